"""Integer index simplifier and interval arithmetic.

Integer expressions are brought to a linear normal form `sum(coef * term) + const` where a
term is a variable or an opaque non-linear atom (a floordiv, floormod, min, max or product
of non-constants). Known variable ranges (loop extents) let it remove divisions and
modulos that split/fuse relations create: with 0 <= ii < 16,
`(io*16 + ii) // 16 -> io` and `(io*16 + ii) % 16 -> ii`; and decide comparisons, so
guards that always hold disappear. Terms print largest coefficient first, e.g.
`i*512 + k*16 + j`, as a person would write them.

The approach is the canonical-form simplification used by TVM's arith module (Halide's
simplifier before it), reduced to what affine loop nests need.
"""

from __future__ import annotations

from typing import Mapping

from .expr import BinOp, Call, Cast, Const, Expr, Select, TensorLoad, Var, dtype_of
from .ir import Address, Broadcast, Load, Ramp

Range = tuple[int, int]  # inclusive [lo, hi]
INF = float("inf")


def _is_int(e: Expr) -> bool:
    return dtype_of(e.dtype).kind == "int"


class Lin:
    """Linear form: {key: (coef, term)} + const, keys are ids of terms."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const: int = 0):
        self.terms: dict[object, list] = terms or {}
        self.const = const

    def copy(self) -> "Lin":
        return Lin({k: [c, t] for k, (c, t) in self.terms.items()}, self.const)

    def add(self, other: "Lin", scale: int = 1) -> "Lin":
        out = self.copy()
        for k, (c, t) in other.terms.items():
            if k in out.terms:
                out.terms[k][0] += c * scale
                if out.terms[k][0] == 0:
                    del out.terms[k]
            elif c * scale:
                out.terms[k] = [c * scale, t]
        out.const += other.const * scale
        return out

    def scale(self, s: int) -> "Lin":
        if s == 0:
            return Lin()
        return Lin({k: [c * s, t] for k, (c, t) in self.terms.items()}, self.const * s)


def _product_range(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Inclusive bounds of x * y for x in `a`, y in `b` (0 times an infinite bound is 0)."""
    corners = [x * y if x and y else 0 for x in a for y in b]
    return (min(corners), max(corners))


def _key(e: Expr):
    return e if isinstance(e, Var) else repr(e)


