"""Lowering: a Schedule becomes a loop-nest `PrimFunc`.

Steps (the structure of TVM's ScheduleOps / InferBound, simplified to static shapes):

1. Inline: `compute_inline` stages are substituted into their consumers' bodies.
2. Bound inference, consumers first: a stage computed at loop `v` of another stage gets
   the region its consumers read inside `v` — the loops enclosing the attach point are
   fixed, the loops below it range over their extents; each index's interval comes from
   its linear form. The region's extents are constants; its start is an expression of the
   enclosing loop variables. The stage's root axes then run over that region, and its
   splits and fuses are re-derived from the inferred extents.
3. Loop nests: each stage's leaf loops in order; a reduction gets an init nest (over the
   data loops below the first reduce loop) before its update nest; attached stages are
   inserted at the top of the loop they are attached to, with their buffer allocated
   there. Splits that do not divide an extent get a guard, placed just inside the
   innermost loop it depends on, and only where the simplifier cannot prove it holds.
4. Flatten: tensor accesses become flat buffer accesses relative to each buffer's region.
5. Passes (`compiler.passes`): unroll, vectorize, loop partitioning of tails, cleanup.
"""

from __future__ import annotations

from typing import Sequence

from . import passes
from .ir import (Address, Allocate, Buffer, Evaluate, For, IfThenElse, Load, PrimFunc, Provide, Store, TensorAddress,
                 map_expr, map_stmt, seq, substitute)
from .schedule import GPU_TAGS, THREAD_TAGS, Schedule, ScheduleError, Split, Stage
from .simplify import INF, Lin, Simplifier
from .te import (BinOp, ComputeOp, Const, Expr, IterVar, PlaceholderOp, Reduce, REDUCERS, Tensor, TensorLoad,
                 Var, all_of, check_identifier, walk)

