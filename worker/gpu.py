"""GPU mode of a measurement worker: which GPU it measures on, what that GPU is, and its pool.

`tunefleet worker --gpu N` calls :func:`select` first (before anything touches CUDA): the
worker and every child it starts then see exactly that one device, as CUDA device 0
(CUDA_VISIBLE_DEVICES, ordered by PCI bus id as nvidia-smi numbers them). :func:`facts`
describes it (name, compute capability, SM count, memory, L2, limits, driver and toolkit
versions), :func:`device_key` names its pool (``cuda-h100-sm90``), :func:`target` is the
code generation target for exactly its architecture and :func:`limits` the verifier's
limits read off the device. Without a GPU these raise ``GpuNotFound`` with the reason.
"""

from __future__ import annotations

import os

from tunefleet.compiler.cuda_device import GpuNotFound, clocks, device_key, name_slug, query
from tunefleet.compiler.cuda.limits import DeviceLimits
from tunefleet.compiler.target import Target

__all__ = ["GpuMode", "GpuNotFound", "select", "facts", "device_key", "target", "limits", "clocks", "name_slug",
           "host_facts"]


def select(index: int) -> str:
    """Make GPU `index` (nvidia-smi's numbering, or the index within an existing
    CUDA_VISIBLE_DEVICES) the only device of this process and its children; returns the
    CUDA_VISIBLE_DEVICES value set. Call before any CUDA use."""
    if index < 0:
        raise ValueError(f"--gpu: index must be >= 0, got {index}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        if index >= len(entries):
            raise GpuNotFound(f"GPU index {index} out of range: CUDA_VISIBLE_DEVICES={visible!r} lists "
                              f"{len(entries)} device(s)")
        chosen = entries[index]
    else:
        chosen = str(index)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def facts(index: int = 0) -> dict:
    """What the worker registers with: kind "cuda", the device's facts (compiler.cuda_device.query),
    toolkit (nvcc version, or None without nvcc) and current clocks where NVML reports them."""
    from tunefleet.compiler.cuda.nvcc import have_nvcc, nvcc_path, nvcc_version

    info = query(index)
    info["kind"] = "cuda"
    info["toolkit"] = {"nvcc": nvcc_path(), "nvcc_version": nvcc_version()} if have_nvcc() else None
    info["clocks"] = clocks(info.get("pci_bus_id"), index)
    return info


def target(info: dict) -> Target:
    """``cuda -arch=sm_<major><minor>``: code for exactly this device's architecture."""
    return Target("cuda", f"sm_{info['major']}{info['minor']}")


def limits(info: dict) -> DeviceLimits:
    """The verifier's limits as the device reports them."""
    return DeviceLimits.from_device_info(info)


def host_facts(cpus, info: dict) -> dict:
    """The registration facts of a GPU worker: the CPU host's facts (worker.host.host_facts)
    plus kind "cuda", gpu_name, compute_capability, its architecture `cuda_arch` (the
    target its pool's tasks default to; the hosts of a device key must agree on it), the
    nvcc version in the toolchain, and the device's facts under "gpu" (SMs, memory, L2,
    limits, driver, clocks)."""
    from .host import host_facts as cpu_host_facts

    facts = cpu_host_facts(cpus)
    facts["kind"] = "cuda"
    facts["gpu_name"] = info["name"]
    facts["compute_capability"] = f"{info['major']}.{info['minor']}"
    facts["cuda_arch"] = target(info).isa
    toolkit = info.get("toolkit") or {}
    if toolkit.get("nvcc_version"):
        facts.setdefault("toolchain", {})["nvcc"] = str(toolkit["nvcc_version"])
    if info.get("driver_version"):
        facts.setdefault("toolchain", {})["nvidia_driver"] = str(info["driver_version"])
    facts["gpu"] = {k: v for k, v in info.items() if k != "toolkit"}
    return facts


class GpuMode:
    """What `tunefleet worker --gpu N` changes, in one place (the daemon's hook):

        mode = GpuMode(index)                  # selects the GPU, reads its facts (GpuNotFound)
        device_key = device_key or mode.device_key
        name = name or f"{worker_name(cpus)}/gpu{index}"
        facts = mode.host_facts(cpus)          # instead of host_facts(cpus)
        measurer = mode.measurer(cpus=cpus, host=name)   # instead of LocalMeasurer(...)
    """

    def __init__(self, index: int):
        self.index = index
        self.visible = select(index)
        self.info = facts(0)
        self.device_key = device_key(self.info)
        self.target = target(self.info)
        self.limits = limits(self.info)

    def host_facts(self, cpus) -> dict:
        return host_facts(cpus, self.info)

    def measurer(self, **options):
        from tunefleet.tuner.gpu_runner import GpuMeasurer

        return GpuMeasurer(**options)
