"""GPU artifacts: the launcher's signature matches the header (a C++ program including the
header and calling every entry point compiles and links against the .so), the library needs
nothing but libc at load time and exports only its entry points and the runtime API,
architecture errors name the architecture and the toolkit, and the unit declares the
header's prototypes before defining them (a mismatch fails the build)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.cuda import build as cuda_build, entry_points, nvcc
from tunefleet.compiler.artifact import read_manifest, write_artifact
from tunefleet.compiler.build import BuildError, build_info
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.target import Target

from cuda_helpers import SM80, SM90, needs_nvcc
from manifest_edits import edit_args, load_error

WORKLOAD = ops.make_workload("matmul", {"M": 64, "N": 96, "K": 40, "bias": True, "epilogue": "relu"})


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    if not nvcc.have_nvcc():
        pytest.skip("nvcc not found")
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TUNEFLEET_CACHE_DIR", str(cache))
    try:
        built = build_workload(WORKLOAD, ops.default_config(WORKLOAD, SM90), SM90)
        out = write_artifact(tmp_path_factory.mktemp("artifact"), name=built.name, source=built.source,
                             so_path=built.so_path, args=built.args,
                             manifest={"workload": WORKLOAD.to_json(), "target": str(SM90)})
    finally:
        mp.undo()
    return built, out


@needs_nvcc
def test_artifact_holds_cu_source_gpu_header_and_manifest(artifact):
    built, out = artifact
    name = built.name
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{name}.so", f"{name}.cu", f"{name}.h", "manifest.json"])
    manifest = read_manifest(out)
    assert manifest["build_target"] == "cuda -arch=sm_90" and "-arch=sm_90" in manifest["flags"]
    assert manifest["toolchain"]["nvcc_version"] == nvcc.nvcc_version()
    assert "-cudart" in manifest["flags"] and "static" in manifest["flags"]
    header = (out / f"{name}.h").read_text()
    assert f"int {name}(const float* A, const float* B, const float* bias, float* C, cudaStream_t stream);" in header
    assert "float32  [64, 40]" in header and "kDLCUDA" in header
    assert f"Rebuild from {name}.cu: ${{NVCC:-nvcc}}" in header
    assert build_info(built.so_path)["kind"] == "cuda"


@needs_nvcc
def test_library_needs_only_libc_and_exports_only_the_abi(artifact):
    built, out = artifact
    so = out / f"{built.name}.so"
    dynamic = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert needed and all(n.startswith(("libc.so", "ld-linux", "libm.so", "libdl.so", "librt.so", "libpthread.so"))
                          for n in needed), needed
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True,
                             check=True).stdout.split()
    exported = {s for s in symbols if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) and s not in ("T", "B", "D", "W")}
    name = built.name
    assert {name, f"{name}_packed", f"{name}_checked", "tunefleet_last_error", "tunefleet_cuda_timer"} <= exported
    assert all(s.startswith((name, "tunefleet_")) for s in exported), sorted(exported)


@needs_nvcc
def test_header_matches_the_library_for_a_cpp_caller(artifact, tmp_path):
    built, out = artifact
    name = built.name
    main = tmp_path / "main.cpp"
    main.write_text(f"""
