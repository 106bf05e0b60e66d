"""What this host's NVIDIA GPUs are, read through the driver itself (ctypes, no CUDA package).

- `query(index)`: the facts of one device from the CUDA driver API (`libcuda.so.1`: name,
  compute capability, SM count, memory, L2 size, shared memory per block with the opt-in,
  registers per block, PCI bus id, driver version), falling back to `nvidia-smi` when the
  driver library cannot be loaded. `index` counts the devices this process sees (after
  CUDA_VISIBLE_DEVICES).
- `clocks(pci_bus_id)`: current and maximum SM and memory clocks (MHz), temperature and
  power from NVML (`libnvidia-ml.so.1`) where the driver exposes them; None otherwise.

Everything returns plain dicts and raises `GpuNotFound` (with the reason) when there is no
usable device, so callers on CPU-only hosts can skip cleanly.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

__all__ = ["GpuNotFound", "query", "clocks", "device_count", "device_key", "name_slug", "parse_smi"]

#: Words of a GPU name that do not tell one kind of GPU from another.
_VENDOR = {"nvidia", "geforce", "tesla", "quadro", "corporation"}
#: Words from which on a name only describes the board (form factor, memory).
_BOARD = re.compile(r"^(pcie|sxm\d*|nvl|hbm\d*e?|\d+gb|mig)$")

# CUdevice_attribute values (cuda.h)
_ATTR = {
    "max_threads_per_block": 1,
    "regs_per_block": 12,
    "clock_khz": 13,
    "sm_count": 16,
    "memory_clock_khz": 36,
    "memory_bus_bits": 37,
    "l2_bytes": 38,
    "major": 75,
    "minor": 76,
    "shared_per_block_optin": 97,
}


class GpuNotFound(RuntimeError):
    """No usable NVIDIA GPU (no driver, no device, or the index is out of range); the message says which."""


def _libcuda() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise GpuNotFound(f"the NVIDIA driver library libcuda.so.1 cannot be loaded: {exc}") from None
    rc = lib.cuInit(0)
    if rc != 0:
        raise GpuNotFound(f"cuInit failed with CUDA driver error {rc} (no device, or the driver is not loaded)")
    return lib


def device_count() -> int:
    """Devices this process sees (0 without a driver)."""
    try:
        lib = _libcuda()
    except GpuNotFound:
        return 0
    n = ctypes.c_int(0)
    return n.value if lib.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0


def query(index: int = 0) -> dict:
    """Facts of device `index` (see the module docstring). Raises GpuNotFound."""
    try:
        lib = _libcuda()
    except GpuNotFound as driver_error:
        return _query_smi(index, str(driver_error))
    n = ctypes.c_int(0)
    lib.cuDeviceGetCount(ctypes.byref(n))
    if not 0 <= index < n.value:
        raise GpuNotFound(f"GPU index {index} out of range: this process sees {n.value} CUDA device(s)")
    dev = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), index) != 0:
        raise GpuNotFound(f"cuDeviceGet({index}) failed")
    name = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(name, 256, dev)
    facts: dict = {"index": index, "name": name.value.decode(errors="replace")}
    for key, attr in _ATTR.items():
        v = ctypes.c_int(0)
        facts[key] = v.value if lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev) == 0 else None
    total = ctypes.c_size_t(0)
    fn = getattr(lib, "cuDeviceTotalMem_v2", None) or lib.cuDeviceTotalMem
    facts["memory_bytes"] = total.value if fn(ctypes.byref(total), dev) == 0 else None
    bus = ctypes.create_string_buffer(64)
    facts["pci_bus_id"] = bus.value.decode() if lib.cuDeviceGetPCIBusId(bus, 64, dev) == 0 else None
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    facts["cuda_driver_version"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    facts["driver_version"] = _smi_field(index, "driver_version")
    facts["compute_capability"] = f"{facts['major']}.{facts['minor']}"
    facts["arch"] = f"sm_{facts['major']}{facts['minor']}"
    return facts


def _smi_field(index: int, field: str) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, f"--query-gpu={field}", "--format=csv,noheader,nounits", "-i", str(index)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def parse_smi(line: str, index: int = 0) -> dict:
    """Facts from one line of `nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version,pci.bus_id
    --format=csv,noheader,nounits` (memory in MiB)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 5:
        raise GpuNotFound(f"unexpected nvidia-smi output: {line!r}")
    name, cc, mem, driver, bus = parts[:5]
    major, _, minor = cc.partition(".")
    return {"index": index, "name": name, "major": int(major), "minor": int(minor or 0),
            "compute_capability": f"{int(major)}.{int(minor or 0)}", "arch": f"sm_{int(major)}{int(minor or 0)}",
            "memory_bytes": int(float(mem)) * 1024 * 1024 if mem.replace(".", "").isdigit() else None,
            "driver_version": driver, "pci_bus_id": bus, "sm_count": None, "l2_bytes": None,
            "shared_per_block_optin": None, "regs_per_block": None, "max_threads_per_block": None}


