"""Loop-nest IR: what lowering produces and the code generators consume.

Expressions reuse the tensor-expression nodes (`Var`, `Const`, `BinOp`, `Call`, `Cast`,
`Select`) and add buffer access and vector nodes: `Load(buffer, index)` with a flat
element index, `Ramp(base, stride, lanes)` (the index vector base + stride*[0..lanes)) and
`Broadcast(value, lanes)`. Statements are `For`, `Store`, `Allocate`, `IfThenElse`, `Seq`
and `Evaluate` (an extern call). Loops always start at 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .expr import BinOp, Call, Cast, Const, Expr, Reduce, Select, TensorLoad, Var, as_expr, children
from .te import Tensor


@dataclass(eq=False)
class Buffer:
    """A dense row-major array: `shape` (ints), `dtype` name, `scope`.

    scope: 'global' (a kernel argument), 'heap' (a large temporary, 64-byte aligned),
    'local' (a small array on the stack or in registers).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for d in reversed(self.shape):
            out.append(acc)
            acc *= d
        return tuple(reversed(out))

    def __repr__(self):
        return f"Buffer({self.name}, {list(self.shape)}, {self.scope})"


class Load(Expr):
    """`buffer[index]`; a vector load when `index` is a Ramp (or has lanes > 1)."""

    __slots__ = ("buffer", "index", "dtype")

    def __init__(self, buffer: Buffer, index: Expr):
        self.buffer, self.index, self.dtype = buffer, as_expr(index), buffer.dtype

    def __repr__(self):
        return f"{self.buffer.name}[{self.index!r}]"


class Ramp(Expr):
    """The int vector `base + stride * [0, 1, ..., lanes-1]`."""

    __slots__ = ("base", "stride", "lanes", "dtype")

    def __init__(self, base: Expr, stride: int, lanes: int):
        self.base, self.stride, self.lanes, self.dtype = as_expr(base), stride, lanes, "int64"

    def __repr__(self):
        return f"ramp({self.base!r}, {self.stride}, {self.lanes})"


class Broadcast(Expr):
    """`value` repeated in `lanes` lanes."""

    __slots__ = ("value", "lanes", "dtype")

    def __init__(self, value: Expr, lanes: int):
        self.value, self.lanes, self.dtype = as_expr(value), lanes, value.dtype

    def __repr__(self):
        return f"x{self.lanes}({self.value!r})"


class Address(Expr):
    """Pointer to `buffer[index]` (passed to extern calls)."""

    __slots__ = ("buffer", "index", "dtype")

    def __init__(self, buffer: Buffer, index: Expr):
        self.buffer, self.index, self.dtype = buffer, as_expr(index), "handle"

    def __repr__(self):
        return f"&{self.buffer.name}[{self.index!r}]"


class TensorAddress(Expr):
    """Pointer to `tensor[indices]` before buffers are flattened (lowering-internal)."""

    __slots__ = ("tensor", "indices", "dtype")

    def __init__(self, tensor: Tensor, indices):
        self.tensor, self.indices, self.dtype = tensor, tuple(as_expr(i) for i in indices), "handle"

    def __repr__(self):
        return f"&{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


class Stmt:
    """Base of the statement nodes."""


@dataclass(eq=False)
class For(Stmt):
    """`for var in range(extent)`; kind: 'serial' | 'parallel' | 'vectorized' | 'unrolled'."""

    var: Var
    extent: int
    kind: str
    body: Stmt


@dataclass(eq=False)
class Store(Stmt):
    """`buffer[index] = value` (vector store when index is a Ramp)."""

    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class Allocate(Stmt):
    """Declares `buffer` (scope 'local' or 'heap') for the duration of `body`."""

    buffer: Buffer
    body: Stmt


@dataclass(eq=False)
class IfThenElse(Stmt):
    """`if cond: then` (`else: otherwise` unless it is None)."""

    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(eq=False)
class Seq(Stmt):
    """`stmts` in order (build one with `seq`, which flattens nested ones)."""

    stmts: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class Provide(Stmt):
    """`tensor[indices] = value` before buffers are flattened (lowering-internal)."""

    tensor: Tensor
    indices: list
    value: Expr


@dataclass(eq=False)
class Evaluate(Stmt):
    """Calls extern C function `func` with `args` (expressions; pointers as `Address`)."""

    func: str
    args: list


@dataclass(eq=False)
class PrimFunc:
    """A lowered kernel: `params` (global buffers, inputs then outputs) and its `body`."""

    name: str
    params: list[Buffer]
    body: Stmt
    num_outputs: int = 1
    extern_sources: list[str] = field(default_factory=list)


