"""The C runtime's thread pool follows its limits: the calling thread's affinity mask (a C++
program narrowing and widening it between calls), the cgroup CPU quota, and several
application threads calling at once. Real gcc/g++ builds, outputs checked against numpy,
pool threads observed from inside the parallel loop (thread ids, CPUs, /proc/self/task)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from runtime_probe import (  # noqa: F401 (build_cache, probe_dir: fixtures)
    BLOCKS, N, build_cache, build_probe, cpus_by_thread, probe_dir, run_child, run_probe)

import tunefleet
from tunefleet.compiler.abi import ArgSpec

PROGRAM = Path(__file__).with_name("runtime_mask_program.cpp")
MASK = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(MASK) < 2, reason="needs 2 CPUs in the affinity mask "
                                    f"to narrow it from 2 to 1 (this process has {len(MASK)})")


@pytest.fixture(scope="module")
def program(probe_dir, tmp_path_factory):
    """The C++ program of runtime_mask_program.cpp, built with g++ against the artifact."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    work = tmp_path_factory.mktemp("program")
    exe = work / "mask_program"
    subprocess.run(["g++", "-O1", "-std=c++17", str(PROGRAM), "-o", str(exe), f"-I{probe_dir}",
                    str(probe_dir / "probe.so"), f"-Wl,-rpath,{probe_dir}"],
                   check=True, capture_output=True, text=True)
    return exe


