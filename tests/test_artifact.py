"""Artifacts end to end: the ABI entry points, the header from C and C++, the manifest, the
rebuild command and tunefleet.load. A hand-written matmul stands in for generated code."""

import ctypes
import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import tunefleet
from tunefleet.compiler.abi import ABI_VERSION, ArgSpec, entry_points_source
from tunefleet.compiler.artifact import read_manifest, write_artifact
from tunefleet.compiler.build import compile_shared
from tunefleet.compiler.target import Target

M, K, N = 16, 64, 32
ARGS = [ArgSpec("A", (M, K), "float32", False), ArgSpec("B", (K, N), "float32", False),
        ArgSpec("C", (M, N), "float32", True)]

MATMUL = f"""
#include "tunefleet_runtime.h"

typedef struct {{ const float* a; const float* b; float* c; }} matmul_t;

static void matmul_rows(int64_t begin, int64_t end, void* p) {{
  matmul_t* t = p;
  for (int64_t i = begin; i < end; ++i)
    for (int j = 0; j < {N}; ++j) {{
      float acc = 0.0f;
      for (int k = 0; k < {K}; ++k) acc += t->a[i * {K} + k] * t->b[k * {N} + j];
      t->c[i * {N} + j] = acc;
    }}
}}

TF_EXPORT int matmul(const float* restrict A, const float* restrict B, float* restrict C) {{
  matmul_t t = {{A, B, C}};
  tf_parallel_for({M}, matmul_rows, &t);
  return 0;
}}
"""

# Fills A and B the way inputs() does; prints C, one value per line.
FILL = f"""
  static float A[{M * K}], B[{K * N}], C[{M * N}];
  for (int i = 0; i < {M * K}; ++i) A[i] = (float)(i % 7 - 3);
  for (int i = 0; i < {K * N}; ++i) B[i] = (float)(i % 5 - 2);
"""

CPP_MAIN = f"""
#include <cstdio>
#include "matmul.h"
int main() {{
{FILL}
  if (matmul(A, B, C) != 0) {{ std::fprintf(stderr, "%s\\n", tunefleet_last_error()); return 1; }}
  for (int i = 0; i < {M * N}; ++i) std::printf("%g\\n", C[i]);
  return 0;
}}
"""

C_CHECKED_MAIN = f"""
#include <stdio.h>
#include "matmul.h"
int main(void) {{
{FILL}
  int64_t shape_a[2] = {{{M}, {K}}}, shape_b[2] = {{{K}, {N + 1}}}, shape_c[2] = {{{M}, {N}}};
  DLTensor a = {{A, {{kDLCPU, 0}}, 2, {{kDLFloat, 32, 1}}, shape_a, NULL, 0}};
  DLTensor b = {{B, {{kDLCPU, 0}}, 2, {{kDLFloat, 32, 1}}, shape_b, NULL, 0}};
  DLTensor c = {{C, {{kDLCPU, 0}}, 2, {{kDLFloat, 32, 1}}, shape_c, NULL, 0}};
  DLTensor* args[3] = {{&a, &b, &c}};
  if (matmul_checked(args, 3) == 0) return 1;
  printf("%s\\n", tunefleet_last_error());
  shape_b[1] = {N};
  if (matmul_checked(args, 3) != 0) return 2;
  printf("%g\\n", C[0]);
  return 0;
}}
"""


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path_factory.mktemp("build-cache")))
        return compile_shared([entry_points_source("matmul", ARGS), MATMUL], Target.host(),
                              name="matmul")


@pytest.fixture(scope="module")
def artifact(so, tmp_path_factory):
    return write_artifact(
        tmp_path_factory.mktemp("artifact"), name="matmul",
        source=so.with_suffix(".c").read_text(), so_path=so, args=ARGS,
        manifest={"workload": {"op": "matmul", "shape": [M, K, N]}, "target": str(Target.host()),
                  "device_key": "cpu-test", "config": {"tile": 4}, "latency_s": 1.5e-6,
                  "gflops": 21.8})


def inputs():
    a = (np.arange(M * K) % 7 - 3).astype(np.float32).reshape(M, K)
    b = (np.arange(K * N) % 5 - 2).astype(np.float32).reshape(K, N)
    return a, b


def compile_and_run(compiler, main_file, link_args, cwd):
    exe = cwd / "main"
    subprocess.run([compiler, str(main_file), "-o", str(exe), *link_args], cwd=cwd, check=True,
                   capture_output=True, text=True)
    return subprocess.run([str(exe)], cwd=cwd, capture_output=True, text=True, timeout=30)


