"""CUDA templates of the GEMM family: matmul (+bias, +relu/gelu) and batch_matmul (B optionally
transposed), on the register-blocked shared-memory schedule of `common.schedule_gemm`.

The computation is expressed over shared-memory stages: A_shared[*b, k, m] = A[*b, m, k]
(A transposed on its way into shared memory, so that each thread reads its tile_m values of
a k step as one 16-byte vector) and B_shared[*b, k, n] = B[*b, k, n] (or B[*b, n, k] for a
transposed B). Global reads of both are along their contiguous axis, 16 bytes per thread.
"""

from __future__ import annotations

from ... import te
from ...cuda.limits import limits_for
from ...schedule import ScheduleError, create_schedule
from ..common import apply_epilogue, kernel_args
from . import common


def gemm_expr(A: te.Tensor, B: te.Tensor, bias: te.Tensor | None, epilogue: str, *, transpose_b: bool = False,
              name: str = "C"):
    """(a_shared, b_shared, prod, out) for C = A·B (or A·Bᵀ) with leading batch axes shared by A,
    B and C; out = prod when there is no bias and no epilogue."""
    *batch, M, K = A.shape
    N = B.shape[-2] if transpose_b else B.shape[-1]
    nb = len(batch)
    bnames = [f"b{d}" for d in range(nb)]
    a_sh = te.compute((*batch, K, M), lambda *idx: A[(*idx[:nb], idx[-1], idx[-2])], name="A_shared",
                      axis_names=[*bnames, "k", "m"])
    if transpose_b:
        b_sh = te.compute((*batch, K, N), lambda *idx: B[(*idx[:nb], idx[-1], idx[-2])], name="B_shared",
                          axis_names=[*bnames, "k", "n"])
    else:
        b_sh = te.compute((*batch, K, N), lambda *idx: B[idx], name="B_shared", axis_names=[*bnames, "k", "n"])
    k = te.reduce_axis(K, "k")
    has_epi = bias is not None or epilogue != "none"
    prod = te.compute((*batch, M, N),
                      lambda *idx: te.sum(a_sh[(*idx[:nb], k, idx[-2])] * b_sh[(*idx[:nb], k, idx[-1])], axis=k),
                      name=name + "_acc" if has_epi else name, axis_names=[*bnames, "i", "j"])
    if not has_epi:
        return a_sh, b_sh, prod, prod

    def epi(*idx):
        x = prod[idx]
        if bias is not None:
            x = x + bias[idx[-1]]
        return apply_epilogue(x, epilogue)

    out = te.compute((*batch, M, N), epi, name=name, axis_names=[*bnames, "i", "j"])
    return a_sh, b_sh, prod, out


def matmul_template(cfg, workload, target):
    a = workload.args
    if a.get("micro_kernel") is not None:
        raise ScheduleError("matmul: a C micro_kernel cannot run in a CUDA kernel; the cuda template ignores none")
    if a.get("b_layout", "KN") != "KN":
        raise ScheduleError(f"matmul: the cuda template takes B row-major (KN), not {a['b_layout']}")
    M, N, K = a["M"], a["N"], a["K"]
    common.define_gemm_knobs(cfg, M, N, K)
    cfg.add_flop(2 * M * N * K)
    A = te.placeholder((M, K), a["dtype"], "A")
    B = te.placeholder((K, N), a["dtype"], "B")
    bias = te.placeholder((N,), a["dtype"], "bias") if a["bias"] else None
    a_sh, b_sh, prod, out = gemm_expr(A, B, bias, a["epilogue"])
    sch = create_schedule(out)
    common.schedule_gemm(sch, cfg, prod, out, a_sh, b_sh, a_contiguous=0, b_contiguous=1)
    return sch, kernel_args(A, B, bias, out)


def matmul_default(space, workload, target) -> dict:
    a = workload.args
    return common.gemm_default(space, a["M"], a["N"], a["K"], sm_count=limits_for(target).sm_count)


def batch_matmul_template(cfg, workload, target):
    a = workload.args
    nb, M, N, K = a["batch"], a["M"], a["N"], a["K"]
    common.define_gemm_knobs(cfg, M, N, K)
    cfg.add_flop(2 * nb * M * N * K)
    A = te.placeholder((nb, M, K), a["dtype"], "A")
    B = te.placeholder((nb, N, K) if a["transpose_b"] else (nb, K, N), a["dtype"], "B")
    a_sh, b_sh, prod, out = gemm_expr(A, B, None, "none", transpose_b=a["transpose_b"])
    sch = create_schedule(out)
    common.schedule_gemm(sch, cfg, prod, out, a_sh, b_sh, a_contiguous=1, b_contiguous=1 if a["transpose_b"] else 2)
    return sch, [A, B, out]


def batch_matmul_default(space, workload, target) -> dict:
    a = workload.args
    return common.gemm_default(space, a["M"], a["N"], a["K"], batch=a["batch"], sm_count=limits_for(target).sm_count)
