"""Weights passed pre-packed: a caller whose weights are constants (a model's) packs them once
into the layout the kernel computes from, instead of the kernel packing them on every call (as
onnxruntime's NCHWc transformer and oneDNN's weight reorders cache them).

Which workloads take which argument so, for a target, and how to pack it in numpy and in C:

* conv2d_nchw, `weight` OIHW → `weight_layout` OIHW<i>i<o>o (conv2d.prepacked_layout: up to
  PREPACK_MAX_PIXELS output pixels, ungrouped; 1×1 kernels only with at most IM2COL_MAX_PIXELS
  output pixels on AVX2 and AVX-512, where the panel GEMM or NCHWc reads them);
* matmul, `B` [K, N] → `b_layout` KN<nr>n, and dense, `W` [N, K] → `weight_layout` NK<nr>n:
  the column panels [ceil(N/nr), K, nr] that the GEMM micro-kernel streams (matmul.pack_panels_np),
  nr the default config's register-tile width, for at least SKINNY_ROWS rows (fewer rows read B
  in place: packing it is a second pass over the weights).
"""

from __future__ import annotations

import numpy as np

from . import conv2d, matmul
from .registry import Workload, default_config, make_workload

__all__ = ["PREPACKED_ARGS", "prepacked_layout", "with_prepacked_weights", "packed_arguments", "pack", "pack_c"]

#: operator → (the argument a caller may pass pre-packed, the workload argument naming its layout,
#: that argument's plain layout).
PREPACKED_ARGS = {"conv2d_nchw": ("weight", "weight_layout", "OIHW"), "matmul": ("B", "b_layout", "KN"),
                  "dense": ("W", "weight_layout", "NK")}


def prepacked_layout(workload: Workload, target) -> str | None:
    """The layout a model bundle pre-packs the constant argument PREPACKED_ARGS[op] of `workload`
    to for `target` (a CPU target), None where it is better read in place or packed per call, or
    where the workload already takes it pre-packed."""
    op, a = workload.op, workload.args
    if op == "conv2d_nchw":
        return conv2d.prepacked_layout(workload, target)
    if op not in PREPACKED_ARGS or matmul.b_panels(a) is not None or a["M"] < matmul.SKINNY_ROWS \
            or a.get("micro_kernel"):
        return None
    nr = default_config(workload, target)["nr"].val
    return f"{PREPACKED_ARGS[op][2]}{nr}n"


def with_prepacked_weights(workload: Workload, target) -> Workload:
    """`workload` taking its constant argument pre-packed to `prepacked_layout` (itself where None)."""
    layout = prepacked_layout(workload, target) if workload.op in PREPACKED_ARGS and target.kind == "cpu" else None
    if layout is None:
        return workload
    return make_workload(workload.op, {**workload.args, PREPACKED_ARGS[workload.op][1]: layout})


def packed_arguments(workload: Workload) -> dict[str, str]:
    """The arguments of `workload` that a caller holding them in the operator's plain layout (e.g.
    an ONNX model's initializers) passes packed, by name → layout (`pack`)."""
    if workload.op not in PREPACKED_ARGS:
        return {}
    arg, layout_arg, plain = PREPACKED_ARGS[workload.op]
    layout = workload.args.get(layout_arg, plain)
    return {} if layout == plain else {arg: layout}


def pack(array: np.ndarray, layout: str) -> np.ndarray:
    """An argument in its plain layout → `layout`: OIHW weights [CO, CI, KH, KW] → OIHW<i>i<o>o
    (conv2d.pack_weight), B [K, N] → KN<nr>n or W [N, K] → NK<nr>n (matmul.pack_panels_np).
    ValueError for another layout."""
    if layout.startswith("OIHW"):
        return conv2d.pack_weight(array, layout)
    return matmul.pack_panels_np(array, layout)


def pack_c(symbol: str, workload: Workload) -> str:
    """C source of ``static inline void <symbol>_pack_weight(const T *plain, T *packed)`` for a
    header: what `pack` does for the workload's pre-packed argument, so a C or C++ caller packs
    a constant once. ValueError when the workload takes none."""
    packed = packed_arguments(workload)
    if not packed:
        raise ValueError(f"{workload.op} workload {workload.key} takes no argument pre-packed")
    if workload.op == "conv2d_nchw":
        return conv2d.pack_weight_c(symbol, workload)
    a = workload.args
    return matmul.pack_panels_c(symbol, next(iter(packed.values())), a["N"], a["K"], a["dtype"])
