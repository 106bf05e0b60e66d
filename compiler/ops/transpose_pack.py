"""Whole-vector transposes in registers: packing a transposed B (dense's W [N, K], batch_matmul's
Bᵀ) into the GEMM's column panels, and storing an NCHWc register tile of a convolution to its
NCHW output (`tensorize_transposed_store`, AVX-512: a masked store per channel row instead of
an extract and a store per element).

The panels are Bp[no, k, ni] = B[no·nr + ni, k]: each vector of a panel row gathers nr
elements K apart. Built element by element (a scalar load and an insert per lane), that took
29% of a 128×768 -> 3072 dense call on an Intel Xeon (model 85, AVX-512, 2 threads), whose
port 5 runs both the inserts and half of the FMAs. The micro-kernel here takes L rows of the
panel at a time (L = the vector lanes: 16 with AVX-512, 8 with AVX, else 4) and walks along
them, loading an L × L block as L contiguous vectors, transposing it in registers and storing
L whole vectors of the panel; a partial block (K mod L, or panel widths that are no multiple
of L) is copied element by element. With AVX-512 and 4 lanes the transpose is the perfect
shuffle, log2(L) rounds of interleaving row i with row i + L/2 (after them vector i holds
column i; e.g. Hacker's Delight §7-3); with AVX, whose interleaves stay within 128-bit halves,
interleaves, then pairs of pairs, then the halves swapped. Walking all nr rows at once (nr
streams for the hardware prefetchers) the packing still took 32% of that call; L rows at a
time it takes 16%, and the call runs 1.17× faster (7 interleaved rounds; 1.11× PyTorch, from
0.92×). Built for AVX2 the default packs all of B before the GEMM (pack_b True), bound by the
memory either way: 0.98×.
"""

from __future__ import annotations

from .. import te
from ..schedule import TensorIntrin

FUNC = "tf_pack_transposed_f32"