def seq(stmts: Iterable[Stmt | None]) -> Stmt:
    """A Seq of the non-empty statements, flattened; a single statement is returned as is."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.stmts if isinstance(s, Seq) else [s])
    return flat[0] if len(flat) == 1 else Seq(flat)


# --------------------------------------------------------------------------- generic rewriting


def map_children(s: Stmt, f: Callable[[Stmt], Stmt]) -> Stmt:
    """`s` rebuilt with `f` applied to each statement directly inside it (a loop's or an
    allocation's body, the branches of an IfThenElse, the parts of a Seq); other statements
    as they are. For top-down rewrites that carry context down (map_stmt works bottom-up)."""
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, f(s.body))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, f(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, f(s.then), f(s.otherwise) if s.otherwise is not None else None)
    if isinstance(s, Seq):
        return seq(f(x) for x in s.stmts)
    return s


def _rebuild_binop(e: BinOp, f) -> Expr:
    a, b = map_expr(e.a, f), map_expr(e.b, f)
    return e if (a is e.a and b is e.b) else BinOp(e.op, a, b)


def _rebuild_call(e: Call, f) -> Expr:
    args = [map_expr(x, f) for x in e.args]
    return e if all(x is y for x, y in zip(args, e.args)) else Call(e.name, args)


def _rebuild_cast(e: Cast, f) -> Expr:
    v = map_expr(e.value, f)
    return e if v is e.value else Cast(e.dtype, v)


def _rebuild_select(e: Select, f) -> Expr:
    c, t, o = map_expr(e.cond, f), map_expr(e.t, f), map_expr(e.f, f)
    return e if (c is e.cond and t is e.t and o is e.f) else Select(c, t, o)


def _rebuild_load(e: Load, f) -> Expr:
    i = map_expr(e.index, f)
    return e if i is e.index else Load(e.buffer, i)


def _rebuild_ramp(e: Ramp, f) -> Expr:
    b = map_expr(e.base, f)
    return e if b is e.base else Ramp(b, e.stride, e.lanes)


def _rebuild_broadcast(e: Broadcast, f) -> Expr:
    v = map_expr(e.value, f)
    return e if v is e.value else Broadcast(v, e.lanes)


def _rebuild_tensor_load(e: TensorLoad, f) -> Expr:
    idx = [map_expr(x, f) for x in e.indices]
    return e if all(x is y for x, y in zip(idx, e.indices)) else TensorLoad(e.tensor, idx)


def _rebuild_reduce(e: Reduce, f) -> Expr:
    src = map_expr(e.source, f)
    return e if src is e.source else Reduce(e.combiner, src, e.axes)


#: How map_expr rebuilds a node of each type from its mapped children (leaves: not listed).
#: A dict on the exact type: lowering maps millions of nodes, and a chain of isinstance
#: checks cost more than the rebuilding (profiled: featurizing a config is mostly lowering).
_REBUILD: dict[type, Callable] = {
    BinOp: _rebuild_binop, Call: _rebuild_call, Cast: _rebuild_cast, Select: _rebuild_select,
    Load: _rebuild_load, Ramp: _rebuild_ramp, Broadcast: _rebuild_broadcast, TensorLoad: _rebuild_tensor_load,
    TensorAddress: lambda e, f: TensorAddress(e.tensor, [map_expr(x, f) for x in e.indices]),
    Address: lambda e, f: Address(e.buffer, map_expr(e.index, f)),
    Reduce: _rebuild_reduce,
}


def map_expr(e: Expr, f: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild `e` bottom-up; `f(node)` may return a replacement for a node (after its children)."""
    rebuild = _REBUILD.get(type(e))
    n = e if rebuild is None else rebuild(e, f)
    r = f(n)
    return n if r is None else r


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions (keys compared by identity)."""
    if not mapping:
        return e
    return map_expr(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def map_stmt(s: Stmt, fe: Callable[[Expr], Expr], fs: Callable[[Stmt], Stmt | None] | None = None) -> Stmt:
    """Rebuild statement `s`, applying `fe` to every top-level expression and `fs` to each rebuilt statement."""
    if isinstance(s, For):
        n: Stmt = For(s.var, s.extent, s.kind, map_stmt(s.body, fe, fs))
    elif isinstance(s, Store):
        n = Store(s.buffer, fe(s.index), fe(s.value))
    elif isinstance(s, Provide):
        n = Provide(s.tensor, [fe(i) for i in s.indices], fe(s.value))
    elif isinstance(s, Allocate):
        n = Allocate(s.buffer, map_stmt(s.body, fe, fs))
    elif isinstance(s, IfThenElse):
        n = IfThenElse(fe(s.cond), map_stmt(s.then, fe, fs),
                       map_stmt(s.otherwise, fe, fs) if s.otherwise is not None else None)
    elif isinstance(s, Seq):
        n = seq(map_stmt(x, fe, fs) for x in s.stmts)
    elif isinstance(s, Evaluate):
        n = Evaluate(s.func, [fe(a) if isinstance(a, Expr) else a for a in s.args])
    else:
        raise TypeError(f"unknown statement {type(s).__name__}")
    if fs is not None:
        r = fs(n)
        return n if r is None else r
    return n


def stmt_exprs(s: Stmt) -> Iterable[Expr]:
    """Every top-level expression in a statement tree."""
    if isinstance(s, For):
        yield from stmt_exprs(s.body)
    elif isinstance(s, Store):
        yield s.index
        yield s.value
    elif isinstance(s, Provide):
        yield from s.indices
        yield s.value
    elif isinstance(s, Allocate):
        yield from stmt_exprs(s.body)
    elif isinstance(s, IfThenElse):
        yield s.cond
        yield from stmt_exprs(s.then)
        if s.otherwise is not None:
            yield from stmt_exprs(s.otherwise)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from stmt_exprs(x)
    elif isinstance(s, Evaluate):
        yield from (a for a in s.args if isinstance(a, Expr))


def walk_stmt(s: Stmt) -> Iterable[Stmt]:
    """Pre-order traversal of statements."""
    yield s
    if isinstance(s, (For, Allocate)):
        yield from walk_stmt(s.body)
    elif isinstance(s, IfThenElse):
        yield from walk_stmt(s.then)
        if s.otherwise is not None:
            yield from walk_stmt(s.otherwise)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_stmt(x)


#: The direct sub-expressions of the IR's own expression nodes, by exact type (as expr.children
#: does for the tensor-expression nodes): lowering and code generation walk millions of nodes.
_IR_CHILDREN: dict[type, Callable[[Expr], tuple]] = {
    Load: lambda e: (e.index,), Address: lambda e: (e.index,), TensorAddress: lambda e: e.indices,
    Ramp: lambda e: (e.base,), Broadcast: lambda e: (e.value,),
}


def expr_nodes(e: Expr) -> Iterable[Expr]:
    """Pre-order traversal of an IR expression (including Load/Ramp/Broadcast children)."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        get = _IR_CHILDREN.get(type(n))
        stack.extend(get(n) if get is not None else children(n))


def const_int(e: Expr) -> int | None:
    """The int value of a constant integer expression, else None."""
    return e.value if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool) else None


