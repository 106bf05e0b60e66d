"""The C-style renderer: one base for the C and the CUDA C++ code generators.

In the spirit of tinygrad's ``renderer/cstyle.py``: :class:`CStyleRenderer` renders what
both languages write alike (names, constants, casts, selects, scalar arithmetic with only
the parentheses C's precedence needs, integer floor division, scalar math calls,
conditions, counted loops, block-scoped declarations, the kernel's parameter list), and a
backend is a small subclass that sets a few tables (the pointer qualifier, how booleans,
non-finite floats and float min/max print, the loop index type) and
overrides what only it has: vector loads and stores, loops bound to GPU indices or lifted
into the thread pool, allocations, calls, and the function around the body.
"""

from __future__ import annotations

import math
import re

from ..ir import (Address, Allocate, Broadcast, Buffer, Evaluate, For, IfThenElse, Load, PrimFunc, Ramp, Seq, Stmt,
                  Store, lanes_of)
from ..simplify import Simplifier
from ..te import DTYPES, BinOp, Call, Cast, Const, Expr, Select, Var, dtype_of
from .c_names import c_identifier

#: IR binary operator -> C operator.
BINARY_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "floormod": "%", "lt": "<", "le": "<=",
              "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
#: C precedence of the integer index operators (higher binds tighter).
INT_PRECEDENCE = {"add": 4, "sub": 4, "mul": 5, "div": 5, "floordiv": 5, "floormod": 5}
#: (operator, its right operand's operator) of equal precedence that need no parentheses: only
#: where ints regroup exactly (a + (b - c) is a + b - c; a * (b / c) is not a * b / c).
_REGROUPS = {("add", "add"), ("add", "sub"), ("mul", "mul")}
#: IR math call -> C math function of double (the float variant adds "f").
MATH_FUNCTIONS = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "abs": "fabs"}


class NameTable:
    """Unique, valid C names for the variables and buffers of one function.

    ``names(obj, hint)`` gives `obj` (any object, by identity) the name `hint` with
    non-word characters replaced by ``_`` (and written ``tf_u_<hint>`` where C or C++ could not
    declare it, ``c_names.c_identifier``), suffixed ``_1``, ``_2``... when taken; the same
    object always gets the same name. Names the generated code declares itself are ``tf_*``,
    which this never gives."""

    def __init__(self):
        self.map: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, obj, hint: str) -> str:
        if id(obj) not in self.map:
            base = c_identifier(re.sub(r"\W", "_", hint) or "v")
            name, n = base, 1
            while name in self.used:
                name, n = f"{base}_{n}", n + 1
            self.used.add(name)
            self.map[id(obj)] = name
        return self.map[id(obj)]


def c_division(simp: Simplifier, e: BinOp) -> bool:
    """Whether C's truncating / and % equal floordiv/floormod here (non-negative by a positive constant)."""
    return simp.range_of(e.a)[0] >= 0 and isinstance(e.b, Const) and e.b.value > 0


