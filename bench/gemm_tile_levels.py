"""Benchmark: where a GEMM's register tile loses its speed — the same tile, one core, with its
operands at each level of the cache hierarchy, against the core's measured fp32 FMA peak.

A C model of the matmul template's default arrangement (`ops.matmul.gemm_default`: an mr × nr
tile of accumulators, A's element broadcast, B's vectors from a packed panel; the loop over K not
unrolled, where GCC keeps every accumulator in a register: at ku 4 it spills two of AVX-512's 6 × 64
tile), built for the target like our kernels (`build.compile_shared`), timed on one
thread. Rows, each GFLOP/s (best of several runs) and % of the peak:

* ``L1``: a 128-deep panel of B and the tile's rows of A, all in the L1, the tile repeated;
* ``L2``: a K-deep panel of B (K × nr floats) from the L2, the tile's rows of A (mr × K) in the
  L1 or L2, repeated;
* ``L3``: a K³ product as the default runs it without packing: B's panels pre-packed, for each
  panel every row tile of A, A's rows read in place (from the L3 or memory);
* ``packed``: the same with each panel of B packed from row-major B right before its tiles
  (the default's pack_b "block" with one panel per block).

The drop from one row to the next is what that level costs; the gap from ``L1`` to the peak is
the tile's own (its loads, broadcasts and loop against the FMA ports).

    python bench/gemm_tile_levels.py [--target "cpu -isa=avx2"] [--mr 6] [--vectors 4] [--k 1024]

Intel Xeon (model 167 as the VM reports it: AVX-512 with two FMA units, 48 KiB L1d and 2 MiB L2
per core; one core's peak 218-224 GFLOP/s in these runs, 238 in quieter minutes), K = 1024, two
runs: the 6 × 64 tile L1 195-200 (89-92%), L2 191-194 (88-89%), L3 166-168 (76-77%), packed
160-167 (73-76%) — the template's kernel at 1024³ on one thread measured 174-183 (PyTorch
191-208) with the peak at 238; 8 × 48: 200 / 189 / 159 / 158 (89 / 84 / 71 / 71%). Built for AVX2
(6 × 16; AVX2 peak 120): 120 (101%) / 111 (93%) / 91 (76%) / 90 (76%). So on this host the tile
itself is within about 10% of the peak, and A's rows streamed from the L3 (one tile's 6 rows
for each panel of B) cost the most: the search's order nm_mn with 2 panels per block, which reads
them once for both panels, measured 1.04-1.07× the default at 1024³. The same host later
(peak 220): 212 (96%) / 190 (86%) / 152 (69%) / 155 (70%), the template's default (its tile
unrolled by 2 since 167cec2) 173-184 on one thread (78-83%); nm_mn with 2 panels per block then
measured 0.99×.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import host_target, peak_gflops  # noqa: E402

from tunefleet.compiler.build import compile_shared  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402

#: The depth of the ``L1`` row's panel: 128 × 64 floats of B (32 KiB) stay in a 48 KiB L1 (on a
#: 32 KiB L1, AMD Zen 3 and 4, the AVX-512 6 × 64 tile's L1 row reads part of its panel from the L2).
L1_DEPTH = 128


def tile_source(mr: int, vectors: int, lanes: int) -> str:
    """C of `tile(A, lda, B, C, ldc, K)`: C[mr, nr] = A[mr, K] (rows lda apart) · B (a packed
    panel [K, nr]), nr = vectors · lanes, accumulators in registers, the loop over K not
    unrolled — the shape of the template's register tile (ku 1)."""
    nr = vectors * lanes
    acc = [f"c{r}_{v}" for r in range(mr) for v in range(vectors)]
    body = [f"    c{r}_{v} += tf_bc(A[{r} * lda + k]) * *(const vec*)(B + k * {nr} + {v * lanes});"
            for r in range(mr) for v in range(vectors)]
    store = [f"  *(vec*)(C + {r} * ldc + {v * lanes}) = c{r}_{v};" for r in range(mr) for v in range(vectors)]
    splat = ", ".join(["x"] * lanes)
    return "\n".join([
        f"typedef float vec __attribute__((vector_size({lanes * 4})));",
        f"static inline vec tf_bc(float x) {{ return (vec){{{splat}}}; }}",
        "__attribute__((noinline)) static void tile(const float* restrict A, int64_t lda, const float* restrict B,",
        "                                           float* restrict C, int64_t ldc, int64_t K) {",
        "  vec " + ", ".join(f"{a} = {{0}}" for a in acc) + ";",
        "  for (int64_t k = 0; k < K; ++k) {", *body, "  }", *store, "}"])


