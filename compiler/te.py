"""Tensor expressions: the declarative description of what a kernel computes.

A computation is a DAG of `Tensor`s. Leaves come from `placeholder` (kernel inputs); inner
nodes from `compute(shape, fcompute)`, whose body is an `Expr` over the output's index
variables and optionally one reduction (`sum`/`max`/`min` over `reduce_axis` variables).
Shapes are static Python ints; every tensor is dense row-major in its logical shape.

The model follows TVM's tensor expression language (Chen et al., "TVM: An Automated
End-to-End Optimizing Compiler for Deep Learning", OSDI 2018). Expressions are immutable;
Python operators build them (`a + b`, `a * 2`, `i < n`); equality tests are explicit
(`eq(a, b)`) so that expressions stay hashable by identity.

`to_json` / `from_json` serialize a computation as plain data: identifiers are validated
against a strict pattern and every node kind against a closed list — nothing is evaluated.

This module holds tensors, operations and the builders (`placeholder`, `compute`, `sum`, …);
the expression nodes and dtypes live in `compiler.expr` and are part of this language's
names (`__all__`), as users write and inspect them (`te.Expr`, `te.TEError`, `te.dtype_of`).
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Sequence

import numpy as np

from .expr import (BINARY_OPS, DTYPES, INTRINSICS, TENSOR_DTYPES, BinOp, Call, Cast, Const, DType, Expr, IterVar,
                   Reduce, Select, TEError, TensorLoad, Var, as_condition, as_expr, check_identifier, dtype_of, walk)


# --------------------------------------------------------------------------- tensors and ops


class Tensor:
    """A dense tensor of static `shape` (tuple of ints) and `dtype`, produced by `op`."""

    __slots__ = ("name", "shape", "dtype", "op")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, op: "Operation"):
        self.name, self.shape, self.dtype, self.op = name, shape, dtype, op

    def __getitem__(self, idx) -> TensorLoad:
        return TensorLoad(self, idx if isinstance(idx, tuple) else (idx,))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self):
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


class Operation:
    name: str


class PlaceholderOp(Operation):
    """A kernel input."""

    def __init__(self, name: str):
        self.name = name


class ComputeOp(Operation):
    """`out[axes] = body`; `axes` are data IterVars (one per output dim), `reduce_axes` those of a top-level Reduce."""

    def __init__(self, name: str, axes: tuple[IterVar, ...], body: Expr, tag: str = ""):
        self.name, self.axes, self.body, self.tag = name, axes, body, tag
        self.reduce_axes: tuple[IterVar, ...] = body.axes if isinstance(body, Reduce) else ()

    @property
    def axis(self) -> tuple[IterVar, ...]:
        """The data axes (TVM's name), for use in schedules: `i, j = s[C].op.axis`."""
        return self.axes

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        """The reduce axes (TVM's name)."""
        return self.reduce_axes

    def input_tensors(self) -> list[Tensor]:
        """Tensors read by the body, in first-use order, without duplicates."""
        seen: dict[int, Tensor] = {}
        for node in walk(self.body):
            if isinstance(node, TensorLoad):
                seen.setdefault(id(node.tensor), node.tensor)
        return list(seen.values())


def _check_shape(shape, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)):
        raise TEError(f"{what}: shape must be a list of positive ints, got {str(shape)[:80]}")
    shape = tuple(shape)
    for d in shape:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
            raise TEError(f"{what}: shape must be positive ints, got {list(shape)}")
    return tuple(int(d) for d in shape)


def placeholder(shape, dtype: str = "float32", name: str = "data") -> Tensor:
    """A kernel input of `shape` and `dtype` (a TENSOR_DTYPES name)."""
    check_identifier(name, "tensor name")
    if dtype not in TENSOR_DTYPES:
        raise TEError(f"tensor {name!r}: dtype {dtype!r} not supported; allowed: {', '.join(TENSOR_DTYPES)}")
    return Tensor(name, _check_shape(shape, f"tensor {name!r}"), dtype, PlaceholderOp(name))


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    """A reduction variable over `range(extent)`."""
    return IterVar(check_identifier(name, "axis name"), extent, "reduce")