LOCAL_LIMIT_BYTES = 64 * 1024  # larger attached buffers go to the heap


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor]):
        self.sch = sch
        self.args = list(args)
        self.stages = [st for st in sch.stages if st.attach != "inline"]
        self.by_tensor: dict[int, Stage] = {id(st.tensor): st for st in sch.stages}
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.region: dict[int, list[tuple[Expr, int]]] = {}  # id(tensor) -> [(min, extent)]
        self.enclosing: dict[Stage, list[IterVar]] = {}
        self.leaf_ext: dict[Stage, dict[IterVar, int]] = {}
        self.root_value: dict[Stage, dict[IterVar, Expr]] = {}
        self.guards: dict[Stage, list[Expr]] = {}
        self.body: dict[Stage, Expr] = {st: self._inline(st.op.body) for st in self.stages}
        self.buffers: dict[int, Buffer] = {}
        # GPU schedules: loops bound to thread indices (shared stages relax their regions over
        # them), and guards kept below the loops that attached stages are computed at (so a
        # shared-memory copy, with its barriers, never runs under a thread-dependent condition)
        self.thread_vars = {iv for st in sch.stages for iv, k in st.iter_kind.items() if k in THREAD_TAGS}
        self.gpu = any(k in GPU_TAGS for st in sch.stages for k in st.iter_kind.values())

    # ----------------------------------------------------------------- inlining
    def _inline(self, e: Expr) -> Expr:
        def repl(n):
            if isinstance(n, TensorLoad):
                st = self.by_tensor.get(id(n.tensor))
                if st is not None and st.attach == "inline":
                    return self._inline(substitute(st.op.body, dict(zip(st.op.axes, n.indices))))
            return None

        if isinstance(e, Reduce):
            return Reduce(e.combiner, map_expr(e.source, repl), e.axes)
        return map_expr(e, repl)

    def _loads_of(self, st: Stage, t: Tensor) -> list[TensorLoad]:
        return [n for n in walk(self.body[st]) if isinstance(n, TensorLoad) and n.tensor is t]

    # ----------------------------------------------------------------- bound inference
    def infer(self) -> None:
        for st in reversed(self.stages):
            if st.attach == "root":
                self.enclosing[st] = []
                self.region[id(st.tensor)] = [(Const(0, "int64"), d) for d in st.tensor.shape]
            else:
                self._infer_attached(st)
            self._derive_loops(st)

    def _infer_attached(self, st: Stage) -> None:
        parent, iv = st.attach_stage, st.attach_ivar
        if parent not in self.enclosing:
            raise ScheduleError(f"stage {st.name!r}: compute_at target {parent.name!r} must consume it "
                                f"(directly or through stages attached inside it)")
        leaves = parent.leaf_iter_vars
        fixed = self.enclosing[parent] + leaves[:leaves.index(iv) + 1]
        self.enclosing[st] = fixed
        fixed_set = set(fixed)
        if st.scope == "shared":  # one copy per thread block: its region spans the block's threads
            fixed_set -= self.thread_vars
        consumers = [c for c in self.stages if self._loads_of(c, st.tensor)]
        if not consumers:
            raise ScheduleError(f"stage {st.name!r} is computed at {parent.name!r} but nothing reads it")
        simp = Simplifier(self.ranges)
        dims: list[list[tuple[str, Expr, int, int] | None]] = [[] for _ in st.tensor.shape]
        for c in consumers:
            if c is not parent and iv not in self.enclosing.get(c, []):
                raise ScheduleError(f"stage {st.name!r} is computed at {parent.name!r}.{iv.name} but its consumer "
                                    f"{c.name!r} is outside that loop")
            for load in self._loads_of(c, st.tensor):
                for d, idx in enumerate(load.indices):
                    dims[d].append(self._interval(simp, substitute(idx, self.root_value[c]), fixed_set))
        region = []
        for d, cands in enumerate(dims):
            shape_d = st.tensor.shape[d]
            if any(c is None for c in cands) or len({c[0] for c in cands}) > 1:
                region.append((Const(0, "int64"), shape_d))
                continue
            lo, hi = min(c[2] for c in cands), max(c[3] for c in cands)
            if hi - lo + 1 >= shape_d:
                region.append((Const(0, "int64"), shape_d))
            else:
                region.append((simp.simplify(BinOp("add", cands[0][1], Const(lo, "int64"))), hi - lo + 1))
        self.region[id(st.tensor)] = region

    def _interval(self, simp: Simplifier, e: Expr, fixed: set) -> tuple[str, Expr, int, int] | None:
        """(key of symbolic part, symbolic part, lo, hi) of `e` with non-fixed loop vars ranging; None if unknown."""
        lin = simp.lin(e)
        sym = Lin()
        lo = hi = lin.const
        for k, (coef, t) in lin.terms.items():
            vars_in = {n for n in walk(t) if isinstance(n, Var)}
            if vars_in and vars_in <= fixed:
                sym.terms[k] = [coef, t]
                continue
            if vars_in & fixed:
                return None
            tl, th = simp.range_of(t)
            if tl == -INF or th == INF:
                return None
            lo, hi = (lo + coef * tl, hi + coef * th) if coef > 0 else (lo + coef * th, hi + coef * tl)
        sym_e = simp.from_lin(sym)
        return (repr(sym_e), sym_e, int(lo), int(hi))

    def _derive_loops(self, st: Stage) -> None:
        region = self.region[id(st.tensor)]
        ext: dict[IterVar, int] = {a: e for a, (_, e) in zip(st.op.axes, region)}
        ext.update({a: a.extent for a in st.op.reduce_axes})
        for rel in st.relations:
            if isinstance(rel, Split):
                pe = ext[rel.parent]
                if rel.factor is not None:
                    ext[rel.inner], ext[rel.outer] = min(rel.factor, pe), _ceil_div(pe, min(rel.factor, pe))
                else:
                    n = min(rel.nparts, pe)
                    ext[rel.outer], ext[rel.inner] = n, _ceil_div(pe, n)
            else:
                ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
        self.leaf_ext[st] = ext
        for leaf in st.leaf_iter_vars:
            self.ranges[leaf] = (0, ext[leaf] - 1)
        val: dict[IterVar, Expr] = {leaf: leaf for leaf in st.leaf_iter_vars}
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                val[rel.parent] = BinOp("add", BinOp("mul", val[rel.outer], Const(ext[rel.inner], "int64")),
                                        val[rel.inner])
            else:
                val[rel.outer] = BinOp("floordiv", val[rel.fused], Const(ext[rel.inner], "int64"))
                val[rel.inner] = BinOp("floormod", val[rel.fused], Const(ext[rel.inner], "int64"))
        simp = Simplifier(self.ranges)
        roots = [*st.op.axes, *st.op.reduce_axes]
        rel_val = {r: simp.simplify(val[r]) for r in roots}
        guards = [BinOp("lt", rel_val[r], Const(ext[r], "int64")) for r in roots]
        mins = [m for m, _ in region]
        self.root_value[st] = {a: simp.simplify(BinOp("add", m, rel_val[a])) for a, m in zip(st.op.axes, mins)}
        self.root_value[st].update({r: rel_val[r] for r in st.op.reduce_axes})
        if st.attach == "at":
            for a in self._unsafe_axes(st):
                d = st.tensor.shape[st.op.axes.index(a)]
                guards.append(BinOp("lt", self.root_value[st][a], Const(d, "int64")))
                guards.append(BinOp("ge", self.root_value[st][a], Const(0, "int64")))
        self.guards[st] = [g for g in (simp.simplify(g) for g in guards) if not isinstance(g, Const)]
        if any(isinstance(g, Const) and not g.value for g in (simp.simplify(x) for x in guards)):
            raise ScheduleError(f"stage {st.name!r}: empty iteration domain")

    def _reads_in_bounds(self, st: Stage, free: Sequence[IterVar]) -> bool:
        """Whether every read of inputs/root stages stays in bounds over the whole loop ranges,
        when the axes `free` of `st` take every value of their loops and its other axes only
        the values inside the tensor's shape."""
        value = dict(self.root_value[st])
        ranges = dict(self.ranges)
        for a, d in zip(st.op.axes, st.tensor.shape):
            if a not in free:  # an axis kept inside the shape: a fresh variable over [0, d)
                value[a] = Var(f"{a.name}_in_shape")
                ranges[value[a]] = (0, d - 1)
        simp = Simplifier(ranges)
        for n in walk(self.body[st]):
            if not isinstance(n, TensorLoad):
                continue
            prod = self.by_tensor.get(id(n.tensor))
            if prod is not None and prod.attach == "at":
                continue  # an attached producer sizes its region to what is read
            for idx, d in zip(n.indices, n.tensor.shape):
                lo, hi = simp.range_of(simp.simplify(substitute(idx, value)))
                if lo < 0 or hi > d - 1:
                    return False
        return True

    def _unsafe_axes(self, st: Stage) -> list[IterVar]:
        """The axes of attached stage `st` that need guards to its tensor's shape: those whose
        values beyond it (a tile larger than what is left of the tensor) would read out of
        bounds. The other axes compute their whole tile: e.g. a register tile of a GEMM reading
        a zero-padded packed panel of B computes the columns beyond N too (their values are
        never stored) instead of guarding every lane, which would keep it from vectorizing.
        Each axis is tried alone, then the safe ones together; if that fails, all are unsafe."""
        axes = list(st.op.axes)
        if self._reads_in_bounds(st, axes):
            return []
        unsafe = [a for a in axes if not self._reads_in_bounds(st, [a])]
        safe = [a for a in axes if a not in unsafe]
        return unsafe if self._reads_in_bounds(st, safe) else axes

    # ----------------------------------------------------------------- buffers
    def buffer(self, t: Tensor) -> Buffer:
        if id(t) not in self.buffers:
            st = self.by_tensor.get(id(t))
            if isinstance(t.op, PlaceholderOp) or any(t is a for a in self.args):
                self.buffers[id(t)] = Buffer(t.name, t.shape, t.dtype, "global")
            elif st.attach == "root":
                self.buffers[id(t)] = Buffer(t.name, t.shape, t.dtype, "heap")
            else:
                shape = tuple(e for _, e in self.region[id(t)])
                if st.row_pad:
                    shape = (*shape[:-1], shape[-1] + st.row_pad)
                b = Buffer(t.name, shape, t.dtype)
                b.scope = "local" if b.size * (4 if t.dtype == "float32" else 8) <= LOCAL_LIMIT_BYTES else "heap"
                if st.scope == "shared" or (self.gpu and st.scope == "local"):
                    b.scope = st.scope
                self.buffers[id(t)] = b
        return self.buffers[id(t)]

    # ----------------------------------------------------------------- loop nests
    def stage_stmt(self, st: Stage):
        ext, kinds = self.leaf_ext[st], st.iter_kind
        vals = self.root_value[st]
        body = self.body[st]
        store_idx = [vals[a] for a in st.op.axes]
        children: dict[IterVar, list[Stage]] = {}
        for c in self.stages:
            if c.attach == "at" and c.attach_stage is st:
                children.setdefault(c.attach_ivar, []).append(c)
        guards = [(g, {n for n in walk(g) if isinstance(n, IterVar)} & set(st.leaf_iter_vars)) for g in self.guards[st]]

        tensorized = st.tensorized[0] if st.tensorized else None

        def build(loop_vars: list[IterVar], inner, gs, *, expand: bool = False):
            if tensorized in loop_vars and not expand:
                p = loop_vars.index(tensorized)
                tile = set(loop_vars[p:])
                inner_gs = [(g, vs) for g, vs in gs if vs & tile]
                call = self.intrin_call(st, inner, loop_vars[p:])
                if inner_gs:
                    last = {v: Const(ext[v] - 1, "int64") for v in tile}
                    full = Simplifier(self.ranges).simplify(all_of(*(substitute(g, last) for g, _ in inner_gs)))
                    call = IfThenElse(full, call, build(loop_vars[p:], inner, inner_gs, expand=True))
                return build(loop_vars[:p], call, [(g, vs) for g, vs in gs if not vs & tile])
            pos = {v: n for n, v in enumerate(loop_vars)}
            floor = -1
            if self.gpu:  # keep guards inside the loops where attached stages are computed
                floor = max((n for n, v in enumerate(loop_vars) if children.get(v)), default=-1)
            placed = [(g, max(floor, max((pos[v] for v in vs if v in pos), default=-1))) for g, vs in gs]
            stmt = inner
            for n in reversed(range(len(loop_vars))):
                here = [g for g, p in placed if p == n]
                if here:
                    stmt = IfThenElse(all_of(*here), stmt)
                v = loop_vars[n]
                for child in reversed(children.get(v, [])):
                    buf = self.buffer(child.tensor)
                    stmt = Allocate(buf, seq([self.stage_stmt(child), stmt]))
                stmt = For(v, ext[v], kinds.get(v, "serial"), stmt)
            top = [g for g, p in placed if p == -1]
            return IfThenElse(all_of(*top), stmt) if top else stmt

        leaves = st.leaf_iter_vars
        if not isinstance(body, Reduce):
            value = substitute(body, vals)
            return build(leaves, Provide(st.tensor, store_idx, value), guards)
        first = next((n for n, v in enumerate(leaves) if v.kind == "reduce"), len(leaves))
        if tensorized is not None:
            first = min(first, leaves.index(tensorized))
        outer, inner = leaves[:first], leaves[first:]
        outer_set = set(outer)
        inner_guards = [(g, vs) for g, vs in guards if not vs <= outer_set]
        outer_guards = [(g, vs) for g, vs in guards if vs <= outer_set]
        data_inner = [v for v in inner if v.kind == "data"]
        reduce_roots = set(st.op.reduce_axes)
        init_guards = [(g, vs) for g, vs in inner_guards
                       if vs <= outer_set | set(data_inner) and not any(isinstance(n, Var) and n in reduce_roots
                                                                        for n in walk(g))]
        src = substitute(body.source, vals)
        acc = TensorLoad(st.tensor, store_idx)
        update = Provide(st.tensor, store_idx, BinOp(REDUCERS[body.combiner], acc, src))
        init = Provide(st.tensor, store_idx, body.identity())
        saved = children
        children = {}
        init_nest = build(data_inner, init, init_guards, expand=True)
        children = {v: cs for v, cs in saved.items() if v in set(inner)}
        update_nest = build(inner, update, inner_guards)
        children = {v: cs for v, cs in saved.items() if v in outer_set}
        return build(outer, seq([init_nest, update_nest]), outer_guards)

    def intrin_call(self, st: Stage, provide: Provide, tile: list[IterVar]) -> Evaluate:
        """The Evaluate replacing the loops `tile` of `st` by its TensorIntrin."""
        intrin = st.tensorized[1]
        zero = {v: Const(0, "int64") for v in tile}
        simp = Simplifier(self.ranges)
        accesses = {provide.tensor.name: (provide.tensor, provide.indices)}
        for n in walk(provide.value):
            if isinstance(n, TensorLoad):
                accesses.setdefault(n.tensor.name, (n.tensor, n.indices))
        ext = self.leaf_ext[st]
        args = []
        for spec in intrin.args:
            name, _, field = spec.partition(".")
            if spec.startswith("extent:"):
                axis = spec[len("extent:"):]
                match = [v for v in tile if v.name == axis]
                if not match:
                    raise ScheduleError(f"stage {st.name!r}: tensorize argument {spec!r}: no tensorized loop "
                                        f"named {axis!r}; loops: {[v.name for v in tile]}")
                args.append(Const(ext[match[0]], "int64"))
            elif name in accesses and field.startswith("stride") and field[6:].isdigit():
                t = accesses[name][0]
                d = int(field[6:])
                if d >= t.ndim:
                    raise ScheduleError(f"stage {st.name!r}: tensorize argument {spec!r}: {name} has {t.ndim} dims")
                args.append(Const(self.buffer(t).strides[d], "int64"))
            elif name in accesses and not field:
                t, idx = accesses[name]
                args.append(TensorAddress(t, [simp.simplify(substitute(i, zero)) for i in idx]))
            else:
                raise ScheduleError(f"stage {st.name!r}: tensorize argument {spec!r} names no tensor of the "
                                    f"stage; tensors: {sorted(accesses)}")
        return Evaluate(intrin.func, args)

    # ----------------------------------------------------------------- flattening
    def flatten(self, stmt):
        def index(t: Tensor, indices) -> Expr:
            region = self.region.get(id(t))
            buf = self.buffer(t)
            flat: Expr = Const(0, "int64")
            for d, (i, stride) in enumerate(zip(indices, buf.strides)):
                rel = i if region is None else BinOp("sub", i, region[d][0])
                flat = BinOp("add", flat, BinOp("mul", rel, Const(stride, "int64")))
            return flat

        def fe(e: Expr) -> Expr:
            def repl(n):
                if isinstance(n, TensorLoad):
                    return Load(self.buffer(n.tensor), index(n.tensor, n.indices))
                if isinstance(n, TensorAddress):
                    return Address(self.buffer(n.tensor), index(n.tensor, n.indices))
                return None

            return map_expr(e, repl)

        def fs(s):
            if isinstance(s, Provide):
                return Store(self.buffer(s.tensor), fe(index(s.tensor, s.indices)), s.value)
            return None

        return map_stmt(stmt, fe, fs)

    def run(self, name: str) -> PrimFunc:
        self.infer()
        roots = [st for st in self.stages if st.attach == "root"]
        body = seq(self.stage_stmt(st) for st in roots)
        for st in reversed(roots):
            if not any(st.tensor is a for a in self.args):
                body = Allocate(self.buffer(st.tensor), body)
        body = self.flatten(body)
        params = [self.buffer(t) for t in self.args]
        n_out = sum(1 for t in self.args if isinstance(t.op, ComputeOp))
        sources = list(dict.fromkeys(st.tensorized[1].source for st in self.stages if st.tensorized))
        return PrimFunc(name, params, body, n_out, sources)


