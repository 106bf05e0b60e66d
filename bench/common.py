"""Shared benchmark helpers: the machine's fp32 FMA peak, and timings taken in interleaved
rounds of fresh child processes, because single timings vary by up to 35% between
processes on these machines. Benchmarks are never part of the test run."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tunefleet.compiler.build import compile_shared
from tunefleet.compiler.target import Target

PROCESSES = 3

_PEAK_C = """
#include "tunefleet_runtime.h"
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
#define CHAINS 12
static void chains(int64_t begin, int64_t end, void* p) {
  long iters = *(long*)p;
  for (int64_t t = begin; t < end; ++t) {
    VEC acc[CHAINS]; VEC x, y;
    for (int c = 0; c < CHAINS; ++c) { acc[c] = (VEC){} + 1.0f + c * 1e-3f; }
    x = (VEC){} + 0.999999f; y = (VEC){} + 1e-7f;
    for (long i = 0; i < iters; ++i) {
      for (int c = 0; c < CHAINS; ++c) acc[c] = acc[c] * x + y;   /* independent FMA chains */
      __asm__ volatile("" : "+v"(x));                              /* keep x a register, not a constant */
    }
    VEC s = acc[0];
    for (int c = 1; c < CHAINS; ++c) s += acc[c];
    if (s[0] == 12345.0f) tf_set_error("unreachable");
  }
}
TF_EXPORT int peak(long iters, int tasks) { tf_parallel_for(tasks, chains, &iters); return 0; }
"""


def peak_gflops(threads: int, target: Target | None = None, *, iters: int = 20_000_000, runs: int = 5) -> float:
    """Measured fp32 FMA peak of `threads` cores in GFLOP/s: CHAINS independent vector FMA
    chains per thread (the compiler cannot merge them), `iters` FMAs per chain, best of `runs`
    runs (many short runs find the quiet moments of a shared machine)."""
    import ctypes
    import time

    target = target or Target.host()
    lanes = target.lanes("float32")
    vec = "v16" if lanes == 16 else "v8"
    so = compile_shared([_PEAK_C.replace("VEC", vec)], target, name="tf_peak")
    lib = ctypes.CDLL(str(so))
    lib.tunefleet_set_num_threads(threads)
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        lib.peak(ctypes.c_long(iters), threads)
        best = min(best, time.perf_counter() - t)
    return threads * iters * 12 * lanes * 2 / best / 1e9


def host_target(text: str) -> Target:
    """argparse type of a bench's ``--target``: a CPU target this host runs (AVX2 code on an
    AVX-512 host), else an argparse error naming the host's."""
    import argparse

    from tunefleet.compiler.target import TargetError

    try:
        target = Target.parse(text)
    except TargetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not target.runs_on(Target.host()):
        raise argparse.ArgumentTypeError(f"{target} does not run on this host ({Target.host()})")
    return target


def peak_code(threads: int, target: Target | None = None, **kwargs) -> str:
    """Python source printing 1 / peak_gflops(threads, target, **kwargs) (seconds per GFLOP at
    the peak, with `target`'s vectors; the host's by default), for a child process: the smaller
    the better, like the timings it is interleaved with."""
    return (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
            "from common import peak_gflops; from tunefleet.compiler.target import Target\n"
            f"print(1 / peak_gflops({threads}, Target.parse({str(target or Target.host())!r}), **{kwargs!r}))")


def numpy_env(coretype: bool) -> dict:
    """The environment for a numpy child: with or without OPENBLAS_CORETYPE (which, set to
    Haswell on these machines, forces OpenBLAS onto its AVX2 kernels at half speed)."""
    env = dict(os.environ)
    if not coretype:
        env.pop("OPENBLAS_CORETYPE", None)
    elif "OPENBLAS_CORETYPE" not in env:
        env["OPENBLAS_CORETYPE"] = "Haswell"
    return env


