"""Tensorize with an extern C micro-kernel: the source travels with the workload, is
compiled into every candidate and into the artifact, and the artifact stands alone."""

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.artifact import write_artifact
from tunefleet.compiler.build import BuildError
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.target import Target

TARGET = Target.host()
GEMM_4X16 = """
#include <stdint.h>
void gemm_4x16(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int i = 0; i < 4; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < 16; ++j) C[i * ldc + j] += A[i * lda + k] * B[k * ldb + j];
}
"""


def workload(M, N, K, source=GEMM_4X16, **extra):
    mk = {"func": "gemm_4x16", "source": source, "mr": 4, "nr": 16}
    return ops.make_workload("matmul", {"M": M, "N": N, "K": K, "micro_kernel": mk, **extra})


def check(w, config):
    built = build_workload(w, config, TARGET)
    assert built.source.count("gemm_4x16(") >= 2  # defined, and called where the loops were
    inputs = ops.random_inputs(w.tensors(), np.random.default_rng(config.index))
    (out,) = built.run(*inputs)
    (ref,) = w.reference(*inputs)
    return np.abs(out - ref).max() / np.abs(ref).max()


def test_tensorized_matmul_matches_numpy_over_random_configs():
    rng = np.random.default_rng(5)
    cases = []
    for shape, extra in [((64, 64, 32), {}), ((30, 50, 17), {}), ((33, 64, 8), {"bias": True, "epilogue": "relu"})]:
        w = workload(*shape, **extra)
        cases += [(w, c) for c in ops.config_space(w, TARGET).random(rng, 7)]
    with ThreadPoolExecutor(2) as pool:
        errors = list(pool.map(lambda c: check(*c), cases))
    assert len(cases) >= 20 and max(errors) < 1e-4, errors


def test_artifact_loads_in_a_fresh_process_with_no_other_library(tmp_path):
    w = workload(32, 48, 20)
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    art = write_artifact(tmp_path / "art", name=built.name, source=built.source, so_path=built.so_path,
                         args=built.args, manifest={"workload": w.to_json()})
    needed = subprocess.run(["objdump", "-p", str(art / f"{built.name}.so")], capture_output=True, text=True).stdout
    libs = {line.split()[1] for line in needed.splitlines() if line.strip().startswith("NEEDED")}
    assert libs <= {"libc.so.6", "libm.so.6", "libpthread.so.0", "ld-linux-x86-64.so.2"}, libs
    code = textwrap.dedent(f"""
        import numpy as np, tunefleet
        k = tunefleet.load({str(art)!r})
        a = np.ones((32, 20), np.float32); b = np.full((20, 48), 2.0, np.float32)
        print(float(k(a, b)[0, 0]))
    """)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "", "PYTHONPATH": ":".join(sys.path)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout) == 40.0


def test_micro_kernel_that_does_not_compile_gives_the_compilers_message():
    w = workload(8, 16, 4, source="void gemm_4x16(int64_t K) { return K; }  /* missing header, bad return */")
    with pytest.raises(BuildError) as e:
        build_workload(w, ops.default_config(w, TARGET), TARGET)
    assert "error" in e.value.compiler_output and "gemm_4x16" in str(e.value)


@pytest.mark.parametrize("mk, field", [
    ({"func": "gemm", "source": "x" * (300 * 1024), "mr": 4, "nr": 16}, "micro_kernel.source"),
    ({"func": "g; system", "source": "int x;", "mr": 4, "nr": 16}, "micro_kernel.func"),
    ({"func": "gemm", "source": "int x;", "mr": 0, "nr": 16}, "micro_kernel.mr"),
    ({"func": "gemm", "source": "int x;", "mr": 4}, "micro_kernel"),
])
def test_bad_micro_kernels_are_rejected_naming_the_field(mk, field):
    with pytest.raises(ops.WorkloadError) as e:
        ops.make_workload("matmul", {"M": 8, "N": 16, "K": 4, "micro_kernel": mk})
    assert e.value.field == field
