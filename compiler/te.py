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
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np


class TEError(ValueError):
    """A tensor expression is malformed (bad shape, dtype, identifier, or JSON)."""


# --------------------------------------------------------------------------- dtypes


@dataclass(frozen=True)
class DType:
    """A scalar type: `name` as used in JSON/numpy, `ctype` for C, `bits`, `kind` ('float'|'int'|'bool')."""

    name: str
    ctype: str
    bits: int
    kind: str

    @property
    def bytes(self) -> int:
        return (self.bits + 7) // 8

    @property
    def numpy(self) -> np.dtype:
        return np.dtype("bool" if self.kind == "bool" else self.name)


# Adding float16 / int8 means adding a row here (plus their C spellings in the backends).
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", "float", 32, "float"),
        DType("float64", "double", 64, "float"),
        DType("int32", "int32_t", 32, "int"),
        DType("int64", "int64_t", 64, "int"),
        DType("bool", "int", 1, "bool"),
    )
}
TENSOR_DTYPES = ("float32", "float64")


def dtype_of(name: str) -> DType:
    """Look up a dtype by name; raises TEError listing the known ones."""
    try:
        return DTYPES[name]
    except KeyError:
        raise TEError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}") from None


# --------------------------------------------------------------------------- identifiers

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while main errno".split()
)


def check_identifier(name: str, what: str = "name") -> str:
    """Validate a C/Python-safe identifier (letters, digits, '_'; not a keyword; not `tf_*`)."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise TEError(f"{what} {name!r} is not a valid identifier (letters, digits and '_', at most 63)")
    if name in _C_KEYWORDS or keyword.iskeyword(name) or name.startswith(("tf_", "tunefleet_", "__")):
        raise TEError(f"{what} {name!r} is reserved")
    return name


# --------------------------------------------------------------------------- expressions


class Expr:
    """Base of all expression nodes. `dtype` is a dtype name."""

    dtype: str

    def __add__(self, o): return BinOp("add", self, o)
    def __radd__(self, o): return BinOp("add", o, self)
    def __sub__(self, o): return BinOp("sub", self, o)
    def __rsub__(self, o): return BinOp("sub", o, self)
    def __mul__(self, o): return BinOp("mul", self, o)
    def __rmul__(self, o): return BinOp("mul", o, self)
    def __truediv__(self, o): return BinOp("div", self, o)
    def __rtruediv__(self, o): return BinOp("div", o, self)
    def __floordiv__(self, o): return BinOp("floordiv", self, o)
    def __rfloordiv__(self, o): return BinOp("floordiv", o, self)
    def __mod__(self, o): return BinOp("floormod", self, o)
    def __rmod__(self, o): return BinOp("floormod", o, self)
    def __neg__(self): return BinOp("sub", const(0, self.dtype), self)
    def __lt__(self, o): return BinOp("lt", self, o)
    def __le__(self, o): return BinOp("le", self, o)
    def __gt__(self, o): return BinOp("gt", self, o)
    def __ge__(self, o): return BinOp("ge", self, o)

    __hash__ = object.__hash__

    def __bool__(self):
        raise TEError("an expression has no truth value; use if_then_else / all_of instead of Python if/and")


class Const(Expr):
    """A literal. `value` is a Python int/float; `dtype` its type."""

    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype: str):
        dt = dtype_of(dtype)
        self.value = bool(value) if dt.kind == "bool" else int(value) if dt.kind == "int" else float(value)
        self.dtype = dtype

    def __repr__(self):
        return repr(self.value)


class Var(Expr):
    """A named scalar variable (loop index, shape-free). Identity is the object, not the name."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: str = "int64"):
        self.name = name
        self.dtype = dtype

    def __repr__(self):
        return self.name


class IterVar(Var):
    """An iteration variable over `range(extent)`. `kind` is 'data' (an output axis) or 'reduce'."""

    __slots__ = ("extent", "kind")

    def __init__(self, name: str, extent: int, kind: str = "data"):
        super().__init__(name)
        if not isinstance(extent, (int, np.integer)) or extent < 1:
            raise TEError(f"axis {name!r}: extent must be a positive int, got {extent!r}")
        self.extent = int(extent)
        self.kind = kind


BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max",
              "lt", "le", "gt", "ge", "eq", "ne", "and", "or")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")
INTRINSICS = ("exp", "log", "sqrt", "tanh", "erf", "abs", "sigmoid")


