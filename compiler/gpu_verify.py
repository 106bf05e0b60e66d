"""Device limits and the verifier run on every lowered CUDA kernel before it is built.

A config whose kernel needs more than the device allows (threads per block, shared memory
per block, registers, grid extents) or that places a barrier where not every thread of a
block reaches it is *invalid*: `verify` raises `InvalidConfig` (a ScheduleError, so older
callers still count it as a failed build), with `limit` naming what was exceeded. A tuner
can tell these apart from measured failures and never spend a build or a measurement on
them (the check costs microseconds; nvcc costs seconds).

Limits come from the target's architecture (`limits_for(target)`, the documented values of
each compute capability), or from the device itself (`DeviceLimits.from_device_info`, what
`cudaGetDeviceProperties` reports; a GPU worker passes these).

Registers are estimated, not known before ptxas runs: the words of the per-thread arrays
(register tiles and register copies; after unrolling they live in registers) plus
`REGISTER_OVERHEAD` for addresses, indices and loop state. A kernel whose estimate exceeds
the per-thread maximum (255), or whose estimate times its threads exceeds the registers of
a block, would spill heavily under `__launch_bounds__`; it is rejected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from .gpu_lower import GpuFunc, InvalidConfig, check_barriers
from .schedule import BLOCK_TAGS, THREAD_TAGS
from .target import Target

#: Registers per thread assumed beyond the per-thread arrays (addresses, indices, loop counters).
REGISTER_OVERHEAD = 24


@dataclass(frozen=True)
class DeviceLimits:
    """What one thread block of a device may use."""

    max_threads_per_block: int = 1024
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared_per_block: int = 48 * 1024  # bytes, with the opt-in of cudaFuncSetAttribute
    registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    l2_bytes: int = 0
    sm_count: int = 0  # multiprocessors (0: unknown); default-config rules size their grids by it

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_device_info(cls, info: dict) -> "DeviceLimits":
        """Limits of a detected device (`worker.gpu.detect()` facts: shared_per_block_optin,
        regs_per_block, max_threads_per_block, l2_bytes); missing facts keep the defaults."""
        base = cls()
        return replace(
            base,
            max_threads_per_block=int(info.get("max_threads_per_block") or base.max_threads_per_block),
            max_shared_per_block=int(info.get("shared_per_block_optin") or base.max_shared_per_block),
            registers_per_block=int(info.get("regs_per_block") or base.registers_per_block),
            l2_bytes=int(info.get("l2_bytes") or 0),
            sm_count=int(info.get("sm_count") or 0),
        )


KB = 1024
#: Shared memory per block with the opt-in, by compute capability (CUDA C++ Programming Guide,
#: "Technical Specifications per Compute Capability").
_SHARED_OPTIN = {
    (7, 0): 96 * KB, (7, 2): 96 * KB, (7, 5): 64 * KB,
    (8, 0): 163 * KB, (8, 6): 99 * KB, (8, 7): 163 * KB, (8, 9): 99 * KB,
    (9, 0): 227 * KB, (10, 0): 227 * KB, (10, 3): 227 * KB, (11, 0): 227 * KB, (12, 0): 99 * KB, (12, 1): 99 * KB,
}
#: L2 sizes of the usual data-center parts of each architecture (for the L2 flush when the
#: device does not say).
_L2 = {(8, 0): 40 * 1024 * KB, (9, 0): 50 * 1024 * KB}
#: Multiprocessors of the usual data-center part of each architecture (A100, A10, L40S, H100 SXM).
_SMS = {(8, 0): 108, (8, 6): 72, (8, 9): 142, (9, 0): 132, (10, 0): 148}


def compute_capability(arch: str) -> tuple[int, int]:
    """(major, minor) of "sm_90" / "sm_90a" / "sm_120"."""
    digits = arch.removeprefix("sm_").rstrip("a").rstrip("f")
    return int(digits[:-1]), int(digits[-1])


def limits_for(target: Target) -> DeviceLimits:
    """The limits of the target's architecture (defaults for an unknown one: 48 KB shared)."""
    cc = compute_capability(target.isa)
    shared = _SHARED_OPTIN.get(cc)
    if shared is None:
        known = [v for k, v in _SHARED_OPTIN.items() if k[0] == cc[0]]
        shared = min(known) if known else 48 * KB
    return DeviceLimits(max_shared_per_block=shared, l2_bytes=_L2.get(cc, 0), sm_count=_SMS.get(cc, 0))


def register_estimate(g: GpuFunc) -> int:
    """Estimated registers per thread (see the module docstring)."""
    return _registers(g.local_words)


def _registers(local_words: int) -> int:
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
    regs = _registers(local_words)
    if regs > limits.max_registers_per_thread:
        raise InvalidConfig(f"{name}: about {regs} registers per thread ({local_words} words of register tiles) "
                            f"exceed the maximum of {limits.max_registers_per_thread}", "registers", regs,
                            limits.max_registers_per_thread)
    if regs * threads > limits.registers_per_block:
        raise InvalidConfig(f"{name}: about {regs} registers x {threads} threads = {regs * threads} exceed the "
                            f"{limits.registers_per_block} registers of a block", "registers", regs * threads,
                            limits.registers_per_block)


def verify(g: GpuFunc, limits: DeviceLimits) -> None:
    """Raise InvalidConfig when kernel `g` exceeds `limits` (`check_limits`) or has a divergent barrier."""
    check_limits(g.name, g.launch, g.shared_bytes, g.local_words, limits)
    check_barriers(g.func.body, g.launch)


__all__ = ["DeviceLimits", "InvalidConfig", "REGISTER_OVERHEAD", "check_limits", "compute_capability", "limits_for",
           "register_estimate", "verify"]
