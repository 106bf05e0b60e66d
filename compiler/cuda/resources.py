"""GPU resource accounting: what a CUDA kernel takes of a block's threads, shared memory and registers.

- threads: the launch extents (`launch_extents`: per GPU index, the largest extent of a loop
  bound to it);
- shared memory: the shared buffers laid out at `SHARED_ALIGN`-aligned offsets of the
  kernel's dynamic shared memory (`shared_layout`);
- registers: estimated, not known before ptxas runs: the words of the per-thread arrays
  (`local_words`: register tiles and register copies; after unrolling they live in
  registers) plus `REGISTER_OVERHEAD` for addresses, indices and loop state
  (`registers_per_thread`). A kernel whose estimate exceeds the per-thread maximum (255), or
  whose estimate times its threads exceeds the registers of a block, would spill heavily
  under `__launch_bounds__`; it is rejected.

`check_limits` compares these numbers with a device's `DeviceLimits`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..ir import Allocate, Buffer, For, IfThenElse, Seq, Stmt, walk_stmt
from ..schedule import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS
from ..te import dtype_of
from .limits import DeviceLimits, InvalidConfig

#: Alignment of each shared-memory buffer in the dynamic shared memory, bytes.
SHARED_ALIGN = 16
#: Registers per thread assumed beyond the per-thread arrays (addresses, indices, loop counters).
REGISTER_OVERHEAD = 24


def round_up(x: int, multiple: int) -> int:
    """The least multiple of `multiple` not below `x` (integers, `multiple` > 0)."""
    return -(-x // multiple) * multiple


def launch_extents(s: Stmt) -> dict[str, int]:
    """{tag: largest extent of a loop bound to it} (1 for unbound tags)."""
    out = {t: 1 for t in GPU_TAGS}
    for n in walk_stmt(s):
        if isinstance(n, For) and n.kind in GPU_TAGS:
            out[n.kind] = max(out[n.kind], n.extent)
    return out


def shared_layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """(byte offset of each buffer, total bytes) of shared buffers of `sizes` bytes placed in
    order at `SHARED_ALIGN`-aligned offsets of the dynamic shared memory."""
    offsets, total = [], 0
    for size in sizes:
        total = round_up(total, SHARED_ALIGN)
        offsets.append(total)
        total += size
    return offsets, total


def buffer_bytes(b: Buffer) -> int:
    """Bytes of buffer `b`."""
    return b.size * dtype_of(b.dtype).bytes


def words(b: Buffer) -> int:
    """4-byte words of one element of `b` (at least 1)."""
    return max(1, dtype_of(b.dtype).bytes // 4)


def local_words(s: Stmt) -> int:
    """4-byte words of per-thread arrays live at once: an allocation's words plus what its body
    holds; statements of a sequence (e.g. unrolled copies of one register copy) one at a time."""
    if isinstance(s, Allocate):
        own = s.buffer.size * words(s.buffer) if s.buffer.scope == "local" else 0
        return own + local_words(s.body)
    if isinstance(s, For):
        return local_words(s.body)
    if isinstance(s, IfThenElse):
        return max(local_words(s.then), local_words(s.otherwise) if s.otherwise is not None else 0)
    if isinstance(s, Seq):
        return max((local_words(x) for x in s.stmts), default=0)
    return 0


def registers_per_thread(local_words: int) -> int:
    """Estimated registers per thread of a kernel with `local_words` words of per-thread arrays."""
    return local_words + REGISTER_OVERHEAD


def check_limits(name: str, launch: Mapping[str, int], shared_bytes: int, local_words: int,
                 limits: DeviceLimits) -> None:
    """Raise InvalidConfig when a kernel of these numbers exceeds `limits`: all that `verify` checks
    but the barriers, for callers that know the numbers without lowering (the cost model's
    features). `launch`: {tag: extent} of every tag in GPU_TAGS; `shared_bytes`: dynamic shared
    memory per block; `local_words`: 4-byte words of per-thread arrays (as `GpuFunc`'s)."""
    block = [launch[t] for t in THREAD_TAGS]
    threads = math.prod(block)
    for tag, extent, most in zip(THREAD_TAGS, block, limits.max_block_dims):
        if extent > most:
            raise InvalidConfig(f"{name}: {tag} extent {extent} exceeds the device's {most}", "threads", extent, most)
    if threads > limits.max_threads_per_block:
        raise InvalidConfig(f"{name}: {threads} threads per block {block} exceed the device's "
                            f"{limits.max_threads_per_block}", "threads", threads, limits.max_threads_per_block)
    for tag, most in zip(BLOCK_TAGS, limits.max_grid_dims):
        if launch[tag] > most:
            raise InvalidConfig(f"{name}: {tag} extent {launch[tag]} exceeds the device's grid limit {most}", "grid",
                                launch[tag], most)
    if shared_bytes > limits.max_shared_per_block:
        raise InvalidConfig(f"{name}: {shared_bytes} bytes of shared memory per block exceed the device's "
                            f"{limits.max_shared_per_block}", "shared_memory", shared_bytes,
                            limits.max_shared_per_block)
    regs = registers_per_thread(local_words)
    if regs > limits.max_registers_per_thread:
        raise InvalidConfig(f"{name}: about {regs} registers per thread ({local_words} words of register tiles) "
                            f"exceed the maximum of {limits.max_registers_per_thread}", "registers", regs,
                            limits.max_registers_per_thread)
    if regs * threads > limits.registers_per_block:
        raise InvalidConfig(f"{name}: about {regs} registers x {threads} threads = {regs * threads} exceed the "
                            f"{limits.registers_per_block} registers of a block", "registers", regs * threads,
                            limits.registers_per_block)


__all__ = ["REGISTER_OVERHEAD", "SHARED_ALIGN", "buffer_bytes", "check_limits", "launch_extents", "local_words",
           "registers_per_thread", "round_up", "shared_layout", "words"]
