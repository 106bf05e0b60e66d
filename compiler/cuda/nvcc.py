"""The CUDA toolkit: finding nvcc, what it can target, and nvcc runs into cached `.so` files.

nvcc builds a unit for exactly one architecture (``-arch=sm_XY``; ``sm_90a`` as
``-gencode=arch=compute_90a,code=sm_90a``), ``-O3 -shared -Xcompiler -fPIC``, the CUDA
runtime linked statically and libstdc++/libgcc too (their symbols hidden), so the library
needs nothing at load time but libc and, at the first CUDA call, the driver. When the
toolkit cannot target the architecture the BuildError names both. Builds are cached like
the C ones (`compiler.build.cache_dir()`), keyed by sha256 of unit + flags + nvcc version.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import sandbox
from ..build import COMPILE_TIMEOUT_S, BuildError, cache_dir, compile_atomic, tool_output, write_atomic
from ..target import Target

#: nvcc flags of every GPU build besides the architecture and the soname.
BASE_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
              "-cudart", "static", "-Xcompiler", "-static-libstdc++", "-Xcompiler", "-static-libgcc",
              "-Xlinker", "--exclude-libs,ALL", "-Xlinker", "--no-undefined")


#: Where nvcc is looked for when it is neither $NVCC nor on PATH.
NVCC_FALLBACKS = ("/usr/local/cuda/bin/nvcc",)
#: Limits of a sandboxed nvcc run: as gcc's (build.COMPILE_LIMITS) but no address-space limit,
#: since the CUDA toolchain's programs reserve address space far beyond what they touch.
NVCC_LIMITS = sandbox.Limits(cpu_s=COMPILE_TIMEOUT_S + 10, address_space=None, file_size=256 << 20,
                             processes=sandbox.default_processes())


def nvcc_path() -> str:
    """`$NVCC`, else `nvcc` on PATH, else /usr/local/cuda/bin/nvcc. BuildError when none exists."""
    env = os.environ.get("NVCC")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return os.path.abspath(env)
        raise BuildError(f"nvcc not found: $NVCC is {env!r}, which is not an executable file")
    for candidate in (shutil.which("nvcc"), *NVCC_FALLBACKS):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise BuildError("nvcc not found: install the CUDA toolkit, put nvcc on PATH or set $NVCC")


def have_nvcc() -> bool:
    try:
        nvcc_path()
    except BuildError:
        return False
    return True


@functools.cache
def _nvcc_version(path: str) -> str:
    out = tool_output([path, "--version"], 60)
    m = re.search(r"release ([0-9.]+), V([0-9.]+)", out)
    return m.group(2) if m else (out.strip().splitlines() or ["unknown"])[-1]


def nvcc_version() -> str:
    """The toolkit version of nvcc, e.g. "13.0.88"."""
    return _nvcc_version(nvcc_path())


@functools.cache
def _nvcc_archs(path: str) -> tuple[str, ...]:
    out = tool_output([path, "--list-gpu-arch"], 60)
    return tuple(f"sm_{m}" for m in re.findall(r"compute_([0-9]+[a-z]?)", out))


def supported_archs() -> tuple[str, ...]:
    """The architectures this nvcc can build for ("sm_75", ..., from `nvcc --list-gpu-arch`)."""
    return _nvcc_archs(nvcc_path())


def arch_flags(arch: str) -> list[str]:
    """nvcc flags building for exactly `arch`. BuildError naming the architecture and the toolkit
    version when this nvcc cannot target it."""
    base = arch.rstrip("af") if arch.endswith(("a", "f")) else arch
    archs = supported_archs()
    if base not in archs:
        raise BuildError(f"the CUDA toolkit {nvcc_version()} ({nvcc_path()}) cannot target architecture {arch}; "
                         f"it supports {', '.join(archs) or 'none'}. Build on a host whose toolkit supports "
                         f"{arch}, or use a target it supports")
    if arch != base:  # arch-specific features (wgmma, setmaxnreg): only the -gencode form assembles them
        num = arch.removeprefix("sm_")
        return [f"-gencode=arch=compute_{num},code=sm_{num}"]
    return [f"-arch={arch}"]


def cuda_flags(target: Target, name: str) -> list[str]:
    if target.kind != "cuda":
        raise BuildError(f"target {target} is not a cuda target")
    return [*BASE_FLAGS, *arch_flags(target.isa), "-Xlinker", f"-soname={name}.so"]


def toolchain_versions() -> dict:
    """{"nvcc": path, "nvcc_version": toolkit version}."""
    path = nvcc_path()
    return {"nvcc": path, "nvcc_version": _nvcc_version(path)}


def compile_cuda_shared(unit: str, target: Target, *, name: str) -> Path:
    """Build CUDA unit `unit` into `<name>.so` for `target` (cached; see the module docstring).
    Beside the library: the unit `<name>.cu` and build.json (as `compiler.build.build_info`
    reads it). Raises BuildError (nvcc missing, architecture unsupported, compile error, timeout)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise BuildError(f"library name {name!r} is not a C identifier")
    toolchain = toolchain_versions()
    flags = cuda_flags(target, name)
    key = hashlib.sha256(json.dumps([unit, flags, toolchain, "cuda"]).encode()).hexdigest()
    out_dir = cache_dir() / key[:2] / key[2:32]
    so_path = out_dir / f"{name}.so"
    if so_path.exists():
        return so_path
    out_dir.mkdir(parents=True, exist_ok=True)
    source_path = out_dir / f"{name}.cu"
    write_atomic(source_path, unit)
    info = {"name": name, "kind": "cuda", "target": str(target), "flags": flags, "libs": [],
            "toolchain": toolchain, "source": f"{name}.cu", "command": rebuild_command(name, flags)}
    write_atomic(out_dir / "build.json", json.dumps(info, indent=2))
    compile_atomic([toolchain["nvcc"], *flags, str(source_path)], so_path, name, inputs=[out_dir],
                    limits=NVCC_LIMITS)
    return so_path