_INTERLEAVE = {lanes: (", ".join(f"{i}, {i + lanes}" for i in range(lanes // 2)),
                       ", ".join(f"{i}, {i + lanes}" for i in range(lanes // 2, lanes))) for lanes in (4, 16)}

#: The L × L register transpose `tf_pt_transpose` (and its vector type), shared by the
#: micro-kernels here; guarded, so that several of them can share a translation unit.
TRANSPOSE_SOURCE = f"""
#ifndef TF_PT_TRANSPOSE
#define TF_PT_TRANSPOSE
#if defined(__AVX512F__)
#define TF_PT_LANES 16
#define TF_PT_LO {_INTERLEAVE[16][0]}
#define TF_PT_HI {_INTERLEAVE[16][1]}
#elif defined(__AVX__)
#define TF_PT_LANES 8
#else
#define TF_PT_LANES 4
#define TF_PT_LO {_INTERLEAVE[4][0]}
#define TF_PT_HI {_INTERLEAVE[4][1]}
#endif
/* aligned(4): loads and stores of any float's address (unaligned vector moves). */
typedef float tf_pt_vec __attribute__((vector_size(4 * TF_PT_LANES), aligned(4)));
#if defined(__clang__) || __GNUC__ >= 12
#define TF_PT_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else /* GCC before 12 has only __builtin_shuffle, with a mask vector */
typedef int tf_pt_mask __attribute__((vector_size(4 * TF_PT_LANES)));
#define TF_PT_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (tf_pt_mask){{__VA_ARGS__}})
#endif

/* Transposes the L x L block whose rows are v[0..L-1] in place. */
#if TF_PT_LANES == 8
/* AVX: interleave pairs within 128-bit halves, then pairs of pairs, then swap halves (unpcklps /
   unpckhps, shufps, vperm2f128: one instruction each, where the perfect shuffle's interleaves
   cross the halves and take several). */
static inline void tf_pt_transpose(tf_pt_vec* v) {{
  tf_pt_vec t[8], s[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {{
    t[2 * i] = TF_PT_SHUFFLE(v[2 * i], v[2 * i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[2 * i + 1] = TF_PT_SHUFFLE(v[2 * i], v[2 * i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }}
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {{
    s[4 * i] = TF_PT_SHUFFLE(t[4 * i], t[4 * i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    s[4 * i + 1] = TF_PT_SHUFFLE(t[4 * i], t[4 * i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    s[4 * i + 2] = TF_PT_SHUFFLE(t[4 * i + 1], t[4 * i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    s[4 * i + 3] = TF_PT_SHUFFLE(t[4 * i + 1], t[4 * i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }}
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {{
    v[j] = TF_PT_SHUFFLE(s[j], s[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    v[j + 4] = TF_PT_SHUFFLE(s[j], s[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }}
}}
#else
/* The perfect shuffle: log2(L) rounds of interleaving row i with row i + L/2 (one vpermt2ps
   each with AVX-512, unpcklps / unpckhps with 4 lanes). */
static inline void tf_pt_transpose(tf_pt_vec* v) {{
  enum {{ L = TF_PT_LANES }};
  tf_pt_vec t[L];
#pragma GCC unroll 4
  for (int round = 1; round < L; round *= 2) {{
#pragma GCC unroll 8
    for (int i = 0; i < L / 2; ++i) {{
      t[2 * i] = TF_PT_SHUFFLE(v[i], v[i + L / 2], TF_PT_LO);
      t[2 * i + 1] = TF_PT_SHUFFLE(v[i], v[i + L / 2], TF_PT_HI);
    }}
#pragma GCC unroll 16
    for (int i = 0; i < L; ++i) v[i] = t[i];
  }}
}}
#endif
#endif /* TF_PT_TRANSPOSE */
"""

SOURCE = TRANSPOSE_SOURCE + f"""
/* P[k * ldp + j] = B[j * ldb + k] for k < K, j < nr: one column panel of a transposed B. */
static void {FUNC}(int64_t K, int64_t nr, const float* B, int64_t ldb, float* P, int64_t ldp) {{
  enum {{ L = TF_PT_LANES }};
  /* The loops end at the last whole vector, not at `j + L <= nr`: gcc then knows where each tail
     starts and does not warn of undefined behaviour in a tail that never runs
     (-Waggressive-loop-optimizations, in the copy specialized to a call's constants). */
  const int64_t rows = nr - nr % L, columns = K - K % L;
  int64_t j = 0;
  for (; j < rows; j += L) {{ /* L rows at a time: L streams for the prefetchers, not nr */
    int64_t k = 0;
    for (; k < columns; k += L) {{
      tf_pt_vec v[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) v[i] = *(const tf_pt_vec*)(B + (j + i) * ldb + k);
      tf_pt_transpose(v);
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) *(tf_pt_vec*)(P + (k + i) * ldp + j) = v[i];
    }}
    for (; k < K; ++k)
      for (int64_t i = j; i < j + L; ++i) P[k * ldp + i] = B[i * ldb + k];
  }}
  for (; j < nr; ++j)
    for (int64_t k = 0; k < K; ++k) P[k * ldp + j] = B[j * ldb + k];
}}
"""


def tensorize_transposed_pack(sch, packed: te.Tensor, B: te.Tensor, N: int, nr: int) -> None:
    """Compute the panels `packed` [*outer, K, nr] of the transposed B [*batch, N, K] by
    :data:`FUNC`, one call per panel (tensorized at its K loop), where that is what its
    body is: float32 and no zero-padded panel (N a multiple of nr, as many panels as N
    needs); otherwise the stage keeps its loops."""
    if B.dtype != "float32" or N % nr or packed.shape[0] * nr != N:
        return
    sp = sch[packed]
    k, ni = sp.op.axis[-2:]
    sp.tensorize(k, TensorIntrin(FUNC, SOURCE, (f"extent:{k.name}", f"extent:{ni.name}", B.name,
                                                f"{B.name}.stride{len(B.shape) - 2}", packed.name,
                                                f"{packed.name}.stride{len(packed.shape) - 2}")))


STORE_FUNC = "tf_store_tile_nchw_f32"

STORE_SOURCE = TRANSPOSE_SOURCE + f"""
#if defined(__AVX512F__)
#include <immintrin.h>
/* out[c * ldo + w] = tile[w * ldt + c] for w < W, c < C (a multiple of L): a register tile of W
   output columns x C channels (NCHWc: channels contiguous) stored to C rows of NCHW planes,
   L x L blocks at a time by register transposes, a partial block of columns by masked stores.
   AVX-512 only. */
static inline void {STORE_FUNC}(int64_t W, int64_t C, const float* tile, int64_t ldt, float* out, int64_t ldo) {{
  enum {{ L = TF_PT_LANES }};
  for (int64_t c = 0; c < C; c += L)
    for (int64_t w = 0; w < W; w += L) {{
      const int64_t n = W - w < L ? W - w : L;
      const __mmask16 first = (__mmask16)((1u << n) - 1);
      tf_pt_vec v[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) v[i] = i < n ? *(const tf_pt_vec*)(tile + (w + i) * ldt + c) : (tf_pt_vec){{0}};
      tf_pt_transpose(v);
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) _mm512_mask_storeu_ps(out + (c + i) * ldo + w, first, (__m512)v[i]);
    }}
}}
#endif
"""


def tensorize_transposed_store(sch, out: te.Tensor, tile: te.Tensor, w, c) -> None:
    """Store each tile of `out` (NCHW [N, CO, OH, OW]; loop w over its columns, c inside over
    its channels) from `tile`, its NCHWc register tile [..., OW, oc_bn] (a local stage
    computed at the tile's loop), by :data:`STORE_FUNC` tensorized at w: L × L transposes in
    registers, one store per channel row, instead of a store per lane of each vector of
    channels. float32 with AVX-512 only (its masked stores), oc_bn a multiple of its 16 lanes."""
    sch[out].tensorize(w, TensorIntrin(STORE_FUNC, STORE_SOURCE, (f"extent:{w.name}", f"extent:{c.name}", tile.name,
                                                                  f"{tile.name}.stride{len(tile.shape) - 2}",
                                                                  out.name, f"{out.name}.stride1")))