def run_program(exe, out_dir, mode):
    """Runs the program on the first two CPUs of the mask; ({phase: its JSON line}, stderr),
    every call's Y checked against numpy's X + 1."""
    proc = subprocess.run([str(exe), str(out_dir), mode, str(MASK[0]), str(MASK[1])],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    phases = {line["phase"]: line for line in map(json.loads, proc.stdout.splitlines())}
    for index, phase in enumerate(("wide", "narrow", "widened")):
        x, y = np.fromfile(out_dir / f"{phase}.bin", dtype=np.float32).reshape(2, N)
        np.testing.assert_array_equal(x, np.arange(N, dtype=np.float32) + 1000 * index)
        np.testing.assert_array_equal(y, x + 1)
    return phases, proc.stderr


@needs_two_cpus
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_narrowing_the_mask_after_a_first_call_gives_one_thread(program, tmp_path, mode):
    phases, stderr = run_program(program, tmp_path, mode)
    wide, narrow = phases["wide"], phases["narrow"]
    assert (wide["api"], wide["threads_seen"], wide["tasks"]) == (2, 2, 2)
    # one thread ran the loop, on the one CPU left; the stale worker was stopped
    assert (narrow["api"], narrow["threads_seen"], narrow["tasks"]) == (1, 1, 1)
    assert set(narrow["cpus"]) == {MASK[0]}
    assert phases["set8 narrow"]["returned"] == 1
    assert ("tunefleet_set_num_threads asks for 8 threads but the calling thread's CPU affinity "
            "mask has 1 CPU(s); using 1") in stderr


@needs_two_cpus
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_widening_the_mask_again_gives_two_pinned_threads(program, tmp_path, mode):
    phases, stderr = run_program(program, tmp_path, mode)
    widened = phases["widened"]
    assert (widened["api"], widened["threads_seen"], widened["tasks"]) == (2, 2, 2)
    # the worker runs its blocks pinned to the second CPU of the new mask
    assert {cpu for cpu, tid in zip(widened["cpus"], widened["tids"]) if tid != widened["caller"]} == {MASK[1]}
    assert phases["set8 widened"]["returned"] == 2
    assert "asks for 8 threads but the calling thread's CPU affinity mask has 2 CPU(s); using 2" in stderr


def test_concurrent_calls_from_four_threads_are_right_and_follow_each_callers_mask(probe_dir):
    """Four application threads call the kernel at once, two of them on a one-CPU mask of
    their own: every result is right, and each call ran on as many pool threads as its
    caller's mask has CPUs (the caller's own thread among them)."""
    kernel = tunefleet.load(probe_dir)
    errors, seen = [], {}

    def work(index):
        try:
            narrow = index % 2 == 1
            if narrow:
                os.sched_setaffinity(0, MASK[:1])  # pid 0: this thread only
            threads = 1 if narrow else min(len(MASK), BLOCKS)
            me = threading.get_native_id()
            for call in range(40):
                x = np.arange(N, dtype=np.float32) * (index + 1) + call
                _, tids = run_probe(kernel, x)
                assert me in tids and len(set(tids.tolist())) == threads, (index, call, tids)
            seen[index] = kernel.num_threads
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not any(w.is_alive() for w in workers), "a caller hung"
    if errors:
        raise errors[0]
    assert seen == {0: len(MASK), 1: 1, 2: len(MASK), 3: 1}


def test_set_num_threads_returns_the_count_it_will_use(probe_dir):
    kernel = tunefleet.load(probe_dir)
    try:
        assert kernel.set_num_threads(1) == 1 and kernel.num_threads == 1
        _, tids = run_probe(kernel)
        assert len(set(tids.tolist())) == 1
        assert kernel.set_num_threads(0) == len(MASK) == kernel.num_threads
        assert kernel.set_num_threads(len(MASK) + 3) == len(MASK)
        _, tids = run_probe(kernel)
        assert len(set(tids.tolist())) == min(len(MASK), BLOCKS)
    finally:
        kernel.set_num_threads(0)


@needs_two_cpus
def test_a_caller_left_on_a_workers_cpu_does_not_share_it(probe_dir):
    """A thread whose mask was narrowed to one CPU and widened again stays on that CPU (Linux
    moves it later, if at all); where a worker was pinned there, the two took turns on one CPU
    while the other idled (a 1024³ matmul on 2 CPUs ran at half speed). Each call that starts
    on the CPU the caller was left on, and whose caller's own blocks all run there, runs the
    worker's blocks on the other one. (Where the caller goes is the scheduler's: on a loaded
    host it may move the unpinned caller onto the other CPU between its `sched_getcpu` and the
    runtime's, or during the call, and back.)"""
    kernel = tunefleet.load(probe_dir)
    sched_getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    placements, errors = [], []

    def work():
        try:
            for call in range(20):
                left = MASK[call % 2]
                os.sched_setaffinity(0, [left])
                os.sched_setaffinity(0, MASK)
                here = sched_getcpu()
                by_thread = cpus_by_thread(*run_probe(kernel))
                caller = by_thread.pop(threading.get_native_id())
                (worker,) = by_thread.values()
                placements.append((left, here, caller, worker))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    assert kernel.set_num_threads(2) == 2
    try:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(timeout=60)
    finally:
        kernel.set_num_threads(0)
    if errors:
        raise errors[0]
    assert len(placements) == 20
    started_there = [(left, worker) for left, here, caller, worker in placements if here == left and caller == {left}]
    assert len(started_there) >= 10, placements  # the scheduler rarely moves it this soon
    assert all(worker == set(MASK[:2]) - {left} for left, worker in started_there), placements


# Each block of a BLOCKS-block loop writes tunefleet_get_num_threads() to COUNT[block]. With
# MODE[0] == 1 the first block waits (up to 10 s) for a MODE[0] == 2 call to have run its loop,
# which itself waits (up to 10 s) for that first block to have started.
COUNTING = r"""
#include "tunefleet_runtime.h"
#include <sched.h>
#include <time.h>

static int first_block_started, other_loop_done;

static void wait_for(int* flag) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  for (time_t until = ts.tv_sec + 10; !__atomic_load_n(flag, __ATOMIC_SEQ_CST) && ts.tv_sec < until;) {
    sched_yield();
    clock_gettime(CLOCK_MONOTONIC, &ts);
  }
}

typedef struct { int32_t* count; int wait; } counting_t;

static void count_blocks(int64_t begin, int64_t end, void* p) {
  counting_t* c = p;
  if (c->wait && begin == 0) {
    __atomic_store_n(&first_block_started, 1, __ATOMIC_SEQ_CST);
    wait_for(&other_loop_done);
  }
  for (int64_t b = begin; b < end; ++b) c->count[b] = tunefleet_get_num_threads();
}

int NAME(const int32_t* restrict MODE, int32_t* restrict COUNT) {
  counting_t c = {COUNT, MODE[0] == 1};
  if (MODE[0] == 2) wait_for(&first_block_started);
  tf_parallel_for(BLOCKS, count_blocks, &c);
  if (MODE[0] == 2) __atomic_store_n(&other_loop_done, 1, __ATOMIC_SEQ_CST);
  return 0;
}
""".replace("BLOCKS", str(BLOCKS))


@needs_two_cpus
def test_inside_a_loop_the_thread_count_is_that_loops_while_another_caller_runs_one(tmp_path):
    """A caller on a one-CPU mask runs its loop alone; while it does, a caller on two CPUs runs
    a loop on the pool's two threads. Each loop's body reads its own loop's count (the
    one-CPU caller read the pool's two before: its loop does not hold the pool)."""
    counting = tunefleet.load(build_probe(tmp_path, "counting", COUNTING, [
        ArgSpec("MODE", (1,), "int32", False), ArgSpec("COUNT", (BLOCKS,), "int32", True)]))
    narrow = {}

    def run_narrow():
        os.sched_setaffinity(0, MASK[:1])  # pid 0: this thread only
        narrow["count"] = counting(np.array([1], dtype=np.int32))

    thread = threading.Thread(target=run_narrow)
    thread.start()
    wide = counting(np.array([2], dtype=np.int32))
    thread.join(timeout=30)
    assert not thread.is_alive(), "the one-CPU caller hung"
    assert wide.tolist() == [min(len(MASK), BLOCKS)] * BLOCKS
    assert narrow["count"].tolist() == [1] * BLOCKS


def v1_cpu_cgroup() -> Path | None:
    """The directory of this process's cgroup in a cgroup v1 `cpu` hierarchy, where one is
    mounted under /sys/fs/cgroup; else None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                directory = Path("/sys/fs/cgroup", mount) / path.lstrip("/")
                if (directory / "cpu.cfs_quota_us").exists():
                    return directory
    return None


@pytest.fixture
def quota_cgroup():
    """A new cgroup v1 `cpu` child of this process's cgroup with a quota of 1 CPU (quota =
    period), removed afterwards; skips where none can be made (not root, no v1 cpu
    hierarchy, or a read-only one: most containers)."""
    parent = v1_cpu_cgroup()
    if parent is None:
        pytest.skip("no cgroup v1 cpu hierarchy under /sys/fs/cgroup (cgroup v2 cpu.max cannot "
                    "be set for a test: a v2 child with the cpu controller needs a parent "
                    "without processes)")
    child = parent / f"tunefleet-test-{os.getpid()}"
    try:
        child.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup under {parent}: {exc}")
    try:
        period = int((child / "cpu.cfs_period_us").read_text())
        (child / "cpu.cfs_quota_us").write_text(str(period))
        yield child, period
    finally:
        child.rmdir()


CGROUP_CHILD = """
import json, time, numpy as np, tunefleet
k = tunefleet.load({path!r})
x = np.arange({n}, dtype=np.float32)
def threads_seen():
    y, cpus, tids = k(x)
    assert (y == x + 1).all()
    return len(set(tids.tolist()))
