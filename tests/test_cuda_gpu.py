"""CUDA kernels on a real GPU: every GPU operator's kernels (the default config and random
ones) match numpy, the event timer and the L2 flush work, the DLPack entry point checks its
arguments, and the GPU measurer (isolated child per candidate) returns ok results with the
device's clocks. Skipped, with the reason, where there is no GPU (or no nvcc)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler import cuda_device
from tunefleet.compiler.cuda import nvcc
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.cuda.kernel import GpuKernel
from tunefleet.compiler.target import Target
from tunefleet.tuner.measure_child import TOLERANCE, relative_error

from cuda_helpers import NO_NVCC, random_valid_configs


def _gpu():
    if not nvcc.have_nvcc():
        return None, NO_NVCC
    try:
        info = cuda_device.query(0)
    except cuda_device.GpuNotFound as exc:
        return None, f"no NVIDIA GPU: {exc}"
    return info, ""


INFO, WHY = _gpu()
pytestmark = pytest.mark.skipif(INFO is None, reason=WHY or "no GPU")
TARGET = Target("cuda", INFO["arch"]) if INFO else None

WORKLOADS = [
    ("matmul", {"M": 1000, "N": 520, "K": 300, "bias": True, "epilogue": "relu"}),
    ("matmul", {"M": 128, "N": 3072, "K": 768}),
    ("batch_matmul", {"batch": 12, "M": 128, "N": 128, "K": 64, "transpose_b": True}),
    ("conv2d_nchw", {"N": 1, "CI": 64, "CO": 64, "H": 56, "W": 56, "KH": 3, "KW": 3, "padding": 1, "bias": True,
                     "epilogue": "relu"}),
    ("conv2d_nchw", {"N": 1, "CI": 256, "CO": 512, "H": 56, "W": 56, "KH": 1, "KW": 1, "stride": 2}),
    ("depthwise_conv2d_nchw", {"N": 1, "C": 32, "H": 112, "W": 112, "KH": 3, "KW": 3, "padding": 1,
                               "bias": True, "epilogue": "relu"}),
]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path / "cache"))


def _kernel(built) -> GpuKernel:
    return GpuKernel(built.so_path, {"name": built.name, "args": [a.to_dict() for a in built.args]})


def _check(w, built):
    inputs = ops.random_inputs(w.tensors(), np.random.default_rng(0))
    outs = _kernel(built).run(*inputs)
    for out, ref in zip(outs, w.reference(*inputs)):
        err = relative_error(out, np.asarray(ref))
        assert err <= TOLERANCE[w.args["dtype"]], f"{w!r}: relative error {err}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("op, args", WORKLOADS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(WORKLOADS)])
def test_kernels_match_numpy_on_the_gpu(op, args):
    w = ops.make_workload(op, args)
    _check(w, build_workload(w, ops.default_config(w, TARGET), TARGET))
    built, _ = random_valid_configs(op, args, TARGET, 3, seed=1, build=lambda w_, c: build_workload(w_, c, TARGET))
    for b in built:
        _check(w, b)


def test_timer_and_l2_flush():
    w = ops.make_workload("matmul", {"M": 1024, "N": 1024, "K": 1024})
    kernel = _kernel(build_workload(w, ops.default_config(w, TARGET), TARGET))
    inputs = ops.random_inputs(w.tensors(), np.random.default_rng(0))
    warm = kernel.time(*inputs, repeat=3, min_repeat_ms=20)
    cold = kernel.time(*inputs, repeat=3, min_repeat_ms=0, flush_l2=True)
    assert (warm > 0).all() and (cold > 0).all()
    assert w.flop / np.median(warm) / 1e9 > 100  # any GPU of this decade does 100 GFLOP/s


def test_checked_entry_point_validates_dltensors():
    w = ops.make_workload("matmul", {"M": 64, "N": 64, "K": 64})
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    kernel = _kernel(built)
    lib = kernel._lib

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    shapes = [(64, 64)] * 3
    ptrs, tensors, keep = [], [], []
    for shape in shapes:
        p = ctypes.c_void_p()
        assert lib.tunefleet_cuda_malloc(ctypes.byref(p), 64 * 64 * 4) == 0
        ptrs.append(p)
        dims = (ctypes.c_int64 * 2)(*shape)
        keep.append(dims)
        tensors.append(DLTensor(p.value, 2, 0, 2, 2, 32, 1, dims, None, 0))
    checked = getattr(lib, f"{built.name}_checked")
    arr = (ctypes.POINTER(DLTensor) * 3)(*[ctypes.pointer(t) for t in tensors])
    try:
        assert checked(arr, 3) == 0 and lib.tunefleet_cuda_synchronize() == 0
        tensors[0].device_type = 1  # kDLCPU
        assert checked(arr, 3) != 0
        assert b"expected device kDLCUDA" in lib.tunefleet_last_error()
        tensors[0].device_type = 2
        tensors[1].bits = 64
        assert checked(arr, 3) != 0 and b"expected dtype float32" in lib.tunefleet_last_error()
    finally:
        for p in ptrs:
            lib.tunefleet_cuda_free(p)


@pytest.mark.timeout(600)
def test_gpu_measurer_measures_in_isolated_children():
    from tunefleet.tuner.gpu_runner import GpuMeasurer
    from tunefleet.tuner.measure import MeasureInput, MeasureProtocol

    w = ops.make_workload("matmul", {"M": 512, "N": 512, "K": 512})
    space = ops.config_space(w, TARGET)
    configs = [ops.default_config(w, TARGET).to_json(), space.get(0).to_json()]
    inputs = [MeasureInput(w.to_json(), str(TARGET), c) for c in configs]
    with GpuMeasurer(n_parallel=2) as measurer:
        results = measurer.measure_batch(inputs, MeasureProtocol(repeat=3, min_repeat_ms=10))
    assert [r.status for r in results] == ["ok", "ok"] or results[1].error.startswith("InvalidConfig:")
    assert results[0].ok and all(c > 0 for c in results[0].costs)
    assert len(measurer.clocks) >= 1
