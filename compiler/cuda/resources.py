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

`check_limits` compares these numbers with a device's `DeviceLimits`. `estimate_resources`
computes them from the loop nest before the passes (about 4 ms for a matmul config, against
~30 ms for `lower_cuda`): what the cost model's features and their validity check read.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..ir import Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, walk_stmt
from ..loop_nest import LoopNest, element_words
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


def local_words(s: Stmt) -> int:
    """4-byte words of per-thread arrays live at once: an allocation's words plus what its body
    holds; statements of a sequence (e.g. unrolled copies of one register copy) one at a time."""
    if isinstance(s, Allocate):
        own = s.buffer.size * element_words(s.buffer) if s.buffer.scope == "local" else 0
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


# ----------------------------------------------------------------------------- before the passes


@dataclass
class SharedMemoryUse:
    """What the shared buffers of a kernel take once `lower_cuda` has laid them out."""

    #: bytes of each buffer, in allocation order (both halves of a double-buffered one)
    sizes: list[int]
    #: refills of shared memory per thread
    fills: int
    #: buffers double-buffered
    doubled: int
    #: {id of a loop: 4-byte words of the registers staging its double-buffered copies}
    staging: dict[int, int]

    @property
    def bytes(self) -> int:
        """Bytes of dynamic shared memory: the buffers at `SHARED_ALIGN`-aligned offsets, in order."""
        return shared_layout(self.sizes)[1]


@dataclass
class KernelResources:
    """What a CUDA kernel takes of a block, as `lower_cuda` would lay it out: `launch` ({tag:
    extent} of every tag in GPU_TAGS), `shared` (its shared memory), `local_words` (4-byte words of
    per-thread arrays live at once, as `GpuFunc.local_words`)."""

    launch: dict[str, int]
    shared: SharedMemoryUse
    local_words: int

    @property
    def threads(self) -> int:
        """Threads per block."""
        return math.prod(self.launch[t] for t in THREAD_TAGS)

    @property
    def blocks(self) -> int:
        """Blocks of the grid."""
        return math.prod(self.launch[t] for t in BLOCK_TAGS)

    def check(self, name: str, limits: DeviceLimits) -> None:
        """InvalidConfig when kernel `name` of these resources exceeds `limits` (`check_limits`)."""
        check_limits(name, self.launch, self.shared.bytes, self.local_words, limits)

    def within(self, name: str, limits: DeviceLimits) -> bool:
        """Whether kernel `name` of these resources keeps to `limits`."""
        try:
            self.check(name, limits)
        except InvalidConfig:
            return False
        return True


def _per_thread(loops: Sequence[For]) -> int:
    """Iterations of `loops` in one thread: the product of the extents of those not bound to a GPU index."""
    return math.prod(loop.extent for loop in loops if loop.kind not in GPU_TAGS)


def _shared_memory_use(nest: LoopNest, double: Collection[int]) -> SharedMemoryUse:
    """The shared memory of `nest` whose buffers `double` (ids) belong to stages marked `double_buffer()`.

    As `shared_memory.double_buffer`: the copies computed at a loop not bound to a GPU index, longer
    than 1, that write only such buffers and read no shared memory get two halves of each buffer
    (each rounded up to 16 bytes), and registers staging the elements a thread copies (held across
    the loop's body)."""
    at: dict[int | None, list[tuple[Buffer, list[For]]]] = {}
    for buf, loops in nest.shared:
        at.setdefault(id(loops[-1]) if loops else None, []).append((buf, loops))
    out = SharedMemoryUse([], 0, 0, {})
    for group in at.values():
        loops = group[0][1]
        copies = [site for site in nest.sites if any(site.store.buffer is buf for buf, _ in group)]
        doubled = (bool(loops) and loops[-1].kind not in GPU_TAGS and loops[-1].extent > 1
                   and all(id(buf) in double for buf, _ in group)
                   and not any(buf.scope == "shared" for site in copies for buf, _ in site.accesses[1:]))
        for buf, _ in group:
            size = buffer_bytes(buf)
            out.sizes.append(2 * round_up(size, SHARED_ALIGN) if doubled else size)
        out.fills += _per_thread(loops)
        if doubled:
            out.doubled += len(group)
            out.staging[id(loops[-1])] = sum(_per_thread(site.loops[len(loops):]) * element_words(site.store.buffer)
                                             for site in copies)
    return out


def estimate_resources(func: PrimFunc, nest: LoopNest, double_buffered: Collection[int]) -> KernelResources:
    """The resources `lower_cuda` would give the kernel whose loop nest before the passes is `func`
    (`compiler.lower.lower_loop_nest`; `nest`: its `collect_loop_nest`, with at least one store);
    `double_buffered`: ids of the shared buffers of stages marked `double_buffer()`
    (`shared_memory.double_buffered_buffers`)."""
    shared = _shared_memory_use(nest, double_buffered)
    words = max(site.local_words + sum(shared.staging.get(id(loop), 0) for loop in site.loops) for site in nest.sites)
    return KernelResources(launch_extents(func.body), shared, words)


__all__ = ["REGISTER_OVERHEAD", "SHARED_ALIGN", "KernelResources", "SharedMemoryUse", "buffer_bytes", "check_limits",
           "estimate_resources", "launch_extents", "local_words", "registers_per_thread", "round_up",
           "shared_layout"]
