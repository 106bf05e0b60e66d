"""Names that C or C++ cannot declare as they are (keywords, standard macros, what the generated
code calls) are written tf_u_<name> in generated code and headers (compiler/codegen/c_names.py).
Before, a custom computation with a tensor or axis named NAN, expf, int64_t or linux failed
every build, and one named this or class gave a header that no C++ program could include."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.build import BASE_FLAGS
from tunefleet.compiler.codegen.c_names import c_identifier, reserved
from tunefleet.compiler.codegen.cstyle import MATH_FUNCTIONS
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.target import Target
from tunefleet.tuner.apply import build_artifact
from tunefleet.tuner.measure_child import outputs_error

C_HEADERS = ("math.h", "stdint.h", "stddef.h", "string.h", "stdlib.h", "stdio.h")
CPP_HEADERS = ("cmath", "cstdint", "cstddef", "cstring", "cstdlib", "cstdio")
#: Tensor names, then the stage's, the output's and the axes' names.
INPUTS = ("NAN", "this", "expf", "int64_t", "stdout", "delete")
OTHERS = ("memcpy", "linux", "M_PI", "isnan", "INT8_MAX", "signbit")


def _macros(compiler: str, flags: list[str], headers: tuple[str, ...], tmp_path) -> set[str]:
    source = tmp_path / ("probe.c" if compiler == "gcc" else "probe.cpp")
    source.write_text("".join(f"#include <{h}>\n" for h in headers))
    out = subprocess.run([compiler, *flags, "-dM", "-E", str(source)], capture_output=True, text=True, check=True)
    names = {re.match(r"#define (\w+)", line).group(1) for line in out.stdout.splitlines()}
    return {n for n in names if not n.startswith("_")}


def test_every_macro_of_the_standard_headers_and_every_math_function_called_is_reserved(tmp_path):
    c_flags = [f for f in BASE_FLAGS if f.startswith("-std")]
    macros = _macros("gcc", c_flags, C_HEADERS, tmp_path) | _macros("g++", [], CPP_HEADERS, tmp_path)
    assert {"NAN", "EOF", "linux", "stdout", "M_PI", "INT8_MAX"} <= macros  # the probe reads them
    assert sorted(n for n in macros if not reserved(n)) == []
    called = {f"{f}{suffix}" for f in MATH_FUNCTIONS.values() for suffix in ("", "f")} | {"fminf", "fmaxf"}
    assert sorted(n for n in called if not reserved(n)) == []
    assert not any(reserved(n) for n in ("A", "B", "X", "W", "data", "weight", "B_packed", "i_o", "y1", "size"))


def _computation() -> dict:
    mid, out, a1, r1, a2, a3 = OTHERS

    def load(t, i, j):
        return ["load", t, [["var", i], ["var", j]]]

    body = ["call", "exp", [["load", mid, [["var", a2]]]]]
    for t in INPUTS:
        body = ["add", body, load(t, a2, a3)]
    return {"version": 1, "outputs": [out], "tensors": [
        *[{"name": t, "op": "placeholder", "shape": [8, 16], "dtype": "float32"} for t in INPUTS],
        {"name": mid, "op": "compute", "shape": [8], "dtype": "float32", "axes": [a1],
         "reduce_axes": [{"name": r1, "extent": 16}],
         "body": ["reduce", "sum", ["mul", load(INPUTS[0], a1, r1), ["const", 0.1, "float32"]], [r1]]},
        {"name": out, "op": "compute", "shape": [8, 16], "dtype": "float32", "axes": [a2, a3], "body": body}]}


@pytest.fixture(scope="module")
def workload():
    return ops.make_workload("custom", {"te": _computation()})


def test_a_computation_named_with_reserved_names_builds_and_matches_the_interpreter(workload):
    target = Target.host()
    configs = [ops.default_config(workload, target), *ops.config_space(workload, target).random(
        np.random.default_rng(0), 2)]
    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng(0))
    for config in configs:
        built = build_workload(workload, config, target)
        assert not outputs_error(workload, built.args, built.run(*inputs), workload.reference(*inputs))
    assert [a.name for a in built.args] == [*INPUTS, "linux"]  # the ABI's names stay the user's


@pytest.mark.parametrize("compiler, headers", [("gcc", C_HEADERS), ("g++", CPP_HEADERS)])
def test_its_header_serves_c_and_cpp_programs_that_include_the_standard_headers_first(
        workload, tmp_path, compiler, headers):
    art = build_artifact(workload, Target.host(), ops.default_config(workload, Target.host()), tmp_path / "art")
    (header,) = art.glob("*.h")
    prototype = re.search(rf"^int {header.stem}\((.*)\);$", header.read_text(), re.M).group(1)
    assert prototype.split(", ") == [*(f"const float* {c_identifier(n)}" for n in INPUTS), "float* tf_u_linux"]
    main = tmp_path / ("main.c" if compiler == "gcc" else "main.cpp")
    main.write_text("".join(f"#include <{h}>\n" for h in headers) + f'#include "{header.name}"\n' + f"""
static float in[6][8 * 16], out[8 * 16];
int main(void) {{
  for (int i = 0; i < 8 * 16; ++i) in[0][i] = 1.0f;
  if ({header.stem}(in[0], in[1], in[2], in[3], in[4], in[5], out) != 0) return 1;
  printf("%.4f\\n", out[0]);
  return 0;
}}
""")
    exe = tmp_path / "main"
    subprocess.run([compiler, str(main), f"-I{art}", f"-L{art}", f"-l:{header.stem}.so", f"-Wl,-rpath,{art}",
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30, check=True)
    assert float(run.stdout) == pytest.approx(np.exp(1.6) + 1.0, rel=1e-5)  # exp(sum of 16 x 0.1) + NAN[0][0]
