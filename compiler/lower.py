"""Lowering: a Schedule becomes a loop-nest `PrimFunc`.

The structure of TVM's ScheduleOps / InferBound, simplified to static shapes, in steps:

1. Inline (`inline_stages`): `compute_inline` stages are substituted into their consumers'
   bodies.
2. Bound inference (`compiler.lower_bounds`), consumers first: the region of its tensor each
   stage computes (all of it for a root stage; what its consumers read inside its attach
   loop for an attached one), its loops' extents, its axes' values and its guards.
3. Loop nests (`compiler.lower_nests`): each root stage's loops around its statement, the
   stages attached to its loops inside them, guards where the simplifier cannot prove them.
4. Buffers (`BufferAssignment`): where each tensor lives; root stages that are not
   arguments are allocated around the whole body.
5. Flatten (`flatten`): tensor accesses become flat buffer accesses relative to each
   buffer's region.
6. Passes (`compiler.passes`): unroll, vectorize, loop partitioning of tails, cleanup.

`lower` runs all of them; `lower_loop_nest` stops before the passes (the CUDA lowering runs
its own; the cost model's features read the nest as the schedule wrote it).
"""

from __future__ import annotations

from typing import Sequence

from . import passes
from .expr import BinOp, Const, Expr, Reduce, TensorLoad, check_identifier, dtype_of
from .ir import (Address, Allocate, Buffer, Load, PrimFunc, Provide, Stmt, Store, TensorAddress, map_expr, map_stmt,
                 seq, substitute)
from .lower_bounds import Interval, infer_bounds
from .lower_nests import LoopNestBuilder
from .schedule import GPU_TAGS, THREAD_TAGS, Schedule, ScheduleError, Stage
from .te import ComputeOp, PlaceholderOp, Tensor

#: Attached stages whose buffer is larger than this get a heap temporary instead of a local array.
LOCAL_LIMIT_BYTES = 64 * 1024


def lower(sch: Schedule, args: Sequence[Tensor], name: str, *, lanes: int = 16) -> PrimFunc:
    """Lower `sch` to a PrimFunc named `name` taking `args` (input placeholders, then outputs).

    `lanes` is the target's float32 vector width (16 for AVX-512, 8 for AVX2); float64 uses half.
    Raises ScheduleError for schedules that cannot be lowered (named stage and axis).
    """
    check_identifier(name, "kernel name")
    check_args(sch, args)
    func, _ = lower_loop_nest(sch, args, name)
    return passes.optimize(func, lanes)


def lower_loop_nest(sch: Schedule, args: Sequence[Tensor], name: str) -> tuple[PrimFunc, dict[int, Buffer]]:
    """The loop nest of `sch` as a PrimFunc `name` over `args`, before any IR pass (loop kinds are
    still the schedule's annotations, nothing is unrolled or vectorized), and the Buffer of each
    tensor it stores or reads, by id of the tensor. For the CUDA lowering, which runs its own
    passes, and for the cost model's features. Raises ScheduleError as `lower` does."""
    stage_of = {id(stage.tensor): stage for stage in sch.stages}
    stages = [stage for stage in sch.stages if stage.attach != "inline"]
    bodies = {stage: inline_stages(stage.op.body, stage_of) for stage in stages}
    thread_loops = {loop for stage in sch.stages for loop, kind in stage.iter_kind.items() if kind in THREAD_TAGS}
    gpu = any(kind in GPU_TAGS for stage in sch.stages for kind in stage.iter_kind.values())

    bounds = infer_bounds(stages, bodies, stage_of, thread_loops)
    buffers = BufferAssignment(args, stage_of, bounds.regions, gpu=gpu)
    nests = LoopNestBuilder(stages, bodies, bounds, buffers.of, gpu=gpu)
    roots = [stage for stage in stages if stage.attach == "root"]
    body = seq(nests.stage_nest(stage) for stage in roots)
    for stage in reversed(roots):
        if not any(stage.tensor is arg for arg in args):
            body = Allocate(buffers.of(stage.tensor), body)
    body = flatten(body, buffers.of, bounds.regions)

    params = [buffers.of(arg) for arg in args]
    num_outputs = sum(1 for arg in args if isinstance(arg.op, ComputeOp))
    extern_sources = list(dict.fromkeys(stage.tensorized[1].source for stage in stages if stage.tensorized))
    return PrimFunc(name, params, body, num_outputs, extern_sources), buffers.by_tensor


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


