"""matmul: C[M, N] = A[M, K] · B[K, N] (+ bias[N]) (+ relu/gelu), row-major float32/float64.

The CPU template follows the structure of GotoBLAS / BLIS (Goto & van de Geijn, "Anatomy
of high-performance matrix multiplication", TOMS 2008; Van Zee & van de Geijn, BLIS,
TOMS 2015): B is packed into column panels Bp[N/nr][K][nr] (and optionally A into row
panels Ap[M/mr][K][mr]), output tiles of mr × nr are accumulated in registers over all of
K by a micro-kernel (mr rows unrolled, nr columns as nr/lanes vectors, K unrolled by ku),
and the tiles are blocked (bm tiles of M × bn panels of N) so the working set stays in
L1/L2. The bias and activation are applied when the register tile is written out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import te
from ..schedule import TensorIntrin, create_schedule
from .common import EPILOGUES, RegisterTileFits, apply_epilogue, kernel_args, knob_choices, np_epilogue, pack_blocked
from .registry import ArgDef, OpDef, WorkloadError, register
from .transpose_pack import tensorize_transposed_pack

MAX_DIM = 1 << 16


def gemm_args(shape: dict[str, tuple[int, str]], *, bias: bool, bias_description: str) -> list[ArgDef]:
    """The arguments of a GEMM with bias and epilogue (matmul, dense): `shape` maps M, N and K
    to (default, description), each in 1..MAX_DIM; then bias (default `bias`), epilogue and
    dtype (float32 or float64)."""
    return [*(ArgDef(name, "int", default, 1, MAX_DIM, description=text) for name, (default, text) in shape.items()),
            ArgDef("bias", "bool", bias, description=bias_description),
            ArgDef("epilogue", "str", "none", choices=EPILOGUES, description="activation applied last"),
            ArgDef("dtype", "str", "float32", choices=("float32", "float64"))]


_PANELS = re.compile(r"(KN|NK)([1-9][0-9]*)n")
#: The widest column panel a pre-packed B may have (the widest register tile: 4 vectors of 16).
MAX_PANEL_WIDTH = 64


def panel_layout_arg(name: str, plain: str) -> ArgDef:
    """The argument `name` giving the layout of a GEMM's B operand: `plain` (row-major, "KN" for
    B [K, N], "NK" for dense's W [N, K]) or `plain`<nr>n for B pre-packed into the column panels
    its micro-kernel streams, [ceil(N/nr), K, nr] (panel p, row k, lane c = B[k, p·nr + c];
    columns beyond N zero). Left out of a workload's args at its default (`omit_default`)."""
    return ArgDef(name, "str", plain, omit_default=True, description=(
        f"{plain}, or {plain}<nr>n for B pre-packed into column panels [ceil(N/nr), K, nr] "
        f"(columns beyond N zero; nr in 1..{MAX_PANEL_WIDTH}), e.g. {plain}32n"))


def panel_width(layout: str) -> int | None:
    """nr of a pre-packed panel layout (`panel_layout_arg`), None for a row-major one."""
    m = _PANELS.fullmatch(layout)
    return int(m.group(2)) if m else None


def b_panels(a: dict) -> int | None:
    """nr of the pre-packed B of a GEMM workload (matmul's b_layout, dense's weight_layout), else None."""
    return panel_width(a.get("b_layout", a.get("weight_layout", "KN")))


def check_panel_layout(a: dict, name: str, plain: str) -> None:
    """WorkloadError naming `name` unless a[name] (default `plain`) is `plain` or `plain`<nr>n."""
    layout = a.get(name, plain)
    m = _PANELS.fullmatch(layout)
    if layout != plain and (m is None or m.group(1) != plain or int(m.group(2)) > MAX_PANEL_WIDTH):
        raise WorkloadError(name, f"{layout!r} is not {plain} or {plain}<nr>n with nr in 1..{MAX_PANEL_WIDTH} "
                                  f"(e.g. {plain}32n)")


