"""Calling a built CUDA kernel (`.so` from `compiler.cuda.build`) from Python over numpy arrays.

The library links the CUDA runtime statically and exports small helpers (device memory,
copies, device count, the event timer), so this needs no CUDA Python package and no
libcudart: only the NVIDIA driver, opened by the library on its first CUDA call.

`GpuKernel(so_path, manifest)`: `run(*inputs)` copies the inputs to the device, launches,
waits and copies the outputs back (outputs pre-filled with NaN bytes on the device, so an
element the kernel does not write shows); `time(*inputs, ...)` times it with
`tunefleet_cuda_timer`. `device_count(so_path)` says whether a GPU can be used at all
(0 without a driver or a device; `last_error` then tells why).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..abi import ArgSpec
from ..dltensor import KDL_CPU, check_manifest_args

_H2D, _D2H = 1, 2


class GpuUnavailable(RuntimeError):
    """No CUDA device can be used from this process (no driver, no device, or a driver too old)."""


def _load(so_path: str | os.PathLike) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(Path(so_path).resolve()))
    lib.tunefleet_last_error.restype = ctypes.c_char_p
    lib.tunefleet_cuda_malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.tunefleet_cuda_free.argtypes = [ctypes.c_void_p]
    lib.tunefleet_cuda_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.tunefleet_cuda_memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    lib.tunefleet_cuda_device_count.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.tunefleet_cuda_timer.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), *[ctypes.c_int] * 5,
                                         ctypes.POINTER(ctypes.c_double)]
    return lib


def device_count(so_path: str | os.PathLike) -> tuple[int, str]:
    """(number of CUDA devices this process sees through the library's runtime, why 0)."""
    lib = _load(so_path)
    n = ctypes.c_int(0)
    lib.tunefleet_cuda_device_count(ctypes.byref(n))
    return n.value, ("" if n.value else lib.tunefleet_last_error().decode(errors="replace"))


class GpuKernel:
    """A loaded GPU kernel (see the module docstring). `manifest` needs "name" and "args".

    Raises ValueError when the manifest lists other arguments (count, order, dtypes, shapes) than
    the library was compiled for (`dltensor.check_manifest_args`: its ``<name>_checked`` checks
    every argument's layout before any device, so host tensors that agree are refused for their
    device alone; no CUDA device is needed), OSError when the library cannot be loaded."""

    def __init__(self, so_path: str | os.PathLike, manifest: dict) -> None:
        self.manifest = manifest
        self.name: str = manifest["name"]
        self.args = [ArgSpec.from_dict(a) for a in manifest["args"]]
        self._inputs = [a for a in self.args if not a.is_output]
        self._lib = _load(so_path)
        self._fn = getattr(self._lib, self.name)
        self._fn.argtypes = [ctypes.c_void_p] * (len(self.args) + 1)
        self._fn.restype = ctypes.c_int
        self._packed = ctypes.cast(getattr(self._lib, f"{self.name}_packed"), ctypes.c_void_p)
        first = self.args[0].name if self.args else ""
        check_manifest_args(self._lib, self.name, self.args,
                            f"{self.name}_checked: argument '{first}': expected device kDLCUDA (2) or "
                            f"kDLCUDAManaged (13), got device_type {KDL_CPU} (device_id 0)")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            error = self._lib.tunefleet_last_error().decode(errors="replace")
            raise RuntimeError(f"{self.name}: {what} failed (code {rc}): {error}")

    def ensure_device(self) -> None:
        """GpuUnavailable when there is no usable CUDA device."""
        n = ctypes.c_int(0)
        self._lib.tunefleet_cuda_device_count(ctypes.byref(n))
        if n.value < 1:
            raise GpuUnavailable(f"no CUDA device: {self._lib.tunefleet_last_error().decode(errors='replace')}")

    def _host_arrays(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self._inputs):
            raise TypeError(f"{self.name} takes {len(self._inputs)} inputs "
                            f"({', '.join(a.name for a in self._inputs)}), got {len(inputs)}")
        out = []
        for spec, x in zip(self._inputs, inputs):
            x = np.asarray(x)
            if x.dtype != np.dtype(spec.dtype) or x.shape != spec.shape:
                raise ValueError(f"argument {spec.name!r}: expected {spec.dtype} {list(spec.shape)}, "
                                 f"got {x.dtype} {list(x.shape)}")
            out.append(np.ascontiguousarray(x))
        return out

    def _device_buffers(self, inputs: list[np.ndarray]) -> list[ctypes.c_void_p]:
        buffers: list[ctypes.c_void_p] = []
        try:
            for spec in self.args:
                p = ctypes.c_void_p()
                self._check(self._lib.tunefleet_cuda_malloc(ctypes.byref(p), spec.nbytes), f"allocating {spec.name}")
                buffers.append(p)
            for x, p in zip(inputs, buffers):
                self._check(self._lib.tunefleet_cuda_memcpy(p, x.ctypes.data, x.nbytes, _H2D), "copying inputs")
            for spec, p in zip(self.args, buffers):
                if spec.is_output:
                    self._check(self._lib.tunefleet_cuda_memset(p, 0xFF, spec.nbytes), "filling outputs")
        except BaseException:
            self._free(buffers)
            raise
        return buffers

    def _free(self, buffers: list[ctypes.c_void_p]) -> None:
        for p in buffers:
            self._lib.tunefleet_cuda_free(p)

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Outputs of one launch over numpy `inputs` (copied to the device and back)."""
        self.ensure_device()
        host = self._host_arrays(inputs)
        buffers = self._device_buffers(host)
        try:
            self._check(self._fn(*buffers, None), "launch")
            self._check(self._lib.tunefleet_cuda_synchronize(), "execution")
            outs = []
            for spec, p in zip(self.args, buffers):
                if spec.is_output:
                    o = np.empty(spec.shape, spec.dtype)
                    self._check(self._lib.tunefleet_cuda_memcpy(o.ctypes.data, p, o.nbytes, _D2H), "copying outputs")
                    outs.append(o)
            return outs
        finally:
            self._free(buffers)

    def time(self, *inputs: np.ndarray, number: int = 1, repeat: int = 5, min_repeat_ms: int = 50,
             cooldown_ms: int = 0, flush_l2: bool = False) -> np.ndarray:
        """Seconds per launch of each of `repeat` repeats (CUDA events; see tunefleet_cuda_timer)."""
        self.ensure_device()
        host = self._host_arrays(inputs)
        buffers = self._device_buffers(host)
        try:
            pointers = (ctypes.c_void_p * len(buffers))(*[p.value for p in buffers])
            seconds = np.empty(repeat, dtype=np.float64)
            self._check(self._lib.tunefleet_cuda_timer(
                self._packed, pointers, number, repeat, min_repeat_ms, cooldown_ms, int(flush_l2),
                seconds.ctypes.data_as(ctypes.POINTER(ctypes.c_double))), "timing")
            return seconds
        finally:
            self._free(buffers)

    def __call__(self, *inputs: np.ndarray):
        outs = self.run(*inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)


__all__ = ["GpuKernel", "GpuUnavailable", "device_count"]