def _query_smi(index: int, why: str) -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise GpuNotFound(f"{why}; nvidia-smi is not installed either")
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap,memory.total,driver_version,pci.bus_id",
                              "--format=csv,noheader,nounits", "-i", str(index)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuNotFound(f"{why}; nvidia-smi failed: {exc}") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise GpuNotFound(f"{why}; nvidia-smi: {(out.stderr or out.stdout).strip()}")
    return parse_smi(out.stdout.strip().splitlines()[0], index)


def clocks(pci_bus_id: str | None = None, index: int = 0) -> dict | None:
    """{"sm_mhz", "mem_mhz", "sm_max_mhz", "mem_max_mhz", "temperature_c", "power_w"} from NVML for the
    device at `pci_bus_id` (else NVML index `index`); None when NVML is unavailable."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    init = getattr(nvml, "nvmlInit_v2", None) or nvml.nvmlInit
    if init() != 0:
        return None
    try:
        handle = ctypes.c_void_p()
        if pci_bus_id:
            get = getattr(nvml, "nvmlDeviceGetHandleByPciBusId_v2", None) or nvml.nvmlDeviceGetHandleByPciBusId
            rc = get(pci_bus_id.encode(), ctypes.byref(handle))
        else:
            get = getattr(nvml, "nvmlDeviceGetHandleByIndex_v2", None) or nvml.nvmlDeviceGetHandleByIndex
            rc = get(index, ctypes.byref(handle))
        if rc != 0:
            return None
        out: dict = {}
        for key, fn, arg in (("sm_mhz", "nvmlDeviceGetClockInfo", 1), ("mem_mhz", "nvmlDeviceGetClockInfo", 2),
                             ("sm_max_mhz", "nvmlDeviceGetMaxClockInfo", 1),
                             ("mem_max_mhz", "nvmlDeviceGetMaxClockInfo", 2)):
            v = ctypes.c_uint(0)
            out[key] = v.value if getattr(nvml, fn)(handle, arg, ctypes.byref(v)) == 0 else None
        t = ctypes.c_uint(0)
        out["temperature_c"] = t.value if nvml.nvmlDeviceGetTemperature(handle, 0, ctypes.byref(t)) == 0 else None
        p = ctypes.c_uint(0)
        out["power_w"] = p.value / 1000 if nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(p)) == 0 else None
        return out
    finally:
        nvml.nvmlShutdown()


def name_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA A100-SXM4-40GB' -> 'a100',
    'NVIDIA GeForce RTX 4090' -> 'rtx-4090', 'NVIDIA H200' -> 'h200'."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in _VENDOR]
    kept = []
    for w in words:
        if _BOARD.match(w):
            break
        kept.append(w)
    return "-".join(kept) or "gpu"


def device_key(info: dict) -> str:
    """The pool of a GPU: ``cuda-<name slug>-sm<major><minor>``, e.g. "cuda-h100-sm90"."""
    return f"cuda-{name_slug(info['name'])}-sm{info['major']}{info['minor']}"
