"""Static facts about a tensor-expression computation: its FLOP count, a proof that every
load stays in bounds, the size of its expressions once inlined (what a custom workload must
satisfy before it is built and run), and the precision its arithmetic runs in."""

from __future__ import annotations

import math
from typing import Sequence

from .. import te
from ..expr import BinOp, Call, Reduce, TensorLoad, children
from ..simplify import Simplifier
from ..te import ComputeOp, Tensor

_ARITH = ("add", "sub", "mul", "div", "min", "max")
_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")


def _is_float(e: te.Expr) -> bool:
    return te.dtype_of(e.dtype).kind == "float"


def expr_flop(e: te.Expr) -> int:
    """Floating-point operations of one evaluation of `e`: float add/sub/mul/div/min/max and
    comparisons count 1, a math intrinsic counts 1 (TVM's convention); index arithmetic, loads,
    casts and selects count 0."""
    n = 0
    for node in te.walk(e):
        if isinstance(node, BinOp):
            if (node.op in _ARITH and _is_float(node)) or (node.op in _COMPARE and _is_float(node.a)):
                n += 1
        elif isinstance(node, Call):
            n += 1
    return n


def precision_dtype(output: Tensor) -> str:
    """The least precise float dtype among `output`'s own and those its computation does arithmetic
    in: its float arithmetic, intrinsic calls and reductions, and those of every stage it reads
    ("float32" when any is float32). Loads, casts and constants round the same way in every
    implementation; arithmetic does not (a vectorized exp, a reduction's order), so this, not the
    output's dtype alone, sets how closely a kernel matches its reference (a float64 output cast
    from a float32 exp differs from numpy's by float32's rounding)."""
    dtypes = {node.dtype for t in te.post_order([output]) if isinstance(t.op, ComputeOp)
              for node in te.walk(t.op.body) if isinstance(node, (BinOp, Call, Reduce)) and _is_float(node)}
    return min({*dtypes, output.dtype}, key=lambda d: te.dtype_of(d).bits)


def count_flop(outputs: Sequence[Tensor]) -> int:
    """FLOPs of computing `outputs` as defined (before any inlining): each compute tensor's
    elements × its body's FLOPs; a reduction adds one combine per reduced point."""
    total = 0
    for t in te.post_order(outputs):
        if not isinstance(t.op, ComputeOp):
            continue
        body = t.op.body
        if isinstance(body, Reduce):
            per_point = math.prod(a.extent for a in body.axes) * (expr_flop(body.source) + 1)
        else:
            per_point = expr_flop(body)
        total += t.size * per_point
    return total


def check_loads_in_bounds(outputs: Sequence[Tensor]) -> None:
    """Raise TEError naming the tensor, the load and the dimension when an index may leave
    [0, extent) over the ranges of the axes (interval arithmetic on the index expressions:
    indices must be provably in bounds, since both branches of if_then_else are evaluated;
    clamp with te.min/te.max where needed)."""
    for t in te.post_order(outputs):
        if not isinstance(t.op, ComputeOp):
            continue
        op = t.op
        simp = Simplifier({ax: (0, ax.extent - 1) for ax in (*op.axes, *op.reduce_axes)})
        for node in te.walk(op.body):
            if not isinstance(node, TensorLoad):
                continue
            for d, (index, extent) in enumerate(zip(node.indices, node.tensor.shape)):
                lo, hi = simp.range_of(simp.simplify(index))
                if lo < 0 or hi > extent - 1:
                    raise te.TEError(
                        f"tensor {t.name!r}: index {d} of its load of {node.tensor.name!r} may range over "
                        f"[{lo}, {hi}], outside [0, {extent - 1}]; clamp it with min/max (both branches of a "
                        f"select are evaluated)")


def inlined_size(outputs: Sequence[Tensor]) -> tuple[int, int]:
    """(nodes, depth) of the largest and of the deepest expression of a stage that stays a stage
    (an output or a reduction) once every other compute tensor is inlined into its readers, as
    the generic template does by default: a load of an inlined tensor counts its own nodes and
    that tensor's inlined expression, and nests as deep as the two together. In time linear in
    the expressions' size; the node count itself can be exponential in the number of stages (a
    chain of tensors each reading the one before twice doubles it at every step), which is what
    it is for."""
    outs = {id(t) for t in outputs}
    inlined: dict[int, tuple[int, int]] = {}  # id of an inlined tensor -> (nodes, depth) of its expression
    largest = deepest = 0
    for t in te.post_order(outputs):
        if not isinstance(t.op, ComputeOp):
            continue
        nodes = depth = 0
        stack = [(t.op.body, 1)]
        while stack:
            node, level = stack.pop()
            below = inlined.get(id(node.tensor), (0, 0)) if isinstance(node, TensorLoad) else (0, 0)
            nodes += 1 + below[0]
            depth = max(depth, level + below[1])
            stack.extend((child, level + 1) for child in children(node))
        if id(t) in outs or isinstance(t.op.body, Reduce):
            largest, deepest = max(largest, nodes), max(deepest, depth)
        else:
            inlined[id(t)] = nodes, depth
    return largest, deepest
