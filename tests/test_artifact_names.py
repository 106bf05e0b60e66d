"""Artifact names say the target: the builds of one workload for two CPU targets (generic and
the best this host runs) are linked into one C program and loaded into one Python process,
each called and checked against numpy, with the runtime's error text and thread counts not
mixed up between them."""

import subprocess

import numpy as np
import pytest

import tunefleet
from tunefleet.compiler import ops
from tunefleet.compiler.artifact import read_manifest
from tunefleet.compiler.target import Target
from tunefleet.tuner.apply import build_artifact

M, K, N = 24, 40, 56


def test_kernel_names_carry_the_target():
    workload = ops.make_workload("matmul", {"M": M, "N": N, "K": K})
    base = workload.kernel_name()
    names = {str(t): workload.kernel_name(t) for t in map(Target.parse, (
        "cpu -isa=generic", "cpu -isa=avx2", "cpu -isa=avx512", "cuda -arch=sm_90", "cuda -arch=sm_90a"))}
    assert names == {"cpu -isa=generic": f"{base}_generic", "cpu -isa=avx2": f"{base}_avx2",
                     "cpu -isa=avx512": f"{base}_avx512", "cuda -arch=sm_90": f"{base}_sm90",
                     "cuda -arch=sm_90a": f"{base}_sm90a"}
    assert base.startswith("matmul_")


@pytest.fixture(scope="module")
def two_artifacts(tmp_path_factory):
    """{isa: artifact dir} of one matmul for generic and the best ISA of this host."""
    best = Target.host().isa
    if best == "generic":
        pytest.skip("this host runs no ISA but generic: there is no second CPU target to link")
    workload = ops.make_workload("matmul", {"M": M, "N": N, "K": K})
    out = tmp_path_factory.mktemp("two-targets")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEFLEET_CACHE_DIR", str(out / "cache"))
        return {isa: build_artifact(workload, Target("cpu", isa), ops.default_config(workload, Target("cpu", isa)),
                                    out / isa)
                for isa in ("generic", best)}


def _inputs():
    rng = np.random.default_rng(11)
    return rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)


MAIN_C = """
#include <stdio.h>
#include <string.h>
#include "{a}.h"
#include "{b}.h"
static float A[{M} * {K}], B[{K} * {N}], CA[{M} * {N}], CB[{M} * {N}];
static int load(const char* path, float* x, size_t n) {{
  FILE* f = fopen(path, "rb");
  if (!f || fread(x, sizeof(float), n, f) != n) return 1;
  return fclose(f);
}}
int main(void) {{
  if (load("A.bin", A, sizeof A / sizeof *A) || load("B.bin", B, sizeof B / sizeof *B)) return 3;
  if ({a}(A, B, CA) != 0 || {b}(A, B, CB) != 0) return 4;
  FILE* out = fopen("C.bin", "wb");
  fwrite(CA, sizeof CA, 1, out);
  fwrite(CB, sizeof CB, 1, out);
  fclose(out);
  /* an error in the second library is what tunefleet_last_error() reports */
  int64_t shape_a[2] = {{{M}, {K} + 1}}, shape_b[2] = {{{K}, {N}}}, shape_c[2] = {{{M}, {N}}};
  DLTensor a = {{A, {{kDLCPU, 0}}, 2, {{kDLFloat, 32, 1}}, shape_a, NULL, 0}};
  DLTensor b = {{B, {{kDLCPU, 0}}, 2, {{kDLFloat, 32, 1}}, shape_b, NULL, 0}};
  DLTensor c = {{CB, {{kDLCPU, 0}}, 2, {{kDLFloat, 32, 1}}, shape_c, NULL, 0}};
  DLTensor* args[3] = {{&a, &b, &c}};
  if ({b}_checked(args, 3) == 0) return 5;
  printf("%s\\n", tunefleet_last_error());
  /* each library's pool is set through its own name */
  int before = {b}_get_num_threads();
  int set = {a}_set_num_threads(1);
  int got = {a}_get_num_threads();
  printf("%d %d %d\\n", set, got, {b}_get_num_threads() == before);
  return 0;
}}
"""


def test_two_targets_link_into_one_c_program(two_artifacts, tmp_path):
    (generic, a_dir), (best, b_dir) = two_artifacts.items()
    a, b = read_manifest(a_dir)["name"], read_manifest(b_dir)["name"]
    assert a.endswith("_generic") and b.endswith(f"_{best}") and a.removesuffix("_generic") == b.removesuffix(f"_{best}")
    x, y = _inputs()
    x.tofile(tmp_path / "A.bin")
    y.tofile(tmp_path / "B.bin")
    (tmp_path / "main.c").write_text(MAIN_C.format(a=a, b=b, M=M, K=K, N=N))
    subprocess.run(["gcc", "-std=c11", "-Werror", "main.c", "-o", "main", f"-I{a_dir}", f"-I{b_dir}",
                    f"-L{a_dir}", f"-L{b_dir}", f"-l:{a}.so", f"-l:{b}.so",
                    f"-Wl,-rpath,{a_dir}:{b_dir}"], cwd=tmp_path, check=True, capture_output=True)
    run = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    ca, cb = np.fromfile(tmp_path / "C.bin", dtype=np.float32).reshape(2, M, N)
    np.testing.assert_allclose(ca, x @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(cb, x @ y, rtol=1e-4, atol=1e-4)
    error, threads = run.stdout.splitlines()
    assert error == f"{b}_checked: argument 'A': expected shape [{M}, {K}], got [{M}, {K + 1}]"
    assert threads == "1 1 1"


def test_two_targets_load_into_one_process(two_artifacts):
    kernels = [tunefleet.load(d) for d in two_artifacts.values()]
    x, y = _inputs()
    for isa, kernel in zip(two_artifacts, kernels):
        np.testing.assert_allclose(kernel(x, y), x @ y, rtol=1e-4, atol=1e-4)
        assert kernel.isa == isa
    assert len({k.name for k in kernels}) == 2
    before = kernels[1].num_threads
    assert kernels[0].set_num_threads(1) == 1 == kernels[0].num_threads
    assert kernels[1].num_threads == before