def rebuild_command(name: str, flags: Sequence[str]) -> str:
    """The shell command that rebuilds `<name>.so` from `<name>.cu`."""
    return "${NVCC:-nvcc} " + shlex.join([*flags, f"{name}.cu", "-o", f"{name}.so"])


def check_compiles(units: Sequence[str], archs: Sequence[str], *, workers: int | None = None,
                   timeout_s: float = 600) -> None:
    """Compile each unit to an object file for all `archs` at once (-gencode per arch), in
    parallel; no link, no cache. For tests: many kernels per unit keep nvcc runs few.
    Raises BuildError with nvcc's output for the first unit that fails."""
    nvcc = nvcc_path()
    gencode = []
    for arch in archs:
        arch_flags(arch)  # BuildError if unsupported
        num = arch.removeprefix("sm_")
        gencode.append(f"-gencode=arch=compute_{num},code=sm_{num}")

    def one(unit: str) -> None:
        with tempfile.TemporaryDirectory(prefix="tunefleet-nvcc-") as tmp:
            src = Path(tmp) / "unit.cu"
            src.write_text(unit)
            command = [nvcc, "-O3", "-std=c++17", "-Xcompiler", "-fPIC", *gencode, "--threads", str(len(archs)),
                       "-c", str(src), "-o", str(Path(tmp) / "unit.o")]
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "LC_ALL": "C"})
            if proc.returncode != 0:
                raise BuildError(f"nvcc failed (exit status {proc.returncode}) for {', '.join(archs)}:",
                                 (proc.stdout + proc.stderr)[-20000:] + "\n--- unit ---\n" + unit[-4000:])

    with ThreadPoolExecutor(workers or max(1, (os.cpu_count() or 2) // max(1, len(archs)))) as pool:
        for f in [pool.submit(one, u) for u in units]:
            f.result()


__all__ = ["BASE_FLAGS", "NVCC_FALLBACKS", "NVCC_LIMITS", "arch_flags", "check_compiles", "compile_cuda_shared",
           "cuda_flags", "have_nvcc", "nvcc_path", "nvcc_version", "rebuild_command", "supported_archs",
           "toolchain_versions"]
