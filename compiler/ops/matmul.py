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

import numpy as np

from .. import te
from ..schedule import create_schedule
from .common import EPILOGUES, apply_epilogue, np_epilogue, pack_blocked
from .registry import ArgDef, OpDef, register

MAX_DIM = 1 << 16

ARGS = [
    ArgDef("M", "int", 1024, 1, MAX_DIM, description="rows of A and C"),
    ArgDef("N", "int", 1024, 1, MAX_DIM, description="columns of B and C"),
    ArgDef("K", "int", 1024, 1, MAX_DIM, description="reduction length"),
    ArgDef("bias", "bool", False, description="add bias[N] to every row"),
    ArgDef("epilogue", "str", "none", choices=EPILOGUES, description="activation applied last"),
    ArgDef("dtype", "str", "float32", choices=("float32", "float64")),
]


def matmul_expr(A: te.Tensor, B: te.Tensor, bias: te.Tensor | None, epilogue: str, *,
                b_panel: te.Tensor | None = None, nr: int = 1, a_panel: te.Tensor | None = None, mr: int = 1,
                name: str = "C") -> tuple[te.Tensor, te.Tensor]:
    """(product, out): the reduction C = A·B (reading packed panels when given) and the
    output with bias/epilogue applied (the same tensor when there is none).

    b_panel: Bp[ceil(N/nr), K, nr] from pack_blocked(B, 1, nr); a_panel: Ap[ceil(M/mr), K, mr]
    from pack_blocked(A, 0, mr). Shared by matmul, dense and batch_matmul templates.
    """
    M, K = A.shape
    N = B.shape[1]
    k = te.reduce_axis(K, "k")

    def a_at(i, kk):
        return a_panel[i // mr, kk, i % mr] if a_panel is not None else A[i, kk]

    def b_at(kk, j):
        return b_panel[j // nr, kk, j % nr] if b_panel is not None else B[kk, j]

    has_epi = bias is not None or epilogue != "none"
    prod = te.compute((M, N), lambda i, j: te.sum(a_at(i, k) * b_at(k, j), axis=k),
                      name=name + "_acc" if has_epi else name)
    if not has_epi:
        return prod, prod

    def epi(i, j):
        x = prod[i, j]
        if bias is not None:
            x = x + bias[j]
        return apply_epilogue(x, epilogue)

    return prod, te.compute((M, N), epi, name=name)


def _inputs(a: dict):
    A = te.placeholder((a["M"], a["K"]), a["dtype"], "A")
    B = te.placeholder((a["K"], a["N"]), a["dtype"], "B")
    bias = te.placeholder((a["N"],), a["dtype"], "bias") if a["bias"] else None
    return A, B, bias


def compute(a: dict) -> list[te.Tensor]:
    A, B, bias = _inputs(a)
    _, out = matmul_expr(A, B, bias, a["epilogue"])
    return [A, B, *([bias] if bias is not None else []), out]


def reference(a: dict, A: np.ndarray, B: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    out = (A.astype(np.float64) @ B.astype(np.float64))
    if a["bias"]:
        out = out + rest[0]
    return [np_epilogue(out.astype(A.dtype), a["epilogue"])]


def flop(a: dict) -> int:
    return 2 * a["M"] * a["N"] * a["K"]


# ----------------------------------------------------------------------------- CPU template

ORDERS = ("nm_nm", "nm_mn", "mn_nm", "mn_mn")


def define_gemm_knobs(cfg, M: int, N: int, K: int, lanes: int) -> None:
    """Knobs of the register-blocked GEMM micro-kernel and its cache blocking."""
    cfg.define_knob("mr", [m for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14) if m <= M] or [M])
    nrs = [lanes * v for v in (1, 2, 3, 4)]
    if N < lanes:
        nrs = [n for n in (1, 2, 4, 8) if n <= N] or [N]
    cfg.define_knob("nr", nrs)
    cfg.define_knob("ku", [1, 2, 4, 8])
    cfg.define_knob("bm", [1, 2, 4, 8, 16, 32, 64])
    cfg.define_knob("bn", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("order", list(ORDERS))
    cfg.define_knob("parallel", ["outer", "fused"])
    cfg.define_knob("pack_b", [True, False])
    cfg.define_knob("pack_a", [False, True])


def schedule_gemm(sch, cfg, prod: te.Tensor, out: te.Tensor, packs: list[te.Tensor], K: int) -> None:
    """Schedule the 2-D GEMM `prod` (and its epilogue `out`) with the knobs of define_gemm_knobs.

    The output stage is tiled (i: ioo, ioi, ii; j: joo, joi, ji), the register tile
    (cache_write of prod) is computed at the innermost tile loop with k split by ku,
    unrolled rows and vectorized columns; packing stages run at the root in parallel.
    """
    mr, nr, ku = cfg["mr"].val, cfg["nr"].val, cfg["ku"].val
    M, N = out.shape
    acc = sch.cache_write(prod, "local")
    if out is not prod:
        sch[prod].compute_inline()
    so = sch[out]
    i, j = so.op.axis
    io, ii = so.split(i, factor=mr)
    jo, ji = so.split(j, factor=nr)
    bm = min(cfg["bm"].val, -(-M // mr))
    bn = min(cfg["bn"].val, -(-N // nr))
    ioo, ioi = so.split(io, factor=bm)
    joo, joi = so.split(jo, factor=bn)
    order = cfg["order"].val
    outer = [joo, ioo] if order.startswith("nm") else [ioo, joo]
    inner = [joi, ioi] if order.endswith("nm") else [ioi, joi]
    so.reorder(*outer, *inner, ii, ji)
    if cfg["parallel"].val == "fused":
        so.parallel(so.fuse(*outer))
    else:
        so.parallel(outer[0])
    so.unroll(ii)
    so.vectorize(ji)
    sa = sch[acc]
    sa.compute_at(so, inner[-1])
    ai, aj = sa.op.axis
    (ak,) = sa.op.reduce_axis
    ko, ki = sa.split(ak, factor=min(ku, K))
    sa.reorder(ko, ki, ai, aj)
    sa.unroll(ki)
    sa.unroll(ai)
    sa.vectorize(aj)
    for p in packs:
        sp = sch[p]
        sp.parallel(sp.op.axis[0])
        sp.vectorize(sp.op.axis[-1])


def cpu_template(cfg, workload, target):
    a = workload.args
    M, N, K = a["M"], a["N"], a["K"]
    lanes = target.lanes(a["dtype"])
    define_gemm_knobs(cfg, M, N, K, lanes)
    cfg.add_flop(flop(a))
    A, B, bias = _inputs(a)
    mr, nr = cfg["mr"].val, cfg["nr"].val
    packs = []
    bp = ap = None
    if cfg["pack_b"].val:
        bp = pack_blocked(B, 1, nr, "B_packed", min(cfg["bn"].val, -(-N // nr)))
        packs.append(bp)
    if cfg["pack_a"].val:
        ap = pack_blocked(A, 0, mr, "A_packed", min(cfg["bm"].val, -(-M // mr)))
        packs.append(ap)
    prod, out = matmul_expr(A, B, bias, a["epilogue"], b_panel=bp, nr=nr, a_panel=ap, mr=mr)
    sch = create_schedule(out)
    schedule_gemm(sch, cfg, prod, out, packs, K)
    return sch, [A, B, *([bias] if bias is not None else []), out]


def gemm_default(space, M: int, N: int, K: int, lanes: int, dtype_bytes: int = 4) -> dict:
    """Rule for the untuned config (no measurement involved):

    - nr: two vectors (one if N is narrower), mr: as many rows as keep mr*nr/lanes
      accumulators within 24 of the 32 vector registers of AVX-512 (12 of 16 for AVX2), at most 12;
    - bn: panels of B per block so a K×(bn·nr) block of B fills about half of a 1 MiB L2;
    - bm: row tiles so an (bm·mr)×K block of A fills about a quarter of it;
    - pack B always, pack A when K is long (strided rows stream poorly), ku = 4.
    """
    choices = {name: [space.knobs[name].entity(i).val for i in range(len(space.knobs[name]))]
               for name in ("mr", "nr", "bm", "bn")}
    nr = 2 * lanes if 2 * lanes in choices["nr"] and N >= 2 * lanes else choices["nr"][0]
    regs = 24 if lanes * dtype_bytes >= 64 else 12
    vecs = max(1, nr // lanes)
    mr = max(m for m in choices["mr"] if m <= max(1, min(12, regs // vecs)))
    l2 = 1 << 20

    def pick(options, limit):
        return max([o for o in options if o <= max(1, limit)] or [options[0]])

    bn = pick(choices["bn"], (l2 // 2) // max(1, K * nr * dtype_bytes))
    bm = pick(choices["bm"], (l2 // 4) // max(1, K * mr * dtype_bytes))
    return {"mr": mr, "nr": nr, "ku": 4, "bm": bm, "bn": bn, "order": "nm_nm", "parallel": "fused",
            "pack_b": True, "pack_a": K >= 256}


def default_config(space, workload, target) -> dict:
    a = workload.args
    return gemm_default(space, a["M"], a["N"], a["K"], target.lanes(a["dtype"]), 4 if a["dtype"] == "float32" else 8)


def _layouts(a: dict) -> dict[str, str]:
    return {"A": "row-major [M, K]", "B": "row-major [K, N]", "bias": "[N]", "C": "row-major [M, N]"}


register(OpDef(
    name="matmul",
    description="C[M,N] = A[M,K] · B[K,N], optional bias[N] and relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop,
    templates={"cpu": cpu_template}, default_config=default_config, layouts=_layouts, family="gemm",
))