def test_artifact_files_and_manifest(artifact):
    assert sorted(p.name for p in artifact.iterdir()) == [
        "manifest.json", "matmul.c", "matmul.h", "matmul.so"]
    manifest = read_manifest(artifact)
    assert manifest["name"] == "matmul" and manifest["abi_version"] == ABI_VERSION == 1
    assert manifest["so_sha256"] == hashlib.sha256((artifact / "matmul.so").read_bytes()).hexdigest()
    assert manifest["args"][1] == {"name": "B", "shape": [K, N], "dtype": "float32",
                                   "is_output": False, "layout": "row-major"}
    assert manifest["device_key"] == "cpu-test" and manifest["config"] == {"tile": 4}
    assert set(Target.host().cflags) <= set(manifest["flags"])
    assert "gcc" in manifest["toolchain"]["cc_version"].lower()
    header = (artifact / "matmul.h").read_text()
    assert f"A  input   float32  [{M}, {K}]" in header and "Device key: cpu-test" in header
    assert manifest["build_command"] in header


def test_cpp_program_links_against_the_header_like_a_user(artifact, tmp_path):
    work = tmp_path / "user"
    shutil.copytree(artifact, work)
    (work / "libmatmul.so").symlink_to("matmul.so")
    (work / "main.cpp").write_text(CPP_MAIN)
    run = compile_and_run("g++", work / "main.cpp", ["-L.", "-lmatmul", "-Wl,-rpath,."], work)
    assert run.returncode == 0, run.stderr
    a, b = inputs()
    np.testing.assert_array_equal(np.array(run.stdout.split(), dtype=np.float32), (a @ b).ravel())


def test_c_program_gets_a_shape_error_from_checked_entry_point(artifact, tmp_path):
    (tmp_path / "main.c").write_text(C_CHECKED_MAIN)
    run = compile_and_run("gcc", tmp_path / "main.c",
                          [f"-I{artifact}", f"-L{artifact}", "-l:matmul.so",
                           f"-Wl,-rpath,{artifact}"], tmp_path)
    assert run.returncode == 0, run.stderr
    message, first = run.stdout.splitlines()
    assert message == f"matmul_checked: argument 'B': expected shape [{K}, {N}], got [{K}, {N + 1}]"
    a, b = inputs()
    assert float(first) == (a @ b)[0, 0]


def test_rebuild_command_from_the_shipped_source(artifact, tmp_path):
    shutil.copy(artifact / "matmul.c", tmp_path)
    subprocess.run(["bash", "-c", read_manifest(artifact)["build_command"]], cwd=tmp_path,
                   check=True)
    fn = ctypes.CDLL(str(tmp_path / "matmul.so")).matmul
    a, b = inputs()
    c = np.empty((M, N), np.float32)
    assert fn(*(x.ctypes.data_as(ctypes.c_void_p) for x in (a, b, c))) == 0
    np.testing.assert_array_equal(c, a @ b)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def dltensor(array, *, strides=None, device=1, byte_offset=0):
    """A DLTensor over `array` (kept alive with its shape/strides as attributes)."""
    codes = {"f": 2, "i": 0, "u": 1}
    shape = (ctypes.c_int64 * array.ndim)(*array.shape)
    stride_array = None if strides is None else (ctypes.c_int64 * array.ndim)(*strides)
    t = DLTensor(array.ctypes.data - byte_offset, DLDevice(device, 0), array.ndim,
                 DLDataType(codes[array.dtype.kind], array.dtype.itemsize * 8, 1), shape,
                 stride_array, byte_offset)
    t.keep = (array, shape, stride_array)
    return t


def call_checked(artifact, *tensors, num_args=None):
    lib = ctypes.CDLL(str(artifact / "matmul.so"))
    lib.tunefleet_last_error.restype = ctypes.c_char_p
    args = (ctypes.POINTER(DLTensor) * len(tensors))(*(ctypes.pointer(t) for t in tensors))
    rc = lib.matmul_checked(args, len(tensors) if num_args is None else num_args)
    return rc, lib.tunefleet_last_error().decode()


def test_checked_entry_point_accepts_valid_tensors(artifact):
    a, b = inputs()
    c = np.zeros((M, N), np.float32)
    assert call_checked(artifact, dltensor(a, byte_offset=64), dltensor(b, strides=(N, 1)),
                        dltensor(c))[0] == 0
    np.testing.assert_array_equal(c, a @ b)