def _promote(a: str, b: str) -> str:
    da, db = dtype_of(a), dtype_of(b)
    if da.kind == db.kind:
        return a if da.bits >= db.bits else b
    if da.kind == "float":
        return a
    if db.kind == "float":
        return b
    return a if da.kind == "int" else b


def as_expr(x, dtype_hint: str | None = None) -> Expr:
    """Convert a Python number (or Expr) to an Expr; floats default to float32 unless a hint is given."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)):
        return Const(bool(x), "bool")
    if isinstance(x, (int, np.integer)):
        if dtype_hint and dtype_of(dtype_hint).kind == "float":
            return Const(float(x), dtype_hint)
        return Const(int(x), dtype_hint if dtype_hint and dtype_of(dtype_hint).kind == "int" else "int64")
    if isinstance(x, (float, np.floating)):
        return Const(float(x), dtype_hint if dtype_hint and dtype_of(dtype_hint).kind == "float" else "float32")
    raise TEError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


def as_condition(cond) -> Expr:
    """`cond` as a boolean Expr. A Python bool is refused: it is what `a == b` or `a != b`
    between expressions gives (Python compares the objects, so `i == 0` is False for every
    iteration variable `i`), almost never a condition meant to be constant. Raises TEError."""
    if isinstance(cond, (bool, np.bool_)):
        raise TEError(f"a condition is the Python bool {bool(cond)}: `==` and `!=` between expressions compare the "
                      f"Python objects; write te.eq(a, b) / te.ne(a, b)")
    return as_expr(cond)


class BinOp(Expr):
    """`op(a, b)` for op in BINARY_OPS. Comparisons and logic give dtype 'bool'."""

    __slots__ = ("op", "a", "b", "dtype")

    def __init__(self, op: str, a, b):
        if op not in BINARY_OPS:
            raise TEError(f"unknown binary op {op!r}; allowed: {', '.join(BINARY_OPS)}")
        a = as_expr(a, b.dtype if isinstance(b, Expr) else None)
        b = as_expr(b, a.dtype)
        self.op, self.a, self.b = op, a, b
        self.dtype = "bool" if op in COMPARE_OPS else _promote(a.dtype, b.dtype)

    def __repr__(self):
        return f"{self.op}({self.a!r}, {self.b!r})"


class Call(Expr):
    """A math intrinsic (`INTRINSICS`) applied to float arguments."""

    __slots__ = ("name", "args", "dtype")

    def __init__(self, name: str, args: Sequence):
        if name not in INTRINSICS:
            raise TEError(f"unknown intrinsic {name!r}; allowed: {', '.join(INTRINSICS)}")
        self.name = name
        self.args = tuple(as_expr(a) for a in args)
        self.dtype = self.args[0].dtype

    def __repr__(self):
        return f"{self.name}({', '.join(map(repr, self.args))})"


class Cast(Expr):
    """Convert `value` to `dtype`."""

    __slots__ = ("value", "dtype")

    def __init__(self, dtype: str, value):
        dtype_of(dtype)
        self.value, self.dtype = as_expr(value), dtype

    def __repr__(self):
        return f"{self.dtype}({self.value!r})"


class Select(Expr):
    """`cond ? t : f` (both branches may be evaluated; guard loads with in-bounds indices)."""

    __slots__ = ("cond", "t", "f", "dtype")

    def __init__(self, cond, t, f):
        t = as_expr(t, f.dtype if isinstance(f, Expr) else None)
        f = as_expr(f, t.dtype)
        self.cond, self.t, self.f = as_condition(cond), t, f
        self.dtype = _promote(t.dtype, f.dtype)

    def __repr__(self):
        return f"select({self.cond!r}, {self.t!r}, {self.f!r})"


class TensorLoad(Expr):
    """`tensor[indices]`: one element of a tensor, indices being integer expressions."""

    __slots__ = ("tensor", "indices", "dtype")

    def __init__(self, tensor: "Tensor", indices: Sequence):
        if len(indices) != len(tensor.shape):
            raise TEError(f"tensor {tensor.name!r} has {len(tensor.shape)} dims, indexed with {len(indices)}")
        self.tensor = tensor
        self.indices = tuple(as_expr(i) for i in indices)
        self.dtype = tensor.dtype

    def __repr__(self):
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


REDUCERS = {"sum": "add", "max": "max", "min": "min"}


class Reduce(Expr):
    """A commutative reduction of `source` over `axes` (reduce IterVars). Only allowed as a compute body."""

    __slots__ = ("combiner", "source", "axes", "dtype")

    def __init__(self, combiner: str, source, axes: Sequence[IterVar]):
        if combiner not in REDUCERS:
            raise TEError(f"unknown reducer {combiner!r}; allowed: {', '.join(REDUCERS)}")
        for ax in axes:
            if not isinstance(ax, IterVar) or ax.kind != "reduce":
                raise TEError(f"reduction axes must come from reduce_axis(), got {ax!r}")
        self.combiner, self.source, self.axes = combiner, as_expr(source), tuple(axes)
        self.dtype = self.source.dtype

    def identity(self) -> Const:
        """The reducer's identity element: 0 for sum, -inf for max, +inf for min."""
        return Const({"sum": 0.0, "max": -math.inf, "min": math.inf}[self.combiner], self.dtype)

    def __repr__(self):
        return f"{self.combiner}({self.source!r}, axis={list(self.axes)})"


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
    return Cast(dtype, value)