def numpy_matmul_code(M: int, N: int, K: int) -> str:
    """Python source printing the best seconds of numpy's A @ B (float32, A [M, K], B [K, N])
    over repeats, for a child process (run it with numpy_env's environment)."""
    return f"""
import time, numpy as np
a = np.random.rand({M}, {K}).astype(np.float32); b = np.random.rand({K}, {N}).astype(np.float32)
c = a @ b
best = 1e9
for _ in range(max(3, int(2e9 / (2 * {M} * {N} * {K} + 1)))):
    t = time.perf_counter(); np.matmul(a, b, out=c); best = min(best, time.perf_counter() - t)
print(best)
"""


def kernel_code(artifact_dir: str | Path, *, repeat: int = 10, min_repeat_ms: int = 100) -> str:
    """Python source printing the best per-call seconds of an artifact (tunefleet's timer,
    random inputs), for a child process."""
    return f"""
import numpy as np, tunefleet
k = tunefleet.load({str(artifact_dir)!r})
rng = np.random.default_rng(0)
ins = [rng.random(a.shape, dtype=np.float32).astype(a.dtype) for a in k.args if not a.is_output]
outs = [np.empty(a.shape, a.dtype) for a in k.args if a.is_output]
print(min(k.time(*ins, *outs, repeat={repeat}, min_repeat_ms={min_repeat_ms})))
"""


def interleaved_seconds(codes: list[str], *, processes: int = PROCESSES,
                        envs: list[dict | None] | None = None) -> list[list[float]]:
    """Each round runs every code (Python printing seconds) in a fresh process, one after the
    other, so a burst of load from other work on the machine hits all of them alike; per code,
    its seconds of each of the `processes` rounds. `envs`: each code's environment (None: this
    process's)."""
    seconds: list[list[float]] = [[] for _ in codes]
    envs = envs or [None] * len(codes)
    for _ in range(processes):
        for i, code in enumerate(codes):
            out = subprocess.run([sys.executable, "-c", code], env=envs[i], capture_output=True, text=True, check=True)
            seconds[i].append(float(out.stdout.strip().splitlines()[-1]))
    return seconds


def interleaved_best_seconds(codes: list[str], *, processes: int = PROCESSES,
                             envs: list[dict | None] | None = None) -> list[float]:
    """Per code, its best seconds over the `processes` rounds of :func:`interleaved_seconds`."""
    return [min(s) for s in interleaved_seconds(codes, processes=processes, envs=envs)]


def round_ratio(peer: list[float], ours: list[float]) -> float:
    """Median over rounds of peer seconds ÷ our seconds measured in the same round (> 1: we are
    faster), for two lists from :func:`interleaved_seconds`. On a host whose neighbours disturb
    it for seconds at a time (a shared VM: best-of-N GFLOP/s of one kernel varied 1.5-2× between
    rounds), the best of each competitor can come from different quiet moments; the ratio within
    a round compares the two under the same load, and the median drops the rounds a burst split."""
    return statistics.median(p / o for p, o in zip(peer, ours))


def quick_seconds(built, workload, *, repeat: int = 3, min_repeat_ms: int = 40) -> float:
    """A quick in-process timing (best repeat) of a built kernel on random inputs: for ranking
    candidates; report numbers from interleaved rounds of kernel_code."""
    import numpy as np

    import tunefleet
    from tunefleet.compiler import ops

    k = tunefleet.load(export(built, workload, scratch_dir("tf-bench-")))
    ins = ops.random_inputs(workload.tensors(), np.random.default_rng(0))
    return float(np.min(k.time(*ins, repeat=repeat, min_repeat_ms=min_repeat_ms)))


def export(built, workload, out_dir: str | Path, extra: dict | None = None) -> Path:
    """Write a built kernel as an artifact directory (for timing it in children)."""
    from tunefleet.compiler.artifact import write_artifact

    return write_artifact(out_dir, name=built.name, source=built.source, so_path=built.so_path, args=built.args,
                          manifest={"workload": workload.to_json(), **(extra or {})})


def scratch_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def dump(path: str | Path, rows: list[dict]) -> None:
    Path(path).write_text(json.dumps(rows, indent=2))
