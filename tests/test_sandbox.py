"""The sandbox's pieces on their own: compiler output fit to show, and a sandboxed build and run
(hostile micro-kernels against a real worker: test_sandbox_worker.py)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from tunefleet.compiler import ops, sandbox
from tunefleet.compiler.build import BuildError
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.multitarget import build_multi_target
from tunefleet.compiler.target import Target


def test_clean_output_cuts_host_paths_and_length() -> None:
    text = ("/root/.cache/tunefleet/build/ab/cdef/matmul_x.c:3:1: error: expected ';'\n"
            "In file included from /usr/include/stdio.h:28, ./local.h and x/y stay\n")
    assert sandbox.clean_output(text) == ("matmul_x.c:3:1: error: expected ';'\n"
                                          "In file included from stdio.h:28, ./local.h and x/y stay\n")
    long = sandbox.clean_output("e" * 10_000, limit=100)
    assert long.startswith("e" * 100) and long.endswith("[... 9900 more characters cut]")


@pytest.fixture
def sandboxed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Builds of this process sandboxed, with a fresh build cache and TUNEFLEET_HOME holding a secret."""
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNEFLEET_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "secret.h").write_text("int leaked_secret_value = 42;\n")
    monkeypatch.setenv(sandbox.ENV_VAR, "1")
    sandbox._sandbox.cache_clear()
    try:
        sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this host: {exc}")
    yield tmp_path / "home"
    sandbox._sandbox.cache_clear()


def workload(source: str) -> ops.Workload:
    mk = {"func": "gemm_4x16", "source": source, "mr": 4, "nr": 16}
    return ops.make_workload("matmul", {"M": 8, "N": 16, "K": 4, "micro_kernel": mk})


GEMM = """#include <stdint.h>
void gemm_4x16(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int i = 0; i < 4; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < 16; ++j) C[i * ldc + j] += A[i * lda + k] * B[k * ldb + j];
}
"""


def test_sandboxed_build_is_correct_and_cannot_include_hidden_files(sandboxed: Path) -> None:
    target = Target.host()
    w = workload(GEMM)
    built = build_workload(w, ops.default_config(w, target), target)
    assert os.stat(built.so_path).st_uid == os.geteuid()  # copied into the cache by this process
    inputs = ops.random_inputs(w.tensors(), np.random.default_rng(0))
    np.testing.assert_allclose(built.run(*inputs)[0], w.reference(*inputs)[0], rtol=1e-5)
    hostile = workload(f'#include "{sandboxed / "secret.h"}"\n' + GEMM)
    with pytest.raises(BuildError) as failure:
        build_workload(hostile, ops.default_config(hostile, target), target)
    assert "secret.h: No such file or directory" in str(failure.value)
    assert str(sandboxed) not in str(failure.value)


def test_a_library_of_parts_builds_in_the_sandbox(sandboxed: Path) -> None:
    """compiler.parts (multi-target libraries, model bundles): each part's object and the link
    are built sandboxed, from the source and objects in the (hidden) build cache."""
    w = ops.make_workload("matmul", {"M": 8, "N": 16, "K": 4})
    built = build_multi_target(w, {isa: ops.default_config(w, Target("cpu", isa)) for isa in ("generic", "avx2")})
    assert built.so_path.is_file() and set(built.isas) == {"generic", "avx2"}
    assert os.stat(built.so_path).st_uid == os.geteuid()


def run_sandboxed(argv: list[str], read_only: Sequence[Path] = (),
                  before_start: Callable[[], object] = lambda: None) -> subprocess.CompletedProcess:
    """`argv` run in this process's sandbox (sandbox.current()) in a fresh scratch directory, with
    `read_only` shown; `before_start` runs after bwrap's command line is made, before it starts."""
    box = sandbox.current()
    limits = sandbox.Limits(cpu_s=30, address_space=None, file_size=1 << 20, processes=sandbox.default_processes())
    with box.scratch() as scratch:
        command = box.command(argv, scratch=scratch, limits=limits, read_only=read_only)
        before_start()
        return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_an_entry_of_a_closed_folder_that_vanishes_before_the_sandbox_starts_is_left_out(sandboxed: Path,
                                                                                      tmp_path: Path) -> None:
    """A 0700 folder shown read-only (a checkout made by ``mktemp -d``) is shown entry by entry
    from a listing; an entry removed between the listing and bwrap's start (pytest's
    ``pytest-cache-files-*`` in a checkout's root) must not stop the sandbox from starting, and
    the entries that remain are shown."""
    closed = tmp_path / "checkout"
    closed.mkdir(mode=0o700)
    (closed / "kept.txt").write_text("shown\n")
    (closed / "pytest-cache-files-x").mkdir()
    done = run_sandboxed(["cat", str(closed / "kept.txt")], read_only=[closed],
                         before_start=(closed / "pytest-cache-files-x").rmdir)
    assert (done.returncode, done.stdout) == (0, "shown\n"), done.stderr


def test_a_build_cache_made_after_the_sandbox_was_found_is_hidden(sandboxed: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """TUNEFLEET_CACHE_DIR set to a folder outside the home (and the sandbox's private /tmp) that
    does not exist yet when the sandbox is found: the first build makes it later, and another
    task's source in it must stay out of a candidate's reach."""
    cache = Path(f"/var/tmp/tunefleet-cache-{os.getpid()}-{tmp_path.name}")
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(cache))
    sandbox._sandbox.cache_clear()
    try:
        box = sandbox.current()
        (cache / "ab").mkdir(parents=True, exist_ok=True)
        (cache / "ab" / "other_task.c").write_text("int other_users_kernel;\n")
        done = run_sandboxed(["cat", str(cache / "ab" / "other_task.c")])
        assert done.returncode != 0 and "No such file" in done.stderr, (done.stdout, done.stderr)
        assert cache.resolve() in box.hidden
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.mark.parametrize("parent", ["/tmp", "/tmp/closed", "/var/tmp/closed"], ids=["tmp", "closed-in-tmp", "closed"])
def test_a_python_installed_where_nobody_could_reach_it_starts_in_the_sandbox(sandboxed: Path, tmp_path: Path,
                                                                              parent: str) -> None:
    """The sandbox's /tmp is a private tmpfs, and its uid (nobody) cannot enter a 0700 folder: a
    checkout and its virtual environment cloned under /tmp (as CI clones), or into a folder
    closed to other users (``mktemp -d``), must still be shown read-only inside, or no worker
    there can sandbox."""
    base = Path(f"{parent}-{os.getpid()}-{tmp_path.name}") if parent.endswith("closed") else Path(parent)
    env_dir = base / f"tunefleet-venv-{os.getpid()}-{tmp_path.name}"
    try:
        if base != Path(parent):
            base.mkdir(mode=0o700)
        venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
        env_dir.chmod(0o700)
        packages = next((env_dir / "lib").glob("python3*/site-packages"))
        # this environment's packages (the editable install's finder too) seen from the new one
        (packages / "outer.pth").write_text(f"import site; list(map(site.addsitedir, {site.getsitepackages()!r}))\n")
        python = env_dir / "bin" / "python"
        check = subprocess.run(
            [str(python), "-c", "from tunefleet.compiler import sandbox; print(sandbox.detect().describe())"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
        assert check.returncode == 0, check.stderr[-2000:]
        assert sys.prefix != str(env_dir)
    finally:
        shutil.rmtree(base if base != Path(parent) else env_dir, ignore_errors=True)