def pack_panels_np(b: np.ndarray, layout: str) -> np.ndarray:
    """B [K, N] (layout KN<nr>n) or W [N, K] (NK<nr>n) → its column panels [ceil(N/nr), K, nr],
    the columns beyond N zero. ValueError for another layout."""
    m = _PANELS.fullmatch(layout)
    if m is None:
        raise ValueError(f"{layout!r} is not KN<nr>n or NK<nr>n")
    nr = int(m.group(2))
    bt = np.asarray(b) if m.group(1) == "NK" else np.asarray(b).T  # [N, K]
    N, K = bt.shape
    padded = np.zeros((-(-N // nr) * nr, K), dtype=bt.dtype)
    padded[:N] = bt
    return np.ascontiguousarray(padded.reshape(-1, nr, K).transpose(0, 2, 1))


def unpack_panels_np(bp: np.ndarray, N: int, transposed: bool) -> np.ndarray:
    """Inverse of pack_panels_np: panels [P, K, nr] → B [K, N] (W [N, K] when `transposed`)."""
    P, K, nr = bp.shape
    bt = bp.transpose(0, 2, 1).reshape(P * nr, K)[:N]
    return bt if transposed else bt.T


def pack_panels_c(symbol: str, layout: str, N: int, K: int, dtype: str) -> str:
    """C source of ``static inline void <symbol>_pack_weight(const T *b, T *packed)`` for a
    header: B [K, N] (W [N, K] for NK<nr>n) → the panels of `layout` (what pack_panels_np does), so
    a C or C++ caller packs a constant B once. T: float / double for `dtype`."""
    m = _PANELS.fullmatch(layout)
    nr, transposed = int(m.group(2)), m.group(1) == "NK"
    t = "float" if dtype == "float32" else "double"
    source, at = ("W", f"b[n * {K} + k]") if transposed else ("B", f"b[k * {N} + n]")
    shape = f"[{N}, {K}]" if transposed else f"[{K}, {N}]"
    return "\n".join([
        f"/* Packs {source} {shape} into {symbol}'s {source} argument, {layout} [{-(-N // nr)}, {K}, {nr}]",
        " * (columns beyond N zero): call it once per constant operand. */",
        f"static inline void {symbol}_pack_weight(const {t} *b, {t} *packed) {{",
        f"  for (long p = 0; p < {-(-N // nr)}; ++p) for (long k = 0; k < {K}; ++k)",
        f"    for (long c = 0; c < {nr}; ++c) {{",
        f"      long n = p * {nr} + c;",
        f"      *packed++ = n < {N} ? {at} : ({t})0;",
        "    }",
        "}",
        "",
    ])


ARGS = [
    *gemm_args({"M": (1024, "rows of A and C"), "N": (1024, "columns of B and C"), "K": (1024, "reduction length")},
               bias=False, bias_description="add bias[N] to every row"),
    ArgDef("micro_kernel", "json", None, description=(
        "optional extern C micro-kernel {func, source, mr, nr}: "
        "void func(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) "
        "adds the mr×K by K×nr product to the mr×nr tile at C (row strides in elements)")),
    panel_layout_arg("b_layout", "KN"),
]

MAX_MICRO_KERNEL_BYTES = 256 * 1024


def _check(a: dict) -> None:
    check_panel_layout(a, "b_layout", "KN")
    mk = a["micro_kernel"]
    if mk is None:
        return
    if panel_width(a.get("b_layout", "KN")) is not None:
        raise WorkloadError("b_layout", "a micro_kernel reads B row-major: b_layout must be KN")
    allowed = {"func", "source", "mr", "nr"}
    if set(mk) != allowed:
        raise WorkloadError("micro_kernel", f"needs exactly the fields {sorted(allowed)}, got {sorted(mk)}")
    try:
        te.check_identifier(mk["func"], "micro_kernel.func")
    except te.TEError as e:
        raise WorkloadError("micro_kernel.func", str(e)) from None
    if not isinstance(mk["source"], str) or not mk["source"].strip():
        raise WorkloadError("micro_kernel.source", "must be C source text")
    if len(mk["source"].encode()) > MAX_MICRO_KERNEL_BYTES:
        raise WorkloadError("micro_kernel.source", f"is larger than {MAX_MICRO_KERNEL_BYTES} bytes")
    for f in ("mr", "nr"):
        if isinstance(mk[f], bool) or not isinstance(mk[f], int) or not 1 <= mk[f] <= 64:
            raise WorkloadError(f"micro_kernel.{f}", f"must be an integer in 1..64, got {mk[f]!r}")
    if a["dtype"] != "float32":
        raise WorkloadError("dtype", "a micro_kernel takes float32 operands")


def matmul_expr(A: te.Tensor, B: te.Tensor, bias: te.Tensor | None, epilogue: str, *,
                b_panel: te.Tensor | None = None, nr: int = 1, a_panel: te.Tensor | None = None, mr: int = 1,
                name: str = "C", transpose_b: bool = False, kc: int | None = None,
                n: int | None = None) -> tuple[te.Tensor, te.Tensor]:
    """(product, out): the reduction C = A·B (reading packed panels when given) and the
    output with bias/epilogue applied (the same tensor when there is none).

    A: [*batch, M, K] or [M, K] (the same A for every batch); B: [*batch, K, N], or
    [*batch, N, K] with transpose_b (C = A·Bᵀ); leading batch dims (any number, also none) are
    B's and C's; bias: [N].
    b_panel: Bp[ceil(N/nr), *batch, K, nr] from pack_blocked(B, <axis of N>, nr);
    a_panel: Ap[ceil(M/mr), *batch, K, mr] from pack_blocked(A, <axis of M>, mr). Shared by
    matmul, dense, batch_matmul and the 1×1 conv2d templates.
    kc: with kc < K (a divisor of K), the reduction runs in K / kc blocks of kc: the product
    is then the sum over the blocks `kb` of `<name>_part` [K/kc, *batch, M, N], each block's
    partial product (GotoBLAS's K blocking, see schedule_gemm).
    n: where B comes pre-packed (B is b_panel, [ceil(n/nr), K, nr], no batch), the columns N.
    """
    M, K = A.shape[-2:]
    batch = B.shape[:-2] if n is None else ()
    a_batched = len(A.shape) > 2
    N = n if n is not None else B.shape[-2] if transpose_b else B.shape[-1]
    k = te.reduce_axis(K, "k")
    names = [f"b{d}" for d in range(len(batch))] + ["i", "j"]

    def a_at(b, i, kk):
        b = b if a_batched else ()
        return a_panel[(i // mr, *b, kk, i % mr)] if a_panel is not None else A[(*b, i, kk)]

    def b_at(b, kk, j):
        if b_panel is not None:
            return b_panel[(j // nr, *b, kk, j % nr)]
        return B[(*b, j, kk)] if transpose_b else B[(*b, kk, j)]

    has_epi = bias is not None or epilogue != "none"
    prod_name = name + "_acc" if has_epi else name
    if kc is None or kc >= K:
        prod = te.compute((*batch, M, N), lambda *idx: te.sum(a_at(idx[:-2], idx[-2], k) * b_at(idx[:-2], k, idx[-1]),
                                                              axis=k),
                          name=prod_name, axis_names=names)
    else:
        if K % kc:
            raise ValueError(f"kc = {kc} does not divide K = {K}")
        kk, kb = te.reduce_axis(kc, "k"), te.reduce_axis(K // kc, "kb")
        part = te.compute((K // kc, *batch, M, N),
                          lambda b, *idx: te.sum(a_at(idx[:-2], idx[-2], b * kc + kk) * b_at(idx[:-2], b * kc + kk, idx[-1]),
                                                 axis=kk),
                          name=prod_name + "_part", axis_names=["kbi", *names])
        prod = te.compute((*batch, M, N), lambda *idx: te.sum(part[(kb, *idx)], axis=kb), name=prod_name,
                          axis_names=names)
    if not has_epi:
        return prod, prod

    def epi(*idx):
        x = prod[idx]
        if bias is not None:
            x = x + bias[idx[-1]]
        return apply_epilogue(x, epilogue)

    return prod, te.compute((*batch, M, N), epi, name=name, axis_names=names)


def gemm_operands(a: dict, names: tuple[str, str, str] = ("A", "B", "bias"), *, transpose_b: bool = False
                  ) -> tuple[te.Tensor, te.Tensor, te.Tensor | None]:
    """Placeholders of dtype a["dtype"] named `names`: A [M, K], B [K, N] ([N, K] with
    transpose_b; its panels [ceil(N/nr), K, nr] where the workload takes B pre-packed, b_panels)
    and bias [N] (None unless a["bias"])."""
    a_name, b_name, bias_name = names
    A = te.placeholder((a["M"], a["K"]), a["dtype"], a_name)
    nr = b_panels(a)
    if nr is not None:
        B = te.placeholder((-(-a["N"] // nr), a["K"], nr), a["dtype"], b_name)
    else:
        B = te.placeholder((a["N"], a["K"]) if transpose_b else (a["K"], a["N"]), a["dtype"], b_name)
    bias = te.placeholder((a["N"],), a["dtype"], bias_name) if a["bias"] else None
    return A, B, bias


def gemm_expr(a: dict, A: te.Tensor, B: te.Tensor, bias: te.Tensor | None, *, transpose_b: bool = False,
              name: str = "C") -> te.Tensor:
    """The output of matmul_expr for gemm_operands' tensors, reading B's panels where the
    workload takes it pre-packed."""
    nr = b_panels(a)
    if nr is None:
        return matmul_expr(A, B, bias, a["epilogue"], transpose_b=transpose_b, name=name)[1]
    return matmul_expr(A, B, bias, a["epilogue"], b_panel=B, nr=nr, n=a["N"], name=name)[1]


def reference_b(a: dict, B: np.ndarray, transposed: bool = False) -> np.ndarray:
    """B [K, N] (W [N, K] when `transposed`) as float64 from the array a kernel takes."""
    B = B.astype(np.float64)
    return B if b_panels(a) is None else unpack_panels_np(B, a["N"], transposed)


def compute(a: dict) -> list[te.Tensor]:
    A, B, bias = gemm_operands(a)
    return kernel_args(A, B, bias, gemm_expr(a, A, B, bias))


def reference(a: dict, A: np.ndarray, B: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    out = (A.astype(np.float64) @ reference_b(a, B))
    if a["bias"]:
        out = out + rest[0]
    return [np_epilogue(out.astype(A.dtype), a["epilogue"])]


def flop(a: dict) -> int:
    return 2 * a["M"] * a["N"] * a["K"]


# ----------------------------------------------------------------------------- CPU template

ORDERS = ("nm_nm", "nm_mn", "mn_nm", "mn_mn")
MIN_PARALLEL_TASKS = 16
#: The shortest K block (kc) the knob offers: a shorter one adds the register tile to the
#: output more often than it saves in cache misses.
MIN_KC = 32
#: Numbers of K blocks the knob kc offers (K / kc).
K_BLOCKS = (2, 3, 4, 5, 8, 16)
#: Unrolls of the register tile's loop over K.
KU_CHOICES = (1, 2, 4, 8)
#: Below this many rows of A the default rule treats a GEMM as skinny (gemm_default, dense's rule).
SKINNY_ROWS = 16


def define_gemm_knobs(cfg, M: int, N: int, K: int, lanes: int, registers: int,
                      pack_b: tuple[bool | str, ...] = (True, False, "block"), b_panels: int | None = None) -> None:
    """Knobs of the register-blocked GEMM micro-kernel and its cache blocking; `pack_b`: the
    choices of packing B (only True where B is a view the micro-kernel cannot stream): True
    packs all of B before the product (one parallel pass), "block" packs each block of bn
    panels inside the parallel loop right before its tiles use it (GotoBLAS's packing of B
    into a buffer that stays in the L2; schedule_gemm), False reads B in place. `kc`: the
    length of the K blocks (kc_choices; K: no blocking, also what configs written before the
    knob existed mean). `b_panels`: B comes pre-packed in panels of that width, so nr is that
    width, B is read in place (pack_b False) and bn only divides the ceil(N/nr) panels (they
    are not padded to whole blocks, which the register tiles of a block would read).
    `lanes`: of a vector of the dtype; `registers`: the target's vector registers, which the
    mr × nr tile must not overflow (RegisterTileFits: the search never proposes one that does)."""
    cfg.define_knob("mr", [m for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14) if m <= M] or [M])
    nrs = [lanes * v for v in (1, 2, 3, 4)]
    if N < lanes:
        nrs = [n for n in (1, 2, 4, 8) if n <= N] or [N]
    cfg.define_knob("nr", nrs if b_panels is None else [b_panels])
    cfg.define_knob("ku", list(KU_CHOICES))
    cfg.define_knob("bm", [1, 2, 4, 8, 16, 32, 64])
    bns = [1, 2, 4, 8, 16, 32]
    cfg.define_knob("bn", bns if b_panels is None else [b for b in bns if -(-N // b_panels) % b == 0])
    cfg.define_knob("order", list(ORDERS))
    cfg.define_knob("parallel", ["outer", "fused"])
    cfg.define_knob("pack_b", list(pack_b) if b_panels is None else [False])
    cfg.define_knob("pack_a", [False, True])
    cfg.define_knob("kc", kc_choices(K), absent=K)
    cfg.define_constraint(RegisterTileFits("mr", "nr", lanes, registers))


def define_prefetch_b_knob(cfg, dot_rows: bool = False) -> None:
    """The knob `prefetch_b` of schedule_gemm's `b_in_place`: 0 (none) or the K steps ahead.
    Where the rows of B read in place are each in another page, the hardware prefetchers do not
    run ahead of the tile (Intel Xeon model 167, AVX-512, 2 threads, a 1×1 convolution's GEMM
    over the NCHW input, PREFETCHT0 4 steps of ku 2 ahead, medians of 3 rounds, looped / caches
    flushed: 512 -> 128 at 28² 1.32× / 1.15×, 256 -> 64 at 56² 1.16× / 1.20×, 1024 -> 256 at
    14² 1.00×, 64 -> 256 at 56² 0.93-0.96×): so a choice for the search, not a default. Define it
    after the space's other knobs: absent (0) it leaves their configs' indices as they were.
    The search never proposes it with B packed, or (`dot_rows` True: the space has that knob)
    with the knob `dot_rows` above 0, where it changes nothing (PrefetchReadsInPlace)."""
    cfg.define_knob("prefetch_b", [0, 4], absent=0)
    cfg.define_constraint(PrefetchReadsInPlace(dot_rows))


@dataclass(frozen=True)
class PrefetchReadsInPlace:
    """A space's constraint (``cfg.define_constraint``): `prefetch_b` > 0 only with B read in
    place by the GEMM's tiles (pack_b False, and `dot_rows` 0 where the space has that knob):
    the same kernel as prefetch_b 0 otherwise, a trial the search would spend twice."""

    dot_rows: bool = False

    def __call__(self, cfg) -> bool:
        return not cfg["prefetch_b"].val or (cfg["pack_b"].val is False and not (self.dot_rows and cfg["dot_rows"].val))


def kc_choices(K: int) -> list[int]:
    """Lengths of the K blocks: K itself (no K blocking) first, then K / b for b in K_BLOCKS
    where that is a whole number of at least MIN_KC that every unroll (ku) divides (a block
    that leaves a tail of the unrolled loop makes every tile guard its last steps)."""
    return [K] + [K // b for b in K_BLOCKS if K % b == 0 and K // b >= MIN_KC and K // b % max(KU_CHOICES) == 0]


def schedule_gemm(sch, cfg, prod: te.Tensor, out: te.Tensor, packs: list[te.Tensor], K: int,
                  b_panel: te.Tensor | None = None, b_in_place: te.Tensor | None = None) -> None:
    """Schedule the GEMM `prod` (and its epilogue `out`) with the knobs of define_gemm_knobs.

    The output stage is tiled (i: ioo, ioi, ii; j: joo, joi, ji), the register tile is
    computed at the innermost tile loop with k split by ku, unrolled rows and vectorized
    columns; packing stages run at the root in parallel, except `b_panel` (B's packed panels,
    of `packs`) with pack_b = "block": it is computed at the loop of the blocks of N (joo;
    the parallel loop when that is fused), so each task packs the bn panels its tiles read
    into its own buffer, which is still in the L2 when they do. With parallel = "outer" and
    order nm_* that is once per block of N; where joo is fused with the blocks of M, or
    inside them, a block is packed once per block of M.
    Leading batch axes (batch_matmul) are outermost and always part of the parallel loop.

    Without K blocking (kc = K) the register tile is a cache_write of prod holding the sum
    over all of K. With kc < K (matmul_expr's `<prod>_part`), the loop over the K blocks
    (kb) runs right inside the parallel loop: the register tile holds one block's partial
    product and is added to prod, which is the output itself or, with an epilogue, a buffer
    for the parallel loop's region that the output's tiles then read; a B block packed
    per block of N is packed per K block too (kc × bn·nr, sized to stay in the L2 while its
    kc × nr panels, re-read by every row tile, stay in the L1: BLIS's kc and nc).

    `b_in_place`: the tensor B is read from when pack_b is False, in a space with the knob
    `prefetch_b` (define_prefetch_b_knob): a value > 0 prefetches into the L1 (PREFETCHT0) the
    rows of B that the register tile reads that many steps of its K loop (ku each) ahead.
    """
    mr, nr, ku = cfg["mr"].val, cfg["nr"].val, cfg["ku"].val
    M, N = out.shape[-2:]
    part = prod.op.input_tensors()[0] if cfg["kc"].val < K else None  # matmul_expr's <prod>_part
    if part is None:
        acc = sch.cache_write(prod, "local")
        if out is not prod:
            sch[prod].compute_inline()
    so = sch[out]
    kb = so.op.reduce_axes[0] if part is not None and out is prod else None
    *batch, outer, inner, ii, ji = _tile(so, cfg, M, N, kb)
    if cfg["parallel"].val == "fused":
        block = so.fuse(*batch, *outer)
        par = block
    else:
        par = so.fuse(*batch, outer[0])
        block = par if cfg["order"].val.startswith("nm") else outer[1]
    so.parallel(par)
    so.unroll(ii)
    so.vectorize(ji)
    pack_at = (so, block)
    if part is None:
        tile_at = (so, inner[-1])
        sa = sch[acc]
    else:
        if out is prod:
            tile_at, pack_at = (so, inner[-1]), (so, kb)
        else:
            sp = sch[prod]
            sp.compute_at(so, par)
            _, p_inner, p_ii, p_ji = _tile(sp, cfg, M, N, sp.op.reduce_axes[0], blocks=False)
            sp.unroll(p_ii)
            sp.vectorize(p_ji)
            tile_at, pack_at = (sp, p_inner[-1]), (sp, sp.op.reduce_axes[0])
        sa = sch[part]
        sa.set_scope("local")
    sa.compute_at(*tile_at)
    *_, ai, aj = sa.op.axis
    (ak,) = sa.op.reduce_axes
    ko, ki = sa.split(ak, factor=min(ku, K))
    sa.reorder(ko, ki, ai, aj)
    if b_in_place is not None and cfg["pack_b"].val is False and cfg["prefetch_b"].val:
        sa.prefetch(b_in_place, ko, ko, offset=cfg["prefetch_b"].val, locality=3)
    sa.unroll(ki)
    sa.unroll(ai)
    sa.vectorize(aj)
    for p in packs:
        sp = sch[p]
        if p is b_panel and cfg["pack_b"].val == "block":
            sp.compute_at(*pack_at)
        else:
            sp.parallel(sp.op.axis[0])
        sp.vectorize(sp.op.axis[-1])


def _tile(stage, cfg, M: int, N: int, kb=None, *, blocks: bool = True) -> list:
    """Split `stage`'s last two axes into blocks (bm / bn register tiles, unless not
    `blocks`) of register tiles (mr × nr) and order them by the knob `order`, with the loop
    `kb` (a reduce axis of the stage, or None) right inside the parallel loop. Returns
    [*batch, outer block loops, inner tile loops, ii, ji]."""
    mr, nr = cfg["mr"].val, cfg["nr"].val
    *batch, i, j = stage.op.axis
    io, ii = stage.split(i, factor=mr)
    jo, ji = stage.split(j, factor=nr)
    order = cfg["order"].val
    if not blocks:
        inner = [jo, io] if order.endswith("nm") else [io, jo]
        stage.reorder(*([kb] if kb is not None else []), *inner, ii, ji)
        return [[], inner, ii, ji]
    ioo, ioi = stage.split(io, factor=min(cfg["bm"].val, -(-M // mr)))
    joo, joi = stage.split(jo, factor=min(cfg["bn"].val, -(-N // nr)))
    outer = [joo, ioo] if order.startswith("nm") else [ioo, joo]
    inner = [joi, ioi] if order.endswith("nm") else [ioi, joi]
    kbs = [kb] if kb is not None else []
    if cfg["parallel"].val == "fused":
        stage.reorder(*batch, *outer, *kbs, *inner, ii, ji)
    else:
        stage.reorder(*batch, outer[0], *kbs, outer[1], *inner, ii, ji)
    return [*batch, outer, inner, ii, ji]


def micro_kernel_template(cfg, workload, target):
    """Tiles of the output computed by the workload's extern micro-kernel (tensorize); the
    tiles a split leaves partial run the plain loops. Knobs: blocking and loop order."""
    a = workload.args
    mk = a["micro_kernel"]
    M, N = a["M"], a["N"]
    cfg.define_knob("bm", [1, 2, 4, 8, 16])
    cfg.define_knob("bn", [1, 2, 4, 8, 16])
    cfg.define_knob("order", list(ORDERS))
    cfg.define_knob("parallel", ["outer", "fused"])
    cfg.add_flop(flop(a))
    A, B, bias = gemm_operands(a)
    prod, out = matmul_expr(A, B, bias, a["epilogue"])
    sch = create_schedule(out)
    sp = sch[prod]
    i, j = sp.op.axis
    io, ii = sp.split(i, factor=mk["mr"])
    jo, ji = sp.split(j, factor=mk["nr"])
    ioo, ioi = sp.split(io, factor=min(cfg["bm"].val, -(-M // mk["mr"])))
    joo, joi = sp.split(jo, factor=min(cfg["bn"].val, -(-N // mk["nr"])))
    order = cfg["order"].val
    outer = [joo, ioo] if order.startswith("nm") else [ioo, joo]
    inner = [joi, ioi] if order.endswith("nm") else [ioi, joi]
    sp.reorder(*outer, *inner, ii, ji, sp.op.reduce_axis[0])
    sp.parallel(sp.fuse(*outer) if cfg["parallel"].val == "fused" else outer[0])
    sp.tensorize(ii, TensorIntrin(mk["func"], mk["source"],
                                  ("extent:k", "A", "A.stride0", "B", "B.stride0", prod.name, f"{prod.name}.stride0")))
    if out is not prod:
        so = sch[out]
        so.parallel(so.op.axis[0])
    return sch, kernel_args(A, B, bias, out)


def packed_panels(cfg, A: te.Tensor, B: te.Tensor, transpose_b: bool = False
                  ) -> tuple[te.Tensor | None, te.Tensor | None, list[te.Tensor]]:
    """(A panels, B panels, the packing stages) that the knobs pack_a / pack_b ask for, for
    A [*batch, M, K] and B [*batch, K, N] (or [*batch, N, K] with transpose_b):
    pack_blocked along M by mr and along N by nr, the panel counts padded to whole blocks of
    bm / bn (so edge tiles read zeros, not out of bounds); None for an operand read in place.
    Packed panels are named `<operand>_packed`."""
    m_axis, n_axis = len(A.shape) - 2, len(B.shape) - (2 if transpose_b else 1)
    M, N = A.shape[m_axis], B.shape[n_axis]
    mr, nr = cfg["mr"].val, cfg["nr"].val
    ap = pack_blocked(A, m_axis, mr, f"{A.name}_packed", min(cfg["bm"].val, -(-M // mr))) if cfg["pack_a"].val else None
    bp = (pack_blocked(B, n_axis, nr, f"{B.name}_packed", min(cfg["bn"].val, -(-N // nr)))
          if cfg["pack_b"].val else None)
    return ap, bp, [p for p in (bp, ap) if p is not None]


def gemm_template(cfg, target, dtype: str, A: te.Tensor, B: te.Tensor, bias: te.Tensor | None, epilogue: str, *,
                  transpose_b: bool = False, name: str = "C"):
    """The CPU GEMM of matmul, dense and batch_matmul: (schedule, kernel arguments) for
    out = epilogue(A·B + bias) (A·Bᵀ with transpose_b; shapes as in matmul_expr) with the
    knobs of define_gemm_knobs (for a cpu `target` and `dtype`), the packed panels they ask for
    and schedule_gemm."""
    M, K = A.shape[-2:]
    define_gemm_knobs(cfg, M, B.shape[-2] if transpose_b else B.shape[-1], K, target.lanes(dtype),
                      target.vector_registers)
    return gemm_schedule(cfg, A, B, bias, epilogue, transpose_b=transpose_b, name=name)


def gemm_schedule(cfg, A: te.Tensor, B: te.Tensor, bias: te.Tensor | None, epilogue: str, *,
                  transpose_b: bool = False, name: str = "C", n: int | None = None):
    """gemm_template's (schedule, kernel arguments) in a space that has define_gemm_knobs' knobs;
    `n`: B is pre-packed, its panels [ceil(n/nr), K, nr] (define_gemm_knobs' b_panels). The
    panels of a transposed B that need no zero padding are packed by register transposes
    (`transpose_pack`)."""
    ap, bp, packs = packed_panels(cfg, A, B, transpose_b)
    prod, out = matmul_expr(A, B, bias, epilogue, b_panel=B if n is not None else bp, nr=cfg["nr"].val, a_panel=ap,
                            mr=cfg["mr"].val, transpose_b=transpose_b, name=name, kc=cfg["kc"].val, n=n)
    sch = create_schedule(out)
    schedule_gemm(sch, cfg, prod, out, packs, A.shape[-1], bp)
    if transpose_b and bp is not None:
        tensorize_transposed_pack(sch, bp, B, B.shape[-2], cfg["nr"].val)
    return sch, kernel_args(A, B, bias, out)


def cpu_template(cfg, workload, target):
    a = workload.args
    if a["micro_kernel"] is not None:
        return micro_kernel_template(cfg, workload, target)
    cfg.add_flop(flop(a))
    A, B, bias = gemm_operands(a)
    nr = b_panels(a)
    if nr is None:
        return gemm_template(cfg, target, a["dtype"], A, B, bias, a["epilogue"])
    define_gemm_knobs(cfg, a["M"], a["N"], a["K"], target.lanes(a["dtype"]), target.vector_registers, b_panels=nr)
    return gemm_schedule(cfg, A, B, bias, a["epilogue"], n=a["N"])


def gemm_default(space, M: int, N: int, K: int, lanes: int, dtype_bytes: int = 4, *, registers: int) -> dict:
    """Rule for the untuned config (no measurement involved) of an M × N × K GEMM, `lanes`
    elements of `dtype_bytes` bytes per vector, `registers` vector registers (the target's):

    - register tile: with 32 vector registers (AVX-512) nr = 4 vectors and mr = 6 rows (24
      accumulators, 6 broadcasts + 4 loads per 24 FMAs), with 16 (AVX2) 2 vectors × 6 rows, or
      3 vectors × 4 rows where 3 vectors divide N (the vectors of B are FMA memory operands, so
      12 accumulators and a broadcast fit; 4 broadcasts + 3 loads per 12 FMAs instead of 6 + 2):
      built for AVX2, run on an AMD Zen 5, per-round ratios to 6 × 16: 128×3072×768 1.07-1.09,
      64×3072×768 1.14, 128×768×3072 1.04, 1008³ 1.04, 1024×3072×1024 1.02, 128×768² 1.03,
      512×768² 1.01; where the last tile of N is partial it lost (1024³ 0.90, 512³ 0.89);
      narrower N takes fewer vectors and more rows, keeping accumulators within 24 (12); with
      32 registers also where tiles of 2 or 3 vectors (12 or 8 rows) compute enough fewer
      columns beyond N (least_padding_width: 196 columns in 224 instead of 256);
    - bn: panels of B per block so a K×(bn·nr) block of B fills about half of a 1 MiB L2, and
      where nr divides N, a bn that divides N / nr (a block straddling N's edge makes the
      write-back of every tile guard each lane: 81 -> 288 GFLOP/s for 256×3136×64 here);
    - bm: row tiles so an (bm·mr)×K block of A fills about a quarter of it; both shrink
      until there are MIN_PARALLEL_TASKS blocks, then where 2 or 4 threads' contiguous ranges
      of blocks would hold uneven numbers of tiles (even_blocks: the blocks at N's edge are
      smaller); AMD Zen 5, AVX-512, 2 threads, ResNet-50's 1×1 layers at 28² (and 256 → 512
      at 56² stride 2), GFLOP/s: 325-354 -> 441-451 (1.27-1.36×), 296 -> 373 (1.26×); built
      for AVX2, the layers at 14²: 177-189 -> 220-231 (1.22×);
    - pack B when it is larger than half the L2 (its panels become contiguous; a smaller B
      stays cached anyway and packing it costs a pass and a fork/join), or when the blocks of
      bn·nr columns do not divide N: the packed panels are zero-padded to whole blocks, so the
      register tile reads whole vectors at the edge instead of guarding every lane (which
      keeps it scalar); leave A in place (mr row streams prefetch well);
    - ku = 4, but 2 for the tiles whose accumulators crowd the registers (`tile_unroll`);
    - where B is packed and its blocks of N are at least MIN_PARALLEL_TASKS, with 32 vector
      registers (AVX-512) always and with 16 (AVX2) where A fits half the L2: pack_b =
      "block" with the threads splitting the blocks of N
      (parallel "outer"), bn from a quarter of the L2 (the packed block shares it with the
      block of A): each thread packs a block right before its tiles read it from the L2,
      instead of one pass writing all of B to memory that the tiles then read back
      (Xeon model 207, AVX-512, 2 threads, same run: 1000³ 298 -> 315 GFLOP/s,
      128×3072×768 244 -> 278, 1024³ 318 -> 323). With AVX2 each block of N reads all of A
      again (a narrow block: 64 columns), which the 32-register tile's wider blocks and a 2 MiB
      L2 absorb but an AVX2 host does not where A is large: AMD Zen 3 (AVX2 only, 512 KiB L2),
      2 threads, per-round ratios to packing all of B first: 128×3072×768 1.15, 64×3072×768
      1.27, 128×768² 1.04, dense 128 × 768 → 3072 1.36, 128 × 768 → 768 1.06; 1024³ 0.98,
      2048³ 0.90, 1000³ 0.86, so AVX2 packs all of B first where A is larger;
    - skinny A (M < SKINNY_ROWS, down to GEMV at M = 1): with fewer than 6 rows the tile
      takes up to 4 vectors of N per row instead (M = 1: 4 accumulators), B is read
      in place (each element is used by M rows only, so packing doubles the traffic: at
      M = 1, 1000×512, Zen 3, one thread, 117 -> 38 µs) and the threads split N.
    """
    choices = {name: knob_choices(space, name) for name in ("mr", "nr", "bm", "bn")}
    regs = 24 if lanes * dtype_bytes >= 64 else 12
    skinny = M < SKINNY_ROWS
    rows = min(M, 6)  # rows × vectors accumulators, vectors of B and a broadcast of A in the registers
    wide = [n for n in choices["nr"] if n <= max(N, lanes) and n // lanes <= min(4, (regs * 4 // 3 - 1) // (rows + 1))]
    nr = max(wide) if wide else choices["nr"][0]
    if regs == 24 and not skinny:
        nr = least_padding_width(N, [n for n in wide if n >= 2 * lanes], nr)
    if regs == 12 and not skinny and N % (3 * lanes) == 0 and 3 * lanes in choices["nr"]:
        nr = 3 * lanes  # and so 4 rows: see the docstring
    mr = tile_rows(choices["mr"], nr, lanes, dtype_bytes)
    l2 = 1 << 20
    bn = pick_at_most(choices["bn"], (l2 // 2) // max(1, K * nr * dtype_bytes))
    if N % nr == 0:  # blocks that divide N: no block straddles its edge, so no lane is guarded
        bn = max(b for b in choices["bn"] if b <= bn and (N // nr) % b == 0)
    bm = pick_at_most(choices["bm"], (l2 // 4) // max(1, K * mr * dtype_bytes))
    bm, bn = balance_blocks(-(-M // mr), -(-N // nr), bm, bn)
    bm, bn = even_blocks(-(-M // mr), -(-N // nr), bm, bn, choices["bm"], choices["bn"])
    pack_b = not skinny and (K * N * dtype_bytes > l2 // 2 or N % (nr * bn) != 0)
    config = {"mr": mr, "nr": nr, "ku": tile_unroll(mr, nr, lanes, dtype_bytes, registers), "bm": bm, "bn": bn,
              "order": "nm_nm", "parallel": "fused", "pack_b": pack_b, "pack_a": False, "kc": K}
    if pack_b and (regs == 24 or M * K * dtype_bytes <= l2 // 2) and "block" in knob_choices(space, "pack_b"):
        # pack B per block of N inside the parallel loop (blocks of a quarter of the L2)
        block_bn = pick_at_most(choices["bn"], (l2 // 4) // max(1, K * nr * dtype_bytes))
        if -(-N // (nr * block_bn)) >= MIN_PARALLEL_TASKS:
            config.update(bn=block_bn, bm=pick_at_most(choices["bm"], (l2 // 4) // max(1, K * mr * dtype_bytes)),
                          parallel="outer", pack_b="block")
    return config


def tile_unroll(mr: int, nr: int, lanes: int, dtype_bytes: int, registers: int) -> int:
    """The default unroll of the register tile's loop over K: 4, or 2 where, with FMAs on
    vectors of 32 or 64 bytes (AVX2, AVX-512), the tile's accumulators take at least 3/4 of the
    target's `registers` vector registers (24 of AVX-512's 32: 6 × 4, 8 × 3, 12 × 2 vectors; 12
    of AVX2's 16: 6 × 2) and the vectors of B it loads per step stay in registers too (with 16,
    the 2-vector tiles; the 3-vector tile reads them as FMA memory operands and does not spill).
    Unrolled by 4 those tiles leave GCC 12 too few registers: it stores and reloads values in
    the hot loop (AVX-512 6 × 64: 2 stack references per 96 FMAs, 8 × 48 and 12 × 32: 6,
    14 × 32: 4-16; AVX2 6 × 16: 1 per 48); by 2 none. 20-21 accumulators (5 × 4, 7 × 3) do
    not spill by 4.
    Built for AVX2 on an AMD Zen 4, 2 threads, medians of 5-9 interleaved rounds, ku 2
    against 4: matmul 512³ 1.08, 1000³ 1.04, 1024³ 1.06, 2048³ 1.04; ResNet-50's 1×1
    convolutions 256 -> 64 at 56² 1.02, 1024 -> 256 at 14² 1.10, 128 -> 512 at 28² 1.07; the
    4 × 24 tile 0.98, SSE's 6 × 8 tile (generic: a multiply and an add apart) 0.96. Built for
    AVX-512 on an Intel Xeon (model 167), 2 threads, medians of 9 interleaved rounds: matmul
    1024³ 1.07, 2048³ 1.04, 1000³ 1.06, 128×3072×768 1.03; 1×1 convolutions 256 -> 64 at 56²
    1.19, 64 -> 256 at 56² 1.15, 128 -> 512 at 28² 1.04, 1024 -> 256 at 14² (12 × 32) 0.99;
    dense 128 × 768 -> 3072 1.00; the panel GEMM's 7 × 32 tile 0.98 (not crowded: keeps 4)."""
    vectors = max(1, nr // lanes)
    crowded = 4 * mr * vectors >= 3 * registers and (vectors == 2 or registers >= 32)
    return 2 if lanes * dtype_bytes >= 32 and crowded else 4


def tile_rows(mr_choices: list[int], nr: int, lanes: int, dtype_bytes: int = 4) -> int:
    """Rows of a register tile nr columns wide (`gemm_default`): as many as keep its
    accumulators within 24 vector registers of 32 (vectors of lanes · dtype_bytes >= 64 bytes:
    AVX-512) or 12 of 16, at most 14."""
    regs = 24 if lanes * dtype_bytes >= 64 else 12
    return max(m for m in mr_choices if m <= max(1, min(14, regs // max(1, nr // lanes))))


#: How much more of the computed columns (a fraction) a narrower register tile must put to use
#: before the default takes it instead of the widest.
PADDING_GAIN = 0.05


def least_padding_width(N: int, widths: list[int], widest: int) -> int:
    """`widest`, or the width of `widths` whose tiles compute the fewest columns beyond N where
    that puts more than PADDING_GAIN more of the computed columns to use: 196 columns (14²) in
    tiles of 64 compute 256, in tiles of 32 only 224 (ResNet-50's 1×1 layers at 14², AMD Zen 5,
    AVX-512: 6 × 64 -> 12 × 32 1.11×)."""
    def used(n: int) -> float:
        return N / (-(-N // n) * n)

    best = max(widths, key=lambda n: (used(n), n), default=widest)
    return best if used(best) > used(widest) * (1 + PADDING_GAIN) else widest


def pick_at_most(options: list[int], limit: int) -> int:
    """The largest of `options` at most max(1, limit); the first when none is."""
    return max([o for o in options if o <= max(1, limit)] or [options[0]])


def balance_blocks(m_tiles: int, n_tiles: int, bm: int, bn: int) -> tuple[int, int]:
    """(bm, bn) halved, the larger first, until the m_tiles × n_tiles register tiles make at least
    MIN_PARALLEL_TASKS blocks of bm × bn tiles (so the threads get balanced shares) or both are 1."""
    while -(-m_tiles // bm) * -(-n_tiles // bn) < MIN_PARALLEL_TASKS and (bm > 1 or bn > 1):
        bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
    return bm, bn


#: Thread counts whose shares of the parallel loop the default's blocks keep even.
BALANCED_THREADS = (2, 4)
#: How much more than an even share (fraction) the busiest thread may get before the default
#: takes smaller blocks.
SHARE_SLACK = 0.02


def share_imbalance(m_tiles: int, n_tiles: int, bm: int, bn: int, threads: int) -> float:
    """The busiest thread's register tiles over an even share (1.0: even) when the parallel loop
    over the blocks of bm × bn tiles (blocks of N outermost, the default's order nm_nm, loops
    fused) is cut into `threads` contiguous ranges of nearly equal numbers of blocks, as
    tf_parallel_for cuts it. The last block of each axis holds what is left of it, so blocks
    differ in size where bm or bn does not divide the tiles."""
    m_blocks = -(-m_tiles // bm)
    blocks = m_blocks * -(-n_tiles // bn)

    def tiles_before(block: int) -> int:  # in the blocks before `block` (j-major: blocks of N outermost)
        j, i = divmod(block, m_blocks)
        return min(j * bn, n_tiles) * m_tiles + max(0, min(bn, n_tiles - j * bn)) * min(i * bm, m_tiles)

    chunks = min(threads, blocks)
    base, rem = divmod(blocks, chunks)
    starts = [c * base + min(c, rem) for c in range(chunks + 1)]
    return max(tiles_before(e) - tiles_before(b) for b, e in zip(starts, starts[1:])) * threads / (m_tiles * n_tiles)


def even_blocks(m_tiles: int, n_tiles: int, bm: int, bn: int, bm_choices: list[int],
                bn_choices: list[int]) -> tuple[int, int]:
    """(bm, bn), or smaller blocks from the choices where those share the tiles more evenly among
    BALANCED_THREADS threads (share_imbalance): the largest blocks within SHARE_SLACK of the
    evenest. A block of N that holds the tiles left at N's edge is smaller than the others, and
    the threads take contiguous ranges of blocks, so with blocks of 8 × 8 tiles over 86 × 13
    tiles (ResNet-50's 1×1 layers at 28²: 512 × 784, AVX-512 tiles 6 × 64) one thread gets the
    first block of N (8 of its 13 tiles) and the other the last: 1.23 × an even share."""
    worst = {(m, n): max(share_imbalance(m_tiles, n_tiles, m, n, t) for t in BALANCED_THREADS)
             for m in bm_choices if m <= bm for n in bn_choices if n <= bn}
    evenest = min(worst.values())
    return max((b for b, w in worst.items() if w <= evenest + SHARE_SLACK), key=lambda b: (b[0] * b[1], b[1]))


def gemm_workload_default(space, workload, target) -> dict:
    """gemm_default for a workload with arguments M, N, K and dtype (for batch_matmul: one
    product of the batch); B pre-packed (b_panels) is read in place."""
    a = workload.args
    config = gemm_default(space, a["M"], a["N"], a["K"], target.lanes(a["dtype"]), te.dtype_of(a["dtype"]).bytes,
                          registers=target.vector_registers)
    return config if b_panels(a) is None else {**config, "pack_b": False}


def default_config(space, workload, target) -> dict:
    if workload.args["micro_kernel"] is not None:
        return {"bm": 4, "bn": 4, "order": "nm_nm", "parallel": "fused"}
    return gemm_workload_default(space, workload, target)


def panels_description(a: dict, plain: str, transposed: bool = False) -> str:
    """What a layouts() entry says of a GEMM's B: `plain`, or its pre-packed panels (of W [N, K]
    where `transposed`)."""
    nr = b_panels(a)
    if nr is None:
        return plain
    element = f"W[p*{nr} + c, k]" if transposed else f"B[k, p*{nr} + c]"
    return (f"{a.get('b_layout', a.get('weight_layout'))} column panels [ceil(N/{nr}), K, {nr}] "
            f"(panel p, row k, lane c = {element}; columns beyond N zero)")


def _layouts(a: dict) -> dict[str, str]:
    return {"A": "row-major [M, K]", "B": panels_description(a, "row-major [K, N]"), "bias": "[N]",
            "C": "row-major [M, N]"}


register(OpDef(
    name="matmul",
    description="C[M,N] = A[M,K] · B[K,N], optional bias[N] and relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop,
    templates={"cpu": cpu_template}, default_config=default_config, layouts=_layouts, family="gemm", check=_check,
))
