"""Lowering for CUDA: a Schedule with GPU bindings becomes a kernel `PrimFunc` plus its launch.

The loop nest comes from the shared lowering (`compiler.lower.lower_loop_nest`: bound inference,
loop nests, guards, flattening; stages of scope 'shared' get regions relaxed over the
thread indices of their block, guards stay below the loops attached stages are computed
at). Then the GPU pass pipeline:

1. simplify, drop unit loops;
2. unroll 'unrolled' loops (a loop whose copies would exceed `passes.MAX_UNROLL_STMTS`
   statements stays a loop marked 'unroll_pragma': the code generator writes
   `#pragma unroll` and nvcc unrolls it);
3. vectorize 'vectorized' loops into Ramp/Broadcast statements of `lanes` elements (float4
   for float32: 16-byte loads and stores where the code generator proves the alignment);
4. shared memory: each shared-memory copy gets a barrier before it (the previous
   iteration's readers are done) and after it (the copy is complete before it is read);
   copies computed at the same loop share their barriers; the buffers are hoisted to the
   kernel's dynamic shared memory, at offsets aligned to 16 bytes;
5. double buffering of the stages marked `double_buffer()` (see `double_buffer`);
6. launch: the extent of each block / thread index is the largest extent of a loop bound
   to it; a shorter loop bound to it becomes a guarded statement.

Schedules a kernel cannot run raise `ScheduleError`: a loop annotated 'parallel', a
tensorized stage (a CPU micro-kernel), a root stage that is not a kernel argument (it
would need a global temporary), a root stage with no loop bound to a block index, a read
that could pass the end of a shared buffer (`passes.reads_beyond`; bound inference sizes
shared regions to what is read, so this guards against its mistakes), or a barrier that some
threads of a block could skip (`InvalidConfig`, see `compiler.cuda.verify`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .. import passes
from ..ir import (Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, expr_nodes, map_stmt, seq, substitute,
                  walk_stmt)
from ..lower import check_args, lower_loop_nest
from ..schedule import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS, Schedule, ScheduleError
from ..te import Const, Tensor, Var, check_identifier
from . import shared_memory
from .limits import InvalidConfig
from .resources import buffer_bytes, launch_extents, local_words, shared_layout


@dataclass
class GpuFunc:
    """A lowered CUDA kernel.

    func: the PrimFunc (body = the code of one thread; loops bound to GPU indices are `For`
    nodes of that kind, shared buffers are declared by `shared`); launch: {tag: extent} for
    every tag in GPU_TAGS (1 when unbound); shared: [(buffer, byte offset)] in the dynamic
    shared memory; shared_bytes: its total; local_words: 4-byte words of per-thread arrays.
    """

    func: PrimFunc
    launch: dict[str, int]
    shared: list[tuple[Buffer, int]] = field(default_factory=list)
    shared_bytes: int = 0
    local_words: int = 0

    @property
    def name(self) -> str:
        return self.func.name

    @property
    def grid(self) -> tuple[int, int, int]:
        return tuple(self.launch[t] for t in BLOCK_TAGS)

    @property
    def block(self) -> tuple[int, int, int]:
        return tuple(self.launch[t] for t in THREAD_TAGS)

    @property
    def threads(self) -> int:
        x, y, z = self.block
        return x * y * z


def check_gpu_schedule(sch: Schedule, args: Sequence[Tensor]) -> None:
    """ScheduleError for what a CUDA kernel cannot express (see the module docstring)."""
    arg_ids = {id(t) for t in args}
    for st in sch.stages:
        if st.attach == "inline":
            continue
        for iv, kind in st.iter_kind.items():
            if kind == "parallel":
                raise ScheduleError(f"stage {st.name!r}: loop {iv.name!r} is 'parallel', which has no meaning in a "
                                    f"CUDA kernel; bind it to a block or thread index ({', '.join(GPU_TAGS)})")
            if kind in BLOCK_TAGS and st.attach != "root":
                raise ScheduleError(f"stage {st.name!r}: loop {iv.name!r} is bound to {kind}, but only loops of "
                                    f"root stages (the kernel's outputs) may be bound to block indices")
        if st.tensorized is not None:
            raise ScheduleError(f"stage {st.name!r}: tensorize calls a C micro-kernel, which a CUDA kernel cannot")
        if st.double_buffered and (st.scope != "shared" or st.attach != "at"):
            raise ScheduleError(f"stage {st.name!r}: double_buffer needs a stage in shared memory computed at a "
                                f"loop of its reader (scope {st.scope!r}, attach {st.attach!r})")
        if st.attach == "root":
            if id(st.tensor) not in arg_ids:
                raise ScheduleError(f"stage {st.name!r} is computed at the root but is not a kernel argument: it "
                                    f"would need a global temporary; inline it or compute_at it in a kernel loop")
            if not any(st.iter_kind.get(iv) in BLOCK_TAGS for iv in st.leaf_iter_vars):
                raise ScheduleError(f"stage {st.name!r}: a root stage of a CUDA kernel needs a loop bound to a "
                                    f"block index ({', '.join(BLOCK_TAGS)})")


def _count(s: Stmt) -> int:
    return sum(1 for _ in walk_stmt(s))


def unroll(s: Stmt) -> Stmt:
    """Unroll 'unrolled' loops; one too large to copy becomes 'unroll_pragma' (nvcc unrolls it)."""

    def fs(n):
        if isinstance(n, For) and n.kind == "unrolled":
            if n.extent * _count(n.body) > passes.MAX_UNROLL_STMTS:
                return For(n.var, n.extent, "unroll_pragma", n.body)
            return seq(map_stmt(n.body, lambda e, k=k: substitute(e, {n.var: Const(k, "int64")}))
                       for k in range(n.extent))
        return None

    return map_stmt(s, lambda e: e, fs)


def check_barriers(s: Stmt, launch: dict[str, int]) -> None:
    """InvalidConfig when a barrier sits where some threads of a block may not reach it: under a
    condition on a thread index, or in a loop bound to a thread index shorter than the block."""
    thread_vars: set[Var] = set()

    def walk(n: Stmt, divergent: str) -> None:
        if shared_memory.is_barrier(n) and divergent:
            raise InvalidConfig(f"a __syncthreads() barrier would run under {divergent}, which not every thread of "
                                f"the block reaches (a guard on a thread index encloses a shared-memory copy); "
                                f"choose tiles that divide the loop extents", "barrier")
        if isinstance(n, For):
            here = divergent
            if n.kind in THREAD_TAGS:
                thread_vars.add(n.var)
                if n.extent < launch[n.kind] and not here:
                    here = f"the loop {n.var.name} bound to {n.kind} with extent {n.extent} < {launch[n.kind]} threads"
            walk(n.body, here)
        elif isinstance(n, IfThenElse):
            here = divergent
            if not here and any(isinstance(x, Var) and x in thread_vars for x in expr_nodes(n.cond)):
                here = f"the condition {n.cond!r}"
            walk(n.then, here)
            if n.otherwise is not None:
                walk(n.otherwise, here)
        elif isinstance(n, Allocate):
            walk(n.body, divergent)
        elif isinstance(n, Seq):
            for x in n.stmts:
                walk(x, divergent)

    walk(s, "")


def lower_cuda(sch: Schedule, args: Sequence[Tensor], name: str, *, lanes: int = 4) -> GpuFunc:
    """Lower a GPU schedule to a CUDA kernel (see the module docstring). `lanes`: float32
    elements per vector access (4: 16-byte accesses). Raises ScheduleError / InvalidConfig."""
    check_identifier(name, "kernel name")
    check_args(sch, args)
    check_gpu_schedule(sch, args)
    func, buffers = lower_loop_nest(sch, args, name)
    double = shared_memory.double_buffered_buffers(sch, buffers)
    for n in walk_stmt(func.body):
        if isinstance(n, Allocate) and n.buffer.scope == "heap":
            raise ScheduleError(f"buffer {n.buffer.name!r} ({n.buffer.size} elements) would be a heap temporary, "
                                f"which a CUDA kernel cannot allocate; compute it at an inner loop or inline it")
    body = passes.simplify_stmt(func.body)
    body = passes.remove_unit_loops(body)
    body = unroll(body)
    body = passes.simplify_stmt(body)
    body = passes.vectorize(body, lanes)
    body = passes.simplify_stmt(body)
    body, shared = shared_memory.lift_shared_buffers(body)
    if double:
        body, shared = shared_memory.double_buffer(body, shared, double)
        body = passes.simplify_stmt(body)
    launch = launch_extents(body)
    check_barriers(body, launch)
    overrun = passes.reads_beyond(body, shared)
    if overrun:
        buf, low, high = overrun[0]
        raise ScheduleError(f"kernel {name!r} would read elements {low}..{high} of shared buffer {buf.name!r}, which "
                            f"holds {buf.size}: a read past the end of shared memory faults on the GPU")
    offsets, total = shared_layout([buffer_bytes(b) for b in shared])
    out = PrimFunc(func.name, func.params, body, func.num_outputs, [])
    return GpuFunc(out, launch, list(zip(shared, offsets)), total, local_words(body))


__all__ = ["GpuFunc", "check_barriers", "check_gpu_schedule", "lower_cuda", "unroll"]
