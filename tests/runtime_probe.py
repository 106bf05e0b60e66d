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

# Each block adds 1 through a nested tf_parallel_for (must run inline) and a 64-byte aligned
# temporary, and records sched_getcpu() in CPU[block], gettid() in TID[block]. A negative X[0]
# is reported as an error.
PROBE = r"""
#include "tunefleet_runtime.h"
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct { const float* x; float* y; int32_t* cpu; int32_t* tid; int failed; } probe_t;

static void probe_add(int64_t begin, int64_t end, void* p) {
  probe_t* t = p;
  for (int64_t i = begin; i < end; ++i) t->y[i] = t->x[i] + 1.0f;
}

static void probe_block(int64_t begin, int64_t end, void* p) {
  probe_t* t = p;
  for (int64_t b = begin; b < end; ++b) {
    float* tmp = tf_alloc_aligned(64 * sizeof(float));
    if (tmp == NULL || (uintptr_t)tmp % 64 != 0) t->failed = 1;
    probe_t block = {t->x + b * 64, tmp, t->cpu, t->tid, 0};
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
  probe_t t = {X, Y, CPU, TID, 0};
  tf_parallel_for(BLOCKS, probe_block, &t);
  if (t.failed) {
    tf_set_error("NAME: tf_alloc_aligned failed or was not 64-byte aligned");
    return 1;
  }
  return 0;
}
""".replace("BLOCKS", str(BLOCKS))

ARGS = [ArgSpec("X", (N,), "float32", False), ArgSpec("Y", (N,), "float32", True),
        ArgSpec("CPU", (BLOCKS,), "int32", True), ArgSpec("TID", (BLOCKS,), "int32", True)]


def build_probe(out_dir, name):
    """Builds the probe as kernel `name` for the host and writes its artifact into `out_dir`."""
    source = PROBE.replace("NAME", name)
    so = compile_shared([entry_points_source(name, ARGS), source], Target.host(), name=name)
    return write_artifact(out_dir, name=name, source=so.with_suffix(".c").read_text(),
                          so_path=so, args=ARGS, manifest={"target": str(Target.host())})


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


def chunk_of(block, threads):
    """The static chunk tf_parallel_for gives `block` of BLOCKS over `threads` threads."""
    base, rem = divmod(BLOCKS, threads)
    starts = [i * base + min(i, rem) for i in range(threads)]
    return max(i for i, s in enumerate(starts) if s <= block)


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
