"""The probe kernel the C runtime's tests build: Y = X + 1 over BLOCKS blocks run by
tf_parallel_for, each block recording the CPU and the thread id (gettid) that ran it, so
that a test sees which pool threads ran a parallel loop and where."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tunefleet.compiler.abi import ArgSpec, entry_points_source
from tunefleet.compiler.artifact import write_artifact
from tunefleet.compiler.build import compile_shared
from tunefleet.compiler.target import Target

N, BLOCKS = 4096, 64
SLOW_BLOCK, SLOW_S = BLOCKS // 2, 1.0
#: The most parts tf_parallel_for cuts a thread's chunk into (tunefleet_runtime.c's TF_CHUNK_PARTS).
CHUNK_PARTS = 8

# Each block adds 1 through a nested tf_parallel_for (must run inline) and a 64-byte aligned
# temporary, and records sched_getcpu() in CPU[block], gettid() in TID[block]. A negative X[0]
# is reported as an error. Each pool thread, at its first block of a call, waits (up to 10 s)
# until every thread of the loop has started one, so that every thread runs blocks even where
# one could take them all (its parts, then the others'); a negative X[1] makes block
# SLOW_BLOCK (the first of chunk 1 with 2 threads) take SLOW_S seconds.
PROBE = r"""
#include "tunefleet_runtime.h"
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  const float* x; float* y; int32_t* cpu; int32_t* tid; int failed; int call; int threads; int started;
} probe_t;

static int probe_calls;
static __thread int probe_seen_call;

static double probe_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void probe_join(probe_t* t) {
  if (probe_seen_call == t->call) return;
  probe_seen_call = t->call;
  __atomic_add_fetch(&t->started, 1, __ATOMIC_SEQ_CST);
  for (double until = probe_now() + 10; __atomic_load_n(&t->started, __ATOMIC_SEQ_CST) < t->threads && probe_now() < until;)
    sched_yield();
}

static void probe_add(int64_t begin, int64_t end, void* p) {
  probe_t* t = p;
  for (int64_t i = begin; i < end; ++i) t->y[i] = t->x[i] + 1.0f;
}

static void probe_block(int64_t begin, int64_t end, void* p) {
  probe_t* t = p;
  probe_join(t);
  for (int64_t b = begin; b < end; ++b) {
    if (b == SLOW_BLOCK && t->x[1] < 0) usleep(SLOW_US);
    float* tmp = tf_alloc_aligned(64 * sizeof(float));
    if (tmp == NULL || (uintptr_t)tmp % 64 != 0) t->failed = 1;
    probe_t block = {t->x + b * 64, tmp, t->cpu, t->tid, 0, 0, 1, 0};
    tf_parallel_for(64, probe_add, &block);
    for (int i = 0; tmp && i < 64; ++i) t->y[b * 64 + i] = tmp[i];
    tf_free(tmp);
    t->cpu[b] = sched_getcpu();
    t->tid[b] = (int32_t)syscall(SYS_gettid);
  }
}

int NAME(const float* restrict X, float* restrict Y, int32_t* restrict CPU,
         int32_t* restrict TID) {
  if (X[0] < 0) {
    tf_set_error("NAME: X[0] is negative (%g)", X[0]);
    return 2;
  }
  /* the threads this call's loop will run on (the calling thread's mask and the pool's request) */
  int threads = tunefleet_get_num_threads();
  probe_t t = {X, Y, CPU, TID, 0, __atomic_add_fetch(&probe_calls, 1, __ATOMIC_SEQ_CST),
               threads < BLOCKS ? threads : BLOCKS, 0};
  tf_parallel_for(BLOCKS, probe_block, &t);
  if (t.failed) {
    tf_set_error("NAME: tf_alloc_aligned failed or was not 64-byte aligned");
    return 1;
  }
  return 0;
}
""".replace("SLOW_BLOCK", str(SLOW_BLOCK)).replace("SLOW_US", str(int(SLOW_S * 1e6))).replace("BLOCKS", str(BLOCKS))

ARGS = [ArgSpec("X", (N,), "float32", False), ArgSpec("Y", (N,), "float32", True),
        ArgSpec("CPU", (BLOCKS,), "int32", True), ArgSpec("TID", (BLOCKS,), "int32", True)]


def build_probe(out_dir, name, source=PROBE, args=ARGS):
    """Builds `source` (the probe by default; NAME stands for `name`) with arguments `args` as
    kernel `name` for the host and writes its artifact into `out_dir`."""
    source = source.replace("NAME", name)
    so = compile_shared([entry_points_source(name, args), source], Target.host(), name=name)
    return write_artifact(out_dir, name=name, source=so.with_suffix(".c").read_text(),
                          so_path=so, args=args, manifest={"target": str(Target.host())})


@pytest.fixture(scope="module", autouse=True)
def build_cache(tmp_path_factory):
    """Builds of a test module go to a cache of its own (imported, it applies to that module)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path_factory.mktemp("build-cache")))
        yield


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory, build_cache):
    """The probe's artifact directory (kernel "probe"), built once per test module."""
    return build_probe(tmp_path_factory.mktemp("probe"), "probe")


def cpus_by_thread(cpus, tids) -> dict[int, set[int]]:
    """The CPUs each thread (by id) ran its blocks on, from a probe call's CPU and TID outputs."""
    by_thread: dict[int, set[int]] = {}
    for cpu, tid in zip(cpus.tolist(), tids.tolist()):
        by_thread.setdefault(tid, set()).add(cpu)
    return by_thread


def run_probe(kernel, x=None):
    """Calls the loaded probe on `x` (default 0..N-1), checks Y against numpy; (cpus, tids)."""
    x = np.arange(N, dtype=np.float32) if x is None else x
    y, cpus, tids = kernel(x)
    np.testing.assert_array_equal(y, x + 1)
    return cpus, tids


def run_child(code, *, env=None, taskset=None, prefix=()):
    """Runs `code` in a child Python (under `prefix` and `taskset -c <taskset>` when given);
    returns (json of its last stdout line, stderr)."""
    command = [sys.executable, "-c", code]
    if taskset is not None:
        command = ["taskset", "-c", taskset, *command]
    proc = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr
