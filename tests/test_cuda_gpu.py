"""CUDA kernels on a real GPU: every GPU operator's kernels (the default config and random
ones) match numpy, the event timer and the L2 flush work, the DLPack entry point checks its
arguments, and the GPU measurer (isolated child per candidate) returns ok results with the
device's clocks. Skipped, with the reason, where there is no GPU (or no nvcc)."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.artifact import write_artifact
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
    ("conv2d_nchw", {"N": 1, "CI": 256, "CO": 512, "H": 56, "W": 56, "KH": 1, "KW": 1, "stride": 2, "bias": True,
                     "residual": True, "epilogue": "relu"}),
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


CPP_CALLER = r"""
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include "NAME.h"

/* Reads A, B and bias (raw float32) from argv[1..3], runs the kernel on a stream of its own,
   writes C to argv[4]. Sizes in floats: argv[5..8]. */
static float* load(const char* path, size_t n) {
  float* h = (float*)malloc(n * sizeof(float));
  FILE* f = fopen(path, "rb");
  if (!f || fread(h, sizeof(float), n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(3); }
  fclose(f);
  float* d = 0;
  if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc\n"); exit(3); }
  cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
  free(h);
  return d;
}

int main(int argc, char** argv) {
  size_t na = atol(argv[5]), nb = atol(argv[6]), nbias = atol(argv[7]), nc = atol(argv[8]);
  float *A = load(argv[1], na), *B = load(argv[2], nb), *bias = load(argv[3], nbias), *C = 0;
  cudaMalloc(&C, nc * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  if (NAME(A, B, bias, C, stream) != 0) { fprintf(stderr, "%s\n", tunefleet_last_error()); return 1; }
  if (cudaStreamSynchronize(stream) != cudaSuccess) { fprintf(stderr, "sync failed\n"); return 1; }
  float* h = (float*)malloc(nc * sizeof(float));
  cudaMemcpy(h, C, nc * sizeof(float), cudaMemcpyDeviceToHost);
  FILE* f = fopen(argv[4], "wb");
  fwrite(h, sizeof(float), nc, f);
  fclose(f);
  return 0;
}
"""


@pytest.mark.timeout(600)
def test_cpp_program_runs_the_artifact_on_the_gpu(tmp_path):
    """A user's C++ program, compiled against the artifact's header and linked to its .so,
    runs the kernel on its own CUDA stream; the result matches numpy."""
    w = ops.make_workload("matmul", {"M": 300, "N": 200, "K": 100, "bias": True, "epilogue": "relu"})
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    out = write_artifact(tmp_path / "artifact", name=built.name, source=built.source, so_path=built.so_path,
                         args=built.args, manifest={"workload": w.to_json(), "target": str(TARGET)})
    main = tmp_path / "main.cu"
    main.write_text(CPP_CALLER.replace("NAME", built.name))
    exe = tmp_path / "main"
    proc = subprocess.run([nvcc.nvcc_path(), str(main), f"-I{out}", f"-L{out}", f"-l:{built.name}.so",
                           f"-Xlinker=-rpath,{out}", "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    inputs = ops.random_inputs(w.tensors(), np.random.default_rng(0))  # A, B, bias
    ref = np.asarray(w.reference(*inputs)[0])
    paths = [tmp_path / f"in{i}.bin" for i in range(len(inputs))]
    for x, path in zip(inputs, paths):
        np.ascontiguousarray(x, dtype=np.float32).tofile(path)
    c_path = tmp_path / "c.bin"
    sizes = [x.size for x in inputs] + [ref.size]
    run = subprocess.run([str(exe), *map(str, paths), str(c_path), *map(str, sizes)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = np.fromfile(c_path, dtype=np.float32).reshape(ref.shape)
    assert relative_error(got, ref) <= TOLERANCE["float32"]