#include <stdio.h>
#include "{name}.h"
int main() {{
  const float *A = 0, *B = 0, *bias = 0; float* C = 0;
  cudaStream_t stream = 0;
  void* args[4] = {{0, 0, 0, 0}};
  DLTensor* tensors[4] = {{0, 0, 0, 0}};
  double seconds[3];
  int (*launch)(const float*, const float*, const float*, float*, cudaStream_t) = &{name};
  int (*packed)(void**, cudaStream_t) = &{name}_packed;
  if (launch(A, B, bias, C, stream) != 0 || {name}_checked(tensors, 4) != 0 ||
      tunefleet_cuda_timer(packed, args, 1, 3, 1, 0, 0, seconds) != 0)
    fprintf(stderr, "%s\\n", tunefleet_last_error());
  return 0;
}}
""")
    exe = tmp_path / "main"
    gxx = shutil.which("g++") or shutil.which("c++")
    proc = subprocess.run([gxx, "-std=c++17", "-Wall", "-Werror", str(main), f"-I{out}", f"-L{out}",
                           f"-l:{name}.so", f"-Wl,-rpath,{out}", "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # without a GPU the program runs and reports why (a launch on a machine with one would work)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    # with the CUDA headers included first, the header's cudaStream_t is the same type
    cu = tmp_path / "main.cu"
    cu.write_text(f'#include <cuda_runtime.h>\n#include "{name}.h"\n'
                  f"int use(float* C) {{ return {name}(0, 0, 0, C, cudaStreamPerThread); }}\n")
    proc = subprocess.run([nvcc.nvcc_path(), "-c", str(cu), f"-I{out}", "-o", str(tmp_path / "main.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # and as C11
    c = tmp_path / "main.c"
    c.write_text(f'#include "{name}.h"\nint use(float* C) {{ return {name}(0, 0, 0, C, 0); }}\n')
    gcc = shutil.which("gcc") or shutil.which("cc")
    proc = subprocess.run([gcc, "-std=c11", "-Wall", "-Werror", "-fsyntax-only", str(c), f"-I{out}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_nvcc
def test_a_launcher_that_disagrees_with_the_header_does_not_build(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path))
    part = cuda_build.workload_kernel(WORKLOAD, ops.default_config(WORKLOAD, SM80), SM80)
    part.launcher = part.launcher.replace("float* C, cudaStream_t stream) {", "double* C, cudaStream_t stream) {", 1)
    with pytest.raises(BuildError, match="conflicting declaration|incompatible|declaration is incompatible"):
        nvcc.compile_cuda_shared(cuda_build.cuda_unit([part]), SM80, name=part.name)


@needs_nvcc
def test_unsupported_architecture_names_it_and_the_toolkit(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path))
    old = Target("cuda", "sm_50")
    assert "sm_50" not in nvcc.supported_archs()
    with pytest.raises(BuildError) as exc:
        build_workload(WORKLOAD, ops.default_config(WORKLOAD, old), old)
    text = str(exc.value)
    assert "sm_50" in text and nvcc.nvcc_version() in text and "sm_90" in text


def test_missing_nvcc_is_a_build_error(monkeypatch):
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    monkeypatch.setattr(nvcc.shutil, "which", lambda name: None)
    monkeypatch.setattr(nvcc, "NVCC_FALLBACKS", ("/nonexistent/cuda/bin/nvcc",))
    with pytest.raises(BuildError, match="nvcc not found"):
        nvcc.nvcc_path()
    assert not nvcc.have_nvcc()


def test_template_views_must_match_the_operator_arguments():
    from tunefleet.compiler import te
    from tunefleet.compiler.abi import arg_specs

    ref = [te.placeholder((8, 4), name="A"), te.placeholder((4,), name="B")]
    view = [te.placeholder((32,), name="A"), te.placeholder((4,), name="B")]
    specs = arg_specs(view, reference=ref)
    assert specs[0].shape == (8, 4)
    with pytest.raises(BuildError, match="not a view"):
        arg_specs([te.placeholder((31,), name="A"), ref[1]], reference=ref)


def test_header_without_nvcc_documents_device_pointers_and_stream():
    from tunefleet.compiler.abi import ArgSpec

    args = [ArgSpec("x", (4, 8), "float32", False, "row-major [M, K]"), ArgSpec("y", (4,), "float32", True)]
    text = entry_points.header_text("k", args, doc="Target: cuda -arch=sm_90",
                                  launch={"grid": [1, 1, 1], "block": [32, 1, 1], "shared_bytes": 0})
    assert "int k(const float* x, float* y, cudaStream_t stream);" in text
    assert "int k_checked(DLTensor** args, int num_args);" in text and "device memory" in text
    assert "row-major [M, K]" in text and "block [32, 1, 1]" in text
    json.dumps(args[0].to_dict())


@needs_nvcc
def test_load_gives_a_gpu_kernel(artifact):
    import numpy as np

    import tunefleet
    from tunefleet.compiler import cuda_device
    from tunefleet.compiler.cuda.kernel import GpuKernel, GpuUnavailable

    built, out = artifact
    kernel = tunefleet.load(out)
    assert isinstance(kernel, GpuKernel) and kernel.name == built.name
    inputs = ops.random_inputs(WORKLOAD.tensors(), np.random.default_rng(0))
    if cuda_device.device_count() == 0:
        with pytest.raises(GpuUnavailable, match="no CUDA device"):
            kernel(*inputs)
    else:
        (ref,) = WORKLOAD.reference(*inputs)
        assert np.allclose(kernel(*inputs), ref, rtol=1e-4, atol=1e-4)


@needs_nvcc
@pytest.mark.parametrize("edit, message", [
    (edit_args(lambda args: args[1].update(shape=[40, 95])), "argument 'B': expected shape [40, 96], got [40, 95]"),
    (edit_args(lambda args: args[3].update(shape=[32, 96])), "argument 'C': expected shape [64, 96], got [32, 96]"),
    (edit_args(lambda args: args[0].update(dtype="float64")), "argument 'A': expected dtype float32, got float64"),
    (edit_args(lambda args: args.pop(2)), "expected 4 arguments (A, B, bias, C), got 3"),
    (edit_args(lambda args: args.insert(1, args.pop(0))), "argument 'A': expected shape [64, 40], got [40, 96]"),
    (edit_args(lambda args: args.clear()), "expected 4 arguments (A, B, bias, C), got 0"),
], ids=["input narrower", "output shorter", "dtype", "argument dropped", "reordered", "no arguments"])
def test_a_gpu_artifacts_manifest_is_checked_against_its_library_on_any_host(artifact, tmp_path, edit, message):
    """A GPU kernel's device buffers are sized from manifest.json: one listing smaller arrays
    would let the kernel write past them. The check needs no CUDA device (CI has none)."""
    import tunefleet
    from tunefleet.compiler.cuda.kernel import GpuKernel

    _, out = artifact
    assert message in load_error(out, tmp_path, edit)
    assert isinstance(tunefleet.load(out), GpuKernel)  # the untouched artifact still loads


@needs_nvcc
def test_gpu_and_cpu_artifacts_linked_into_one_program_share_the_error_text(artifact, tmp_path, monkeypatch):
    built, out = artifact
    gpu = built.name
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path / "cache"))
    cpu_target = Target("cpu", "generic")
    cpu_built = build_workload(WORKLOAD, ops.default_config(WORKLOAD, cpu_target), cpu_target)
    cpu_out = write_artifact(tmp_path / "cpu", name=cpu_built.name, source=cpu_built.source,
                             so_path=cpu_built.so_path, args=cpu_built.args, manifest={})
    cpu = cpu_built.name
    assert gpu.removesuffix("_sm90") == cpu.removesuffix("_generic")  # one workload, two targets
    (tmp_path / "main.cpp").write_text(f"""
#include <stdio.h>
#include "{gpu}.h"
#include "{cpu}.h"
int main() {{
  /* tunefleet_last_error() binds to the GPU library (linked first); the CPU one sets the error */
  if ({cpu}_checked(NULL, 4) == 0) return 1;
  printf("%s\\n", tunefleet_last_error());
  if ({gpu}_checked(NULL, 4) == 0) return 2;
  printf("%s\\n", tunefleet_last_error());
  return 0;
}}
""")
    gxx = shutil.which("g++") or shutil.which("c++")
    subprocess.run([gxx, "-std=c++17", "-Werror", "main.cpp", f"-I{out}", f"-I{cpu_out}", f"-L{out}", f"-L{cpu_out}",
                    f"-l:{gpu}.so", f"-l:{cpu}.so", f"-Wl,-rpath,{out}:{cpu_out}", "-o", "main"],
                   cwd=tmp_path, check=True, capture_output=True)
    run = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    cpu_error, gpu_error = run.stdout.splitlines()
    assert cpu_error.startswith(f"{cpu}_checked: expected 4 arguments") and "args is NULL" in cpu_error
    assert gpu_error.startswith(f"{gpu}_checked: expected 4 arguments") and "args is NULL" in gpu_error