def check_args(sch: Schedule, args: Sequence[Tensor]) -> None:
    """Arguments must be inputs first, then outputs; every input read and every output present."""
    seen_output = False
    for t in args:
        if isinstance(t.op, PlaceholderOp):
            if seen_output:
                raise ScheduleError(f"argument {t.name!r}: inputs must come before outputs")
        else:
            seen_output = True
    names = [t.name for t in args]
    if len(set(names)) != len(names):
        raise ScheduleError(f"argument names must be unique, got {names}")
    for st in sch.stages:
        for inp in st.op.input_tensors():
            if isinstance(inp.op, PlaceholderOp) and not any(inp is a for a in args):
                raise ScheduleError(f"stage {st.name!r} reads input {inp.name!r}, which is not an argument")
    for out in sch.outputs:
        if not any(out is a for a in args):
            raise ScheduleError(f"output {out.name!r} is not an argument")


def lower(sch: Schedule, args: Sequence[Tensor], name: str, *, lanes: int = 16) -> PrimFunc:
    """Lower `sch` to a PrimFunc named `name` taking `args` (input placeholders, then outputs).

    `lanes` is the target's float32 vector width (16 for AVX-512, 8 for AVX2); float64 uses half.
    Raises ScheduleError for schedules that cannot be lowered (named stage and axis).
    """
    check_identifier(name, "kernel name")
    check_args(sch, args)
    func = _Lowering(sch, args).run(name)
    return passes.optimize(func, lanes)


def lower_loop_nest(sch: Schedule, args: Sequence[Tensor], name: str) -> tuple[PrimFunc, dict[int, Buffer]]:
    """The loop nest of `sch` as a PrimFunc `name` over `args`, before any IR pass (loop kinds are
    still the schedule's annotations, nothing is unrolled or vectorized), and the Buffer of each
    tensor it stores or reads, by id of the tensor. For the CUDA lowering, which runs its own
    passes, and for the cost model's features. Raises ScheduleError as `lower` does."""
    lowering = _Lowering(sch, args)
    return lowering.run(name), lowering.buffers
