"""Multi-target libraries: one .so of a workload for every ISA of target.DISPATCH_ISAS (generic,
avx2, avx512), built with gcc. Each path forced with TUNEFLEET_ISA that this host executes gives
numpy's numbers; a forced path it lacks (or one not inside) is a clean error, never an illegal
instruction; unforced, the library picks the host's best. Which ISAs this host runs comes from
Target.host(), never from a hard-coded ISA."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import tunefleet
from tunefleet.cli import main
from tunefleet.compiler import ops
from tunefleet.compiler.artifact import read_manifest
from tunefleet.compiler.target import DISPATCH_ISAS, Target
from tunefleet.tuner.apply import build_multi_target_artifact as build_from_best


def build_multi_target_artifact(workload, isas, out_dir):
    """The multi-target artifact of `workload`'s default configs for `isas`."""
    return build_from_best(workload, dict.fromkeys(isas), out_dir)

SHAPE = {"M": 24, "N": 56, "K": 40}
# An extern micro-kernel is compiled into every ISA's part: its symbol must not clash.
GEMM_2X8 = """
#include <stdint.h>
void gemm_2x8(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int i = 0; i < 2; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < 8; ++j) C[i * ldc + j] += A[i * lda + k] * B[k * ldb + j];
}
"""
MICRO_KERNEL = {"func": "gemm_2x8", "source": GEMM_2X8, "mr": 2, "nr": 8}
HOST_RUNS = [t.isa for t in Target.host().executable()]


def runs_here(isa: str) -> bool:
    return Target("cpu", isa).runs_on(Target.host())


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("build-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEFLEET_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module", params=[None, MICRO_KERNEL], ids=["matmul", "micro-kernel"])
def artifact(request, cache, tmp_path_factory):
    workload = ops.make_workload("matmul", {**SHAPE, "bias": True, "epilogue": "relu",
                                            "micro_kernel": request.param})
    return build_multi_target_artifact(workload, DISPATCH_ISAS, tmp_path_factory.mktemp("multi"))


