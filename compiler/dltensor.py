"""DLPack's ``DLTensor`` (dlpack.h v0.8, as every artifact header declares it) as ctypes
structures, for calling an artifact's ``<name>_checked`` entry point from Python."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from .abi import ArgSpec, dlpack_type

#: DLDeviceType of host memory.
KDL_CPU = 1


class DLDevice(ctypes.Structure):
    """``DLDevice``: device_type (int32, a DLDeviceType), device_id (int32)."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """``DLDataType``: code (uint8: 0 int, 1 uint, 2 float), bits (uint8), lanes (uint16)."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """``DLTensor``: data, device, ndim, dtype, shape (int64[ndim]), strides (int64[ndim] in
    elements, or NULL for compact row-major), byte_offset (bytes)."""

    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def dltensor(spec: ArgSpec, data: int) -> DLTensor:
    """A compact row-major DLTensor of argument `spec` (its dtype and shape) over host address `data`.
    The tensor keeps its shape array alive (attribute ``keep``); `data` is the caller's to keep."""
    code, bits = dlpack_type(spec.dtype)
    shape = (ctypes.c_int64 * len(spec.shape))(*spec.shape)
    tensor = DLTensor(data, DLDevice(KDL_CPU, 0), len(spec.shape), DLDataType(code, bits, 1), shape, None, 0)
    tensor.keep = shape
    return tensor


def pointer_array(tensors: Sequence[DLTensor]) -> ctypes.Array:
    """``DLTensor* args[]`` over `tensors`, as ``<name>_checked(args, num_args)`` takes it."""
    return (ctypes.POINTER(DLTensor) * len(tensors))(*(ctypes.pointer(t) for t in tensors))


#: What a manifest whose arguments disagree with its library is told (then why).
MANIFEST_MISMATCH = "the manifest's arguments are not those the library was compiled for"


def check_manifest_args(lib: ctypes.CDLL, name: str, args: Sequence[ArgSpec], agreement: str) -> None:
    """ValueError unless library `lib` was compiled for exactly `args` (a manifest's arguments:
    count, order, dtypes, shapes). Calls hand a kernel buffers sized from its manifest, a file
    beside the library: a damaged or edited one would let the kernel write past them.

    One call of ``<name>_checked`` with a host DLTensor of each of `args`, all over one scratch
    buffer: the entry point checks each argument's layout against what it was compiled with
    before it would run the kernel, then refuses the call for a reason that comes only after
    those checks (the C entry point: the first output overlaps the first argument; the CUDA one:
    the first argument is not on a CUDA device). `agreement` is that refusal's text
    (``tunefleet_last_error()``); any other text names what disagrees. `lib` must have
    ``tunefleet_last_error.restype = ctypes.c_char_p``."""
    scratch = (ctypes.c_double * 8)()
    tensors = [dltensor(a, ctypes.addressof(scratch)) for a in args]
    checked = getattr(lib, f"{name}_checked")
    checked.argtypes = [ctypes.c_void_p, ctypes.c_int]
    refused = checked(pointer_array(tensors), len(tensors)) != 0
    error = lib.tunefleet_last_error().decode(errors="replace")
    if not (refused and error == agreement):
        raise ValueError(f"{name}: {MANIFEST_MISMATCH}: {error}")
