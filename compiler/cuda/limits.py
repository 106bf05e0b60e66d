"""What a CUDA device allows one thread block, and the error of a config that asks for more.

Limits come from the target's architecture (`limits_for(target)`, the documented values of
each compute capability), or from the device itself (`DeviceLimits.from_device_info`, what
`cudaGetDeviceProperties` reports; a GPU worker passes these).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..schedule import ScheduleError
from ..target import Target


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


__all__ = ["DeviceLimits", "InvalidConfig", "compute_capability", "limits_for"]