def run_forced(artifact, isa: str | None) -> dict:
    """In a fresh process (the choice is made at load time) with TUNEFLEET_ISA=isa: the chosen
    ISA or the error, and the output's largest error against numpy's reference."""
    code = f"""
import json, numpy as np, tunefleet
from tunefleet.compiler import ops
k = tunefleet.load({str(artifact)!r})
w = ops.Workload.from_json(k.manifest["workload"])
inputs = ops.random_inputs(w.tensors(), np.random.default_rng(3))
(ref,) = w.reference(*inputs)
try:
    isa = k.isa
except RuntimeError as exc:
    isa = None
    try:
        k(*inputs)
        call = "returned"
    except RuntimeError as call_exc:
        call = str(call_exc)
    print(json.dumps({{"error": str(exc), "call": call}}))
else:
    print(json.dumps({{"isa": isa, "err": float(np.abs(k(*inputs) - ref).max() / np.abs(ref).max())}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "TUNEFLEET_ISA"}
    if isa is not None:
        env["TUNEFLEET_ISA"] = isa
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr  # an illegal instruction would show here as -4
    return json.loads(run.stdout)


def test_the_manifest_and_header_list_every_target_inside(artifact):
    manifest = read_manifest(artifact)
    name = manifest["name"]
    assert manifest["build_targets"] == [f"cpu -isa={isa}" for isa in DISPATCH_ISAS]
    assert [t["kernel"] for t in manifest["targets"]] == [f"{name}_{isa}" for isa in DISPATCH_ISAS]
    assert {t["source"] for t in manifest["targets"]} == {"default config"}
    header = (artifact / f"{name}.h").read_text()
    assert f"const char* {name}_isa(void);" in header and "TUNEFLEET_ISA" in header
    for isa in DISPATCH_ISAS:
        assert f"int {name}_{isa}(const float* A" in header
    # only the entry points and the runtime's public API: the runtime, the parallel bodies and the
    # micro-kernel stay private to their part
    exported = subprocess.run(["nm", "-D", "--defined-only", str(artifact / f"{name}.so")],
                              capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in exported.splitlines()}
    assert symbols == {name, f"{name}_isa", *(f"{kernel}{suffix}" for kernel in [name, *(f"{name}_{isa}" for isa in DISPATCH_ISAS)]
                                              for suffix in ("", "_checked", "_packed")),
                       f"{name}_set_num_threads", f"{name}_get_num_threads", "tunefleet_set_num_threads",
                       "tunefleet_get_num_threads", "tunefleet_last_error", "tunefleet_timer", "tunefleet_error_text"}


@pytest.mark.parametrize("isa", DISPATCH_ISAS)
def test_each_forced_path_is_right_where_the_host_runs_it_and_an_error_elsewhere(artifact, isa):
    result = run_forced(artifact, isa)
    if runs_here(isa):
        assert result["isa"] == isa and result["err"] < 1e-4, result
    else:
        assert f"TUNEFLEET_ISA={isa}: this CPU does not support {isa}" in result["error"], result
        assert result["call"].endswith(result["error"])  # the kernel refuses to run, with the reason


def test_unforced_the_library_runs_the_best_isa_of_this_host(artifact):
    result = run_forced(artifact, None)
    assert result["isa"] == HOST_RUNS[0] and result["err"] < 1e-4


def test_an_isa_not_inside_is_an_error(cache, tmp_path):
    workload = ops.make_workload("matmul", SHAPE)
    art = build_multi_target_artifact(workload, ["avx2", "generic"], tmp_path)
    for forced in ("avx512", "sse9"):
        result = run_forced(art, forced)
        assert result["error"].endswith(f"TUNEFLEET_ISA={forced}: not inside this library, which holds avx2, generic")


def test_a_library_of_isas_this_host_lacks_refuses_to_run(cache, tmp_path):
    lacking = [isa for isa in DISPATCH_ISAS if not runs_here(isa)]
    if not lacking:
        pytest.skip(f"this host runs every ISA of {DISPATCH_ISAS}")
    art = build_multi_target_artifact(ops.make_workload("matmul", SHAPE), lacking, tmp_path)
    result = run_forced(art, None)
    assert result["error"].endswith(f"this CPU supports none of the ISAs inside this library ({', '.join(lacking)})")


def test_the_rebuild_command_rebuilds_the_library(artifact, tmp_path):
    manifest = read_manifest(artifact)
    name = manifest["name"]
    for f in (f"{name}.c", "manifest.json"):
        shutil.copy(artifact / f, tmp_path / f)
    subprocess.run(manifest["build_command"], shell=True, cwd=tmp_path, check=True, capture_output=True)
    result = run_forced(tmp_path, HOST_RUNS[-1])
    assert result["isa"] == HOST_RUNS[-1] and result["err"] < 1e-4


MAIN_C = """
#include <stdio.h>
#include <string.h>
#include "{name}.h"
static float A[{M} * {K}], B[{K} * {N}], bias[{N}], C[{M} * {N}], D[{M} * {N}];
int main(int argc, char** argv) {{
  for (int i = 0; i < {M} * {K}; ++i) A[i] = (float)(i % 7 - 3);
  for (int i = 0; i < {K} * {N}; ++i) B[i] = (float)(i % 5 - 2);
  for (int i = 0; i < {N}; ++i) bias[i] = (float)(i % 3 - 1);
  const char* isa = {name}_isa();
  if (isa == NULL) {{ printf("error %s\\n", tunefleet_last_error()); return 0; }}
  if ({name}(A, B, bias, C) != 0) return 2;
  /* the per-ISA kernel of the chosen path, called directly, agrees */
  int rc = -1;
{direct}
  if (rc != 0 || memcmp(C, D, sizeof C) != 0) return 3;
  printf("%s", isa);
  for (int i = 0; i < {M} * {N}; ++i) printf(" %g", C[i]);
  printf("\\n");
  return 0;
}}
"""


def test_a_c_program_calls_the_dispatcher_and_the_per_isa_kernels(artifact, tmp_path):
    name = read_manifest(artifact)["name"]
    direct = "\n".join(f'  if (strcmp(isa, "{isa}") == 0) rc = {name}_{isa}(A, B, bias, D);' for isa in DISPATCH_ISAS)
    (tmp_path / "main.c").write_text(MAIN_C.format(name=name, direct=direct, **SHAPE))
    subprocess.run(["gcc", "-std=c11", "-Werror", "main.c", "-o", "main", f"-I{artifact}", f"-L{artifact}",
                    f"-l:{name}.so", f"-Wl,-rpath,{artifact}"], cwd=tmp_path, check=True, capture_output=True)
    a = (np.arange(SHAPE["M"] * SHAPE["K"]) % 7 - 3).astype(np.float32).reshape(SHAPE["M"], SHAPE["K"])
    b = (np.arange(SHAPE["K"] * SHAPE["N"]) % 5 - 2).astype(np.float32).reshape(SHAPE["K"], SHAPE["N"])
    expected = np.maximum(a @ b + (np.arange(SHAPE["N"]) % 3 - 1), 0)
    for isa in DISPATCH_ISAS:
        env = {**os.environ, "TUNEFLEET_ISA": isa}
        run = subprocess.run(["./main"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, (isa, run.returncode, run.stderr)
        words = run.stdout.split()
        if runs_here(isa):
            assert words[0] == isa
            np.testing.assert_allclose(np.array(words[1:], dtype=np.float32).reshape(expected.shape), expected)
        else:
            assert words[0] == "error" and f"this CPU does not support {isa}" in run.stdout


def test_build_targets_from_the_command_line(cache, tmp_path):
    result = CliRunner().invoke(main, ["build", "matmul", "--M", "8", "--N", "16", "--K", "8",
                                       "--targets", "avx2,avx512", "--out", str(tmp_path / "k")])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "k")
    assert manifest["build_targets"] == ["cpu -isa=avx512", "cpu -isa=avx2"]
    kernel = tunefleet.load(tmp_path / "k")
    if "avx2" in HOST_RUNS:
        x, y = np.ones((8, 8), np.float32), np.ones((8, 16), np.float32)
        assert kernel.isa in HOST_RUNS and np.array_equal(kernel(x, y), x @ y)
    for bad, message in ((["--targets", "avx2,neon"], "--targets: cpu isa 'neon' cannot be dispatched"),
                         (["--targets", "avx2", "--target", "cpu"], "--targets: not with --target"),
                         (["--targets", ","], "--targets: name at least one ISA")):
        result = CliRunner().invoke(main, ["build", "matmul", "--M", "8", "--N", "16", "--K", "8", *bad,
                                           "--out", str(tmp_path / "bad")])
        assert result.exit_code == 2 and message in result.output, result.output


def test_build_targets_takes_each_isas_best_record(cache, tmp_path):
    from tunefleet.tuner import records
    from tunefleet.tuner.measure import MeasureInput, MeasureResult
    from tunefleet.tuner.records import Record, Toolchain

    workload = ops.make_workload("matmul", {"M": 8, "N": 16, "K": 8})
    avx2 = Target("cpu", "avx2")
    configs = ops.config_space(workload, avx2).random(np.random.default_rng(2), 2)
    path = tmp_path / "records.jsonl"
    for config, seconds in zip(configs, (2e-6, 1e-6)):  # the second is the best
        records.append(path, Record.of(MeasureInput(workload.to_json(), str(avx2), config.to_json()),
                                       MeasureResult("ok", [seconds] * 3), "cpu-test", Toolchain("gcc", "12")))
    result = CliRunner().invoke(main, ["build", "matmul", "--M", "8", "--N", "16", "--K", "8", "--targets",
                                       "generic,avx2", "--records", str(path), "--out", str(tmp_path / "k")])
    assert result.exit_code == 0, result.output
    by_target = {t["target"]: t for t in read_manifest(tmp_path / "k")["targets"]}
    assert by_target["cpu -isa=avx2"]["source"] == "best record"
    assert by_target["cpu -isa=avx2"]["config"] == configs[1].to_json()
    assert by_target["cpu -isa=avx2"]["latency_s"] == 1e-6 and by_target["cpu -isa=avx2"]["device_key"] == "cpu-test"
    assert by_target["cpu -isa=generic"]["source"] == "default config"
    result = CliRunner().invoke(main, ["build", "matmul", "--M", "8", "--N", "16", "--K", "8", "--records", str(path),
                                       "--out", str(tmp_path / "bad")])
    assert result.exit_code == 2 and "--records: only with --targets" in result.output
    best = configs[1].to_json()  # a knob value its space does not hold: before, exit 1 blaming the build
    damaged = {**best, "knobs": {**best["knobs"], next(iter(best["knobs"])): [0]}}
    records.append(path, Record.of(MeasureInput(workload.to_json(), str(avx2), damaged),
                                   MeasureResult("ok", [1e-7] * 3), "cpu-test", Toolchain("gcc", "12")))
    result = CliRunner().invoke(main, ["build", "matmul", "--M", "8", "--N", "16", "--K", "8", "--targets",
                                       "generic,avx2", "--records", str(path), "--out", str(tmp_path / "bad")])
    assert result.exit_code == 2 and "--records: a best record's config is not in its config space" in result.output
