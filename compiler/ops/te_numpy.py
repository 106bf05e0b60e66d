"""A numpy interpreter of tensor expressions: the reference implementation of custom workloads.

`evaluate(outputs, inputs)` computes every tensor of the computation, producers first. A
compute tensor is evaluated at all its points at once: each axis becomes an index array
shaped to broadcast along its own dimension (reduce axes get trailing dimensions, which
the reducer then folds), and the body is interpreted node by node with numpy operations.
Nothing is ever passed to `eval`: the tree is data, and each node kind maps to one numpy
function. Large tensors are evaluated in slices along their first axis, so the index grids
stay small.

Semantics follow the C backend: float arithmetic is carried out in float64 and each tensor
is rounded to its dtype when stored, as is a constant, and a value where a cast converts it
(a float32 value cast to float64 holds only float32's digits); integer `div` truncates toward zero, `floordiv` /
`floormod` round toward -inf; `if_then_else` evaluates both branches (a load in either
must be in bounds, as te requires).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import te
from ..expr import BinOp, Call, Cast, Const, IterVar, Reduce, Select, TensorLoad, Var
from ..te import PlaceholderOp, Tensor

#: Elements of one slice's evaluation grid (output points × reduction points).
SLICE_ELEMENTS = 1 << 22

_erf = np.vectorize(math.erf, otypes=[np.float64])

_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
    "floordiv": np.floor_divide, "floormod": np.mod, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or,
}
_CALLS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "erf": _erf, "abs": np.abs,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def _div(a, b):
    """`div`: true division for floats, truncation toward zero for integers (as C)."""
    if np.issubdtype(np.result_type(a, b), np.integer):
        q = np.floor_divide(a, b)
        return q + ((np.mod(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)))
    return np.true_divide(a, b)


def _numpy_dtype(dtype: str):
    kind = te.dtype_of(dtype).kind
    return np.float64 if kind == "float" else np.int64 if kind == "int" else np.bool_


class _Slice:
    """Evaluates one compute tensor's body over a block of its points."""

    def __init__(self, values: dict[int, np.ndarray], grid: dict[IterVar, np.ndarray]):
        self.values, self.grid = values, grid

    def expr(self, e):
        if isinstance(e, Const):
            return _numpy_dtype(e.dtype)(np.asarray(e.value).astype(e.dtype))
        if isinstance(e, Var):
            return self.grid[e]
        if isinstance(e, BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            return _div(a, b) if e.op == "div" else _BINARY[e.op](a, b)
        if isinstance(e, Call):
            return _CALLS[e.name](self.expr(e.args[0]))
        if isinstance(e, Cast):
            value = np.asarray(self.expr(e.value)).astype(e.value.dtype)
            if te.dtype_of(e.dtype).kind == "int" and value.dtype.kind == "f":
                value = np.trunc(value)
            return value.astype(e.dtype).astype(_numpy_dtype(e.dtype))
        if isinstance(e, Select):
            return np.where(self.expr(e.cond), self.expr(e.t), self.expr(e.f))
        if isinstance(e, TensorLoad):
            index = tuple(np.asarray(self.expr(i), dtype=np.int64) for i in e.indices)
            return self.values[id(e.tensor)][index]
        raise te.TEError(f"cannot interpret {type(e).__name__}")


def _evaluate_compute(t: Tensor, values: dict[int, np.ndarray]) -> np.ndarray:
    op = t.op
    raxes = op.reduce_axes
    ndim = len(op.axes) + len(raxes)
    shape = t.shape or (1,)  # a 0-d tensor is evaluated as one element
    out = np.empty(shape, dtype=np.float64)
    per_row = math.prod(shape[1:]) * math.prod(a.extent for a in raxes)
    step = max(1, SLICE_ELEMENTS // max(1, per_row))
    body = op.body.source if isinstance(op.body, Reduce) else op.body
    with np.errstate(all="ignore"):
        for start in range(0, shape[0], step):
            stop = min(shape[0], start + step)
            grid = {}
            for d, ax in enumerate((*op.axes, *raxes)):
                dims = [1] * ndim
                lo, hi = (start, stop) if d == 0 and t.shape else (0, ax.extent)
                dims[d] = hi - lo
                grid[ax] = np.arange(lo, hi, dtype=np.int64).reshape(dims)
            full = [*(stop - start for _ in t.shape[:1]), *t.shape[1:], *(a.extent for a in raxes)]
            value = np.broadcast_to(_Slice(values, grid).expr(body), full)
            if raxes:
                value = _REDUCE[op.body.combiner](value, axis=tuple(range(len(op.axes), ndim)))
            out[start:stop] = value
    return out.reshape(t.shape).astype(t.dtype).astype(np.float64)  # rounded as stored, kept in float64


def evaluate(outputs: Sequence[Tensor], inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The values of `outputs`, given an array per placeholder name (shapes as declared).

    Raises TEError for a missing or mis-shaped input.
    """
    values: dict[int, np.ndarray] = {}
    for t in te.post_order(outputs):
        if isinstance(t.op, PlaceholderOp):
            x = inputs.get(t.name)
            if x is None or tuple(x.shape) != t.shape:
                raise te.TEError(f"input {t.name!r}: need an array of shape {list(t.shape)}")
            values[id(t)] = np.asarray(x, dtype=np.float64)
        else:
            values[id(t)] = _evaluate_compute(t, values)
    return [values[id(t)].astype(t.dtype) for t in outputs]
