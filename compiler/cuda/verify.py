"""The verifier run on every lowered CUDA kernel before it is built.

A config whose kernel needs more than the device allows (threads per block, shared memory
per block, registers, grid extents; `compiler.cuda.resources`) or that places a barrier where
not every thread of a block reaches it is *invalid*: `verify` raises `InvalidConfig` (a
ScheduleError, so older callers still count it as a failed build), with `limit` naming what
was exceeded. A tuner can tell these apart from measured failures and never spend a build or
a measurement on them (the check costs microseconds; nvcc costs seconds).
"""

from __future__ import annotations

from .limits import DeviceLimits
from .lower import GpuFunc, check_barriers
from .resources import check_limits, registers_per_thread


def register_estimate(g: GpuFunc) -> int:
    """Estimated registers per thread of kernel `g` (see `compiler.cuda.resources`)."""
    return registers_per_thread(g.local_words)


def verify(g: GpuFunc, limits: DeviceLimits) -> None:
    """Raise InvalidConfig when kernel `g` exceeds `limits` (`check_limits`) or has a divergent barrier."""
    check_limits(g.name, g.launch, g.shared_bytes, g.local_words, limits)
    check_barriers(g.func.body, g.launch)


__all__ = ["register_estimate", "verify"]