class CStyleRenderer:
    """Renders one PrimFunc in a C-like language; subclasses set the tables below and
    override `load`, `store`, `loop`, `allocate`, `evaluate` and `generate`."""

    #: the language, for error messages
    language: str
    #: qualifier of the kernel's pointer parameters
    restrict: str
    #: how true and false print
    true: str
    false: str
    #: float min/max of two scalars: formatted with op ("min"/"max") and suffix ("f" for float32)
    float_min_max: str
    #: type of loop indices and of index arithmetic
    index_ctype: str

    def __init__(self, func: PrimFunc):
        self.func = func
        self.names = NameTable()
        self.simp = Simplifier()

    # ----------------------------------------------------------------- names
    def var(self, v: Var) -> str:
        return self.names(v, v.name)

    def buf(self, b: Buffer) -> str:
        return self.names(b, b.name)

    def ctype(self, dtype: str) -> str:
        """The C type of a scalar of `dtype` in expressions (casts)."""
        return DTYPES[dtype].ctype

    # ----------------------------------------------------------------- expressions
    #: The method rendering each kind of expression (the first class of its MRO listed here).
    EXPRESSIONS = {Const: "const", Var: "var", Load: "load", Address: "address", BinOp: "binop", Call: "call",
                   Cast: "cast", Select: "select", Ramp: "vector_expr", Broadcast: "vector_expr"}

    def expr(self, e: Expr) -> str:
        for kind in type(e).__mro__:
            if kind in self.EXPRESSIONS:
                return getattr(self, self.EXPRESSIONS[kind])(e)
        raise NotImplementedError(f"{self.language} codegen: {type(e).__name__}")

    def address(self, e: Address) -> str:
        return f"({self.buf(e.buffer)} + {self.expr(e.index)})"

    def select(self, e: Select) -> str:
        if lanes_of(e.cond) == 1:
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        raise NotImplementedError("select with a per-lane condition")

    def load(self, e: Load) -> str:
        raise NotImplementedError

    def vector_expr(self, e: Expr) -> str:
        """A Ramp or Broadcast standing alone in an expression (none, unless a backend has them)."""
        raise NotImplementedError(f"{self.language} codegen: {type(e).__name__} outside a vector statement")

    def const(self, e: Const) -> str:
        if e.dtype == "bool":
            return self.true if e.value else self.false
        if dtype_of(e.dtype).kind == "int":
            return f"{e.value}" if abs(e.value) < 2**31 else f"{e.value}LL"
        v = float(e.value)
        if math.isinf(v) or math.isnan(v):
            return self.non_finite(v, e.dtype)
        return f"{v!r}f" if e.dtype == "float32" else repr(v)

    def non_finite(self, v: float, dtype: str) -> str:
        """An infinity or a NaN of float `dtype`."""
        raise NotImplementedError

    def cast(self, e: Cast) -> str:
        return f"(({self.ctype(e.dtype)})({self.expr(e.value)}))"

    def binop(self, e: BinOp, a: str | None = None, b: str | None = None) -> str:
        """`e` with operands `a`, `b` (default: rendered from `e`)."""
        a = self.expr(e.a) if a is None else a
        b = self.expr(e.b) if b is None else b
        kind = dtype_of(e.dtype).kind
        if e.op in ("min", "max"):
            if kind == "float":
                return f"{self.float_min_max.format(op=e.op, suffix=float_suffix(e.dtype))}({a}, {b})"
            return f"(({a}) {'<' if e.op == 'min' else '>'} ({b}) ? ({a}) : ({b}))"
        if e.op in ("floordiv", "floormod"):
            if kind == "float":
                f = "floor" + float_suffix(e.dtype)
                return f"{f}(({a}) / ({b}))" if e.op == "floordiv" else f"(({a}) - {f}(({a}) / ({b})) * ({b}))"
            if not c_division(self.simp, e):
                return self.floor_division(e.op, a, b)
        if e.op in INT_PRECEDENCE and kind == "int":
            return self.int_arith(e, a, b)
        return f"({a} {BINARY_OPS[e.op]} {b})"

    def floor_division(self, op: str, a: str, b: str) -> str:
        """Integer floordiv / floormod (`op`) by the prelude's helper, for possibly negative operands."""
        return f"tf_{op}({a}, {b})"

    @staticmethod
    def int_arith(e: BinOp, a: str, b: str) -> str:
        """Integer index arithmetic `a op b` with only the parentheses C's precedence needs: `i * 64 + j`."""
        prec = INT_PRECEDENCE[e.op]

        def needs(child: Expr, right: bool) -> bool:
            if not (isinstance(child, BinOp) and child.op in INT_PRECEDENCE):
                return False
            p = INT_PRECEDENCE[child.op]
            return p < prec or (right and p == prec and (e.op, child.op) not in _REGROUPS)

        a = f"({a})" if needs(e.a, False) else a
        b = f"({b})" if needs(e.b, True) else b
        return f"{a} {BINARY_OPS[e.op]} {b}"

    def call(self, e: Call) -> str:
        return self.math_call(e.name, e.dtype, [self.expr(a) for a in e.args])

    @staticmethod
    def math_call(name: str, dtype: str, args: list[str]) -> str:
        """Scalar math function `name` of `dtype` over rendered `args` (sigmoid spelled out)."""
        f = float_suffix(dtype)
        if name == "sigmoid":
            one = "1.0f" if f else "1.0"
            return f"({one} / ({one} + exp{f}(-({args[0]}))))"
        return f"{MATH_FUNCTIONS[name]}{f}({', '.join(args)})"

    def aligned(self, b: Buffer, base: Expr, lanes: int) -> bool:
        """Whether a vector of `lanes` elements of `b` at `base` is aligned to its whole size: `b`
        may be (`may_align`) and `base` is provably a multiple of `lanes`."""
        if not self.may_align(b):
            return False
        lin = self.simp.lin(base)
        return lin.const % lanes == 0 and all(c % lanes == 0 for c, _ in lin.terms.values())

    def may_align(self, b: Buffer) -> bool:
        """Whether `b`'s first element is known to be aligned to a whole vector."""
        raise NotImplementedError

    # ----------------------------------------------------------------- statements
    def stmt(self, s: Stmt, ind: int) -> list[str]:
        """The lines of `s`, indented by `ind` levels of two spaces."""
        pad = "  " * ind
        if isinstance(s, Seq):
            return [line for x in s.stmts for line in self.stmt(x, ind)]
        if isinstance(s, Store):
            return self.store(s, ind)
        if isinstance(s, For):
            return self.loop(s, ind)
        if isinstance(s, IfThenElse):
            out = [f"{pad}if ({self.expr(s.cond)}) {{"] + self.stmt(s.then, ind + 1)
            if s.otherwise is not None:
                out += [f"{pad}}} else {{"] + self.stmt(s.otherwise, ind + 1)
            return out + [f"{pad}}}"]
        if isinstance(s, Allocate):
            return self.allocate(s, ind)
        if isinstance(s, Evaluate):
            return self.evaluate(s, ind)
        raise NotImplementedError(f"{self.language} codegen: {type(s).__name__}")

    def store(self, s: Store, ind: int) -> list[str]:
        raise NotImplementedError

    def loop(self, s: For, ind: int) -> list[str]:
        raise NotImplementedError

    def allocate(self, s: Allocate, ind: int) -> list[str]:
        raise NotImplementedError

    def evaluate(self, s: Evaluate, ind: int) -> list[str]:
        raise NotImplementedError

    def loop_var(self, s: For) -> str:
        """The name of loop `s`'s variable, whose range [0, extent) the simplifier now knows."""
        v = self.var(s.var)
        self.simp.ranges[s.var] = (0, s.extent - 1)
        return v

    def counted_loop(self, s: For, v: str, ind: int, pragma: str | None = None) -> list[str]:
        """`for (<index type> v = 0; v < extent; ++v) { body }`, after the line `pragma` if any."""
        pad = "  " * ind
        head = [f"{pad}{pragma}"] if pragma else []
        head.append(f"{pad}for ({self.index_ctype} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        return head + self.stmt(s.body, ind + 1) + [f"{pad}}}"]

    def scoped(self, declarations: list[str], body: Stmt, ind: int, after: tuple[str, ...] = ()) -> list[str]:
        """`{ declarations; body; after }`: a block whose declarations end with it."""
        pad = "  " * ind
        return ([f"{pad}{{", *(f"{pad}  {line}" for line in declarations)] + self.stmt(body, ind + 1)
                + [*(f"{pad}  {line}" for line in after), f"{pad}}}"])

    # ----------------------------------------------------------------- function
    def is_input(self, b: Buffer) -> bool:
        """Whether `b` is one of the function's input parameters (read only)."""
        n_in = len(self.func.params) - self.func.num_outputs
        return any(b is p for p in self.func.params[:n_in])

    def params(self) -> list[str]:
        """The kernel's parameters: `const float* restrict A` per input, without `const` per output."""
        return [f"{'const ' if self.is_input(b) else ''}{DTYPES[b.dtype].ctype}* {self.restrict} {self.buf(b)}"
                for b in self.func.params]


def float_suffix(dtype: str) -> str:
    """The suffix of C's float32 math functions and literals ("f"), "" for other dtypes."""
    return "f" if dtype == "float32" else ""


__all__ = ["BINARY_OPS", "INT_PRECEDENCE", "MATH_FUNCTIONS", "CStyleRenderer", "NameTable", "c_division",
           "float_suffix"]