def lanes_of(e: Expr) -> int:
    """Number of vector lanes of an expression (1 for scalars)."""
    t = type(e)
    if t is Ramp or t is Broadcast:
        return e.lanes
    if t is Load:
        return lanes_of(e.index)
    return max((lanes_of(c) for c in children(e)), default=1)


def dump(s: Stmt, indent: int = 0) -> str:
    """Readable text of a statement tree (for debugging and docs)."""
    pad = "  " * indent
    if isinstance(s, For):
        return f"{pad}for {s.var.name} in 0..{s.extent} ({s.kind}):\n" + dump(s.body, indent + 1)
    if isinstance(s, Store):
        return f"{pad}{s.buffer.name}[{s.index!r}] = {s.value!r}\n"
    if isinstance(s, Allocate):
        return f"{pad}alloc {s.buffer.name}{list(s.buffer.shape)} {s.buffer.scope}\n" + dump(s.body, indent)
    if isinstance(s, IfThenElse):
        out = f"{pad}if {s.cond!r}:\n" + dump(s.then, indent + 1)
        if s.otherwise is not None:
            out += f"{pad}else:\n" + dump(s.otherwise, indent + 1)
        return out
    if isinstance(s, Seq):
        return "".join(dump(x, indent) for x in s.stmts)
    if isinstance(s, Evaluate):
        return f"{pad}{s.func}({', '.join(map(repr, s.args))})\n"
    return f"{pad}{s!r}\n"


def used_vars(nodes: Sequence[Expr]) -> set[Var]:
    out: set[Var] = set()
    for e in nodes:
        for n in expr_nodes(e):
            if isinstance(n, Var):
                out.add(n)
    return out
