"""Lowering for CUDA: a Schedule with GPU bindings becomes a kernel `PrimFunc` plus its launch.

The loop nest comes from the shared lowering (`compiler.lower._Lowering`: bound inference,
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
would need a global temporary), a root stage with no loop bound to a block index, or a
barrier that some threads of a block could skip (`InvalidConfig`, see gpu_verify).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from . import passes
from .ir import (Allocate, Buffer, Evaluate, For, IfThenElse, Load, PrimFunc, Ramp, Seq, Stmt, Store, expr_nodes,
                 lanes_of, map_expr, map_stmt, seq, stmt_exprs, substitute, walk_stmt)
from .lower import _Lowering, check_args
from .schedule import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS, Schedule, ScheduleError
from .te import Const, Expr, Tensor, Var, check_identifier, dtype_of

#: The statement a barrier is (the code generator writes `__syncthreads();`).
BARRIER = "__syncthreads"
#: Alignment of each shared-memory buffer in the dynamic shared memory, bytes.
SHARED_ALIGN = 16


class InvalidConfig(ScheduleError):
    """A schedule that is well formed but cannot run on the device: more threads, shared memory
    or registers than a block may have, or a barrier that not every thread of a block reaches.

    It is found before any build; a tuner counts such a config as invalid (never measured),
    not as a failed measurement. `limit` names what was exceeded ("threads", "shared_memory",
    "registers", "grid", "barrier"); `value` and `maximum` are the numbers when there are some.
    """

    def __init__(self, message: str, limit: str = "", value: int | None = None, maximum: int | None = None):
        super().__init__(message)
        self.limit, self.value, self.maximum = limit, value, maximum


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


def _barrier() -> Evaluate:
    return Evaluate(BARRIER, [])


def _is_barrier(s: Stmt) -> bool:
    return isinstance(s, Evaluate) and s.func == BARRIER


def _reads(s: Stmt) -> set[int]:
    return {id(n.buffer) for e in stmt_exprs(s) for n in expr_nodes(e) if isinstance(n, Load)}


def shared_memory(s: Stmt) -> tuple[Stmt, list[Buffer]]:
    """Insert barriers around shared-memory copies and lift their allocations out (step 4)."""
    buffers: list[Buffer] = []

    def visit(n: Stmt) -> Stmt:
        if isinstance(n, Allocate) and n.buffer.scope == "shared":
            # a chain Allocate(b1, seq([copy1, Allocate(b2, seq([copy2, ... rest]))])) of copies at one loop
            # (the copy of a buffer: the leading statements of its scope that store into it)
            copies: list[tuple[Buffer, Stmt]] = []
            rest: Stmt = n
            while isinstance(rest, Allocate) and rest.buffer.scope == "shared":
                b = rest.buffer
                buffers.append(b)
                parts = rest.body.stmts if isinstance(rest.body, Seq) else [rest.body]
                k = 0
                while k < len(parts) and any(isinstance(x, Store) and x.buffer is b for x in walk_stmt(parts[k])):
                    k += 1
                copies.append((b, seq(visit(p) for p in parts[:k])))
                rest = seq(parts[k:])
            out: list[Stmt] = [_barrier()]
            written: set[int] = set()
            for b, c in copies:
                if _reads(c) & written:  # a copy reading an earlier copy waits for it
                    out.append(_barrier())
                    written.clear()
                out.append(c)
                written.add(id(b))
            out.append(_barrier())
            out.append(visit(rest))
            return seq(out)
        if isinstance(n, For):
            return For(n.var, n.extent, n.kind, visit(n.body))
        if isinstance(n, Allocate):
            return Allocate(n.buffer, visit(n.body))
        if isinstance(n, IfThenElse):
            return IfThenElse(n.cond, visit(n.then), visit(n.otherwise) if n.otherwise is not None else None)
        if isinstance(n, Seq):
            return seq(visit(x) for x in n.stmts)
        return n

    out = visit(s)
    return _dedupe_barriers(out), buffers


def _unroll_all(s: Stmt) -> Stmt:
    """`s` with every loop not bound to a GPU index unrolled (its copies substituted)."""

    def fs(n):
        if isinstance(n, For) and n.kind not in GPU_TAGS:
            return seq(map_stmt(n.body, lambda e, k=k: substitute(e, {n.var: Const(k, "int64")}))
                       for k in range(n.extent))
        return None

    return map_stmt(s, lambda e: e, fs)


def _replace_stores(s: Stmt, f) -> Stmt:
    """`s` with each Store replaced by `f(store)` (the loops and guards around it kept)."""
    if isinstance(s, Store):
        return f(s)
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _replace_stores(s.body, f))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _replace_stores(s.then, f),
                          _replace_stores(s.otherwise, f) if s.otherwise is not None else None)
    if isinstance(s, Seq):
        return seq(_replace_stores(x, f) for x in s.stmts)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _replace_stores(s.body, f))
    return s


def _offset(index: Expr, off: Expr) -> Expr:
    """`index + off` for a scalar index or a Ramp (its base moves)."""
    if isinstance(index, Ramp):
        return Ramp(index.base + off, index.stride, index.lanes)
    return index + off


def double_buffered_buffers(sch: Schedule, lowering: _Lowering) -> set[int]:
    """Ids of the Buffers (of a `lowering` of `sch` that has run) of stages marked `double_buffer()`."""
    return {id(lowering.buffers[id(st.tensor)]) for st in sch.stages
            if st.double_buffered and id(st.tensor) in lowering.buffers}


def _staging_slots(s: Stmt, used: dict[int, int], slots: dict[int, int]) -> dict[int, int]:
    """Give each Store of copy `s` its first register (`slots`, by id of the Store) in the staging
    array of its buffer, after `used` ({id of a buffer: registers taken}); returns the registers
    taken after `s`. The two branches of a condition (e.g. a vector edge and its guarded scalar
    version) run one or the other, so they share registers."""
    if isinstance(s, Store):
        b = id(s.buffer)
        slots[id(s)] = used.get(b, 0)
        return {**used, b: slots[id(s)] + lanes_of(s.index)}
    if isinstance(s, Seq):
        for x in s.stmts:
            used = _staging_slots(x, used, slots)
        return used
    if isinstance(s, IfThenElse):
        a = _staging_slots(s.then, used, slots)
        b = _staging_slots(s.otherwise, used, slots) if s.otherwise is not None else used
        return {k: max(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}
    if isinstance(s, (For, Allocate)):
        return _staging_slots(s.body, used, slots)
    return used


def double_buffer(s: Stmt, shared: list[Buffer], ids: set[int]) -> tuple[Stmt, list[Buffer]]:
    """Double-buffer the shared-memory buffers `ids` (ids of Buffers) at their serial loop (step 5).

    After `shared_memory`, such a loop is `for k: {barrier; copies(k); barrier; rest(k)}`; when
    every buffer its copies write is in `ids` and the copies read no shared memory, it becomes
    (S = one copy's elements, rounded up to 16 bytes; the buffer holds 2·S):

        barrier; copies(0) into half 0; barrier;
        for k: { if k + 1 < n: load copies(k+1)'s values into registers (<buffer>_next);
                 rest(k), reading half k % 2;
                 if k + 1 < n: store the registers into half (k+1) % 2;
                 barrier }

    One barrier per iteration remains: the half written in iteration k was last read in
    iteration k - 1, before its barrier. The copies' own loops are unrolled, so every staged
    value has a register (the verifier counts them). Returns the new body and `shared` with the
    doubled buffers in place of the old ones.
    """
    halves: dict[int, tuple[Buffer, int]] = {}

    def half(b: Buffer) -> tuple[Buffer, int]:
        if id(b) not in halves:
            align = SHARED_ALIGN // dtype_of(b.dtype).bytes
            size = -(-b.size // align) * align
            halves[id(b)] = (Buffer(b.name, (2, size), b.dtype, "shared"), size)
        return halves[id(b)]

    def fs(n):
        if not (isinstance(n, For) and n.kind not in GPU_TAGS and n.extent > 1 and isinstance(n.body, Seq)):
            return None
        parts = n.body.stmts
        end = next((i for i in range(1, len(parts)) if _is_barrier(parts[i])), None)
        if not _is_barrier(parts[0]) or end is None or end == 1:
            return None
        copies = _unroll_all(seq(parts[1:end]))
        written = [st for st in walk_stmt(copies) if isinstance(st, Store)]
        if any(id(st.buffer) not in ids for st in written) or _reads(copies) & {id(b) for b in shared}:
            return None
        k = n.var
        slots: dict[int, int] = {}
        words = _staging_slots(copies, {}, slots)
        staging = {id(st.buffer): Buffer(f"{st.buffer.name}_next", (words[id(st.buffer)],), st.buffer.dtype, "local")
                   for st in written}

        def register(st: Store) -> tuple[Buffer, Expr]:
            lanes = lanes_of(st.index)
            slot = Const(slots[id(st)], "int64")
            return staging[id(st.buffer)], (Ramp(slot, 1, lanes) if lanes > 1 else slot)

        def into_half(st: Store, value: Expr) -> Store:  # iteration k's tile into half k % 2
            b2, size = half(st.buffer)
            return Store(b2, _offset(st.index, (k % 2) * size), value)

        def reads_half(e: Expr) -> Expr:
            def f(x):
                if isinstance(x, Load) and id(x.buffer) in halves:
                    b2, size = halves[id(x.buffer)]
                    return Load(b2, _offset(x.index, (k % 2) * size))
                return None

            return map_expr(e, f)

        def at(s_: Stmt, value: Expr) -> Stmt:
            return map_stmt(s_, lambda e: substitute(e, {k: value}))

        prologue = at(_replace_stores(copies, lambda st: into_half(st, st.value)), Const(0, "int64"))
        loads = _replace_stores(copies, lambda st: Store(*register(st), st.value))
        stores = _replace_stores(copies, lambda st: into_half(st, Load(*register(st))))
        has_next = k < n.extent - 1
        body: Stmt = seq([IfThenElse(has_next, at(loads, k + 1)),
                          map_stmt(seq(parts[end + 1:]), reads_half),
                          IfThenElse(has_next, at(stores, k + 1)),
                          _barrier()])
        for regs in staging.values():
            body = Allocate(regs, body)
        return seq([_barrier(), prologue, _barrier(), For(k, n.extent, n.kind, body)])

    out = map_stmt(s, lambda e: e, fs)
    return out, [halves[id(b)][0] if id(b) in halves else b for b in shared]


def _dedupe_barriers(s: Stmt) -> Stmt:
    """Drop a barrier that directly follows another one."""

    def fs(n):
        if isinstance(n, Seq):
            kept: list[Stmt] = []
            for x in n.stmts:
                if _is_barrier(x) and kept and _is_barrier(kept[-1]):
                    continue
                kept.append(x)
            return seq(kept) if len(kept) != len(n.stmts) else None
        return None

    return map_stmt(s, lambda e: e, fs)


def launch_extents(s: Stmt) -> dict[str, int]:
    """{tag: largest extent of a loop bound to it} (1 for unbound tags)."""
    out = {t: 1 for t in GPU_TAGS}
    for n in walk_stmt(s):
        if isinstance(n, For) and n.kind in GPU_TAGS:
            out[n.kind] = max(out[n.kind], n.extent)
    return out


def check_barriers(s: Stmt, launch: dict[str, int]) -> None:
    """InvalidConfig when a barrier sits where some threads of a block may not reach it: under a
    condition on a thread index, or in a loop bound to a thread index shorter than the block."""
    thread_vars: set[Var] = set()

    def walk(n: Stmt, divergent: str) -> None:
        if _is_barrier(n) and divergent:
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


def _local_words(s: Stmt) -> int:
    """4-byte words of per-thread arrays live at once: an allocation's words plus what its body
    holds; statements of a sequence (e.g. unrolled copies of one register copy) one at a time."""
    if isinstance(s, Allocate):
        own = s.buffer.size * max(1, dtype_of(s.buffer.dtype).bytes // 4) if s.buffer.scope == "local" else 0
        return own + _local_words(s.body)
    if isinstance(s, For):
        return _local_words(s.body)
    if isinstance(s, IfThenElse):
        return max(_local_words(s.then), _local_words(s.otherwise) if s.otherwise is not None else 0)
    if isinstance(s, Seq):
        return max((_local_words(x) for x in s.stmts), default=0)
    return 0


def lower_cuda(sch: Schedule, args: Sequence[Tensor], name: str, *, lanes: int = 4) -> GpuFunc:
    """Lower a GPU schedule to a CUDA kernel (see the module docstring). `lanes`: float32
    elements per vector access (4: 16-byte accesses). Raises ScheduleError / InvalidConfig."""
    check_identifier(name, "kernel name")
    check_args(sch, args)
    check_gpu_schedule(sch, args)
    lowering = _Lowering(sch, args)
    func = lowering.run(name)
    double = double_buffered_buffers(sch, lowering)
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
    body, shared = shared_memory(body)
    if double:
        body, shared = double_buffer(body, shared, double)
        body = passes.simplify_stmt(body)
    launch = launch_extents(body)
    check_barriers(body, launch)
    offsets, total = [], 0
    for b in shared:
        total = -(-total // SHARED_ALIGN) * SHARED_ALIGN
        offsets.append((b, total))
        total += b.size * dtype_of(b.dtype).bytes
    out = PrimFunc(func.name, func.params, body, func.num_outputs, [])
    return GpuFunc(out, launch, offsets, total, _local_words(body))


def stores(s: Stmt) -> list[Store]:
    return [n for n in walk_stmt(s) if isinstance(n, Store)]


__all__ = ["BARRIER", "InvalidConfig", "GpuFunc", "check_gpu_schedule", "lower_cuda", "launch_extents",
           "check_barriers", "shared_memory", "unroll", "double_buffer", "double_buffered_buffers"]
_ = Expr  # re-exported type for annotations in codegen
