"""Benchmark: the runtime's thread pool after a program narrows its CPU mask, and the cost of
the per-call mask check, against the runtime from before the pool followed the mask.

Two builds of each kernel, from the same translation unit and flags: "before" links the
runtime implementation of commit BEFORE (mask read once, at first use), "after" the
runtime of this checkout. Needs 2 CPUs in the affinity mask (A, B: its first two) and a
git checkout (the old runtime is read with `git show`).

- narrowed (process-wide): a process on {A, B} calls the kernel once (a pool of 2 threads),
  then narrows every one of its threads to {A} (as `taskset -a -p` or hwloc's process
  binding do) and times the kernel: before, a stale pool of 2 threads on 1 CPU; after, 1.
- two ranks: two processes start on {A, B}, call once, then each pins its calling thread
  to its own CPU (A or B), as MPI ranks binding themselves; both time the kernel at the
  same time. Before, each rank's pool keeps a worker on the other rank's CPU. Other work on
  the machine confounds this one: under outside load, more threads get a bigger share of it.
- check cost: ns per call of an empty parallel loop (tf_parallel_for of a body that does
  nothing), in C, on a 1-CPU mask (the loop runs inline: the difference after - before is
  the mask check: a sched_getaffinity call, a memcmp, a coarse clock read) and on 2 CPUs
  (fork/join through the pool), beside a getppid system call for scale; and µs per
  tunefleet_set_num_threads, which also reads the cgroup CPU quota (what the pool does at
  most once a second).

Every timing is the best over --processes rounds of fresh processes, before and after
interleaved in each round. Kernels: default configs (no tuning) of the workloads named.

    python bench/pool_mask.py [--processes 5] [--only bmm conv]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import PROCESSES, export, scratch_dir  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.build import (RUNTIME_DIR, RUNTIME_LINKED_MACRO, build_info,  # noqa: E402
                                      compile_shared, compiler_command)
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402

#: The last commit whose runtime read the affinity mask once, at first use.
BEFORE = "ef9a6b2"
REPO = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "bmm 12x128x64": ("batch_matmul", {"batch": 12, "M": 128, "N": 128, "K": 64}),
    "conv 1x1 s2 256->512@56": ("conv2d_nchw", {"N": 1, "CI": 256, "CO": 512, "H": 56, "W": 56, "KH": 1,
                                                "KW": 1, "stride": 2, "bias": True, "epilogue": "relu"}),
}

_EMPTY_LOOP_C = r"""
#include "tunefleet_runtime.h"
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static void nothing(int64_t begin, int64_t end, void* closure) {
  (void)begin; (void)end; (void)closure;
  __asm__ volatile("" ::: "memory");
}
static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}
static void one_loop(long extent) { tf_parallel_for(extent, nothing, 0); }
static void one_set_num_threads(long n) { tunefleet_set_num_threads((int)n); }
static void one_syscall(long unused) { (void)unused; syscall(SYS_getppid); }
/* Nanoseconds per op(arg): the best of `batches` batches of `calls` calls (many short
 * batches find the moments no other work preempts a pool thread). */
static double best_ns(void (*op)(long), long arg, int batches, long calls) {
  double best = 1e30;
  for (int r = 0; r < batches; ++r) {
    double start = now_ns();
    for (long i = 0; i < calls; ++i) op(arg);
    double ns = (now_ns() - start) / calls;
    if (ns < best) best = ns;
  }
  return best;
}
/* Per tf_parallel_for(extent, nothing); per tunefleet_set_num_threads(0); per getppid
 * system call (about the cheapest there is, for scale). */
