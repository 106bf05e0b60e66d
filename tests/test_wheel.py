"""The wheel users install, as they install it: built once from a copy of the source tree
(pyproject.toml's build backend, as `pip wheel` builds it), checked to hold every package and
every non-Python file of the source folders, and installed non-editably with only the
`worker` extra into a fresh virtual environment, where a CPU worker host's commands, a build
and a real candidate measurement run, and the other extras' commands fail with one line.

Installs go through a wheelhouse kept in pytest's cache (`.pytest_cache/d/wheelhouse`): the
first run fills it with `pip download` (through pip's own cache and whatever indexes and
find-links pip is configured with); later runs install from it with `--no-index`, offline.
Without a wheelhouse and without a reachable index the tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: import name -> source folder, as pyproject.toml maps them
PACKAGE_DIR: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
#: files of the source tree the build reads besides the package folders
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")
#: modules of the other extras, which a worker host must not need
NOT_ON_A_WORKER = ("xgboost", "sqlalchemy", "fastapi", "uvicorn", "alembic", "pydantic")
_NETWORK_ERROR = re.compile(r"NewConnectionError|ConnectionError|Max retries exceeded|Network is unreachable|"
                            r"Temporary failure in name resolution|No matching distribution found")
_BYTECODE = shutil.ignore_patterns("__pycache__", "*.pyc")


def _pip(*args: str | Path, python: Path | None = None) -> subprocess.CompletedProcess:
    """Run this interpreter's pip (on `python`'s environment when given)."""
    target = ["--python", str(python)] if python else []
    return subprocess.run([sys.executable, "-m", "pip", *target, *map(str, args)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})


def _offline_first(wheelhouse: Path, requirements: list[str], *args: str | Path, python: Path | None = None) -> None:
    """Run `pip *args` offline from `wheelhouse`; when that fails, have pip download
    `requirements` (what the command needs) and everything they depend on into it, then run it
    again offline. Skips the test when pip cannot reach an index, fails it on any other error."""
    offline = ("--no-index", "--find-links", wheelhouse)
    if _pip(*args, *offline, python=python).returncode == 0:
        return
    fetch = _pip("download", "-q", "--find-links", wheelhouse, "-d", wheelhouse, *requirements)
    if fetch.returncode != 0:
        if _NETWORK_ERROR.search(fetch.stderr):
            pytest.skip(f"cannot download {' '.join(requirements)}, and the wheelhouse {wheelhouse} lacks them "
                        f"(offline?): {fetch.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"pip download {' '.join(requirements)} failed:\n{fetch.stderr}")
    run = _pip(*args, *offline, python=python)
    assert run.returncode == 0, run.stderr


def _files(folder: Path) -> list[Path]:
    """The files under `folder`, relative to it, bytecode left out."""
    return sorted(p.relative_to(folder) for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


@pytest.fixture(scope="session")
def wheelhouse(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cached folder of dependency wheels (a fresh temporary one with `-p no:cacheprovider`)."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("wheelhouse") if cache else tmp_path_factory.mktemp("wheelhouse")


@pytest.fixture(scope="session")
def wheel(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tunefleet's wheel, built by pip from a copy of the source tree (so that no stale
    build/ folder of the checkout can leak into it and the checkout is left untouched)."""
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, src / name)
    for folder in sorted(set(PACKAGE_DIR.values())):
        shutil.copytree(ROOT / folder, src / folder, ignore=_BYTECODE)
    out = tmp_path_factory.mktemp("dist")
    # pip's isolated build environment needs the build backend's requirements
    _offline_first(wheelhouse, PYPROJECT["build-system"]["requires"], "wheel", "-q", "--no-deps", "--wheel-dir", out, src)
    (built,) = out.glob("tunefleet-*.whl")
    return built


@pytest.fixture(scope="session")
def worker_host(wheel: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh virtual environment holding the wheel installed with only the `worker` extra;
    returns the environment variables to run its commands with (its bin/ first on PATH, a
    fresh build cache and home)."""
    root = tmp_path_factory.mktemp("worker-host")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    # --no-compile: compiling numpy & co. to bytecode was two thirds of the install's CPU time (15 -> 5-7 s)
    requirement = f"{wheel}[worker]"
    _offline_first(wheelhouse, [requirement], "install", "-q", "--no-compile", requirement, python=venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNEFLEET_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "HOME": str(root),
            "TUNEFLEET_CACHE_DIR": str(root / "build-cache"), "TUNEFLEET_HOME": str(root / "home")}


def _run(env: dict[str, str], *args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """A command of the worker host's environment, run from `cwd` (never the checkout, whose
    tunefleet/ folder would shadow the installed package)."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def test_the_wheel_holds_every_package_and_every_file_the_code_reads(wheel: Path) -> None:
    """Every file of the mapped source folders (each folder with an __init__.py, the runtime's
    C/CUDA sources, the dashboard's static files and templates, the migrations and their
    script template) is in the wheel under its import name, and the wheel holds nothing else."""
    source = {str(Path(*package.split("."), file)) for package, folder in PACKAGE_DIR.items()
              for file in _files(ROOT / folder)}
    names = {n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}
    assert not source - names, f"not in {wheel.name}: {sorted(source - names)}"
    assert not names - source, f"in {wheel.name} but not in the source tree: {sorted(names - source)}"
    packages = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert {"tunefleet.compiler.ops.gpu", "tunefleet.server.migrations.versions"} <= packages
    assert {"tunefleet/compiler/runtime/tunefleet_runtime.c", "tunefleet/server/migrations/script.py.mako",
            "tunefleet/server/templates/base.html", "tunefleet/server/static/dashboard.js"} <= names


