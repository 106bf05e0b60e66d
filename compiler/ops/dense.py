"""dense: Y[M, N] = X[M, K] · W[N, K]ᵀ (+ b[N]) (+ relu/gelu), row-major float32/float64 — a
linear layer as PyTorch's `nn.Linear` and TVM's `nn.dense` store it (weights [out, in]).

The CPU template is matmul's GEMM (`define_gemm_knobs` / `schedule_gemm`) with B = Wᵀ:
packing W into column panels Wp[ceil(N/nr), K, nr] turns its rows into the contiguous
panels the micro-kernel streams, so the transposed weight costs nothing extra; the bias
and activation are applied as the register tile is written out.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..schedule import create_schedule
from .common import EPILOGUES, np_epilogue, pack_blocked
from .matmul import MAX_DIM, define_gemm_knobs, gemm_default, matmul_expr, schedule_gemm
from .registry import ArgDef, OpDef, register

ARGS = [
    ArgDef("M", "int", 128, 1, MAX_DIM, description="rows of X and Y (batch of input vectors)"),
    ArgDef("N", "int", 3072, 1, MAX_DIM, description="output features (rows of W)"),
    ArgDef("K", "int", 768, 1, MAX_DIM, description="input features"),
    ArgDef("bias", "bool", True, description="add b[N] to every row"),
    ArgDef("epilogue", "str", "none", choices=EPILOGUES, description="activation applied last"),
    ArgDef("dtype", "str", "float32", choices=("float32", "float64")),
]


def _inputs(a: dict):
    X = te.placeholder((a["M"], a["K"]), a["dtype"], "X")
    W = te.placeholder((a["N"], a["K"]), a["dtype"], "W")
    b = te.placeholder((a["N"],), a["dtype"], "b") if a["bias"] else None
    return X, W, b


def compute(a: dict) -> list[te.Tensor]:
    X, W, b = _inputs(a)
    _, out = matmul_expr(X, W, b, a["epilogue"], transpose_b=True, name="Y")
    return [X, W, *([b] if b is not None else []), out]


def reference(a: dict, X: np.ndarray, W: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    out = X.astype(np.float64) @ W.astype(np.float64).T
    if a["bias"]:
        out = out + rest[0]
    return [np_epilogue(out.astype(X.dtype), a["epilogue"])]


def flop(a: dict) -> int:
    return 2 * a["M"] * a["N"] * a["K"]


def cpu_template(cfg, workload, target):
    a = workload.args
    M, N, K = a["M"], a["N"], a["K"]
    define_gemm_knobs(cfg, M, N, K, target.lanes(a["dtype"]))
    cfg.add_flop(flop(a))
    X, W, b = _inputs(a)
    mr, nr = cfg["mr"].val, cfg["nr"].val
    wp = xp = None
    if cfg["pack_b"].val:
        wp = pack_blocked(W, 0, nr, "W_packed", min(cfg["bn"].val, -(-N // nr)))
    if cfg["pack_a"].val:
        xp = pack_blocked(X, 0, mr, "X_packed", min(cfg["bm"].val, -(-M // mr)))
    prod, out = matmul_expr(X, W, b, a["epilogue"], b_panel=wp, nr=nr, a_panel=xp, mr=mr, transpose_b=True, name="Y")
    sch = create_schedule(out)
    schedule_gemm(sch, cfg, prod, out, [p for p in (wp, xp) if p is not None], K)
    return sch, [X, W, *([b] if b is not None else []), out]


def default_config(space, workload, target) -> dict:
    """matmul's rule (gemm_default), which packs W (unpacked, its columns are strided)."""
    a = workload.args
    return gemm_default(space, a["M"], a["N"], a["K"], target.lanes(a["dtype"]), 4 if a["dtype"] == "float32" else 8)


def _layouts(a: dict) -> dict[str, str]:
    return {"X": "row-major [M, K]", "W": "row-major [N, K] (out features × in features)", "b": "[N]",
            "Y": "row-major [M, N]"}


register(OpDef(
    name="dense",
    description="Y = X · Wᵀ + b (a linear layer, W [N, K] row-major), optional relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    default_config=default_config, layouts=_layouts, family="gemm",
))
