"""Targets and builds: target strings, cached compiles, compiler errors, micro-kernel sources."""

import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest
from isa_targets import FAMILY, params
from ops_check import sample

from tunefleet.compiler import build, ops
from tunefleet.compiler.build import BuildError, build_info, compile_shared, toolchain_versions
from tunefleet.compiler.driver import kernel_source, lower_workload
from tunefleet.compiler.target import Target, TargetError, list_targets
from tunefleet.compiler.toolchain import compiler_command

TARGET = Target.host()

SQUARE = """
#include "tunefleet_runtime.h"
TF_EXPORT int square(int x) { return x * x; }
"""

# A kernel calling an extern micro-kernel that arrives as an extra source.
USES_MICRO = """
#include "tunefleet_runtime.h"
int micro_axpy(int a, int x, int y);
TF_EXPORT int uses_micro(int x) { return micro_axpy(3, x, 1); }
"""
MICRO = "int micro_axpy(int a, int x, int y) { return a * x + y; }\n"


@pytest.fixture(autouse=True)
def build_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("text", ["cpu -isa=avx512", "cpu -isa=avx2", "cpu -isa=neon",
                                  "cpu -isa=generic", "cuda -arch=sm_90", "cuda -arch=sm_90a"])
def test_target_string_round_trip(text):
    target = Target.parse(text)
    assert str(target) == text and Target.parse(str(target)) == target


def test_target_properties():
    avx512, avx2 = Target.parse("cpu -isa=avx512"), Target.parse(" cpu   -isa=avx2 ")
    assert (avx512.vector_bytes, avx512.lanes("float32"), avx512.lanes("float64")) == (64, 16, 8)
    assert (avx2.vector_bytes, avx2.lanes("float32")) == (32, 8)
    assert Target.parse("cpu -isa=neon").lanes("float32") == 4
    assert (avx512.vector_registers, avx2.vector_registers, Target.parse("cpu -isa=neon").vector_registers) == (32, 16, 32)
    with pytest.raises(TargetError, match="only cpu targets"):
        Target.parse("cuda -arch=sm_90").vector_registers
    assert avx2.cflags == ["-mavx2", "-mfma"] and "-mavx512f" in avx512.cflags
    assert not any("native" in flag for t in (avx512, avx2) for flag in t.cflags)
    assert Target.parse("cpu") == Target.host() == Target.local("cpu")  # a kind alone: this machine's best
    assert TARGET.kind == "cpu" and TARGET.isa in {"avx512", "avx2", "neon", "generic"}


@pytest.mark.parametrize("text, listed", [
    ("cpu -isa=sse4", "avx512, avx2, neon, generic"),
    ("tpu", "cpu, cuda"),
    ("cuda -arch=volta", "sm_90"),
    ("cpu -mcpu=skylake", "-isa="),
    ("cuda -isa=sm_90", "-arch="),
])
def test_bad_targets_list_the_allowed_values(text, listed):
    with pytest.raises(TargetError, match="allowed|takes|needs") as info:
        Target.parse(text)
    assert listed in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(TargetError):
        Target.host().lanes("complex128")


def test_list_targets_names_kinds_values_and_host_default():
    cpu, cuda = list_targets()
    assert cpu["kind"] == "cpu" and cpu["values"] == ["avx512", "avx2", "neon", "generic"]
    assert (cpu["default"], cuda["default"]) == ("cpu", "cuda") and cuda["kind"] == "cuda"
    assert "sm_90" in cuda["values"]


def load_square(so):
    fn = ctypes.CDLL(str(so)).square
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


def logging_compiler(tmp_path, monkeypatch):
    """($CC's log, $CC): a gcc wrapper set as CC that appends each command line to the log."""
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "cc-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec gcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    return log, wrapper


def test_build_and_cache_hit_does_not_recompile(tmp_path, monkeypatch):
    log, wrapper = logging_compiler(tmp_path, monkeypatch)
    first = compile_shared([SQUARE], TARGET, name="square")
    compiles = [line for line in log.read_text().splitlines() if "-shared" in line]
    assert len(compiles) == 1 and load_square(first)(7) == 49
    assert compile_shared([SQUARE], TARGET, name="square") == first
    assert [line for line in log.read_text().splitlines() if "-shared" in line] == compiles
    other_flags = compile_shared([SQUARE], TARGET, name="square", extra_flags=["-O2"])
    assert other_flags != first
    info = build_info(first)
    assert info["name"] == "square" and info["toolchain"]["cc"] == [str(wrapper)]
    assert info["command"].startswith("${CC:-gcc} -O3") and "square.c -o square.so" in info["command"]
    assert not re.search(r'^\s*#\s*include "', first.with_suffix(".c").read_text(), re.M)