class Simplifier:
    """Simplifies expressions given inclusive ranges of variables (`{var: (lo, hi)}`)."""

    def __init__(self, ranges: Mapping[Var, Range] | None = None):
        self.ranges: dict[Var, Range] = dict(ranges or {})

    # ----------------------------------------------------------------- ranges
    def range_of(self, e: Expr) -> tuple[float, float]:
        """Inclusive bounds of an integer expression (±inf when unknown)."""
        if isinstance(e, Const):
            return (e.value, e.value)
        if isinstance(e, Var):
            return self.ranges.get(e, (-INF, INF))
        if isinstance(e, BinOp):
            if e.op == "mul":
                la, lb = self.lin(e.a), self.lin(e.b)
                if la.terms and lb.terms:  # not linear: its lin form is itself, so multiply the ranges
                    return _product_range(self.lin_range(la), self.lin_range(lb))
            if e.op in ("add", "sub", "mul"):
                return self.lin_range(self.lin(e))
            a, b = self.range_of(e.a), self.range_of(e.b)
            if e.op == "floordiv" and isinstance(e.b, Const) and e.b.value > 0:
                c = e.b.value
                return (a[0] // c if a[0] != -INF else -INF, a[1] // c if a[1] != INF else INF)
            if e.op == "floormod" and isinstance(e.b, Const) and e.b.value > 0:
                c = e.b.value
                if a[0] >= 0 and a[1] < c:
                    return a
                return (0, c - 1)
            if e.op == "min":
                return (min(a[0], b[0]), min(a[1], b[1]))
            if e.op == "max":
                return (max(a[0], b[0]), max(a[1], b[1]))
        if isinstance(e, Select):
            a, b = self.range_of(e.t), self.range_of(e.f)
            return (min(a[0], b[0]), max(a[1], b[1]))
        return (-INF, INF)

    def lin_range(self, lin: Lin) -> tuple[float, float]:
        lo = hi = lin.const
        for c, t in lin.terms.values():
            tl, th = self.range_of(t)
            if c > 0:
                lo, hi = lo + c * tl, hi + c * th
            else:
                lo, hi = lo + c * th, hi + c * tl
        return (lo, hi)

    # ----------------------------------------------------------------- linear forms
    def lin(self, e: Expr) -> Lin:
        if isinstance(e, Const):
            return Lin(const=int(e.value))
        if isinstance(e, BinOp) and e.op in ("add", "sub"):
            return self.lin(e.a).add(self.lin(e.b), 1 if e.op == "add" else -1)
        if isinstance(e, BinOp) and e.op == "mul":
            la, lb = self.lin(e.a), self.lin(e.b)
            if not lb.terms:
                return la.scale(lb.const)
            if not la.terms:
                return lb.scale(la.const)
            atom = BinOp("mul", self.from_lin(la), self.from_lin(lb))
            return Lin({_key(atom): [1, atom]})
        if isinstance(e, BinOp) and e.op in ("floordiv", "floormod"):
            return self._divmod(e)
        if isinstance(e, BinOp) and e.op in ("min", "max"):
            a, b = self.simplify(e.a), self.simplify(e.b)
            (al, ah), (bl, bh) = self.range_of(a), self.range_of(b)
            if e.op == "min":
                pick = a if ah <= bl else b if bh <= al else None
            else:
                pick = a if al >= bh else b if bl >= ah else None
            if pick is not None:
                return self.lin(pick)
            if isinstance(a, Const) and isinstance(b, Const):
                return Lin(const=min(a.value, b.value) if e.op == "min" else max(a.value, b.value))
            atom = BinOp(e.op, a, b)
            return Lin({_key(atom): [1, atom]})
        if isinstance(e, Var):
            return Lin({e: [1, e]})
        atom = self._simplify_nonlinear(e)
        if isinstance(atom, Const):
            return Lin(const=int(atom.value))
        return Lin({_key(atom): [1, atom]})

    def _divmod(self, e: BinOp) -> Lin:
        lb = self.lin(e.b)
        la = self.lin(e.a)
        if lb.terms or lb.const <= 0:
            atom = BinOp(e.op, self.from_lin(la), self.from_lin(lb))
            return Lin({_key(atom): [1, atom]})
        c = lb.const
        q, r = Lin(), Lin()
        for k, (coef, t) in la.terms.items():
            qc, rc = divmod(coef, c)
            if qc:
                q.terms[k] = [qc, t]
            if rc:
                r.terms[k] = [rc, t]
        q.const, r.const = divmod(la.const, c)
        lo, hi = self.lin_range(r)
        if lo != -INF and hi != INF and lo // c == hi // c:
            k = int(lo // c)
            if e.op == "floordiv":
                q.const += k
                return q
            r.const -= k * c
            return r
        # r may still hold terms that are multiples of c when combined; keep r as the atom operand
        if e.op == "floordiv":
            atom = BinOp("floordiv", self.from_lin(r), Const(c, "int64"))
            return q.add(Lin({_key(atom): [1, atom]}))
        atom = BinOp("floormod", self.from_lin(r), Const(c, "int64"))
        return Lin({_key(atom): [1, atom]})

    def from_lin(self, lin: Lin) -> Expr:
        """Back to an expression, terms by decreasing coefficient, the constant last."""
        terms = sorted(lin.terms.values(), key=lambda ct: (-abs(ct[0]), repr(ct[1])))
        out: Expr | None = None
        for c, t in terms:
            mag = t if abs(c) == 1 else BinOp("mul", t, Const(abs(c), "int64"))
            if out is None:
                out = mag if c > 0 else BinOp("sub", Const(0, "int64"), mag) if abs(c) == 1 else \
                    BinOp("mul", t, Const(c, "int64"))
            else:
                out = BinOp("add" if c > 0 else "sub", out, mag)
        if out is None:
            return Const(lin.const, "int64")
        if lin.const > 0:
            out = BinOp("add", out, Const(lin.const, "int64"))
        elif lin.const < 0:
            out = BinOp("sub", out, Const(-lin.const, "int64"))
        return out

    # ----------------------------------------------------------------- entry points
    def simplify(self, e: Expr) -> Expr:
        """Simplify an expression; integer parts go through the linear normal form."""
        if isinstance(e, (Const, Var)):
            return e
        if isinstance(e, BinOp) and _is_int(e):
            return self.from_lin(self.lin(e))
        return self._simplify_nonlinear(e)

    def _simplify_nonlinear(self, e: Expr) -> Expr:
        if isinstance(e, BinOp) and e.op in ("lt", "le", "gt", "ge", "eq", "ne") and _is_int(e.a) and _is_int(e.b):
            return self._compare(e)
        if isinstance(e, BinOp) and e.op in ("and", "or"):
            a, b = self.simplify(e.a), self.simplify(e.b)
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const):
                    if e.op == "and":
                        return y if x.value else Const(False, "bool")
                    return Const(True, "bool") if x.value else y
            return BinOp(e.op, a, b)
        if isinstance(e, Select):
            c = self.simplify(e.cond)
            if isinstance(c, Const):
                return self.simplify(e.t if c.value else e.f)
            return Select(c, self.simplify(e.t), self.simplify(e.f))
        if isinstance(e, BinOp):
            a, b = self.simplify(e.a), self.simplify(e.b)
            if e.op == "mul":
                for x, y in ((a, b), (b, a)):
                    if isinstance(x, Const) and x.value == 1:
                        return y
            if e.op == "add":
                for x, y in ((a, b), (b, a)):
                    if isinstance(x, Const) and x.value == 0:
                        return y
            return BinOp(e.op, a, b)
        if isinstance(e, Cast):
            v = self.simplify(e.value)
            return v if v.dtype == e.dtype else Cast(e.dtype, v)
        if isinstance(e, TensorLoad):
            return TensorLoad(e.tensor, [self.simplify(i) for i in e.indices])
        if isinstance(e, Load):
            return Load(e.buffer, self.simplify(e.index))
        if isinstance(e, Address):
            return Address(e.buffer, self.simplify(e.index))
        if isinstance(e, Ramp):
            return Ramp(self.simplify(e.base), e.stride, e.lanes)
        if isinstance(e, Broadcast):
            return Broadcast(self.simplify(e.value), e.lanes)
        if isinstance(e, Call):
            return Call(e.name, [self.simplify(a) for a in e.args])
        return e

    def _compare(self, e: BinOp) -> Expr:
        d = self.lin(e.a).add(self.lin(e.b), -1)  # a - b
        lo, hi = self.lin_range(d)
        truth = {
            "lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
            "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0), "ne": (lo > 0 or hi < 0, lo == hi == 0),
        }[e.op]
        if truth[0]:
            return Const(True, "bool")
        if truth[1]:
            return Const(False, "bool")
        rhs = -d.const
        d.const = 0
        return BinOp(e.op, self.from_lin(d), Const(rhs, "int64"))

    def prove(self, cond: Expr) -> bool | None:
        """True/False when `cond` is decided by the known ranges, else None."""
        c = self.simplify(cond)
        return bool(c.value) if isinstance(c, Const) else None


def simplify(e: Expr, ranges: Mapping[Var, Range] | None = None) -> Expr:
    """Simplify `e` with variables' inclusive ranges (see module docstring)."""
    return Simplifier(ranges).simplify(e)
