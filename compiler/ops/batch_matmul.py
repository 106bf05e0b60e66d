"""batch_matmul: C[batch, M, N] = A[batch, M, K] · B[batch, K, N], or · B[batch, N, K]ᵀ with
`transpose_b` (attention's Q·Kᵀ), row-major float32/float64.

The CPU template is matmul's GEMM (`define_gemm_knobs` / `schedule_gemm`: packed panels,
register tile, cache blocking) with the batch axis in front, fused into the parallel
loop. Packing B into panels also absorbs the transpose: the panels have the same layout
for B and Bᵀ.
"""

from __future__ import annotations

import numpy as np

from .. import te
from .matmul import MAX_DIM, gemm_template, gemm_workload_default, matmul_expr
from .registry import ArgDef, OpDef, register

ARGS = [
    ArgDef("batch", "int", 12, 1, MAX_DIM, description="number of independent products"),
    ArgDef("M", "int", 128, 1, MAX_DIM, description="rows of A and C"),
    ArgDef("N", "int", 128, 1, MAX_DIM, description="columns of C"),
    ArgDef("K", "int", 64, 1, MAX_DIM, description="reduction length"),
    ArgDef("transpose_b", "bool", False, description="B is given as [batch, N, K] (C = A·Bᵀ)"),
    ArgDef("dtype", "str", "float32", choices=("float32", "float64")),
]


def _inputs(a: dict):
    A = te.placeholder((a["batch"], a["M"], a["K"]), a["dtype"], "A")
    b_shape = (a["batch"], a["N"], a["K"]) if a["transpose_b"] else (a["batch"], a["K"], a["N"])
    return A, te.placeholder(b_shape, a["dtype"], "B")


def compute(a: dict) -> list[te.Tensor]:
    A, B = _inputs(a)
    _, out = matmul_expr(A, B, None, "none", transpose_b=a["transpose_b"])
    return [A, B, out]


def reference(a: dict, A: np.ndarray, B: np.ndarray) -> list[np.ndarray]:
    b = B.astype(np.float64)
    if a["transpose_b"]:
        b = b.transpose(0, 2, 1)
    return [(A.astype(np.float64) @ b).astype(A.dtype)]


def flop(a: dict) -> int:
    return 2 * a["batch"] * a["M"] * a["N"] * a["K"]


def cpu_template(cfg, workload, target):
    a = workload.args
    cfg.add_flop(flop(a))
    A, B = _inputs(a)
    return gemm_template(cfg, target, a["dtype"], A, B, None, "none", transpose_b=a["transpose_b"])


def _layouts(a: dict) -> dict[str, str]:
    return {"A": "row-major [batch, M, K]",
            "B": "row-major [batch, N, K] (transposed)" if a["transpose_b"] else "row-major [batch, K, N]",
            "C": "row-major [batch, M, N]"}


register(OpDef(
    name="batch_matmul",
    description="C[b] = A[b] · B[b] (or A[b] · B[b]ᵀ with transpose_b) over a batch of row-major matrices",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    default_config=gemm_workload_default, layouts=_layouts, family="gemm",
))