@pytest.mark.parametrize("case, message", [
    ("shape", f"argument 'B': expected shape [{K}, {N}], got [{K}, {N + 1}]"),
    ("dtype", "argument 'A': expected dtype float32, got float64"),
    ("ndim", "argument 'C': expected 2 dimensions, got 1"),
    ("strides", f"argument 'B': expected compact row-major strides [{N}, 1] (or NULL), "
                f"got [1, {K}]"),
    ("device", "argument 'A': expected device kDLCPU (1), got device_type 2"),
    ("alias", "output 'C' overlaps argument 'B'"),
    ("num_args", "expected 3 arguments (A, B, C), got 2"),
])
def test_checked_entry_point_names_the_bad_argument(artifact, case, message):
    a, b = inputs()
    c = np.zeros((M, N), np.float32)
    tensors = {"A": dltensor(a), "B": dltensor(b), "C": dltensor(c)}
    if case == "shape":
        tensors["B"] = dltensor(np.zeros((K, N + 1), np.float32))
    elif case == "dtype":
        tensors["A"] = dltensor(a.astype(np.float64))
    elif case == "ndim":
        tensors["C"] = dltensor(c.ravel())
    elif case == "strides":
        tensors["B"] = dltensor(b, strides=(1, K))
    elif case == "device":
        tensors["A"] = dltensor(a, device=2)
    elif case == "alias":
        tensors["C"] = dltensor(b[:M])
    rc, error = call_checked(artifact, *tensors.values(),
                             num_args=2 if case == "num_args" else None)
    assert rc != 0 and error.startswith("matmul_checked: ") and message in error
    assert not c.any()


def test_load_calls_the_kernel_on_numpy_arrays(artifact):
    a, b = inputs()
    for path in (artifact, artifact / "matmul.so"):
        kernel = tunefleet.load(path)
        np.testing.assert_array_equal(kernel(a, b), a @ b)
    out = np.empty((M, N), np.float32)
    assert kernel(a, b, out=out) is out
    np.testing.assert_array_equal(out, a @ b)
    assert kernel.manifest["name"] == "matmul" and kernel.num_threads >= 1
    assert "matmul(A: float32[16, 64], B: float32[64, 32])" in repr(kernel)


class DLPackOnly:
    """An array exposed only through the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_load_accepts_dlpack_objects(artifact):
    a, b = inputs()
    out = np.zeros((M, N), np.float32)
    kernel = tunefleet.load(artifact)
    kernel(DLPackOnly(a), DLPackOnly(b), out=DLPackOnly(out))
    np.testing.assert_array_equal(out, a @ b)


@pytest.mark.parametrize("make, error, message", [
    (lambda a, b: ((a.astype(np.float64), b), {}), ValueError,
     "argument 'A': expected dtype float32, got float64"),
    (lambda a, b: ((a, np.zeros((K, N + 1), np.float32)), {}), ValueError,
     f"argument 'B': expected shape [{K}, {N}], got [{K}, {N + 1}]"),
    (lambda a, b: ((np.asfortranarray(a), b), {}), ValueError,
     "argument 'A': expected a C-contiguous"),
    (lambda a, b: ((a, b), {"out": b[:M]}), ValueError,
     "argument 'C': output overlaps argument 'B'"),
    (lambda a, b: ((a, [0.0]), {}), ValueError, "argument 'B': expected a numpy array"),
    (lambda a, b: ((a,), {}), TypeError, "matmul takes 2 inputs (A, B), got 1"),
])
def test_load_validates_arguments(artifact, make, error, message):
    kernel = tunefleet.load(artifact)
    args, kwargs = make(*inputs())
    with pytest.raises(error) as info:
        kernel(*args, **kwargs)
    assert message in str(info.value)


def test_load_rejects_read_only_outputs_and_newer_abi(artifact, tmp_path):
    out = np.zeros((M, N), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'C': the output array is read-only"):
        tunefleet.load(artifact)(*inputs(), out=out)
    newer = tmp_path / "newer"
    shutil.copytree(artifact, newer)
    manifest = read_manifest(newer)
    (newer / "manifest.json").write_text(json.dumps({**manifest, "abi_version": ABI_VERSION + 1}))
    with pytest.raises(ValueError, match="newer than this tunefleet's"):
        tunefleet.load(newer)


def test_kernel_time_and_thread_count(artifact):
    kernel = tunefleet.load(artifact)
    seconds = kernel.time(*inputs(), number=3, repeat=4, min_repeat_ms=1, cooldown_ms=1)
    assert seconds.shape == (4,) and (seconds > 0).all() and (seconds < 0.01).all()
    mask = len(os.sched_getaffinity(0))
    try:
        assert kernel.set_num_threads(1) == 1 and kernel.num_threads == 1
        np.testing.assert_array_equal(kernel(*inputs()), np.matmul(*inputs()))
    finally:
        assert kernel.set_num_threads(0) == mask


def test_write_artifact_refuses_a_library_built_under_another_name(so, tmp_path):
    with pytest.raises(ValueError, match="was built as 'matmul'"):
        write_artifact(tmp_path, name="other", source="", so_path=so, args=ARGS, manifest={})
