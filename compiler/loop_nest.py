"""The stores of a lowered loop nest with what surrounds each: loops, guards, per-thread arrays.

Read from a PrimFunc lowered without passes (`compiler.lower.lower_loop_nest`), where loop
kinds are still the schedule's annotations; the cost model's features and the GPU resource
estimate (`compiler.cuda.resources.estimate_resources`) both walk it once through
:func:`collect_loop_nest`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from .ir import Allocate, Buffer, For, IfThenElse, Load, PrimFunc, Seq, Store, expr_nodes
from .schedule import GPU_TAGS
from .te import Expr, dtype_of


def element_words(b: Buffer) -> int:
    """4-byte words of one element of `b` (at least 1)."""
    return max(1, dtype_of(b.dtype).bytes // 4)


@dataclass
class StoreSite:
    """One Store of the nest: `loops` around it (outermost first), `guards` (conditions around
    it), `nest` (1-based index of the top-level loop nest holding it), `local_words` (4-byte
    words of the per-thread arrays allocated around it)."""

    store: Store
    loops: list[For]
    guards: int
    nest: int
    local_words: int

    @cached_property
    def iterations(self) -> int:
        """Executions of the store: the product of its loops' extents, counting a GPU index once (loops
        bound to an index an enclosing loop is bound to are that index, the shorter one guarded)."""
        bound: dict[str, int] = {}
        serial = 1
        for loop in self.loops:
            if loop.kind in GPU_TAGS:
                bound[loop.kind] = min(bound.get(loop.kind, loop.extent), loop.extent)
            else:
                serial *= loop.extent
        return serial * math.prod(bound.values())

    @cached_property
    def accesses(self) -> list[tuple[Buffer, Expr]]:
        """(buffer, flat index) of the stored buffer, then of each loaded one (first access of each,
        in ``expr_nodes`` order)."""
        seen: dict[int, tuple[Buffer, Expr]] = {id(self.store.buffer): (self.store.buffer, self.store.index)}
        for n in expr_nodes(self.store.value):
            if isinstance(n, Load) and id(n.buffer) not in seen:
                seen[id(n.buffer)] = (n.buffer, n.index)
        return list(seen.values())


@dataclass
class LoopNest:
    """The stores of a function (`sites`, in program order), every buffer it allocates
    (`allocations`), and its shared buffers each with the loops around its allocation
    (`shared`; a shared buffer's copy is computed at the last of them)."""

    sites: list[StoreSite] = field(default_factory=list)
    allocations: list[Buffer] = field(default_factory=list)
    shared: list[tuple[Buffer, list[For]]] = field(default_factory=list)


def collect_loop_nest(func: PrimFunc) -> LoopNest:
    """The :class:`LoopNest` of `func`'s body."""
    nest = LoopNest()
    top = 0

    def visit(s, loops: list[For], guards: int, words: int) -> None:
        nonlocal top
        if isinstance(s, For):
            if not loops:
                top += 1
            visit(s.body, [*loops, s], guards, words)
        elif isinstance(s, Allocate):
            nest.allocations.append(s.buffer)
            if s.buffer.scope == "local":
                words += s.buffer.size * element_words(s.buffer)
            elif s.buffer.scope == "shared":
                nest.shared.append((s.buffer, loops))
            visit(s.body, loops, guards, words)
        elif isinstance(s, IfThenElse):
            visit(s.then, loops, guards + 1, words)
            if s.otherwise is not None:
                visit(s.otherwise, loops, guards + 1, words)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x, loops, guards, words)
        elif isinstance(s, Store):
            nest.sites.append(StoreSite(s, loops, guards, top, words))

    visit(func.body, [], 0, 0)
    return nest


__all__ = ["LoopNest", "StoreSite", "collect_loop_nest", "element_words"]
