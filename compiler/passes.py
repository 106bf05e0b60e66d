"""IR-to-IR passes run after lowering: simplify, drop unit loops, unroll, partition tails,
vectorize, hoist heap allocations. Each pass takes and returns a statement."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .expr import BinOp, Call, Cast, Const, Expr, Select, Var, dtype_of
from .ir import (Address, Allocate, Broadcast, Buffer, Evaluate, For, IfThenElse, Load, PrimFunc, Ramp, Seq, Stmt,
                 Store, expr_nodes, lanes_of, map_children, map_expr, map_stmt, seq, stmt_exprs, substitute, walk_stmt)
from .simplify import Simplifier
from .te import all_of

MAX_UNROLL_STMTS = 2048
#: Vector widths (elements) a loop is cut into, widest first; narrower ones than the target's
#: width serve a loop's lanes left over (`vectorize`).
VECTOR_WIDTHS = (16, 8, 4)


def loop_ranges(s: Stmt) -> dict[Var, tuple[int, int]]:
    """The inclusive range of each loop variable of `s`: of all its loops, the widest (the pieces
    of a parallel loop's partition_tails keep one variable for a loop of 32 and its tail of 5;
    the last one's range made i % 7 simplify to i in the loop of 32)."""
    ranges: dict[Var, tuple[int, int]] = {}
    for n in walk_stmt(s):
        if isinstance(n, For):
            ranges[n.var] = (0, max(ranges.get(n.var, (0, 0))[1], n.extent - 1))
    return ranges


def simplify_stmt(s: Stmt, outer_ranges: dict | None = None) -> Stmt:
    """Simplify every expression; drop guards proven true and branches proven false, the
    stores to a buffer allocated here that nothing reads (a register tile whose write-back a
    dead piece of partition_tails lost), and loops, branches and allocations left with nothing
    to do; shrink a loop whose whole body is guarded by `var < c` to extent c."""
    simp = Simplifier({**(outer_ranges or {}), **loop_ranges(s)})

    def fs(n):
        if isinstance(n, IfThenElse) and isinstance(n.cond, Const):
            return n.then if n.cond.value else (n.otherwise or Seq([]))
        if isinstance(n, (For, Allocate)) and _empty(n.body):
            return Seq([])
        if isinstance(n, IfThenElse) and _empty(n.then) and (n.otherwise is None or _empty(n.otherwise)):
            return Seq([])
        if isinstance(n, Allocate) and not _is_read(n.body, n.buffer):
            return map_stmt(n.body, lambda e: e, lambda x: Seq([]) if isinstance(x, Store) and x.buffer is n.buffer
                            else fs(x))
        if isinstance(n, For) and isinstance(n.body, IfThenElse) and n.body.otherwise is None:
            conds = _conjuncts(n.body.cond)
            tight = [c for c in conds if isinstance(c, BinOp) and c.op == "lt" and c.a is n.var
                     and isinstance(c.b, Const) and c.b.value < n.extent]
            if tight:
                rest = [c for c in conds if c is not tight[0]]
                body = IfThenElse(all_of(*rest), n.body.then) if rest else n.body.then
                return For(n.var, max(1, tight[0].b.value), n.kind, body)
        return None

    return map_stmt(s, simp.simplify, fs)


def _empty(s: Stmt) -> bool:
    return isinstance(s, Seq) and not s.stmts


def _is_read(s: Stmt, buffer: Buffer) -> bool:
    """Whether `s` loads from `buffer` other than to store to it again (an accumulator's
    update), or passes its address to an extern call."""
    exprs = (e for n in walk_stmt(s) if not (isinstance(n, Store) and n.buffer is buffer) for e in _own_exprs(n))
    return any(isinstance(x, (Load, Address)) and x.buffer is buffer for e in exprs for x in expr_nodes(e))


def _own_exprs(n: Stmt) -> list[Expr]:
    """The expressions of statement `n` itself, not of the statements inside it."""
    if isinstance(n, IfThenElse):
        return [n.cond]
    return list(stmt_exprs(n)) if isinstance(n, (Store, Evaluate)) else []


def remove_unit_loops(s: Stmt) -> Stmt:
    def fs(n):
        if isinstance(n, For) and n.extent == 1:
            return map_stmt(n.body, lambda e: substitute(e, {n.var: Const(0, "int64")}))
        return None

    return map_stmt(s, lambda e: e, fs)


def _count(s: Stmt) -> int:
    return sum(1 for _ in walk_stmt(s))


def unroll(s: Stmt) -> Stmt:
    """Replace loops marked 'unrolled' by copies of their body (large ones become serial loops)."""

    def fs(n):
        if isinstance(n, For) and n.kind == "unrolled":
            if n.extent * _count(n.body) > MAX_UNROLL_STMTS:
                return For(n.var, n.extent, "serial", n.body)
            return seq(map_stmt(n.body, lambda e, k=k: substitute(e, {n.var: Const(k, "int64")}))
                       for k in range(n.extent))
        return None

    return map_stmt(s, lambda e: e, fs)


# --------------------------------------------------------------------------- vectorization


class _NotVectorizable(Exception):
    pass


def _depends(e: Expr, v: Var) -> bool:
    return any(n is v for n in expr_nodes(e))


class _Vectorizer:
    """Rewrite the body of `for v in range(lanes)` into vector operations (TVM's VectorizeLoop)."""

    def __init__(self, v: Var, lanes: int, offset: int, simp: Simplifier):
        self.v, self.lanes, self.offset, self.simp = v, lanes, offset, simp

    def index(self, e: Expr) -> Expr:
        if not _depends(e, self.v):
            return e
        lin = self.simp.lin(e)
        entry = lin.terms.get(self.v)
        if entry is None or any(_depends(t, self.v) for k, (c, t) in lin.terms.items() if k is not self.v):
            raise _NotVectorizable
        base = self.simp.simplify(substitute(e, {self.v: Const(self.offset, "int64")}))
        return Ramp(base, entry[0], self.lanes)

    def expr(self, e: Expr) -> Expr:
        if not _depends(e, self.v):
            return e
        if isinstance(e, Load):
            return Load(e.buffer, self.index(e.index))
        if dtype_of(e.dtype).kind != "float" and not isinstance(e, Cast):
            raise _NotVectorizable  # index arithmetic outside a load, or a vector condition
        if isinstance(e, BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            return BinOp(e.op, self._widen(a), self._widen(b))
        if isinstance(e, Call):
            return Call(e.name, [self._widen(self.expr(a)) for a in e.args])
        if isinstance(e, Cast) and dtype_of(e.value.dtype).kind == "float":
            return Cast(e.dtype, self.expr(e.value))
        if isinstance(e, Select) and not _depends(e.cond, self.v):  # one condition for all lanes
            return Select(e.cond, self._widen(self.expr(e.t)), self._widen(self.expr(e.f)))
        raise _NotVectorizable

    def _widen(self, e: Expr) -> Expr:
        return e if lanes_of(e) > 1 else Broadcast(e, self.lanes)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Store):
            idx = self.index(s.index)
            if not isinstance(idx, Ramp):
                raise _NotVectorizable  # a reduction across lanes
            return Store(s.buffer, idx, self._widen(self.expr(s.value)))
        if isinstance(s, Seq):
            return seq(self.stmt(x) for x in s.stmts)
        if isinstance(s, IfThenElse) and not _depends(s.cond, self.v):
            return IfThenElse(s.cond, self.stmt(s.then), self.stmt(s.otherwise) if s.otherwise else None)
        raise _NotVectorizable


def vectorize(s: Stmt, lanes: int) -> Stmt:
    """Turn 'vectorized' loops into Ramp/Broadcast vector statements, `lanes` float32 lanes per vector.

    A loop whose extent is a multiple of the vector width becomes one vector statement per
    chunk; a power-of-two extent below it uses a narrower vector; any other extent above the
    narrowest width is cut into whole vectors, narrower ones, and fewer lanes than the
    narrowest left to a scalar loop (`_vector_head`). A loop whose guards depend
    on its lanes (the edge of a tile that may straddle the end of a tensor) is versioned when
    each guard is linear in the loop variable: `if (every lane passes) <vector statements>
    else <the guarded loop>`, the check being each guard at its worst lane. Loops that cannot
    be vectorized (inner loops, other lane-dependent conditions, reductions across lanes)
    become 'ivdep' loops that GCC's auto-vectorizer may still handle.
    """
    simp = Simplifier(loop_ranges(s))

    def vector(n: For, body: Stmt, w: int) -> Stmt:
        return seq(_Vectorizer(n.var, w, c * w, simp).stmt(body) for c in range(n.extent // w))

    def fs(n):
        if not (isinstance(n, For) and n.kind == "vectorized"):
            return None
        stores = [x for x in walk_stmt(n.body) if isinstance(x, Store)]
        width = lanes * 4 // max((dtype_of(x.buffer.dtype).bytes for x in stores), default=4)
        if n.extent % width == 0:
            w = width
        elif n.extent < width and n.extent in VECTOR_WIDTHS:
            w = n.extent
        elif n.extent > min(width, *VECTOR_WIDTHS):
            return _vector_head(n, width, vector)
        else:
            return _scalar_loop(n)
        try:
            return vector(n, n.body, w)
        except _NotVectorizable:
            pass
        versioned = _without_lane_guards(n, simp)
        if versioned is None:
            return _scalar_loop(n)
        every_lane, body = versioned
        try:
            return IfThenElse(every_lane, vector(n, body, w), _scalar_loop(n))
        except _NotVectorizable:
            return _scalar_loop(n)

    return map_stmt(s, lambda e: e, fs)


def _vector_head(n: For, width: int, vector: Callable[[For, Stmt, int], Stmt]) -> Stmt:
    """A 'vectorized' loop that is not a whole number of vectors: its whole vectors of the
    vector width (`vector`, vectorize's rewrite), then of each narrower width of
    VECTOR_WIDTHS that still fits, then the lanes left over (fewer than the narrowest) as a
    scalar loop (`_scalar_loop`). E.g. a register tile of 4 vectors of 16 lanes at a tensor's
    edge where 63 columns are left: 3 vectors, one of 8 lanes, one of 4, and 3 single lanes,
    not 63 single lanes (whose unrolled tile took gcc half a minute at 5 rows and an unroll
    of 8 over K); 15 columns: 8 + 4 + 3 (15 single lanes of 11 rows made 2800 of a kernel's
    3100 lines). A body that does not vectorize stays scalar whole."""
    pieces, start = [], 0
    for w in (width, *(w for w in VECTOR_WIDTHS if w < width)):
        count = (n.extent - start) // w * w
        if count:
            pieces.append((start, count, w))
            start += count
    try:
        vectors = []
        for first, count, w in pieces:
            body = _shifted(n.body, n.var, n.var, first)
            vectors.append(vector(For(n.var, count, n.kind, body), body, w))
    except _NotVectorizable:
        return _scalar_loop(n)
    if start == n.extent:
        return seq(vectors)
    var = Var(n.var.name + "_r", n.var.dtype)
    return seq([*vectors, _scalar_loop(For(var, n.extent - start, n.kind, _shifted(n.body, n.var, var, start)))])


def _shifted(body: Stmt, old: Var, new: Var, first: int) -> Stmt:
    """`body` with `old` replaced by `new` + `first` (the piece of a loop from `first` on)."""
    if first == 0 and new is old:
        return body
    return map_stmt(body, lambda e: substitute(e, {old: BinOp("add", new, Const(first, "int64"))}))


def _scalar_loop(n: For) -> Stmt:
    """A 'vectorized' loop that does not vectorize: an 'ivdep' loop for GCC's auto-vectorizer,
    or unrolled where it indexes a local buffer by its variable (a register tile's write-back
    cut short at the tensor's edge, e.g. the outputs of a dot product's tile), which an index
    known only at run time would keep in memory instead of in vector registers (`codegen.c`'s
    promotion)."""
    indexed = (x.index for x in [*walk_stmt(n.body), *(y for e in stmt_exprs(n.body) for y in expr_nodes(e))]
               if isinstance(x, (Load, Store)) and x.buffer.scope == "local")
    if any(_depends(i, n.var) for i in indexed):
        unrolled = unroll(For(n.var, n.extent, "unrolled", n.body))
        if not isinstance(unrolled, For):  # not too large to unroll
            return simplify_stmt(unrolled)
    return For(n.var, n.extent, "ivdep", n.body)


_COMPARE = {"lt": -1, "le": -1, "gt": 1, "ge": 1}  # sign of (a - b) the comparison asks for


def _without_lane_guards(n: For, simp: Simplifier) -> tuple[Expr, Stmt] | None:
    """(condition that every lane of loop `n` passes every guard of its body that depends on
    the loop variable, the body without those guards), or None when a guard is not a
    conjunction of comparisons linear in the variable (or has an else branch)."""
    worst: list[Expr] = []

    def atoms(cond: Expr) -> list[Expr] | None:
        if isinstance(cond, BinOp) and cond.op == "and":
            a, b = atoms(cond.a), atoms(cond.b)
            return None if a is None or b is None else a + b
        if not (isinstance(cond, BinOp) and cond.op in _COMPARE):
            return None
        entry = simp.lin(BinOp("sub", cond.a, cond.b)).terms.get(n.var)
        coef = entry[0] if entry is not None else 0
        if _depends(cond, n.var) and (entry is None or any(
                _depends(t, n.var) for k, (c, t) in simp.lin(BinOp("sub", cond.a, cond.b)).terms.items()
                if k is not n.var)):
            return None
        # a - b moves with the variable by `coef`: the lane at which the comparison is hardest
        lane = n.extent - 1 if coef * _COMPARE[cond.op] < 0 else 0
        return [simp.simplify(substitute(cond, {n.var: Const(lane, "int64")}))]

    def strip(st: Stmt) -> Stmt | None:
        if isinstance(st, IfThenElse) and _depends(st.cond, n.var):
            found = atoms(st.cond)
            if found is None or st.otherwise is not None:
                raise _NotVectorizable
            worst.extend(found)
            return strip(st.then) or st.then
        if isinstance(st, Seq):
            return seq(strip(x) or x for x in st.stmts)
        if isinstance(st, IfThenElse):
            return IfThenElse(st.cond, strip(st.then) or st.then,
                              (strip(st.otherwise) or st.otherwise) if st.otherwise is not None else None)
        return None

    try:
        body = strip(n.body) or n.body
    except _NotVectorizable:
        return None
    if not worst:
        return None
    return all_of(*worst), body


# --------------------------------------------------------------------------- loop partitioning


def partition_tails(s: Stmt, outer_ranges: dict | None = None) -> Stmt:
    """Split a loop `for x in range(E)` whose body holds guards `f(x, inner) < B` (f increasing
    in x) or `g(x, inner) >= B` (g increasing in x) into a head loop, where a lower-bound guard
    may fail, a main loop, where every such guard provably holds and is removed, and a tail
    loop, where an upper-bound guard may fail (and from where one fails everywhere, a dead
    loop). The head and tail pieces are partitioned again: an inner loop whose guards also
    read this loop's variable (so it was left whole) may split once the piece fixes that
    variable's range (the tile at N's edge inside the last block of columns), and the piece's
    own loop is cut again by the guards its range leaves (the tiles of the last block of M:
    58 = 48 + 10 rows in blocks of 8 tiles of 6, a whole tile, one of 4 rows, then 6 beyond
    M, whose register tiles simplify_stmt drops with their write-back). A loop whose
    guards read its variable only through floormod (a block index of fused loops) is versioned
    on it instead (`_split_modulo`). `outer_ranges`: ranges of variables of enclosing loops.

    This is loop peeling for split tails and for zero-padding borders (Halide's / TVM's
    LoopPartition): the hot loop carries no conditions.
    """
    ranges = {**(outer_ranges or {}), **loop_ranges(s)}

    def piece(n: For, start: int, stop: int, kind: str, suffix: str) -> For:
        var = Var(n.var.name + suffix, n.var.dtype)
        value = var if not start else BinOp("add", var, Const(start, "int64"))
        value = Const(start, "int64") if stop - start == 1 else value  # folded: see _fixed
        body = map_stmt(n.body, lambda e: substitute(e, {n.var: value}))
        ranges[var] = (0, stop - start - 1)
        body = simplify_stmt(body, ranges)
        if suffix == "":
            return For(var, stop - start, kind, body)
        loop = For(var, stop - start, kind, partition_tails(body, ranges))
        return fs(loop) or loop

    def fs(n):
        if not isinstance(n, For) or n.kind in ("vectorized",) or n.extent < 2:
            return None
        if n.kind == "parallel":
            return _partition_parallel(n, ranges)
        bounds = list(_guard_bounds(n, ranges))
        pieces, main = _pieces(bounds, 0, n.extent)
        if len(pieces) < 2:
            versioned = _split_modulo(n, bounds, ranges)
            return None if versioned is None else For(n.var, n.extent, n.kind, versioned)
        suffixes = iter(("_t", "_d"))
        return seq(piece(n, a, b, n.kind, "_h" if b <= main else "" if a == main else next(suffixes))
                   for a, b in pieces)

    return map_stmt(s, lambda e: e, fs)


def _pieces(bounds, start: int, stop: int) -> tuple[list[tuple[int, int]], int]:
    """The ranges [a, b) that partition_tails cuts [start, stop) of a loop's variable into,
    given the loop's `_guard_bounds`, and where the main one starts: before the head point a
    lower-bound guard may fail; from there to the split point every guard holds; then an
    upper-bound guard may fail, and from the dead point on one fails everywhere."""
    head = min(stop, max(start, _head_point(bounds)))
    holds = _split_point(bounds)
    split = stop if holds is None or holds <= head else min(holds, stop)
    dead = _dead_point(bounds)
    cuts = sorted({start, head, split, stop} | ({dead} if dead is not None and head < dead < stop else set()))
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b], head


def _partition_parallel(n: For, ranges) -> For | None:
    """partition_tails of a parallel loop: one parallel loop over all of its iterations whose
    body branches on the loop variable into the pieces (each simplified under its own range
    of the variable and partitioned again, then its edge pieces' inner loops too; a piece that
    no further cut splits versioned on a block index, `_split_modulo`). Peeling the edge
    iterations into serial loops after the parallel one, as for other loops, would run them
    on the calling thread alone while the others wait: an 8-iteration parallel loop with one
    tail iteration (N = 1000 in blocks of 128 columns) ran 7 blocks on 2 threads, then the 8th
    on one. None where nothing is cut."""

    def part(start: int, stop: int, body: Stmt) -> Stmt:
        r = {**ranges, n.var: (start, stop - 1)}
        loop = For(n.var, n.extent, n.kind, body)
        bounds = list(_guard_bounds(loop, r))
        pieces, main = _pieces(bounds, start, stop)
        if len(pieces) < 2:
            return _split_modulo(loop, bounds, r) or body
        out = None
        for a, b in reversed(pieces):
            piece_ranges = {**ranges, n.var: (a, b - 1)}
            p = simplify_stmt(_fixed(body, n.var, a) if b - a == 1 else body, piece_ranges)
            p = part(a, b, p if a == main else partition_tails(p, piece_ranges))
            out = p if out is None else IfThenElse(BinOp("lt", n.var, Const(b, n.var.dtype)), p, out)
        return out

    body = part(0, n.extent, n.body)
    return None if body is n.body else For(n.var, n.extent, n.kind, body)


def _split_modulo(loop: For, bounds, ranges) -> Stmt | None:
    """The body of `loop` versioned on t < m, t = floormod(x, d) the block index of an
    upper-bound guard that holds for every t < m (0 < m < d), each version simplified for its
    range of t, the other one partitioned again; None if there is no such guard. The blocks
    of N at the end of each row of blocks (blocks of M outermost in a fused parallel loop)
    then get tiles of their own width, as partition_tails gives blocks of N outermost.
    `bounds`: `_guard_bounds` of the loop."""
    for op, coef, _, hi, t in bounds:
        if op != "lt" or _step(t) is not None or not 0 < _max_x(coef, hi) < t.b.value:
            continue
        m, d = _max_x(coef, hi), t.b.value
        v = Var(f"{loop.var.name}_block", t.dtype)
        block = _block_of(t, loop.var)
        body = map_stmt(loop.body, lambda e: map_expr(e, lambda x: v if _block_of(x, loop.var) == block else None))

        def version(lo: int, hi: int) -> Stmt:
            r = {**ranges, v: (lo, hi)}
            b = simplify_stmt(_fixed(body, v, lo) if lo == hi else body, r)
            b = b if lo == 0 else partition_tails(b, r)
            return map_stmt(b, lambda e: substitute(e, {v: t}))

        return IfThenElse(BinOp("lt", t, Const(m, t.dtype)), version(0, m - 1), version(m, d - 1))
    return None


def _fixed(s: Stmt, var: Var, value: int) -> Stmt:
    """`s` where `var` is `value` (the simplifier folds a range of one value only through
    floordiv and floormod)."""
    return map_stmt(s, lambda e: substitute(e, {var: Const(value, var.dtype)}))


def _block_of(x: Expr, var: Var) -> tuple[str, int] | None:
    """("floordiv" or "floormod", d) where `x` is floordiv(var, d) or floormod(var, d), d > 0: a
    block index of loops fused into the loop over `var`."""
    if (isinstance(x, BinOp) and x.op in ("floordiv", "floormod") and x.a is var and isinstance(x.b, Const)
            and x.b.value > 0):
        return x.op, x.b.value
    return None


def _guards(loop: For) -> list[Expr]:
    """Conjuncts of the conditions of IfThenElse statements and Select expressions in the body."""
    conds = [c for n in walk_stmt(loop.body) if isinstance(n, IfThenElse) for c in _conjuncts(n.cond)]
    conds += [c for e in stmt_exprs(loop.body) for n in expr_nodes(e) if isinstance(n, Select)
              for c in _conjuncts(n.cond)]
    return conds


def _guard_bounds(loop: For, ranges):
    """(op, coef, lo, hi, t) for each guard `a op b` (op "lt" or "ge") in the body with
    a - b = coef*t + rest, coef > 0, t the loop's variable x, floordiv(x, d) or floormod(x, d),
    where rest ranges over [lo, hi]. Only guards whose other variables are loops inside this
    one count: their ranges are then exactly what the guard ranges over.

    floordiv and floormod are the block indices of loops fused into one parallel loop: blocks
    of N fused with the blocks of M reach their columns through floordiv(x, M's blocks) (blocks
    of N outermost) or floormod(x, N's blocks), and the guards of the tiles at N's edge hold in
    every block of columns before the last."""
    inner = {n.var for n in walk_stmt(loop.body) if isinstance(n, For)}
    simp = Simplifier(ranges)
    for cond in _guards(loop):
        if not (isinstance(cond, BinOp) and cond.op in ("lt", "ge") and _depends(cond.a, loop.var)):
            continue
        if not {x for x in expr_nodes(cond) if isinstance(x, Var)} - {loop.var} <= inner:
            continue
        lin = simp.lin(BinOp("sub", cond.a, cond.b))
        keys = [loop.var] if loop.var in lin.terms else [k for k, (_, t) in lin.terms.items() if _block_of(t, loop.var)]
        if len(keys) != 1 or lin.terms[keys[0]][0] <= 0:
            continue
        coef, t = lin.terms[keys[0]]
        rest = lin.copy()
        del rest.terms[keys[0]]
        lo, hi = simp.lin_range(rest)
        if lo != -float("inf") and hi != float("inf"):
            yield cond.op, coef, int(lo), int(hi), t


def _step(t: Expr) -> int | None:
    """How many iterations of the loop variable x one value of t (x or floordiv(x, d), as
    `_guard_bounds` gives it) spans: 1 or d; None for floormod(x, d), not monotonic in x."""
    return 1 if isinstance(t, Var) else t.b.value if t.op == "floordiv" else None


def _head_point(bounds) -> int:
    """Smallest k >= 0 such that every lower-bound guard `a >= b` holds for all x >= k; 0 if
    there is none. `bounds`: `_guard_bounds` of the loop."""
    return max((_first_x(coef, lo, t) for op, coef, lo, _, t in bounds if op == "ge" and _step(t)), default=0)


def _split_point(bounds) -> int | None:
    """Largest k such that every upper-bound guard `a < b` holds for all x < k (None if none)."""
    return min((_max_x(coef, hi) * _step(t) for op, coef, _, hi, t in bounds if op == "lt" and _step(t)), default=None)


def _dead_point(bounds) -> int | None:
    """Smallest k such that some upper-bound guard `a < b` fails for all x >= k, whatever the
    inner loops' variables (a block's tiles wholly beyond N): from there its statements are
    dead. None if there is no upper-bound guard."""
    return min((_first_x(coef, lo, t) for op, coef, lo, _, t in bounds if op == "lt" and _step(t)), default=None)


def _first_x(coef: int, lo: int, t: Expr) -> int:
    """Smallest x >= 0 from which coef*t + rest >= 0 for every rest >= lo (t = x or
    floordiv(x, d): `_step`)."""
    # coef*t + lo >= 0  <=>  t >= ceil(-lo / coef), t = floordiv(x, step)  <=>  x >= step * that
    return max(0, -(lo // coef)) * _step(t)


def _max_x(coef: int, hi: float) -> int:
    """Number of non-negative x with coef*x + hi < 0, i.e. ceil(-hi / coef) clipped at 0."""
    return max(0, -int(hi) // coef + (1 if (-int(hi)) % coef else 0)) if hi < 0 else 0


# --------------------------------------------------------------------------- unswitching


def unswitch_invariant_guards(s: Stmt) -> Stmt:
    """Hoist the guards that an innermost loop's body tests but no iteration of it changes:
    `for x: ... if (g) S ...` with g independent of x becomes `if (g) for x: ... S ... else
    for x: ... if (g) S ...` (loop unswitching; the bounds on one expression checked once,
    `_strongest`). Only loops of straight-line code are copied: copying one that holds loops
    (a tile at N's edge, its lanes in scalar loops) doubled GCC's time on it for little gain.

    Row guards that partition_tails leaves in a register tile's loop over K (in the tail piece
    of a block of rows, e.g. `i * 6 < 4` on the tile loop's variable) cost a compare and a
    branch per row and step there and keep GCC from allocating the accumulators across them.
    Conjuncts that read memory stay in place.
    """

    def go(n: Stmt) -> Stmt:
        if not isinstance(n, For) or any(isinstance(x, For) for x in walk_stmt(n.body)):
            return map_children(n, go)
        hoist = [] if n.kind in ("parallel", "vectorized") else _invariant_guards(n)
        if not hoist:
            return n
        fast = For(n.var, n.extent, n.kind, _drop_conjuncts(n.body, frozenset(repr(c) for c in hoist)))
        return IfThenElse(all_of(*_strongest(hoist)), fast, n)

    return go(s)


def _invariant_guards(loop: For) -> list[Expr]:
    """The distinct conjuncts of the conditions of the else-less IfThenElse statements in the
    body of `loop` (which holds no loops) that do not depend on its variable and read no memory."""
    found: dict[str, Expr] = {}
    for n in walk_stmt(loop.body):
        if isinstance(n, IfThenElse) and n.otherwise is None:
            for c in _conjuncts(n.cond):
                nodes = list(expr_nodes(c))
                if (not any(isinstance(x, Load) for x in nodes) and not any(x is loop.var for x in nodes)
                        and any(isinstance(x, Var) for x in nodes)):
                    found.setdefault(repr(c), c)
    return list(found.values())


def _strongest(conds: list[Expr]) -> list[Expr]:
    """`conds` (a conjunction) with each group of bounds on one expression, `x < c1`, `x < c2`,
    ..., reduced to the tightest: a tile's rows checked by one comparison, not one per row."""
    tightest: dict[tuple[str, str], Expr] = {}
    rest: list[Expr] = []
    for c in conds:
        if isinstance(c, BinOp) and c.op in _COMPARE and isinstance(c.b, Const):
            key = (c.op, repr(c.a))
            kept = tightest.get(key)
            upper = _COMPARE[c.op] < 0
            if kept is None or (c.b.value < kept.b.value if upper else c.b.value > kept.b.value):
                tightest[key] = c
        else:
            rest.append(c)
    return [*tightest.values(), *rest]


def _drop_conjuncts(s: Stmt, keys: frozenset[str]) -> Stmt:
    """`s` with the conjuncts whose repr is in `keys` removed from its IfThenElse conditions
    (a condition left with none becomes its then branch)."""

    def fs(n):
        if not (isinstance(n, IfThenElse) and n.otherwise is None):
            return None
        rest = [c for c in _conjuncts(n.cond) if repr(c) not in keys]
        return IfThenElse(all_of(*rest), n.then) if rest else n.then

    return map_stmt(s, lambda e: e, fs)


def _conjuncts(c: Expr) -> list[Expr]:
    if isinstance(c, BinOp) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


# --------------------------------------------------------------------------- buffer bounds


def reads_beyond(s: Stmt, buffers: Sequence[Buffer]) -> list[tuple[Buffer, float, float]]:
    """The reads of `buffers` in `s` whose element index can leave [0, size): (buffer, lowest,
    highest index) for each, over the full range of every enclosing loop (a vector read
    counts all its lanes), narrowed only in the branches of conditions `x < c` on a loop
    variable (the pieces partition_tails cuts a parallel loop into, whose bodies are
    simplified for their own range). Other guards are not taken into account, so a read that
    only a condition keeps in bounds is reported too. For GPU kernels a read past the end of
    shared memory is a fault, not a wrong value (`compiler.cuda.lower` checks this)."""
    ids = {id(b) for b in buffers}
    out: list[tuple[Buffer, float, float]] = []

    def check(exprs, ranges):
        simp = Simplifier(ranges)
        for e in exprs:
            for x in expr_nodes(e):
                if isinstance(x, Load) and id(x.buffer) in ids:
                    ramp = isinstance(x.index, Ramp)
                    index, span = (x.index.base, x.index.stride * (x.index.lanes - 1)) if ramp else (x.index, 0)
                    low, high = simp.range_of(simp.simplify(index))
                    low, high = low + min(0, span), high + max(0, span)
                    if low < 0 or high > x.buffer.size - 1:
                        out.append((x.buffer, low, high))

    def visit(n: Stmt, ranges: dict) -> None:
        if isinstance(n, For):
            visit(n.body, {**ranges, n.var: (0, n.extent - 1)})
        elif isinstance(n, Allocate):
            visit(n.body, ranges)
        elif isinstance(n, Seq):
            for x in n.stmts:
                visit(x, ranges)
        elif isinstance(n, IfThenElse):
            check([n.cond], ranges)
            then, otherwise = ranges, ranges
            c = n.cond
            if (isinstance(c, BinOp) and c.op == "lt" and isinstance(c.a, Var) and c.a in ranges
                    and isinstance(c.b, Const)):
                lo, hi = ranges[c.a]
                then = {**ranges, c.a: (lo, min(hi, c.b.value - 1))}
                otherwise = {**ranges, c.a: (max(lo, c.b.value), hi)}
            visit(n.then, then)
            if n.otherwise is not None:
                visit(n.otherwise, otherwise)
        else:
            check(stmt_exprs(n), ranges)

    visit(s, {})
    return out


# --------------------------------------------------------------------------- allocation hoisting


def hoist_heap(s: Stmt) -> Stmt:
    """Move heap allocations out of serial loops (their size is constant) to just inside the
    innermost enclosing parallel loop, or the function top, so they happen once per task. A
    buffer allocated in several places (the branches partition_tails made of one loop) is
    allocated there once."""
    hoisted: list[Allocate] = []

    def collect(n: Stmt, in_par: bool) -> Stmt:
        if isinstance(n, Allocate) and n.buffer.scope == "heap" and not in_par:
            if not any(h.buffer is n.buffer for h in hoisted):
                hoisted.append(n)
            return collect(n.body, in_par)
        if isinstance(n, For) and n.kind == "parallel" and not in_par:
            return For(n.var, n.extent, n.kind, hoist_heap(n.body))
        return map_children(n, lambda c: collect(c, in_par))

    body = collect(s, False)
    for a in reversed(hoisted):
        body = Allocate(a.buffer, body)
    return body


def optimize(func: PrimFunc, lanes: int) -> PrimFunc:
    """The standard pass pipeline after lowering."""
    body = simplify_stmt(func.body)
    body = remove_unit_loops(body)
    body = unroll(body)
    body = simplify_stmt(body)
    body = partition_tails(body)
    body = remove_unit_loops(body)
    body = simplify_stmt(body)
    body = vectorize(body, lanes)
    body = unswitch_invariant_guards(body)
    body = hoist_heap(body)
    return PrimFunc(func.name, func.params, body, func.num_outputs, func.extern_sources)


