"""Y = X · Wᵀ as dot products along K: the CPU schedule of dense when W [N, K] is read in place.

The GEMM schedule (`matmul.schedule_gemm`) vectorizes over N, so for W [N, K] it either packs W
into column panels first (a whole pass over the weights each call, which at M = 1 costs as
much as the product) or reads its columns with a gather. Here each output Y[i, j] is the dot
product of rows X[i, :] and W[j, :], both contiguous, vectorized over K as BLAS's SGEMV_T
kernels do (OpenBLAS `sgemv_t`: a few rows of A at once, lane-wise partial sums, one
horizontal sum per output):

    part[i, j, l] = Σ_ko X[i, ko·L + l] · W[j, ko·L + l]    (L = vector lanes, ko < K // L)
    Y[i, j]       = epilogue(Σ_l part[i, j, l] + Σ_t X[i, t] · W[j, t] + b[j])

(the lanes and the K % L products of the tail t summed pairwise).

The register tile is mr rows of X × `dot_rows` rows of W, one vector accumulator each (the
same register count as the GEMM's mr × nr/lanes tile); per vector of K it loads mr + dot_rows
vectors for mr · dot_rows FMAs. The tile's outputs along j are a vectorized loop, so the
horizontal sums of each row's dot_rows accumulators are taken together, transposing while
adding, and the bias and epilogue run on a vector of dot_rows outputs (codegen.c's
`hsum_helper`; 4 sums of 16 lanes in 14 instructions instead of 32). Tiles are blocked bm ×
bn and the blocks fused into the parallel loop (knobs `order`, `parallel`), so at M = 1 the
threads split N into contiguous ranges of whole rows of W, each streamed once. Knobs nr,
pack_a and pack_b do not apply.

Where one tile of X's rows covers M (a classifier, one token), each step of a tile's loop over
K prefetches into L2 the lines the next tile reads in that step (`Stage.prefetch`): the rows of
W, each in another page (4 KiB at K = 1024), are streams the hardware prefetchers restart on
every row. In a model run W comes from memory, where this pays; looped with W in the L3 it
costs. AMD Zen 4 (AVX-512), 2 threads, 7 interleaved rounds, medians against no prefetches,
called once after the caches were flushed / in a loop: 1×512 -> 1000 1.36-1.40× / 0.85-0.90×,
1×1024 -> 1000 1.18-1.39× / 0.88-0.90×, 1×2048 -> 1000 1.18× / 0.90×, 1×768 -> 3072 1.19-1.47× /
0.92-0.99×; built for AVX2 1.11-1.33× / 0.86-0.92×; MobileNet's classifier in model order
(bench/model_cpu.py's chained runs, 8 rounds) 1.13-1.26×, on par with onnxruntime's Gemm there.
Prefetching into the L1 instead (two tiles' rows fill Zen 4's 32 KiB) ran the loop at 0.57-0.59×;
a prefetch per 128 bytes, or two tiles ahead, measured no better.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import te
from ..schedule import create_schedule
from .common import apply_epilogue, kernel_args, knob_choices
from .matmul import balance_blocks, pick_at_most

#: Rows of W per register tile; 0 is the GEMM schedule (no dot products).
DOT_ROWS = (0, 1, 2, 4, 8)


def dot_rows_choices(K: int, lanes: int) -> list[int]:
    """Choices of the `dot_rows` knob: DOT_ROWS where K holds at least one vector of `lanes`, else [0]."""
    return list(DOT_ROWS) if K >= lanes else [0]


def pairwise_sum(terms: list[te.Expr]) -> te.Expr:
    """((t0 + t1) + (t2 + t3)) + ...: depth log2(len) instead of a chain of len - 1 additions."""
    while len(terms) > 1:
        terms = [terms[n] + terms[n + 1] if n + 1 < len(terms) else terms[n] for n in range(0, len(terms), 2)]
    return terms[0]


def dot_expr(X: te.Tensor, W: te.Tensor, lanes: int, finish: Callable[..., te.Expr],
             name: str = "Y") -> tuple[te.Tensor, te.Tensor]:
    """(part, out) for out[i, j] = finish(Σ_k X[i, k] · W[j, k], i, j): X [M, K]; W [N, K], or
    [B, N, K] with out [B, M, N] (B: e.g. a convolution's images, X its weights); K >= `lanes`;
    ``finish(x, i, j)`` (``finish(x, b, i, j)`` with a batch) adds the bias and applies the
    epilogue. part [(B,) M, N, lanes] holds the lane-wise partial sums over the first
    K - K % lanes elements; out is their pairwise sum (the horizontal add) and the K % lanes
    products of the tail."""
    M, K = X.shape
    *batch, N, _ = W.shape
    ko = te.reduce_axis(K // lanes, "ko")
    names = ["b"] * len(batch)
    part = te.compute((*batch, M, N, lanes), lambda *ix: te.sum(
        X[ix[-3], ko * lanes + ix[-1]] * W[(*ix[:-3], ix[-2], ko * lanes + ix[-1])], axis=ko),
        name=f"{name}_part", axis_names=[*names, "i", "j", "l"])
    tail = range(K - K % lanes, K)

    def body(*ix):
        *b, i, j = ix
        x = pairwise_sum([part[(*b, i, j, lane)] for lane in range(lanes)] + [X[i, k] * W[(*b, j, k)] for k in tail])
        return finish(x, *b, i, j)

    return part, te.compute((*batch, M, N), body, name=name, axis_names=[*names, "i", "j"])


def schedule_dot(sch, cfg, part: te.Tensor, out: te.Tensor, streamed: te.Tensor | None = None) -> None:
    """Schedule `dot_expr`'s stages in `sch` with the knobs mr, dot_rows, ku, bm, bn, order and
    parallel (module docstring); a batch axis of out runs outermost, in the parallel loop.
    `streamed`: W where it is read once per call (one tile of X's rows covers M), so its rows come
    from memory in a model run: each step of a tile's loop over K prefetches what the next tile
    (the next dot_rows rows of W) reads in that step (`Stage.prefetch`), whose rows, each in
    another page, the hardware prefetchers do not run ahead of."""
    *batch, M, N = out.shape
    mr, rows, ku = cfg["mr"].val, cfg["dot_rows"].val, cfg["ku"].val
    so = sch[out]
    *b, i, j = so.op.axis
    io, ii = so.split(i, factor=mr)
    jo, ji = so.split(j, factor=rows)
    ioo, ioi = so.split(io, factor=min(cfg["bm"].val, -(-M // mr)))
    block_tiles = min(cfg["bn"].val, -(-N // rows))  # tiles along j in a block: joi's extent
    joo, joi = so.split(jo, factor=block_tiles)
    order = cfg["order"].val
    outer = [joo, ioo] if order.startswith("nm") else [ioo, joo]
    inner = [joi, ioi] if order.endswith("nm") else [ioi, joi]
    so.reorder(*b, *outer, *inner, ii, ji)
    so.parallel(so.fuse(*b, *outer) if cfg["parallel"].val == "fused" else so.fuse(*b, outer[0]))
    so.unroll(ii)
    # The tile's outputs along j as a vector: their horizontal sums taken together (module
    # docstring); the vectorizer takes loops of 4 lanes and more, 1 or 2 stay unrolled scalars.
    if rows >= 4:
        so.vectorize(ji)
    else:
        so.unroll(ji)
    sa = sch[part]
    sa.compute_at(so, inner[-1])
    *ab, ai, aj, al = sa.op.axis
    (ak,) = sa.op.reduce_axis
    kko, kki = sa.split(ak, factor=min(ku, ak.extent))
    sa.reorder(*ab, kko, kki, ai, aj, al)
    sa.unroll(kki)
    sa.unroll(ai)
    sa.unroll(aj)
    sa.vectorize(al)
    if streamed is not None and M <= mr and block_tiles > 1:  # one tile per block has no next one in it
        sa.prefetch(streamed, kko, joi)


def dot_template(cfg, lanes: int, X: te.Tensor, W: te.Tensor, bias: te.Tensor | None, epilogue: str, name: str = "Y"):
    """(schedule, kernel arguments) of dense's dot-product form (module docstring), out = epilogue(X ·
    Wᵀ + bias[N]), with the knobs of `schedule_dot` in a space that defines them."""
    part, out = dot_expr(X, W, lanes, lambda x, i, j: apply_epilogue(x + bias[j] if bias is not None else x, epilogue),
                         name)
    sch = create_schedule(out)
    schedule_dot(sch, cfg, part, out, streamed=W)
    return sch, kernel_args(X, W, bias, out)


def dot_default(space, M: int, N: int, K: int, lanes: int, dtype_bytes: int) -> dict:
    """The dot-product knobs of the untuned config (the GEMM knobs it ignores come from
    gemm_default): dot_rows = 4 rows of W and mr rows of X with mr × 4 accumulators within 12
    vector registers (16 on AVX2, leaving mr + 1 for the operands) or 24 (AVX-512's 32); bn
    blocks of W rows filling about half a 1 MiB L2, bm covering M, both halved until there are
    enough blocks for the threads (matmul.balance_blocks). {"dot_rows": 0} (the GEMM) where
    the space has no dot products (K shorter than a vector)."""
    rows_choices = knob_choices(space, "dot_rows")
    if rows_choices == [0]:
        return {"dot_rows": 0}
    rows = max(r for r in rows_choices if r <= 4)
    regs = 24 if lanes * dtype_bytes >= 64 else 12
    mr = max(m for m in knob_choices(space, "mr") if m <= max(1, regs // rows))
    bn = pick_at_most(knob_choices(space, "bn"), (1 << 19) // max(1, K * rows * dtype_bytes))
    bm = pick_at_most(knob_choices(space, "bm"), -(-M // mr))
    bm, bn = balance_blocks(-(-M // mr), -(-N // rows), bm, bn)
    return {"dot_rows": rows, "mr": mr, "bm": bm, "bn": bn}
