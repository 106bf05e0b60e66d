"""Expressions of the tensor-expression language (`compiler.te`): scalar dtypes, identifiers,
the immutable expression nodes (`Const`, `Var`, `IterVar`, `BinOp`, `Call`, `Cast`, `Select`,
`TensorLoad`, `Reduce`) and their traversal.

Python operators build expressions (`a + b`, `a * 2`, `i < n`); equality tests are explicit
(`te.eq(a, b)`) so that expressions stay hashable by identity. The loop-nest IR
(`compiler.ir`) reuses these nodes and adds buffer and vector ones.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from .te import Tensor


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
    if not isinstance(name, str) or name not in DTYPES:
        raise TEError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


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


def _arithmetic(op: str):
    """The operator methods of `a <op> b` and, reflected, `b <op> a` (`1 + x`): each builds a
    BinOp `op` with the operands in the order they are written."""
    def forward(self, other):
        return BinOp(op, self, other)

    def reflected(self, other):
        return BinOp(op, other, self)

    return forward, reflected


class Expr:
    """Base of all expression nodes. `dtype` is a dtype name."""

    dtype: str

    __add__, __radd__ = _arithmetic("add")
    __sub__, __rsub__ = _arithmetic("sub")
    __mul__, __rmul__ = _arithmetic("mul")
    __truediv__, __rtruediv__ = _arithmetic("div")
    __floordiv__, __rfloordiv__ = _arithmetic("floordiv")
    __mod__, __rmod__ = _arithmetic("floormod")
    def __neg__(self): return BinOp("sub", Const(0, self.dtype), self)
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
        if dt.kind == "int" and isinstance(value, float) and not value.is_integer():
            raise TEError(f"constant {value} is not an integer, which {dtype} holds")
        try:
            self.value = bool(value) if dt.kind == "bool" else int(value) if dt.kind == "int" else float(value)
        except OverflowError:
            raise TEError(f"constant {str(value)[:40]} does not fit {dtype}") from None
        if dt.kind == "int" and not -(1 << (dt.bits - 1)) <= self.value < 1 << (dt.bits - 1):
            raise TEError(f"constant {str(value)[:40]} does not fit {dtype}")
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
        if not isinstance(extent, (int, np.integer)) or isinstance(extent, bool) or extent < 1:
            raise TEError(f"axis {name!r}: extent must be a positive int, got {extent!r}")
        self.extent = int(extent)
        self.kind = kind


BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max",
              "lt", "le", "gt", "ge", "eq", "ne", "and", "or")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")
INTRINSICS = ("exp", "log", "sqrt", "tanh", "erf", "abs", "sigmoid")
_BINARY_OP_SET, _COMPARE_OP_SET = frozenset(BINARY_OPS), frozenset(COMPARE_OPS)


def _promote(a: str, b: str) -> str:
    da, db = dtype_of(a), dtype_of(b)
    if da.kind == db.kind:
        return a if da.bits >= db.bits else b
    if da.kind == "float":
        return a
    if db.kind == "float":
        return b
    return a if da.kind == "int" else b


def _converted(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """(a, b), the one whose dtype differs from their promotion cast to it where that is a float
    dtype: the C backends vectorize only operands of one dtype (an int32 constant or an
    iteration variable beside float32 lanes, float32 beside float64). Index arithmetic (ints
    of two widths) is left as it is."""
    if a.dtype == b.dtype:
        return a, b
    dtype = _promote(a.dtype, b.dtype)
    if dtype_of(dtype).kind != "float":
        return a, b
    return (a if a.dtype == dtype else Cast(dtype, a)), (b if b.dtype == dtype else Cast(dtype, b))


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
        if op not in _BINARY_OP_SET:
            raise TEError(f"unknown binary op {op!r}; allowed: {', '.join(BINARY_OPS)}")
        if not isinstance(a, Expr):
            a = as_expr(a, b.dtype if isinstance(b, Expr) else None)
        if not isinstance(b, Expr):
            b = as_expr(b, a.dtype)
        if op not in _COMPARE_OP_SET:
            a, b = _converted(a, b)
        self.op, self.a, self.b = op, a, b
        self.dtype = "bool" if op in _COMPARE_OP_SET else a.dtype if a.dtype == b.dtype else _promote(a.dtype, b.dtype)

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
        if not self.args or any(dtype_of(a.dtype).kind != "float" for a in self.args):
            raise TEError(f"intrinsic {name!r} takes float arguments, got "
                          f"({', '.join(a.dtype for a in self.args)}); cast them")
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
        t, f = _converted(t, as_expr(f, t.dtype))
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
        for d, index in enumerate(self.indices):
            if dtype_of(index.dtype).kind != "int":
                raise TEError(f"index {d} of tensor {tensor.name!r} has dtype {index.dtype}; indices are integers")
        self.dtype = tensor.dtype

    def __repr__(self):
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


REDUCERS = {"sum": "add", "max": "max", "min": "min"}


class Reduce(Expr):
    """A commutative reduction of `source` over `axes` (reduce IterVars). Only allowed as a compute body."""

    __slots__ = ("combiner", "source", "axes", "dtype")

    def __init__(self, combiner: str, source, axes: Sequence[IterVar]):
        if not isinstance(combiner, str) or combiner not in REDUCERS:
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


# --------------------------------------------------------------------------- traversal

#: The direct sub-expressions of a node of each type (leaves: not listed), for children():
#: a dict on the exact type, as lowering walks millions of nodes.
_CHILDREN: dict[type, Callable[[Expr], tuple]] = {
    BinOp: lambda e: (e.a, e.b), Call: lambda e: e.args, Cast: lambda e: (e.value,),
    Select: lambda e: (e.cond, e.t, e.f), TensorLoad: lambda e: e.indices, Reduce: lambda e: (e.source,),
}


def children(e: Expr) -> tuple:
    """The direct sub-expressions of `e`, in evaluation order."""
    get = _CHILDREN.get(type(e))
    return () if get is None else get(e)


def walk(e: Expr) -> Iterable[Expr]:
    """Pre-order traversal of an expression tree."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))