def test_concurrent_builders_in_several_processes_agree(tmp_path):
    code = ("from tunefleet.compiler.build import compile_shared;"
            "from tunefleet.compiler.target import Target;"
            f"print(compile_shared([{SQUARE!r}], Target.host(), name='square'))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    paths = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(paths) == 1
    assert load_square(paths.pop())(5) == 25
    assert not [p for p in (tmp_path / "cache").rglob(".*")], "temporary files left behind"
    assert len(runtime_objects(tmp_path)) == 1


def runtime_objects(tmp_path):
    return sorted((tmp_path / "cache" / "runtime").glob("*/tunefleet_runtime.o"))


def test_runtime_object_is_compiled_once_and_linked_into_every_library(tmp_path, monkeypatch):
    log, _ = logging_compiler(tmp_path, monkeypatch)
    square = compile_shared([SQUARE], TARGET, name="square")
    micro = compile_shared([USES_MICRO], TARGET, name="uses_micro", extra_sources=[MICRO])
    [runtime] = runtime_objects(tmp_path)
    lines = log.read_text().splitlines()
    assert [line for line in lines if " -c " in line] == [line for line in lines if "tunefleet_runtime.c" in line]
    assert len([line for line in lines if " -c " in line]) == 1
    links = [line.split() for line in lines if "-shared" in line]
    assert len(links) == 2 and all(str(runtime) in link and "-DTUNEFLEET_RUNTIME_LINKED" in link
                                   for link in links)
    assert build_info(square)["runtime_object"] == build_info(micro)["runtime_object"] == str(runtime)
    assert load_square(square)(6) == 36
    # another flag, or another runtime source, is another object
    compile_shared([SQUARE], TARGET, name="square", extra_flags=["-O2"])
    header, source = build.runtime_sources()
    monkeypatch.setattr(build, "runtime_sources", lambda: (header, source + "\n/* changed */\n"))
    compile_shared([SQUARE], TARGET, name="square")
    assert len(runtime_objects(tmp_path)) == 3 and runtime in runtime_objects(tmp_path)


def test_the_shared_dltensor_checks_are_inlined_and_their_change_is_another_runtime_object(tmp_path, monkeypatch):
    first = compile_shared([SQUARE], TARGET, name="square")
    unit = first.with_suffix(".c").read_text()
    assert "static int tf_check_tensor_layout(" in unit and not re.search(r'^\s*#\s*include "', unit, re.M)
    runtime_dir = tmp_path / "runtime"
    shutil.copytree(build.RUNTIME_DIR, runtime_dir)
    check = runtime_dir / "tunefleet_dltensor_check.h"
    check.write_text(check.read_text() + "/* changed */\n")
    monkeypatch.setattr(build, "RUNTIME_DIR", runtime_dir)
    build.runtime_sources.cache_clear()
    try:
        second = compile_shared([SQUARE], TARGET, name="square")
    finally:
        build.runtime_sources.cache_clear()
    assert second != first and "/* changed */" in second.with_suffix(".c").read_text()
    assert build_info(second)["runtime_object"] != build_info(first)["runtime_object"]
    assert len(runtime_objects(tmp_path)) == 2 and load_square(second)(7) == 49


def test_a_library_exports_its_entry_points_and_the_public_runtime_api_only():
    so = compile_shared([SQUARE], TARGET, name="square")
    nm = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True)
    assert {line.split()[-1] for line in nm.stdout.splitlines()} == {
        "square", "tunefleet_get_num_threads", "tunefleet_last_error", "tunefleet_set_num_threads",
        "tunefleet_timer", "tunefleet_error_text"}  # the error text: one per process (see test_artifact_names)


def test_syntax_error_carries_the_compiler_output():
    with pytest.raises(BuildError) as info:
        compile_shared(["int broken(void) { return 1 }"], TARGET, name="broken")
    assert "expected ';'" in info.value.compiler_output
    assert info.value.compiler_output.strip() in str(info.value) and "broken" in str(info.value)


def test_micro_kernel_sources_are_compiled_in():
    so = compile_shared([USES_MICRO], TARGET, name="uses_micro", extra_sources=[MICRO])
    fn = ctypes.CDLL(str(so)).uses_micro
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    assert fn(4) == 13


def test_missing_micro_kernel_fails_the_build_not_the_load():
    with pytest.raises(BuildError, match="micro_axpy"):
        compile_shared([USES_MICRO], TARGET, name="uses_micro")


def test_oversized_micro_kernel_sources_are_refused():
    with pytest.raises(BuildError, match=f"limit is {build.MAX_EXTRA_SOURCE_BYTES} bytes"):
        compile_shared([USES_MICRO], TARGET, name="uses_micro",
                       extra_sources=[MICRO, "/*" + "x" * build.MAX_EXTRA_SOURCE_BYTES + "*/"])


def test_compiler_timeout_and_missing_compiler(monkeypatch):
    monkeypatch.setattr(build, "COMPILE_TIMEOUT_S", 0.001)
    with pytest.raises(BuildError, match="timed out after"):
        compile_shared([SQUARE], TARGET, name="square")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(BuildError, match="not found"):
        compile_shared([SQUARE], TARGET, name="square")


def test_toolchain_versions_name_the_compiler():
    versions = toolchain_versions()
    assert versions["cc"][0].endswith("gcc") and "gcc" in versions["cc_version"].lower()


@pytest.mark.parametrize("target", params(FAMILY))
def test_kernel_units_compile_without_warnings_under_wall(target, tmp_path):
    """A library's `<name>.c`, as a user rebuilds it with -Wall, passes gcc's -Wall front-end
    checks (-fsyntax-only) without a warning: random configs of the matmul, dense and conv2d
    templates on each ISA of the host's family, whose register tiles' tail copies read a few of
    the tile's vectors (each block declares only those it names: they were all declared, up to
    112 unused variables in one unit)."""
    cases = []
    for n, (op, args) in enumerate([("matmul", dict(M=37, N=45, K=29)), ("dense", dict(M=5, N=21, K=133)),
                                    ("conv2d_nchw", dict(CI=16, CO=24, H=13, W=11, KH=3, KW=3, padding=1))]):
        cases += sample(ops.make_workload(op, args), 6, seed=n, target=target)
    for i, (workload, config) in enumerate(cases):
        func, specs = lower_workload(workload, config, target)
        (tmp_path / f"k{i}.c").write_text(build.translation_unit([kernel_source(func, specs)], func.extern_sources))
    units = sorted(str(p) for p in tmp_path.glob("k*.c"))
    check = subprocess.run([*compiler_command(), "-fsyntax-only", "-Wall", *build.object_flags(target, ()), *units],
                           capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    assert check.returncode == 0 and "warning" not in check.stderr, check.stderr[-3000:]