def _intrinsic(name: str):
    def fn(x) -> Expr:
        return Call(name, [x])

    fn.__name__ = name
    fn.__doc__ = f"Elementwise `{name}` of a float expression."
    return fn


exp, log, sqrt, tanh, erf, abs, sigmoid = (_intrinsic(n) for n in INTRINSICS)  # noqa: A001


# --------------------------------------------------------------------------- traversal


def children(e: Expr) -> tuple:
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, TensorLoad):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,)
    return ()


def walk(e: Expr) -> Iterable[Expr]:
    """Pre-order traversal of an expression tree."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


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

    def expr(self, j, tensors: dict[str, Tensor], scope: dict[str, IterVar], where: str) -> Expr:
        self.nodes += 1
        if self.nodes > MAX_JSON_NODES:
            raise TEError(f"{where}: expression has more than {MAX_JSON_NODES} nodes")
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
            if args[0] not in scope:
                raise TEError(f"{where}: unknown variable {args[0]!r}; in scope: {', '.join(scope)}")
            return scope[args[0]]
        if kind in BINARY_OPS:
            need(2)
            return BinOp(kind, *(self.expr(a, tensors, scope, where) for a in args))
        if kind == "call":
            need(2)
            if args[0] not in INTRINSICS:
                raise TEError(f"{where}: unknown intrinsic {args[0]!r}; allowed: {', '.join(INTRINSICS)}")
            return Call(args[0], [self.expr(a, tensors, scope, where) for a in self._list(args[1], where)])
        if kind == "cast":
            need(2)
            return Cast(dtype_of(args[0]).name, self.expr(args[1], tensors, scope, where))
        if kind == "select":
            need(3)
            return Select(*(self.expr(a, tensors, scope, where) for a in args))
        if kind == "load":
            need(2)
            if args[0] not in tensors:
                raise TEError(f"{where}: load of unknown tensor {args[0]!r} (tensors must be defined before use)")
            idx = [self.expr(a, tensors, scope, where) for a in self._list(args[1], where)]
            return TensorLoad(tensors[args[0]], idx)
        if kind == "reduce":
            need(3)
            axes = []
            for n in self._list(args[2], where):
                if n not in scope or scope[n].kind != "reduce":
                    raise TEError(f"{where}: {n!r} is not a reduce axis of this tensor")
                axes.append(scope[n])
            return Reduce(args[0], self.expr(args[1], tensors, scope, where), axes)
        raise TEError(f"{where}: unknown node kind {kind!r}; allowed: const, var, load, call, cast, "
                      f"select, reduce, {', '.join(BINARY_OPS)}")

    @staticmethod
    def _list(x, where) -> list:
        if not isinstance(x, list):
            raise TEError(f"{where}: expected a list, got {type(x).__name__}")
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
        for rj in tj.get("reduce_axes", []):
            if not isinstance(rj, dict):
                raise TEError(f"{where}.reduce_axes: entries must be objects with name and extent")
            rn = check_identifier(rj.get("name"), f"{where}.reduce_axes.name")
            if rn in scope:
                raise TEError(f"{where}.reduce_axes: duplicate axis name {rn!r}")
            if not isinstance(rj.get("extent"), int):
                raise TEError(f"{where}.reduce_axes.extent: must be a positive int")
            scope[rn] = reduce_axis(rj["extent"], rn)
        body = reader.expr(tj.get("body"), tensors, scope, f"{where}.body")
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
        if o not in tensors or isinstance(tensors[o].op, PlaceholderOp):
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