def compute(shape, fcompute: Callable[..., Expr], name: str = "compute", tag: str = "",
            axis_names: Sequence[str] | None = None) -> Tensor:
    """Define `out[i0, i1, ...] = fcompute(i0, i1, ...)` over `shape`.

    The body may be an elementwise expression or a single top-level reduction
    (`sum(A[i, k] * B[k, j], axis=k)`). Axis names default to fcompute's parameter names.
    """
    check_identifier(name, "tensor name")
    shape = _check_shape(shape, f"tensor {name!r}")
    if axis_names is None:
        params = list(inspect.signature(fcompute).parameters)
        axis_names = params if len(params) == len(shape) else [f"i{d}" for d in range(len(shape))]
    axes = tuple(IterVar(n, e) for n, e in zip(axis_names, shape))
    body = as_expr(fcompute(*axes))
    for node in walk(body):
        if isinstance(node, Reduce) and node is not body:
            raise TEError(f"tensor {name!r}: a reduction must be the whole body, not nested")
    if dtype_of(body.dtype).kind != "float":
        raise TEError(f"tensor {name!r}: body has dtype {body.dtype}; use cast() to a float dtype")
    op = ComputeOp(name, axes, body, tag)
    return Tensor(name, shape, body.dtype, op)


# --------------------------------------------------------------------------- builder helpers


def const(value, dtype: str = "float32") -> Const:
    return Const(value, dtype)


def _reducer(combiner: str):
    def reduce(expr, axis) -> Reduce:
        axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
        return Reduce(combiner, expr, axes)

    reduce.__name__ = combiner
    reduce.__doc__ = f"`{combiner}` of `expr` over reduce axis/axes `axis` (only as a compute body)."
    return reduce


sum = _reducer("sum")  # noqa: A001 - the field's name for it
_max_reduce = _reducer("max")
_min_reduce = _reducer("min")


def max(a, b=None, axis=None) -> Expr:  # noqa: A001
    """`max(a, b)`: elementwise maximum; `max(expr, axis=k)`: max-reduction over k (as a compute body)."""
    return _max_reduce(a, axis) if axis is not None else BinOp("max", a, b)


def min(a, b=None, axis=None) -> Expr:  # noqa: A001
    """`min(a, b)`: elementwise minimum; `min(expr, axis=k)`: min-reduction over k (as a compute body)."""
    return _min_reduce(a, axis) if axis is not None else BinOp("min", a, b)


def eq(a, b) -> Expr:
    return BinOp("eq", a, b)


def ne(a, b) -> Expr:
    return BinOp("ne", a, b)


def all_of(*conds) -> Expr:
    """Logical and of conditions."""
    out = as_condition(conds[0])
    for c in conds[1:]:
        out = BinOp("and", out, as_condition(c))
    return out


def if_then_else(cond, t, f) -> Expr:
    return Select(cond, t, f)


def cast(dtype: str, value) -> Expr:
    """`value` converted to `dtype`. To bool that is ``value != 0``, as C and numpy convert: the
    backends see a comparison, whose vector form they compute as a mask (a C cast to a bool's
    storage type would keep the value: bool(2) + x added 2)."""
    value = as_expr(value)
    if dtype == "bool" and value.dtype != "bool":
        return ne(value, Const(0, value.dtype))
    return Cast(dtype, value)


def _intrinsic(name: str):
    def fn(x) -> Expr:
        return Call(name, [x])

    fn.__name__ = name
    fn.__doc__ = f"Elementwise `{name}` of a float expression."
    return fn


exp, log, sqrt, tanh, erf, abs, sigmoid = (_intrinsic(n) for n in INTRINSICS)  # noqa: A001


def post_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Every tensor reachable from `outputs`, producers before consumers."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor):
        if id(t) in seen:
            return
        seen.add(id(t))
        if isinstance(t.op, ComputeOp):
            for inp in t.op.input_tensors():
                visit(inp)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


# --------------------------------------------------------------------------- JSON (data, never code)

JSON_VERSION = 1
MAX_JSON_NODES = 100_000
#: Deepest nesting of an expression, in nodes: the compiler's passes recurse along it (a lowering
#: ran out of Python's 1000 frames at 450 levels), and the API's responses carry it as nested
#: JSON lists, which pydantic's serializer refuses beyond about 250 levels.
MAX_EXPR_DEPTH = 128
MAX_TENSOR_ELEMENTS = 1 << 31


def _expr_to_json(e: Expr, names: dict[int, str]):
    if isinstance(e, Const):
        return ["const", e.value if math.isfinite(float(e.value)) else repr(float(e.value)), e.dtype]
    if isinstance(e, Var):
        return ["var", names[id(e)]]
    if isinstance(e, BinOp):
        return [e.op, _expr_to_json(e.a, names), _expr_to_json(e.b, names)]
    if isinstance(e, Call):
        return ["call", e.name, [_expr_to_json(a, names) for a in e.args]]
    if isinstance(e, Cast):
        return ["cast", e.dtype, _expr_to_json(e.value, names)]
    if isinstance(e, Select):
        return ["select", *(_expr_to_json(x, names) for x in (e.cond, e.t, e.f))]
    if isinstance(e, TensorLoad):
        return ["load", e.tensor.name, [_expr_to_json(i, names) for i in e.indices]]
    if isinstance(e, Reduce):
        return ["reduce", e.combiner, _expr_to_json(e.source, names), [names[id(a)] for a in e.axes]]
    raise TEError(f"cannot serialize {type(e).__name__}")


