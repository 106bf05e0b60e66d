"""Shared memory of a CUDA kernel: barriers around its copies and double buffering.

The passes of `compiler.cuda.lower` that place shared-memory copies: `lift_shared_buffers`
puts a barrier before each copy (the previous iteration's readers are done) and after it (the
copy is complete before it is read), lets copies computed at the same loop share them, and
lifts the buffers out to the kernel's dynamic shared memory; `double_buffer` turns the copies
of stages marked `double_buffer()` into a prefetch through registers into the other half of a
doubled buffer.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..ir import (Allocate, Buffer, Evaluate, For, IfThenElse, Load, Ramp, Seq, Stmt, Store, expr_nodes, lanes_of,
                  map_children, map_expr, map_stmt, seq, stmt_exprs, substitute, walk_stmt)
from ..schedule import GPU_TAGS, Schedule
from ..te import Const, Expr, dtype_of
from .resources import SHARED_ALIGN, round_up

#: The statement a barrier is (the code generator writes `__syncthreads();`).
BARRIER = "__syncthreads"


def barrier() -> Evaluate:
    """A barrier statement (`__syncthreads();`)."""
    return Evaluate(BARRIER, [])


def is_barrier(s: Stmt) -> bool:
    """Whether `s` is a barrier statement."""
    return isinstance(s, Evaluate) and s.func == BARRIER


def _reads(s: Stmt) -> set[int]:
    return {id(n.buffer) for e in stmt_exprs(s) for n in expr_nodes(e) if isinstance(n, Load)}


def lift_shared_buffers(s: Stmt) -> tuple[Stmt, list[Buffer]]:
    """Insert barriers around shared-memory copies and lift their allocations out (step 4 of
    `compiler.cuda.lower`); returns the new body and the shared buffers in allocation order."""
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
            out: list[Stmt] = [barrier()]
            written: set[int] = set()
            for b, c in copies:
                if _reads(c) & written:  # a copy reading an earlier copy waits for it
                    out.append(barrier())
                    written.clear()
                out.append(c)
                written.add(id(b))
            out.append(barrier())
            out.append(visit(rest))
            return seq(out)
        return map_children(n, visit)

    out = visit(s)
    return dedupe_barriers(out), buffers


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
    return map_children(s, lambda c: _replace_stores(c, f))


def _offset(index: Expr, off: Expr) -> Expr:
    """`index + off` for a scalar index or a Ramp (its base moves)."""
    if isinstance(index, Ramp):
        return Ramp(index.base + off, index.stride, index.lanes)
    return index + off


def double_buffered_buffers(sch: Schedule, buffers: Mapping[int, Buffer]) -> set[int]:
    """Ids of the Buffers of the stages of `sch` marked `double_buffer()`; `buffers`: the Buffer of
    each tensor, by id of the tensor (as `compiler.lower.lower_loop_nest` gives them)."""
    return {id(buffers[id(st.tensor)]) for st in sch.stages if st.double_buffered and id(st.tensor) in buffers}


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
    """Double-buffer the shared-memory buffers `ids` (ids of Buffers) at their serial loop (step 5
    of `compiler.cuda.lower`).

    After `lift_shared_buffers`, such a loop is `for k: {barrier; copies(k); barrier; rest(k)}`; when
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
            size = round_up(b.size, SHARED_ALIGN // dtype_of(b.dtype).bytes)
            halves[id(b)] = (Buffer(b.name, (2, size), b.dtype, "shared"), size)
        return halves[id(b)]

    def fs(n):
        if not (isinstance(n, For) and n.kind not in GPU_TAGS and n.extent > 1 and isinstance(n.body, Seq)):
            return None
        parts = n.body.stmts
        end = next((i for i in range(1, len(parts)) if is_barrier(parts[i])), None)
        if not is_barrier(parts[0]) or end is None or end == 1:
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
                          barrier()])
        for regs in staging.values():
            body = Allocate(regs, body)
        return seq([barrier(), prologue, barrier(), For(k, n.extent, n.kind, body)])

    out = map_stmt(s, lambda e: e, fs)
    return out, [halves[id(b)][0] if id(b) in halves else b for b in shared]


def dedupe_barriers(s: Stmt) -> Stmt:
    """Drop a barrier that directly follows another one."""

    def fs(n):
        if isinstance(n, Seq):
            kept: list[Stmt] = []
            for x in n.stmts:
                if is_barrier(x) and kept and is_barrier(kept[-1]):
                    continue
                kept.append(x)
            return seq(kept) if len(kept) != len(n.stmts) else None
        return None

    return map_stmt(s, lambda e: e, fs)


__all__ = ["BARRIER", "barrier", "dedupe_barriers", "double_buffer", "double_buffered_buffers", "is_barrier",
           "lift_shared_buffers"]