_DRIVERS = """
/* level 0: L1, 1: L2, 2: L3 (B pre-packed), 3: packed per panel. Returns seconds of the fastest
   of `runs` runs; flop is written to *flop. */
TF_EXPORT double run_level(int level, int64_t K, int runs, double* flop) {
  const int64_t mr = MR, nr = NR;
  int64_t M = level >= 2 ? K / mr * mr : mr, N = level >= 2 ? K / nr * nr : nr, depth = level == 0 ? L1_DEPTH : K;
  float* A = tf_alloc_aligned(sizeof(float) * M * depth);
  float* B = tf_alloc_aligned(sizeof(float) * depth * (N > nr ? N : nr));
  float* P = tf_alloc_aligned(sizeof(float) * depth * nr);
  float* C = tf_alloc_aligned(sizeof(float) * M * N);
  if (!A || !B || !P || !C) return -1;
  for (int64_t i = 0; i < M * depth; ++i) A[i] = 1e-3f * (float)(i % 7);
  for (int64_t i = 0; i < depth * N; ++i) B[i] = 1e-3f * (float)(i % 5);
  int64_t reps = level >= 2 ? 1 : (int64_t)(2e9 / (2.0 * mr * nr * depth));
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    double t = tf_now();
    for (int64_t rep = 0; rep < reps; ++rep) {
      if (level < 2) { tile(A, depth, B, C, nr, depth); continue; }
      for (int64_t j = 0; j < N / nr; ++j) {
        const float* panel = B + j * depth * nr;
        if (level == 3) {
          for (int64_t k = 0; k < depth; ++k)
            for (int64_t c = 0; c < nr; ++c) P[k * nr + c] = B[k * N + j * nr + c];
          panel = P;
        }
        for (int64_t i = 0; i < M / mr; ++i) tile(A + i * mr * depth, depth, panel, C + i * mr * N + j * nr, N, depth);
      }
    }
    t = tf_now() - t;
    if (t < best) best = t;
  }
  *flop = 2.0 * (double)mr * nr * depth * (level >= 2 ? (double)(M / mr) * (N / nr) : (double)reps);
  tf_free(A); tf_free(B); tf_free(P); tf_free(C);
  return best;
}
"""

LEVELS = ("L1", "L2", "L3", "packed")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=host_target, default=Target.host(), help="CPU target to build for")
    p.add_argument("--mr", type=int, default=6, help="rows of the register tile")
    p.add_argument("--vectors", type=int, default=None, help="vectors of B per row (default: 4 with 32 registers, else 2)")
    p.add_argument("--k", type=int, default=1024, help="depth K of the L2 row's panel and of the K³ products")
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    target = args.target
    lanes = target.lanes("float32")
    vectors = args.vectors or (4 if target.vector_registers >= 32 else 2)
    if args.mr * vectors + vectors + 1 > target.vector_registers:
        p.error(f"--mr {args.mr} × --vectors {vectors} accumulators do not fit {target.vector_registers} registers")
    source = "\n".join(['#include "tunefleet_runtime.h"', "#include <time.h>",
                        f"#define MR {args.mr}\n#define NR {vectors * lanes}\n#define L1_DEPTH {L1_DEPTH}",
                        "static double tf_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
                        "return t.tv_sec + 1e-9 * t.tv_nsec; }",
                        tile_source(args.mr, vectors, lanes), _DRIVERS])
    lib = ctypes.CDLL(str(compile_shared([source], target, name="tf_tile_levels")))
    lib.run_level.restype = ctypes.c_double
    lib.run_level.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    peak = peak_gflops(1, target)
    print(f"target {target}, one thread, tile {args.mr} × {vectors * lanes}, K {args.k}; "
          f"measured fp32 FMA peak {peak:.0f} GFLOP/s")
    for level, name in enumerate(LEVELS):
        flop = ctypes.c_double()
        seconds = lib.run_level(level, args.k, args.runs, ctypes.byref(flop))
        if seconds <= 0:
            sys.exit(f"{name}: out of memory")
        gflops = flop.value / seconds / 1e9
        print(f"{name:>8} {gflops:8.1f} GFLOP/s {100 * gflops / peak:5.0f}%", flush=True)


if __name__ == "__main__":
    main()