def to_json(outputs: Sequence[Tensor]) -> dict:
    """Serialize the computation of `outputs` (and all it reads) to canonical JSON data.

    Format: {"version": 1, "tensors": [...producers first...], "outputs": [names]}; each
    compute tensor lists its axes and reduce axes by name and its body as nested lists
    such as ["add", ["load", "A", [["var", "i"]]], ["const", 1.0, "float32"]].
    """
    tensors = []
    for t in post_order(outputs):
        if isinstance(t.op, PlaceholderOp):
            tensors.append({"name": t.name, "op": "placeholder", "shape": list(t.shape), "dtype": t.dtype})
            continue
        op = t.op
        names = {id(a): a.name for a in (*op.axes, *op.reduce_axes)}
        tensors.append({
            "name": t.name, "op": "compute", "shape": list(t.shape), "dtype": t.dtype, "tag": op.tag,
            "axes": [a.name for a in op.axes],
            "reduce_axes": [{"name": a.name, "extent": a.extent} for a in op.reduce_axes],
            "body": _expr_to_json(op.body, names),
        })
    return {"version": JSON_VERSION, "tensors": tensors, "outputs": [t.name for t in outputs]}


class _Reader:
    def __init__(self):
        self.nodes = 0

    def expr(self, j, tensors: dict[str, Tensor], scope: dict[str, IterVar], where: str, depth: int = 1) -> Expr:
        self.nodes += 1
        if self.nodes > MAX_JSON_NODES:
            raise TEError(f"{where}: expression has more than {MAX_JSON_NODES} nodes")
        if depth > MAX_EXPR_DEPTH:
            raise TEError(f"{where}: expression nests deeper than {MAX_EXPR_DEPTH} levels")
        if not isinstance(j, list) or not j or not isinstance(j[0], str):
            raise TEError(f"{where}: expected a node list like ['add', a, b], got {str(j)[:80]}")
        kind, args = j[0], j[1:]

        def need(n):
            if len(args) != n:
                raise TEError(f"{where}: node {kind!r} takes {n} arguments, got {len(args)}")

        if kind == "const":
            need(2)
            value, dtype = args
            dtype_of(dtype)
            if isinstance(value, str) and value in ("inf", "-inf"):
                value = float(value)
            if not isinstance(value, (int, float)) or isinstance(value, bool) and dtype != "bool":
                raise TEError(f"{where}: const value must be a number, got {value!r}")
            return Const(value, dtype)
        if kind == "var":
            need(1)
            if self._name(args[0], where) not in scope:
                raise TEError(f"{where}: unknown variable {args[0]!r}; in scope: {', '.join(scope)}")
            return scope[args[0]]
        if kind in BINARY_OPS:
            need(2)
            return BinOp(kind, *(self.expr(a, tensors, scope, where, depth + 1) for a in args))
        if kind == "call":
            need(2)
            if self._name(args[0], where) not in INTRINSICS:
                raise TEError(f"{where}: unknown intrinsic {args[0]!r}; allowed: {', '.join(INTRINSICS)}")
            return Call(args[0], [self.expr(a, tensors, scope, where, depth + 1) for a in self._list(args[1], where)])
        if kind == "cast":
            need(2)
            return cast(dtype_of(args[0]).name, self.expr(args[1], tensors, scope, where, depth + 1))
        if kind == "select":
            need(3)
            return Select(*(self.expr(a, tensors, scope, where, depth + 1) for a in args))
        if kind == "load":
            need(2)
            if self._name(args[0], where) not in tensors:
                raise TEError(f"{where}: load of unknown tensor {args[0]!r} (tensors must be defined before use)")
            idx = [self.expr(a, tensors, scope, where, depth + 1) for a in self._list(args[1], where)]
            return TensorLoad(tensors[args[0]], idx)
        if kind == "reduce":
            need(3)
            axes = []
            for n in self._list(args[2], where):
                if self._name(n, where) not in scope or scope[n].kind != "reduce":
                    raise TEError(f"{where}: {n!r} is not a reduce axis of this tensor")
                axes.append(scope[n])
            return Reduce(args[0], self.expr(args[1], tensors, scope, where, depth + 1), axes)
        raise TEError(f"{where}: unknown node kind {kind!r}; allowed: const, var, load, call, cast, "
                      f"select, reduce, {', '.join(BINARY_OPS)}")

    @staticmethod
    def _list(x, where) -> list:
        if not isinstance(x, list):
            raise TEError(f"{where}: expected a list, got {type(x).__name__}")
        return x

    @staticmethod
    def _name(x, where) -> str:
        if not isinstance(x, str):
            raise TEError(f"{where}: expected a name (a string), got {str(x)[:80]}")
        return x