one = {{"api": k.num_threads, "seen": threads_seen(), "set2": k.set_num_threads(2)}}
open({quota!r}, "w").write(str(2 * {period}))
time.sleep(1.2)  # past the runtime's second between reads of the quota
two = {{"api": k.num_threads, "seen": threads_seen()}}
print(json.dumps({{"one": one, "two": two}}))
"""


@needs_two_cpus
def test_the_pool_follows_the_cgroup_cpu_quota(probe_dir, quota_cgroup):
    cgroup, period = quota_cgroup
    code = CGROUP_CHILD.format(path=str(probe_dir), n=N, quota=str(cgroup / "cpu.cfs_quota_us"),
                               period=period)
    enter = ["sh", "-c", f'echo $$ > "{cgroup}/cgroup.procs" && exec "$0" "$@"']
    result, stderr = run_child(code, taskset=f"{MASK[0]},{MASK[1]}", prefix=enter)
    assert result == {"one": {"api": 1, "seen": 1, "set2": 1}, "two": {"api": 2, "seen": 2}}
    assert ("tunefleet_set_num_threads asks for 2 threads but the cgroup CPU quota allows 1 "
            "(quota / period, rounded up); using 1") in stderr


def test_the_generated_header_says_how_callers_share_the_pool(probe_dir):
    header = " ".join((probe_dir / "probe.h").read_text().replace(" * ", " ").split())
    assert "the pool runs one parallel loop at a time and the other callers wait for it" in header
    assert "checked before every parallel loop" in header
    assert "returns the count parallel loops called from this thread will use now" in header
    assert "each thread keeps its last 4 freed blocks of 64 KiB or more for its next calls" in header
