"""Loop nests, step 3 of lowering (`compiler.lower`): each stage's statement inside its leaf
loops, outermost first, from what bound inference found (`compiler.lower_bounds.Bounds`).

- A reduction gets an init nest (over the data loops below its first reduce loop) before
  its update nest.
- A stage computed at loop `v` of another stage is inserted at the top of `v`'s body, with
  its buffer allocated there.
- A guard is placed just inside the innermost loop it depends on; in a GPU kernel no higher
  than the innermost loop that stages are computed at, so that a shared-memory copy (with its
  barriers) never runs under a thread-dependent condition.
- A stage's prefetches (`Stage.prefetch`) open the body of their loop, before the stages
  computed there: one unrolled nest of `__builtin_prefetch` calls per box of reads.
- The loops of a tensorized tile become one call of its TensorIntrin; where guards cut a tile,
  the call runs for whole tiles only and the plain loops compute the partial ones.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from .expr import REDUCERS, BinOp, Const, Expr, IterVar, Reduce, TensorLoad, Var, dtype_of, walk
from .ir import Allocate, Buffer, Evaluate, For, IfThenElse, Provide, Stmt, TensorAddress, seq, substitute
from .lower_bounds import Bounds, index_interval
from .schedule import Prefetch, ScheduleError, Stage
from .simplify import Simplifier
from .te import Tensor, all_of

#: Bytes of a cache line, the step of `Stage.prefetch`'s prefetches (x86-64 and Arm Neoverse cores).
CACHE_LINE_BYTES = 64
#: Stages computed at each loop of a stage (in schedule order).
Attached = dict[IterVar, list[Stage]]


class _Guard(NamedTuple):
    """A condition of a stage's statement and the stage's leaf loops it depends on."""

    condition: Expr
    loops: set[IterVar]


class LoopNestBuilder:
    """Builds the loop nest of a stage, with those of the stages computed inside it.

    stages: the schedule's stages that are not inlined, in schedule order; bodies: their bodies
    with inlined stages substituted; bounds: what bound inference found for them; buffer_of:
    the Buffer of a tensor; gpu: whether the schedule binds loops to GPU indices.
    """

    def __init__(self, stages: Sequence[Stage], bodies: dict[Stage, Expr], bounds: Bounds,
                 buffer_of: Callable[[Tensor], Buffer], *, gpu: bool):
        self.stages = stages
        self.bodies = bodies
        self.bounds = bounds
        self.buffer_of = buffer_of
        self.gpu = gpu

    def stage_nest(self, stage: Stage) -> Stmt:
        """The statement computing `stage`'s region: its loops around `tensor[axes] = body`
        (for a reduction, around an init and an update nest). Raises ScheduleError for a
        tensorize argument that names no loop or tensor of the stage."""
        leaf_loops = set(stage.leaf_iter_vars)
        guards = [_Guard(g, {n for n in walk(g) if isinstance(n, IterVar)} & leaf_loops)
                  for g in self.bounds.guards[stage]]
        attached = self._attached_stages(stage)
        axis_values = self.bounds.axis_values[stage]
        store_index = [axis_values[axis] for axis in stage.op.axes]
        body = self.bodies[stage]
        if not isinstance(body, Reduce):
            statement = Provide(stage.tensor, store_index, substitute(body, axis_values))
            return self._nest(stage, stage.leaf_iter_vars, statement, guards, attached)
        return self._reduction_nest(stage, body, store_index, guards, attached)

    def _attached_stages(self, stage: Stage) -> Attached:
        attached: Attached = {}
        for other in self.stages:
            if other.attach == "at" and other.attach_stage is stage:
                attached.setdefault(other.attach_ivar, []).append(other)
        return attached

    def _reduction_nest(self, stage: Stage, body: Reduce, store_index: list[Expr], guards: list[_Guard],
                        attached: Attached) -> Stmt:
        """The outer loops (those above the first reduce loop, or above the tensorized one)
        around an init nest over the data loops below them, then the update nest. Each nest
        holds the guards and the attached stages of its own loops."""
        loops = stage.leaf_iter_vars
        first_inner = next((n for n, v in enumerate(loops) if v.kind == "reduce"), len(loops))
        if stage.tensorized is not None:
            first_inner = min(first_inner, loops.index(stage.tensorized[0]))
        outer, inner = loops[:first_inner], loops[first_inner:]
        outer_set, inner_set = set(outer), set(inner)
        inner_guards = [g for g in guards if not g.loops <= outer_set]
        outer_guards = [g for g in guards if g.loops <= outer_set]
        inner_data_loops = [v for v in inner if v.kind == "data"]
        reduce_axes = set(stage.op.reduce_axes)
        init_guards = [g for g in inner_guards
                       if g.loops <= outer_set | set(inner_data_loops)
                       and not any(isinstance(n, Var) and n in reduce_axes for n in walk(g.condition))]
        source = substitute(body.source, self.bounds.axis_values[stage])
        accumulator = TensorLoad(stage.tensor, store_index)
        update = Provide(stage.tensor, store_index, BinOp(REDUCERS[body.combiner], accumulator, source))
        init = Provide(stage.tensor, store_index, body.identity())
        init_nest = self._nest(stage, inner_data_loops, init, init_guards, {}, expand_tensorized=True)
        update_nest = self._nest(stage, inner, update, inner_guards,
                                 {loop: at for loop, at in attached.items() if loop in inner_set})
        return self._nest(stage, outer, seq([init_nest, update_nest]), outer_guards,
                          {loop: at for loop, at in attached.items() if loop in outer_set})

    def _nest(self, stage: Stage, loops: Sequence[IterVar], statement: Stmt, guards: list[_Guard],
              attached: Attached, *, expand_tensorized: bool = False) -> Stmt:
        """`statement` inside `loops` (outermost first) of `stage`, with `guards` placed and the
        `attached` stages inserted at the top of their loops. The tensorized loop, when it is
        among `loops` and not `expand_tensorized`, becomes a TensorIntrin call with the loops
        inside it."""
        tensorized_loop = stage.tensorized[0] if stage.tensorized else None
        if tensorized_loop in loops and not expand_tensorized:
            return self._tensorized_nest(stage, loops, statement, guards, attached)
        extents = self.bounds.loop_extents[stage]
        level_of = {loop: level for level, loop in enumerate(loops)}
        lowest_level = -1
        if self.gpu:  # keep guards inside the loops where attached stages are computed
            lowest_level = max((level for level, loop in enumerate(loops) if attached.get(loop)), default=-1)
        placed = [(g.condition, max(lowest_level, max((level_of[v] for v in g.loops if v in level_of), default=-1)))
                  for g in guards]
        nest = statement
        for level in reversed(range(len(loops))):
            here = [condition for condition, at in placed if at == level]
            if here:
                nest = IfThenElse(all_of(*here), nest)
            loop = loops[level]
            for child in reversed(attached.get(loop, [])):
                buffer = self.buffer_of(child.tensor)
                nest = Allocate(buffer, seq([self.stage_nest(child), nest]))
            nest = seq([*(self._prefetch(stage, p) for p in stage.prefetches if p.at is loop), nest])
            nest = For(loop, extents[loop], stage.iter_kind.get(loop, "serial"), nest)
        outermost = [condition for condition, at in placed if at == -1]
        return IfThenElse(all_of(*outermost), nest) if outermost else nest

    def _prefetch(self, stage: Stage, prefetch: Prefetch) -> Stmt:
        """The software prefetches of `prefetch` (`Stage.prefetch`): for each read of its tensor
        in `stage`'s body, with loop `ahead` moved `offset` iterations on, the box its indices
        cover while the loops inside `at` run (outer dimensions row by row, the innermost in
        cache lines), unrolled."""
        if stage.iter_kind.get(prefetch.at, "serial") not in ("serial", "unrolled", "parallel"):
            raise ScheduleError(f"stage {stage.name!r}: prefetch at loop {prefetch.at.name!r}, which is "
                                f"{stage.iter_kind[prefetch.at]}; prefetches go in a serial, unrolled or parallel loop")
        loops = stage.leaf_iter_vars
        inner = set(loops[loops.index(prefetch.at) + 1:])
        simplifier = Simplifier(self.bounds.ranges)
        body = self.bodies[stage]
        source = substitute(body.source if isinstance(body, Reduce) else body, self.bounds.axis_values[stage])
        moved = {prefetch.ahead: BinOp("add", prefetch.ahead, Const(prefetch.offset, "int64"))}
        line = max(1, CACHE_LINE_BYTES // dtype_of(prefetch.tensor.dtype).bytes)
        boxes, statements = set(), []
        for load in walk(source):
            if not isinstance(load, TensorLoad) or load.tensor is not prefetch.tensor:
                continue
            if not any(n is prefetch.ahead for index in load.indices for n in walk(index)):
                raise ScheduleError(f"stage {stage.name!r}: prefetch of {load.tensor.name!r} {prefetch.offset} "
                                    f"iterations of {prefetch.ahead.name!r} ahead, which its indices do not read")
            intervals = []
            for index in load.indices:
                index = substitute(index, moved)
                interval = index_interval(simplifier, index, {n for n in walk(index) if isinstance(n, Var)} - inner)
                if interval is None:
                    raise ScheduleError(f"stage {stage.name!r}: prefetch of {load.tensor.name!r}: index {index!r} "
                                        f"has no box over the loops inside {prefetch.at.name!r}")
                intervals.append(interval)
            box = tuple((i.key, i.low, i.high) for i in intervals)  # expressions compare by identity, text by value
            if box in boxes:
                continue
            boxes.add(box)
            steps = [IterVar(f"pf{d}", i.high - i.low + 1, "data") for d, i in enumerate(intervals[:-1])]
            last = intervals[-1]
            lines = IterVar("pfl", -(-(last.high - last.low + 1) // line), "data")
            starts = [BinOp("add", i.symbolic, Const(i.low, "int64")) for i in intervals]
            address = TensorAddress(load.tensor, [BinOp("add", start, step) for start, step in zip(starts, steps)]
                                    + [BinOp("add", starts[-1], BinOp("mul", lines, Const(line, "int64")))])
            nest: Stmt = Evaluate("__builtin_prefetch", [address, Const(0, "int32"), Const(prefetch.locality, "int32")])
            for step in [*steps, lines][::-1]:
                nest = For(step, step.extent, "unrolled", nest)
            statements.append(nest)
        return seq(statements)

    def _tensorized_nest(self, stage: Stage, loops: Sequence[IterVar], statement: Stmt, guards: list[_Guard],
                         attached: Attached) -> Stmt:
        """The loops above the tensorized one around the TensorIntrin call computing a tile; the
        call runs when the tile is whole (its guards hold at the tile's last point), the plain
        loops of the tile otherwise."""
        first_tile_level = loops.index(stage.tensorized[0])
        tile_loops = list(loops[first_tile_level:])
        tile = set(tile_loops)
        tile_guards = [g for g in guards if g.loops & tile]
        call = self._intrinsic_call(stage, statement, tile_loops)
        if tile_guards:
            extents = self.bounds.loop_extents[stage]
            last_point = {loop: Const(extents[loop] - 1, "int64") for loop in tile}
            whole_tile = Simplifier(self.bounds.ranges).simplify(
                all_of(*(substitute(g.condition, last_point) for g in tile_guards)))
            partial_tile = self._nest(stage, tile_loops, statement, tile_guards, attached, expand_tensorized=True)
            call = IfThenElse(whole_tile, call, partial_tile)
        return self._nest(stage, loops[:first_tile_level], call, [g for g in guards if not g.loops & tile], attached)

    def _intrinsic_call(self, stage: Stage, provide: Provide, tile: list[IterVar]) -> Evaluate:
        """The Evaluate replacing the loops `tile` of `stage` by its TensorIntrin: each of the
        intrinsic's argument specs becomes a tile extent ('extent:<loop name>'), a tensor's
        address at the tile's origin ('<tensor>') or a stride of its buffer ('<tensor>.stride<d>')."""
        intrin = stage.tensorized[1]
        origin = {v: Const(0, "int64") for v in tile}
        simplifier = Simplifier(self.bounds.ranges)
        accesses = {provide.tensor.name: (provide.tensor, provide.indices)}
        for node in walk(provide.value):
            if isinstance(node, TensorLoad):
                accesses.setdefault(node.tensor.name, (node.tensor, node.indices))
        extents = self.bounds.loop_extents[stage]
        args = []
        for spec in intrin.args:
            name, _, field = spec.partition(".")
            if spec.startswith("extent:"):
                loop_name = spec[len("extent:"):]
                match = [v for v in tile if v.name == loop_name]
                if not match:
                    raise ScheduleError(f"stage {stage.name!r}: tensorize argument {spec!r}: no tensorized loop "
                                        f"named {loop_name!r}; loops: {[v.name for v in tile]}")
                args.append(Const(extents[match[0]], "int64"))
            elif name in accesses and field.startswith("stride") and field[6:].isdigit():
                tensor = accesses[name][0]
                dim = int(field[6:])
                if dim >= tensor.ndim:
                    raise ScheduleError(f"stage {stage.name!r}: tensorize argument {spec!r}: {name} has "
                                        f"{tensor.ndim} dims")
                args.append(Const(self.buffer_of(tensor).strides[dim], "int64"))
            elif name in accesses and not field:
                tensor, indices = accesses[name]
                args.append(TensorAddress(tensor, [simplifier.simplify(substitute(i, origin)) for i in indices]))
            else:
                raise ScheduleError(f"stage {stage.name!r}: tensorize argument {spec!r} names no tensor of the "
                                    f"stage; tensors: {sorted(accesses)}")
        return Evaluate(intrin.func, args)
