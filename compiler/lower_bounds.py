"""Bound inference, step 2 of lowering (`compiler.lower`): for every stage that is not inlined,
the region of its tensor it computes, the extents of its loops, the value of each of its axes
in terms of those loops, and the guards that keep it inside its domain.

Stages are visited consumers first (TVM's InferBound, simplified to static shapes). A root
stage computes its whole tensor. A stage computed at loop `v` of another stage computes the
region its consumers read inside `v`: the loops enclosing the attach point are fixed, the
loops below it range over their extents, and each index's interval comes from its linear
form. The region's extents are constants; its start is an expression of the enclosing loop
variables. The stage's axes then run over that region, and its splits and fuses are
re-derived from the inferred extents; a split that does not divide an extent gets a guard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .expr import BinOp, Const, Expr, IterVar, TensorLoad, Var, walk
from .ir import substitute
from .schedule import ScheduleError, Split, Stage
from .simplify import INF, Lin, Simplifier
from .te import Tensor

#: One dimension of a region: (start, extent).
Interval = tuple[Expr, int]


@dataclass
class Bounds:
    """What bound inference found (stages are keyed by object, tensors by `id`).

    ranges: every leaf loop variable -> (0, extent - 1), inclusive;
    regions: id(tensor) -> [(start, extent)] per dimension, the part of the tensor its stage
        computes (start 0 and the whole shape for a root stage);
    enclosing_loops: stage -> the loops (of other stages) around its attach point, outermost first;
    loop_extents: stage -> extent of each of its iteration variables (axes, splits, fuses);
    axis_values: stage -> value of each of its root axes (data and reduce) in its leaf loops;
    guards: stage -> the conditions (over its leaf loops) its statement needs, those that
        simplification could not prove.
    """

    ranges: dict[Var, tuple[int, int]] = field(default_factory=dict)
    regions: dict[int, list[Interval]] = field(default_factory=dict)
    enclosing_loops: dict[Stage, list[IterVar]] = field(default_factory=dict)
    loop_extents: dict[Stage, dict[IterVar, int]] = field(default_factory=dict)
    axis_values: dict[Stage, dict[IterVar, Expr]] = field(default_factory=dict)
    guards: dict[Stage, list[Expr]] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexInterval:
    """An index expression over a region: `symbolic` (an expression of fixed loops; `key` its
    text, to compare two of them) plus a constant range [low, high]."""

    key: str
    symbolic: Expr
    low: int
    high: int


def index_interval(simplifier: Simplifier, index: Expr, fixed: set) -> IndexInterval | None:
    """`index` with the loops not in `fixed` ranging over their extents (the simplifier's ranges);
    None when some term mixes fixed and ranging loops or has an unbounded range."""
    linear = simplifier.lin(index)
    symbolic = Lin()
    low = high = linear.const
    for key, (coef, term) in linear.terms.items():
        term_vars = {n for n in walk(term) if isinstance(n, Var)}
        if term_vars and term_vars <= fixed:
            symbolic.terms[key] = [coef, term]
            continue
        if term_vars & fixed:
            return None
        term_low, term_high = simplifier.range_of(term)
        if term_low == -INF or term_high == INF:
            return None
        if coef > 0:
            low, high = low + coef * term_low, high + coef * term_high
        else:
            low, high = low + coef * term_high, high + coef * term_low
    symbolic_expr = simplifier.from_lin(symbolic)
    return IndexInterval(repr(symbolic_expr), symbolic_expr, int(low), int(high))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def infer_bounds(stages: Sequence[Stage], bodies: dict[Stage, Expr], stage_of: dict[int, Stage],
                 thread_vars: set[IterVar]) -> Bounds:
    """Bounds of `stages` (the schedule's stages that are not inlined, producers first).

    bodies: each stage's body with inlined stages substituted; stage_of: id(tensor) -> its stage
    (inlined ones too); thread_vars: loops bound to GPU thread indices (a stage in shared memory
    computes the region of its whole thread block).
    Raises ScheduleError for a stage computed at a loop that its consumers are not inside of,
    a stage attached where nothing reads it, or an empty iteration domain.
    """
    return _BoundInference(stages, bodies, stage_of, thread_vars).run()


class _BoundInference:
    def __init__(self, stages: Sequence[Stage], bodies: dict[Stage, Expr], stage_of: dict[int, Stage],
                 thread_vars: set[IterVar]):
        self.stages = stages
        self.bodies = bodies
        self.stage_of = stage_of
        self.thread_vars = thread_vars
        self.bounds = Bounds()
        self._loads: dict[Stage, dict[int, list[TensorLoad]]] = {}  # reader -> id(tensor) -> its reads there

    def run(self) -> Bounds:
        for stage in reversed(self.stages):
            if stage.attach == "root":
                self.bounds.enclosing_loops[stage] = []
                self.bounds.regions[id(stage.tensor)] = [(Const(0, "int64"), d) for d in stage.tensor.shape]
            else:
                self.bounds.regions[id(stage.tensor)] = self._attached_region(stage)
            self._derive_loops(stage)
        return self.bounds

    def _loads_of(self, reader: Stage, tensor: Tensor) -> list[TensorLoad]:
        if reader not in self._loads:
            loads = self._loads[reader] = {}
            for n in walk(self.bodies[reader]):
                if isinstance(n, TensorLoad):
                    loads.setdefault(id(n.tensor), []).append(n)
        return self._loads[reader].get(id(tensor), [])

    # ----------------------------------------------------------------- regions of attached stages
    def _attached_region(self, stage: Stage) -> list[Interval]:
        """The region of `stage`'s tensor that its consumers read inside its attach loop."""
        parent, attach_loop = stage.attach_stage, stage.attach_ivar
        if parent not in self.bounds.enclosing_loops:
            raise ScheduleError(f"stage {stage.name!r}: compute_at target {parent.name!r} must consume it "
                                f"(directly or through stages attached inside it)")
        parent_loops = parent.leaf_iter_vars
        enclosing = self.bounds.enclosing_loops[parent] + parent_loops[:parent_loops.index(attach_loop) + 1]
        self.bounds.enclosing_loops[stage] = enclosing
        fixed = set(enclosing)
        if stage.scope == "shared":  # one copy per thread block: its region spans the block's threads
            fixed -= self.thread_vars
        consumers = [c for c in self.stages if self._loads_of(c, stage.tensor)]
        if not consumers:
            raise ScheduleError(f"stage {stage.name!r} is computed at {parent.name!r} but nothing reads it")
        simplifier = Simplifier(self.bounds.ranges)
        reads_per_dim: list[list[IndexInterval | None]] = [[] for _ in stage.tensor.shape]
        for consumer in consumers:
            if consumer is not parent and attach_loop not in self.bounds.enclosing_loops.get(consumer, []):
                raise ScheduleError(f"stage {stage.name!r} is computed at {parent.name!r}.{attach_loop.name} but its "
                                    f"consumer {consumer.name!r} is outside that loop")
            for load in self._loads_of(consumer, stage.tensor):
                for dim, index in enumerate(load.indices):
                    index = substitute(index, self.bounds.axis_values[consumer])
                    reads_per_dim[dim].append(index_interval(simplifier, index, fixed))
        return [self._covering_interval(simplifier, reads, extent)
                for reads, extent in zip(reads_per_dim, stage.tensor.shape)]

    @staticmethod
    def _covering_interval(simplifier: Simplifier, reads: list[IndexInterval | None], extent: int) -> Interval:
        """The interval of one dimension covering `reads`: the whole dimension (of `extent`)
        unless all reads share one symbolic start and their constant ranges cover less, or
        reach beyond the dimension. A tile larger than what is left of the dimension reads
        beyond it (its consumer computes those values and never stores them, see
        `_axes_needing_guards`), so the region must hold those reads too: a region clipped to
        the dimension had a GPU thread block's tile read past the end of its shared memory."""
        whole = (Const(0, "int64"), extent)
        if any(r is None for r in reads) or len({r.key for r in reads}) > 1:
            return whole
        low, high = min(r.low for r in reads), max(r.high for r in reads)
        if high - low + 1 >= extent:
            start_low, start_high = simplifier.range_of(simplifier.simplify(reads[0].symbolic))
            if start_low + low >= 0 and start_high + high <= extent - 1:
                return whole
        return simplifier.simplify(BinOp("add", reads[0].symbolic, Const(low, "int64"))), high - low + 1

    # ----------------------------------------------------------------- loops, axis values and guards
    def _derive_loops(self, stage: Stage) -> None:
        """Extents of `stage`'s loops over its region, its axes' values in its leaf loops, and
        its guards."""
        region = self.bounds.regions[id(stage.tensor)]
        extents = self._loop_extents(stage, region)
        self.bounds.loop_extents[stage] = extents
        for leaf in stage.leaf_iter_vars:
            self.bounds.ranges[leaf] = (0, extents[leaf] - 1)
        simplifier = Simplifier(self.bounds.ranges)
        roots = [*stage.op.axes, *stage.op.reduce_axes]
        offsets = self._offsets_in_region(stage, extents)
        offsets = {axis: simplifier.simplify(offsets[axis]) for axis in roots}
        values = {axis: simplifier.simplify(BinOp("add", start, offsets[axis]))
                  for axis, (start, _) in zip(stage.op.axes, region)}
        values.update({axis: offsets[axis] for axis in stage.op.reduce_axes})
        self.bounds.axis_values[stage] = values
        guards = [BinOp("lt", offsets[axis], Const(extents[axis], "int64")) for axis in roots]
        if stage.attach == "at":
            for axis in self._axes_needing_guards(stage):
                dim = stage.tensor.shape[stage.op.axes.index(axis)]
                guards.append(BinOp("lt", values[axis], Const(dim, "int64")))
                guards.append(BinOp("ge", values[axis], Const(0, "int64")))
        simplified = [simplifier.simplify(g) for g in guards]
        self.bounds.guards[stage] = [g for g in simplified if not isinstance(g, Const)]
        if any(isinstance(g, Const) and not g.value for g in simplified):
            raise ScheduleError(f"stage {stage.name!r}: empty iteration domain")

    @staticmethod
    def _loop_extents(stage: Stage, region: list[Interval]) -> dict[IterVar, int]:
        """Extent of every iteration variable of `stage`: its axes over `region`, its reduce
        axes whole, then each split and fuse in the order they were applied."""
        extents: dict[IterVar, int] = {axis: extent for axis, (_, extent) in zip(stage.op.axes, region)}
        extents.update({axis: axis.extent for axis in stage.op.reduce_axes})
        for relation in stage.relations:
            if isinstance(relation, Split):
                parent = extents[relation.parent]
                if relation.factor is not None:
                    inner = min(relation.factor, parent)
                    extents[relation.inner], extents[relation.outer] = inner, _ceil_div(parent, inner)
                else:
                    outer = min(relation.nparts, parent)
                    extents[relation.outer], extents[relation.inner] = outer, _ceil_div(parent, outer)
            else:
                extents[relation.fused] = extents[relation.outer] * extents[relation.inner]
        return extents

    @staticmethod
    def _offsets_in_region(stage: Stage, extents: dict[IterVar, int]) -> dict[IterVar, Expr]:
        """Each iteration variable as an expression of the leaf loops, undoing the splits and
        fuses last to first (root axes: the offset within the stage's region)."""
        value: dict[IterVar, Expr] = {leaf: leaf for leaf in stage.leaf_iter_vars}
        for relation in reversed(stage.relations):
            inner_extent = extents[relation.inner]
            if isinstance(relation, Split):
                value[relation.parent] = BinOp("add", BinOp("mul", value[relation.outer], Const(inner_extent, "int64")),
                                               value[relation.inner])
            else:
                value[relation.outer] = BinOp("floordiv", value[relation.fused], Const(inner_extent, "int64"))
                value[relation.inner] = BinOp("floormod", value[relation.fused], Const(inner_extent, "int64"))
        return value

    def _reads_in_bounds(self, stage: Stage, free: Sequence[IterVar]) -> bool:
        """Whether every read of inputs/root stages stays in bounds over the whole loop ranges,
        when the axes `free` of `stage` take every value of their loops and its other axes only
        the values inside the tensor's shape. Its reduce axes take only the values inside their
        own extent: a split of one that does not divide it keeps its guard whatever this
        decides, so the overhang of the split (K = 129 in steps of 4) reads nothing."""
        value = dict(self.bounds.axis_values[stage])
        ranges = dict(self.bounds.ranges)
        kept = [(axis, dim) for axis, dim in zip(stage.op.axes, stage.tensor.shape) if axis not in free]
        for axis, dim in kept + [(axis, axis.extent) for axis in stage.op.reduce_axes]:
            value[axis] = Var(f"{axis.name}_in_shape")  # a fresh variable over [0, dim)
            ranges[value[axis]] = (0, dim - 1)
        simplifier = Simplifier(ranges)
        for node in walk(self.bodies[stage]):
            if not isinstance(node, TensorLoad):
                continue
            producer = self.stage_of.get(id(node.tensor))
            if producer is not None and producer.attach == "at":
                continue  # an attached producer sizes its region to what is read
            for index, dim in zip(node.indices, node.tensor.shape):
                low, high = simplifier.range_of(simplifier.simplify(substitute(index, value)))
                if low < 0 or high > dim - 1:
                    return False
        return True

    def _axes_needing_guards(self, stage: Stage) -> list[IterVar]:
        """The axes of attached stage `stage` that need guards to its tensor's shape: those whose
        values beyond it (a tile larger than what is left of the tensor) would read out of
        bounds. The other axes compute their whole tile: e.g. a register tile of a GEMM reading
        a zero-padded packed panel of B computes the columns beyond N too (their values are
        never stored) instead of guarding every lane, which would keep it from vectorizing.
        Each axis is tried alone, then the safe ones together; if that fails, all are unsafe."""
        axes = list(stage.op.axes)
        if self._reads_in_bounds(stage, axes):
            return []
        unsafe = [a for a in axes if not self._reads_in_bounds(stage, [a])]
        safe = [a for a in axes if a not in unsafe]
        return unsafe if self._reads_in_bounds(stage, safe) else axes