def inline_stages(expr: Expr, stage_of: dict[int, Stage]) -> Expr:
    """`expr` with every read of an inlined stage's tensor replaced by that stage's body at the
    read's indices (recursively). A top-level Reduce keeps its node, its source inlined."""
    def inline_read(node: Expr) -> Expr | None:
        if isinstance(node, TensorLoad):
            stage = stage_of.get(id(node.tensor))
            if stage is not None and stage.attach == "inline":
                body_at_read = substitute(stage.op.body, dict(zip(stage.op.axes, node.indices)))
                return inline_stages(body_at_read, stage_of)
        return None

    if isinstance(expr, Reduce):
        return Reduce(expr.combiner, map_expr(expr.source, inline_read), expr.axes)
    return map_expr(expr, inline_read)


class BufferAssignment:
    """The Buffer of each tensor of a lowered function, made on first request (`of`).

    Kernel arguments and placeholders: 'global'. Other root stages: 'heap' temporaries of the
    tensor's shape. Attached stages: the shape of their region (the last dimension padded by
    the stage's row_pad), 'local' up to LOCAL_LIMIT_BYTES and 'heap' beyond; in a GPU kernel
    ('gpu') a stage in 'local' or 'shared' scope keeps that scope, as a stage in 'shared'
    scope always does.
    """

    def __init__(self, args: Sequence[Tensor], stage_of: dict[int, Stage], regions: dict[int, list[Interval]], *,
                 gpu: bool):
        self.args = list(args)
        self.stage_of = stage_of
        self.regions = regions
        self.gpu = gpu
        #: id(tensor) -> its Buffer, in the order they were first requested.
        self.by_tensor: dict[int, Buffer] = {}

    def of(self, tensor: Tensor) -> Buffer:
        if id(tensor) not in self.by_tensor:
            self.by_tensor[id(tensor)] = self._new_buffer(tensor)
        return self.by_tensor[id(tensor)]

    def _new_buffer(self, tensor: Tensor) -> Buffer:
        stage = self.stage_of.get(id(tensor))
        if isinstance(tensor.op, PlaceholderOp) or any(tensor is arg for arg in self.args):
            return Buffer(tensor.name, tensor.shape, tensor.dtype, "global")
        if stage.attach == "root":
            return Buffer(tensor.name, tensor.shape, tensor.dtype, "heap")
        shape = tuple(extent for _, extent in self.regions[id(tensor)])
        if stage.row_pad:
            shape = (*shape[:-1], shape[-1] + stage.row_pad)
        buffer = Buffer(tensor.name, shape, tensor.dtype)
        buffer.scope = "local" if buffer.size * dtype_of(tensor.dtype).bytes <= LOCAL_LIMIT_BYTES else "heap"
        if stage.scope == "shared" or (self.gpu and stage.scope == "local"):
            buffer.scope = stage.scope
        return buffer


def flatten(stmt: Stmt, buffer_of, regions: dict[int, list[Interval]]) -> Stmt:
    """`stmt` with tensor reads, addresses and stores (`Provide`) turned into accesses of their
    buffers (`buffer_of(tensor)`) at flat element indices; a tensor with a region (a stage's)
    is indexed relative to the region's start."""
    def flat_index(tensor: Tensor, indices: Sequence[Expr]) -> Expr:
        region = regions.get(id(tensor))
        buffer = buffer_of(tensor)
        flat: Expr = Const(0, "int64")
        for dim, (index, stride) in enumerate(zip(indices, buffer.strides)):
            offset = index if region is None else BinOp("sub", index, region[dim][0])
            flat = BinOp("add", flat, BinOp("mul", offset, Const(stride, "int64")))
        return flat

    def flatten_expr(expr: Expr) -> Expr:
        def flatten_access(node: Expr) -> Expr | None:
            if isinstance(node, TensorLoad):
                return Load(buffer_of(node.tensor), flat_index(node.tensor, node.indices))
            if isinstance(node, TensorAddress):
                return Address(buffer_of(node.tensor), flat_index(node.tensor, node.indices))
            return None

        return map_expr(expr, flatten_access)

    def flatten_store(statement: Stmt) -> Stmt | None:
        if isinstance(statement, Provide):
            return Store(buffer_of(statement.tensor), flatten_expr(flat_index(statement.tensor, statement.indices)),
                         statement.value)
        return None

    return map_stmt(stmt, flatten_expr, flatten_store)