def from_json(data: dict) -> list[Tensor]:
    """Rebuild the output tensors from `to_json` data. Raises TEError naming the bad field."""
    if not isinstance(data, dict) or data.get("version") != JSON_VERSION:
        raise TEError(f"te json: 'version' must be {JSON_VERSION}")
    if not isinstance(data.get("tensors"), list) or not data["tensors"]:
        raise TEError("te json: 'tensors' must be a non-empty list")
    tensors: dict[str, Tensor] = {}
    reader = _Reader()
    for n, tj in enumerate(data["tensors"]):
        where = f"tensors[{n}]"
        if not isinstance(tj, dict):
            raise TEError(f"{where}: must be an object")
        name = check_identifier(tj.get("name"), f"{where}.name")
        if name in tensors:
            raise TEError(f"{where}.name: duplicate tensor name {name!r}")
        where = f"tensor {name!r}"
        shape = _check_shape(tj.get("shape", ()), where)
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise TEError(f"{where}: more than {MAX_TENSOR_ELEMENTS} elements")
        if tj.get("op") == "placeholder":
            tensors[name] = placeholder(shape, tj.get("dtype", "float32"), name)
            continue
        if tj.get("op") != "compute":
            raise TEError(f"{where}.op: must be 'placeholder' or 'compute', got {tj.get('op')!r}")
        axis_names = tj.get("axes", [])
        if not isinstance(axis_names, list) or len(axis_names) != len(shape):
            raise TEError(f"{where}.axes: need one axis name per dim ({len(shape)})")
        scope: dict[str, IterVar] = {}
        axes = []
        for an, ext in zip(axis_names, shape):
            check_identifier(an, f"{where}.axes")
            axes.append(scope.setdefault(an, IterVar(an, ext)))
        reduce_axes = tj.get("reduce_axes", [])
        if not isinstance(reduce_axes, list):
            raise TEError(f"{where}.reduce_axes: must be a list of objects with name and extent")
        for rj in reduce_axes:
            if not isinstance(rj, dict):
                raise TEError(f"{where}.reduce_axes: entries must be objects with name and extent")
            rn = check_identifier(rj.get("name"), f"{where}.reduce_axes.name")
            if rn in scope:
                raise TEError(f"{where}.reduce_axes: duplicate axis name {rn!r}")
            if not isinstance(rj.get("extent"), int):
                raise TEError(f"{where}.reduce_axes.extent: must be a positive int")
            scope[rn] = reduce_axis(rj["extent"], rn)
        try:
            body = reader.expr(tj.get("body"), tensors, scope, f"{where}.body")
        except TEError as e:  # a node's own check (e.g. an index's dtype) does not say where it is
            raise e if str(e).startswith(where) else TEError(f"{where}.body: {e}") from None
        tag = tj.get("tag", "")
        if not isinstance(tag, str) or len(tag) > 64:
            raise TEError(f"{where}.tag: must be a string of at most 64 characters")
        if dtype_of(body.dtype).kind != "float":
            raise TEError(f"{where}.body: has dtype {body.dtype}; use a cast to a float dtype")
        tensors[name] = Tensor(name, shape, body.dtype, ComputeOp(name, tuple(axes), body, tag))
    outs = data.get("outputs")
    if not isinstance(outs, list) or not outs:
        raise TEError("te json: 'outputs' must be a non-empty list of tensor names")
    for o in outs:
        if not isinstance(o, str) or o not in tensors or isinstance(tensors[o].op, PlaceholderOp):
            raise TEError(f"te json: output {o!r} is not a compute tensor defined in 'tensors'")
    return [tensors[o] for o in outs]


def inputs_of(outputs: Sequence[Tensor]) -> list[Tensor]:
    """The placeholders the outputs depend on, in definition order."""
    return [t for t in post_order(outputs) if isinstance(t.op, PlaceholderOp)]


__all__ = [
    "TEError", "DType", "DTYPES", "dtype_of", "Expr", "Const", "Var", "IterVar", "BinOp", "Call", "Cast",
    "Select", "TensorLoad", "Reduce", "Tensor", "PlaceholderOp", "ComputeOp", "placeholder", "compute",
    "reduce_axis", "sum", "max", "min", "eq", "ne", "all_of", "if_then_else",
    "cast", "const", "exp", "log", "sqrt", "tanh", "erf", "abs", "sigmoid", "walk", "post_order", "to_json",
    "from_json", "inputs_of", "check_identifier",
]
