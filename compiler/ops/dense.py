"""dense: Y[M, N] = X[M, K] · W[N, K]ᵀ (+ b[N]) (+ relu/gelu), row-major float32/float64 — a
linear layer as PyTorch's `nn.Linear` and TVM's `nn.dense` store it (weights [out, in]).

The CPU template is matmul's GEMM (`define_gemm_knobs` / `schedule_gemm`) with B = Wᵀ:
packing W into column panels Wp[ceil(N/nr), K, nr] turns its rows into the contiguous
panels the micro-kernel streams; the bias and activation are applied as the register tile
is written out. The knob `dot_rows` > 0 selects the dot-product form of `compiler.ops.dot`
instead (rows of X and W, both contiguous, multiplied along K: no packing of W, which
matters when few rows of X share each weight). The untuned config is matmul's
(`gemm_workload_default`, which packs W: unpacked, its columns are strided), or the dot
products for skinny X. With `weight_layout` NK<nr>n the caller passes W already packed into
those panels (a model's constant weights, packed once: `prepacked`), and the GEMM reads them.
"""

from __future__ import annotations

import numpy as np

from .. import te
from .common import kernel_args, np_epilogue
from .dot import dot_default, dot_rows_choices, dot_template
from .matmul import (SKINNY_ROWS, b_panels, check_panel_layout, define_gemm_knobs, gemm_args, gemm_expr,
                     gemm_operands, gemm_schedule, gemm_workload_default, panel_layout_arg, panels_description,
                     reference_b)
from .registry import OpDef, register

ARGS = [*gemm_args({"M": (128, "rows of X and Y (batch of input vectors)"),
                    "N": (3072, "output features (rows of W)"), "K": (768, "input features")},
                   bias=True, bias_description="add b[N] to every row"),
        panel_layout_arg("weight_layout", "NK")]


#: The placeholders: input X [M, K], weights W [N, K], bias b [N].
OPERAND_NAMES = ("X", "W", "b")


def check(a: dict) -> None:
    check_panel_layout(a, "weight_layout", "NK")


def compute(a: dict) -> list[te.Tensor]:
    X, W, b = gemm_operands(a, OPERAND_NAMES, transpose_b=True)
    return kernel_args(X, W, b, gemm_expr(a, X, W, b, transpose_b=True, name="Y"))


def reference(a: dict, X: np.ndarray, W: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    out = X.astype(np.float64) @ reference_b(a, W, transposed=True).T
    if a["bias"]:
        out = out + rest[0]
    return [np_epilogue(out.astype(X.dtype), a["epilogue"])]


def flop(a: dict) -> int:
    return 2 * a["M"] * a["N"] * a["K"]


def cpu_template(cfg, workload, target):
    a = workload.args
    cfg.add_flop(flop(a))
    X, W, b = gemm_operands(a, OPERAND_NAMES, transpose_b=True)
    lanes = target.lanes(a["dtype"])
    nr = b_panels(a)
    define_gemm_knobs(cfg, a["M"], a["N"], a["K"], lanes, target.vector_registers, b_panels=nr)
    if nr is not None:  # the dot products read rows of W in place: not of pre-packed panels
        return gemm_schedule(cfg, X, W, b, a["epilogue"], name="Y", n=a["N"])
    cfg.define_knob("dot_rows", dot_rows_choices(a["K"], lanes))
    if cfg["dot_rows"].val:
        return dot_template(cfg, lanes, X, W, b, a["epilogue"], name="Y")
    return gemm_schedule(cfg, X, W, b, a["epilogue"], transpose_b=True, name="Y")


def default_config(space, workload, target) -> dict:
    """matmul's rule (`gemm_workload_default`) with dot_rows 0 (the GEMM); for skinny X
    (M < SKINNY_ROWS, down to M = 1) the dot products of `dot.dot_default` instead, which read
    W in place (at M = 1 the GEMM's packing of W is a second pass over the weights)."""
    a = workload.args
    if b_panels(a) is not None:
        return gemm_workload_default(space, workload, target)
    config = {**gemm_workload_default(space, workload, target), "dot_rows": 0}
    if a["M"] < SKINNY_ROWS:
        config.update(dot_default(space, a["M"], a["N"], a["K"], target.lanes(a["dtype"]),
                                  te.dtype_of(a["dtype"]).bytes))
    return config


def _layouts(a: dict) -> dict[str, str]:
    return {"X": "row-major [M, K]", "W": panels_description(a, "row-major [N, K] (out features × in features)", True),
            "b": "[N]", "Y": "row-major [M, N]"}


register(OpDef(
    name="dense",
    description="Y = X · Wᵀ + b (a linear layer, W [N, K] row-major), optional relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    default_config=default_config, layouts=_layouts, family="gemm", check=check,
))