def test_a_worker_host_installs_the_wheel_and_measures_a_candidate(worker_host, tmp_path: Path) -> None:
    env = worker_host
    # every module of the worker package and what `tunefleet worker` imports when it runs
    probe = _run(env, "python", "-c", f"""
import importlib, importlib.util, json, pkgutil, tunefleet, tunefleet.worker
for m in pkgutil.walk_packages(tunefleet.worker.__path__, "tunefleet.worker."):
    importlib.import_module(m.name)
import tunefleet.commands.worker, tunefleet.server.logs, tunefleet.tuner.host
print(json.dumps([tunefleet.__file__, [m for m in {NOT_ON_A_WORKER!r} if importlib.util.find_spec(m)]]))
""", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    location, present = json.loads(probe.stdout)
    assert "site-packages" in location and not location.startswith(str(ROOT)), location
    assert present == [], f"the worker extra pulled in {present}"

    ops = _run(env, "tunefleet", "ops", cwd=tmp_path)
    assert ops.returncode == 0, ops.stderr
    assert "matmul" in ops.stdout and "conv2d_nchw" in ops.stdout
    help_ = _run(env, "tunefleet", "worker", "--help", cwd=tmp_path)
    assert help_.returncode == 0 and "--redis" in help_.stdout, help_.stderr

    # one candidate, as a worker measures it: built with gcc, checked against numpy, timed
    measure = _run(env, "python", "-c", """
import dataclasses, json
from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.tuner.measure import MeasureInput, MeasureProtocol
from tunefleet.tuner.runner import measure_batch
workload, target = ops.make_workload("matmul", {"M": 48, "N": 40, "K": 56}), Target.host()
inp = MeasureInput(workload.to_json(), str(target), ops.default_config(workload, target).to_json())
(result,) = measure_batch([inp], MeasureProtocol(repeat=3, min_repeat_ms=1, cooldown_ms=0, timeout_s=60))
print(json.dumps(dataclasses.asdict(result)))
""", cwd=tmp_path)
    assert measure.returncode == 0, measure.stderr
    result = json.loads(measure.stdout.splitlines()[-1])
    assert result["status"] == "ok", result["error"]
    assert len(result["costs"]) == 3 and all(c > 0 for c in result["costs"]) and result["build_s"] > 0
    assert any((Path(env["TUNEFLEET_CACHE_DIR"])).rglob("*.so")), "no library was built by gcc"

    # the base install builds an artifact, and tunefleet.load calls it
    out = tmp_path / "kernel"
    build = _run(env, "tunefleet", "build", "matmul", "--M", "48", "--N", "40", "--K", "56", "--out", out,
                 cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    call = _run(env, "python", "-c", f"""
import numpy as np, tunefleet
k = tunefleet.load({str(out)!r})
rng = np.random.default_rng(1)
a, b = rng.random((48, 56), dtype=np.float32), rng.random((56, 40), dtype=np.float32)
np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5, atol=1e-5)
print("ok")
""", cwd=tmp_path)
    assert call.returncode == 0 and call.stdout.strip() == "ok", call.stderr


@pytest.mark.parametrize("args, extra", [
    (("tune", "matmul", "--M", "8", "--N", "8", "--K", "8", "--out", "k"), "tuner"),
    (("tune-model", "model.onnx"), "model"),
    (("server",), "server"),
    (("token", "list"), "server"),
    (("up",), "all"),
])
def test_a_command_of_another_extra_fails_with_one_line_naming_it(worker_host, tmp_path: Path, args, extra) -> None:
    run = _run(worker_host, "tunefleet", *args, cwd=tmp_path)
    assert run.returncode in (1, 2)
    assert "Traceback" not in run.stderr and run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert f"pip install 'tunefleet[{extra}]'" in line and f"tunefleet {args[0]}" in line


def test_an_editable_clone_under_tmp_that_holds_its_home_can_sandbox(wheelhouse: Path, tmp_path: Path) -> None:
    """The README's quick start: a clone installed editable under /tmp (/home and /root are
    hidden from the sandbox as well), whose `tunefleet demo` keeps its home, a secret, inside
    the clone. The sandbox shows the folders the packages are imported from, not the clone."""
    from tunefleet.compiler import sandbox

    try:
        sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this host: {exc}")
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, clone / name)
    for folder in sorted(set(PACKAGE_DIR.values())):
        shutil.copytree(ROOT / folder, clone / folder, ignore=_BYTECODE)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    requirement = f"{clone}[worker]"
    _offline_first(wheelhouse, [*PYPROJECT["build-system"]["requires"], requirement], "install", "-q", "--no-compile",
                   "-e", requirement, python=python)
    home = clone / "tunefleet-demo" / "home"
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNEFLEET_", "PYTHON", "VIRTUAL_ENV"))}
    check = _run({**env, "TUNEFLEET_HOME": str(home)}, python, "-c",
                 "import tunefleet.compiler as c; from tunefleet.compiler import sandbox; print(c.__file__); "
                 "print(sandbox.detect().describe())", cwd=tmp_path)
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.startswith(str(clone / "compiler")), check.stdout


def test_the_docker_images_install_the_wheel_with_declared_extras() -> None:
    """The Dockerfile builds the wheel and each image installs it (never the source tree, never
    editably), with an extra pyproject.toml declares."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip wheel .*--no-deps .*--wheel-dir /wheels \.", dockerfile)
    installs = re.findall(r"pip install .*", dockerfile)
    assert len(installs) == 2, installs
    for line in installs:
        extra = re.search(r'"\$\(echo /wheels/tunefleet-\*\.whl\)\[(\w+)\]"', line)
        assert extra and extra[1] in PYPROJECT["project"]["optional-dependencies"], line