TF_EXPORT double ns_per_loop(long calls, long extent) { return best_ns(one_loop, extent, 200, calls); }
TF_EXPORT double ns_per_set_num_threads(long calls) { return best_ns(one_set_num_threads, 0, 5, calls); }
TF_EXPORT double ns_per_syscall(long calls) { return best_ns(one_syscall, 0, 200, calls); }
"""


def old_runtime_source(out_dir: Path) -> Path:
    """The runtime implementation of commit BEFORE, written to out_dir."""
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{BEFORE}:compiler/runtime/tunefleet_runtime.c"],
                          capture_output=True, text=True, check=True).stdout
    path = out_dir / "tunefleet_runtime_before.c"
    path.write_text(text)
    return path


def with_runtime(so_path: Path, runtime_c: Path, out: Path) -> Path:
    """The library of `so_path` rebuilt from its own translation unit and flags, linked with the
    runtime implementation `runtime_c` (compiled against this checkout's runtime header)."""
    info = build_info(so_path)
    subprocess.run([*compiler_command(), *info["flags"], f"-D{RUNTIME_LINKED_MACRO}", f"-I{RUNTIME_DIR}",
                    str(so_path.with_suffix(".c")), str(runtime_c), "-o", str(out), *info["libs"]],
                   check=True, capture_output=True, text=True)
    return out


_NARROWED = """
import os, numpy as np, tunefleet
k = tunefleet.load({path!r})
rng = np.random.default_rng(0)
ins = [rng.random(a.shape, dtype=np.float32).astype(a.dtype) for a in k.args if not a.is_output]
k(*ins)  # the first call starts a pool of 2 threads
for tid in os.listdir("/proc/self/task"):  # narrow every thread of the process
    os.sched_setaffinity(int(tid), {{{cpu}}})
print(min(k.time(*ins, repeat=5, min_repeat_ms=30)))
"""

_RANK = """
import os, sys, numpy as np, tunefleet
k = tunefleet.load({path!r})
rng = np.random.default_rng(0)
ins = [rng.random(a.shape, dtype=np.float32).astype(a.dtype) for a in k.args if not a.is_output]
k(*ins)  # the first call starts a pool of 2 threads
os.sched_setaffinity(0, {{{cpu}}})  # this rank binds its calling thread to its CPU
print("ready", flush=True)
sys.stdin.readline()
print(min(k.time(*ins, repeat=5, min_repeat_ms=30)), flush=True)
"""


def child_seconds(code: str, cpus: str) -> float:
    out = subprocess.run(["taskset", "-c", cpus, sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.split()[-1])


def ranks_seconds(artifact: Path, cpus: list[int]) -> float:
    """Mean over two concurrent ranks (each bound to one of `cpus` after a first call) of each
    rank's best seconds per call."""
    procs = [subprocess.Popen(["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-c",
                               _RANK.format(path=str(artifact), cpu=cpu)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for cpu in cpus]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    seconds = [float(p.stdout.readline()) for p in procs]
    for p in procs:
        p.wait()
    return sum(seconds) / len(seconds)


def kernel_artifacts(op: str, args: dict, target: Target, old_runtime: Path) -> tuple[Path, Path]:
    """(before, after) artifact directories of the workload's default config."""
    w = ops.make_workload(op, args)
    built = build_workload(w, ops.default_config(w, target), target)
    after = export(built, w, scratch_dir("tf-bench-pool-"))
    before = scratch_dir("tf-bench-pool-")
    shutil.copytree(after, before, dirs_exist_ok=True)
    with_runtime(built.so_path, old_runtime, before / f"{built.name}.so")
    return before, after


def check_cost(target: Target, old_runtime: Path, cpus: list[int], processes: int) -> dict:
    """Best ns per empty parallel loop on 1 and 2 CPUs and per set_num_threads, before and after."""
    after = compile_shared([_EMPTY_LOOP_C], target, name="tf_pool_empty_loop")
    before = with_runtime(after, old_runtime, scratch_dir("tf-bench-pool-") / "tf_pool_empty_loop.so")
    code = """
import ctypes, json
lib = ctypes.CDLL({path!r})
for f in (lib.ns_per_loop, lib.ns_per_set_num_threads, lib.ns_per_syscall):
    f.restype = ctypes.c_double
print(json.dumps({{"loop": lib.ns_per_loop(1000, 2), "set": lib.ns_per_set_num_threads(200),
                  "syscall": lib.ns_per_syscall(1000)}}))
"""
    best: dict = {}
    for _ in range(processes):
        for label, so in (("before", before), ("after", after)):
            for mask in (cpus[:1], cpus[:2]):
                out = subprocess.run(["taskset", "-c", ",".join(map(str, mask)), sys.executable, "-c",
                                      code.format(path=str(so))], capture_output=True, text=True, check=True)
                for what, ns in json.loads(out.stdout).items():
                    key = (label, what, len(mask))
                    best[key] = min(best.get(key, float("inf")), ns)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=PROCESSES, help="rounds of fresh processes per timing")
    p.add_argument("--only", nargs="*", help="workload names to run (prefix match), default all")
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("pool_mask: needs 2 CPUs in the affinity mask (narrowing from 2 to 1)")
    os.environ.setdefault("TUNEFLEET_CACHE_DIR", str(scratch_dir("tf-bench-pool-cache-")))
    target = Target.host()
    old_runtime = old_runtime_source(scratch_dir("tf-bench-pool-"))
    print(f"target {target}; CPUs A={cpus[0]} B={cpus[1]}; before = runtime of {BEFORE}; "
          f"best of {args.processes} rounds of fresh processes, before/after interleaved")

    cost = check_cost(target, old_runtime, cpus, args.processes)
    for n in (1, 2):
        b, a = cost[("before", "loop", n)], cost[("after", "loop", n)]
        print(f"empty parallel loop, {n} CPU mask{' (inline)' if n == 1 else ' (fork/join)'}: before {b:7.1f} ns  after {a:7.1f} ns  "
              f"after - before {a - b:+8.1f} ns/call")
    print(f"one getppid system call on this machine: {cost[('after', 'syscall', 1)]:.1f} ns")
    print(f"tunefleet_set_num_threads (after: reads the mask and the cgroup quota, as the pool does "
          f"once a second): {cost[('after', 'set', 1)] / 1e3:.1f} us/call (before {cost[('before', 'set', 1)] / 1e3:.2f} us)")

    print(f"{'workload':>24} {'scenario':>22} {'before us':>10} {'after us':>9} {'before/after':>12}")
    names = [n for n in WORKLOADS if not args.only or any(n.startswith(o) for o in args.only)]
    for name in names:
        op, a = WORKLOADS[name]
        before, after = kernel_artifacts(op, a, target, old_runtime)
        wide = f"{cpus[0]},{cpus[1]}"
        rows = {"narrowed (process-wide)": lambda art: child_seconds(_NARROWED.format(path=str(art), cpu=cpus[0]),
                                                                    wide),
                "two ranks, 1 CPU each": lambda art: ranks_seconds(art, cpus[:2])}
        for scenario, measure in rows.items():
            best = {"before": float("inf"), "after": float("inf")}
            for _ in range(args.processes):
                for label, art in (("before", before), ("after", after)):
                    best[label] = min(best[label], measure(art))
            print(f"{name:>24} {scenario:>22} {best['before'] * 1e6:10.1f} {best['after'] * 1e6:9.1f} "
                  f"{best['before'] / best['after']:12.2f}", flush=True)


if __name__ == "__main__":
    main()
