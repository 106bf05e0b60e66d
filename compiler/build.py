"""Compiling C sources, with the tunefleet runtime, into cached self-contained shared libraries.

Every library has ONE translation unit made by :func:`translation_unit`: the runtime header,
the extern micro-kernel sources, the caller's sources, then the runtime implementation.
Lines ``#include "tunefleet_runtime.h"`` in the sources are replaced by a comment (the
header is already at the top), so the unit compiles with no include path, and the
artifact's ``.c`` rebuilds anywhere with one command (:func:`build_info` ``["command"]``).

The runtime implementation in the unit sits inside ``#ifndef TUNEFLEET_RUNTIME_LINKED``.
:func:`compile_shared` defines that macro and links the runtime as an object compiled once
per compiler, flags and runtime source (:func:`runtime_object`, in the build cache) instead
of compiling it again for every tuning candidate: the same code with the same flags, in two
objects instead of one. The runtime's symbols are hidden either way (``-fvisibility=hidden``,
``TF_HIDDEN``), so only the ``TF_EXPORT`` API and the kernel's entry points are exported, and
two libraries loaded into one process never share runtime state but the thread-local error
text (one per thread for all of them, so ``tunefleet_last_error()`` of any of them reports
the last error; see tunefleet_runtime.c).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from tunefleet.compiler import sandbox
from tunefleet.compiler.target import Target
from tunefleet.compiler.toolchain import BuildError, compiler_command

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
#: Compiler flags of every object and library. Implicit declarations are errors.
BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-pthread",
              "-Werror=implicit-function-declaration")
#: Link flags of every library. The link must resolve every symbol, so a missing
#: micro-kernel fails the build, not the first call. -Bsymbolic-functions binds a library's
#: calls of its own exported functions (the `<name>_set_num_threads` wrappers calling
#: `tunefleet_set_num_threads`, a dispatcher calling its targets' kernels) to its own
#: definitions, so several tunefleet libraries linked into one program never call into each
#: other; data (the shared error text, see tunefleet_runtime.c) is still bound process-wide.
LINK_FLAGS = ("-shared", "-Wl,--no-undefined", "-Wl,-Bsymbolic-functions")
LIBS = ("-lm",)
#: Defined when a unit is compiled to be linked with runtime_object(): the unit's own copy
#: of the runtime implementation is left out.
RUNTIME_LINKED_MACRO = "TUNEFLEET_RUNTIME_LINKED"
COMPILE_TIMEOUT_S = 120
#: Limits of a sandboxed compiler run: CPU seconds a little over the wall-clock timeout, 4 GiB
#: of address space (cc1 on the largest generated unit stays under 1 GiB), 256 MiB per output
#: file (a library with a huge static array fails here instead of filling the disk).
COMPILE_LIMITS = sandbox.Limits(cpu_s=COMPILE_TIMEOUT_S + 10, address_space=4 << 30, file_size=256 << 20,
                                processes=sandbox.default_processes())
#: Limit on the total size of the extern micro-kernel sources, in bytes (UTF-8).
MAX_EXTRA_SOURCE_BYTES = 256 * 1024

_RUNTIME_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"tunefleet_runtime\.h"[ \t]*$', re.M)
_DLTENSOR_CHECK_INCLUDE = re.compile(r'^#include "tunefleet_dltensor_check\.h"$', re.M)
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.cache
def runtime_sources() -> tuple[str, str]:
    """(tunefleet_runtime.h text, tunefleet_runtime.c text with the DLTensor checks inlined)."""
    return ((RUNTIME_DIR / "tunefleet_runtime.h").read_text(),
            inline_dltensor_check((RUNTIME_DIR / "tunefleet_runtime.c").read_text()))


def inline_dltensor_check(runtime: str) -> str:
    """Runtime source `runtime` (the C or the CUDA one) with its line
    `#include "tunefleet_dltensor_check.h"` replaced by that header's text: the DLTensor checks
    both runtimes share, so that each generated unit stays self-contained."""
    check = (RUNTIME_DIR / "tunefleet_dltensor_check.h").read_text().rstrip()
    return _DLTENSOR_CHECK_INCLUDE.sub(lambda _: check, runtime)


def translation_unit(sources: Sequence[str], extra_sources: Sequence[str] = ()) -> str:
    """The self-contained C text built from `sources` (C source texts, in order) and the extern
    micro-kernel `extra_sources` (placed before them); compiled with RUNTIME_LINKED_MACRO
    defined, it leaves out the runtime implementation (see runtime_object). Raises BuildError
    when the extra sources exceed MAX_EXTRA_SOURCE_BYTES."""
    extra_bytes = sum(len(s.encode()) for s in extra_sources)
    if extra_bytes > MAX_EXTRA_SOURCE_BYTES:
        raise BuildError(f"extern micro-kernel sources are {extra_bytes} bytes; the limit is "
                         f"{MAX_EXTRA_SOURCE_BYTES} bytes (MAX_EXTRA_SOURCE_BYTES)")
    header, runtime = runtime_sources()
    parts = [("tunefleet runtime header", header)]
    parts += [(f"extern micro-kernel source {i}", s) for i, s in enumerate(extra_sources)]
    parts += [(f"source {i}", s) for i, s in enumerate(sources)]
    guarded = (f"#ifndef {RUNTIME_LINKED_MACRO} /* defined where the runtime is linked in as an object "
               f"compiled separately */\n{runtime.rstrip()}\n#endif /* {RUNTIME_LINKED_MACRO} */")
    parts.append(("tunefleet runtime", guarded))
    return _join("one self-contained translation unit", parts)


def _join(what: str, parts: Sequence[tuple[str, str]]) -> str:
    """C text of the (title, source) `parts` in order, each under a title comment, with the
    runtime header's #include lines replaced by a comment (the header comes first)."""
    text = f"/* Generated by tunefleet: {what}. */\n"
    for title, source in parts:
        body = _RUNTIME_INCLUDE.sub("/* tunefleet_runtime.h: included at the top */", source)
        text += f"\n/* ---- {title} ---- */\n{body.rstrip()}\n"
    return text


def tool_output(command: Sequence[str], timeout_s: float) -> str:
    """The standard output of `command` (a toolchain's `--version` and the like), whatever its exit
    status. BuildError when it cannot run or takes longer than `timeout_s` seconds."""
    try:
        out = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"cannot run {' '.join(command)}: {exc}") from exc
    return out.stdout


@functools.cache
def _compiler_version(path: str) -> str:
    """First line of `<path> --version`."""
    return (tool_output([path, "--version"], 30).splitlines() or [""])[0].strip()


def toolchain_versions() -> dict:
    """{"cc": compiler command (list of str), "cc_version": first line of its --version}."""
    cc = compiler_command()
    return {"cc": cc, "cc_version": _compiler_version(cc[0])}


def compile_flags(target: Target, name: str, extra_flags: Sequence[str] = ()) -> list[str]:
    """All compiler flags of a build of library `name` for `target` (sources/output/libs aside)."""
    return [*object_flags(target, extra_flags), *LINK_FLAGS, f"-Wl,-soname,{name}.so"]


def object_flags(target: Target, extra_flags: Sequence[str]) -> list[str]:
    """The flags of compile_flags that are not about linking: those of every object."""
    return [*BASE_FLAGS, *target.cflags, *extra_flags]


def cache_dir() -> Path:
    """`$TUNEFLEET_CACHE_DIR`, else ~/.cache/tunefleet/build."""
    env = os.environ.get("TUNEFLEET_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "tunefleet" / "build"


def runtime_object(target: Target, extra_flags: Sequence[str] = ()) -> Path:
    """The runtime compiled for `target` with `extra_flags` as a position-independent object
    (`.o`) for compile_shared to link, and returns its path; compiled at most once.

    It sits in `cache_dir()/runtime/<key>/` as `tunefleet_runtime.o`, beside the unit it was
    compiled from (`tunefleet_runtime.c`: the runtime header, then the implementation with the
    DLTensor checks inlined, as runtime_sources gives them). The key is the sha256 of that
    unit, the flags (compile_flags less the link flags) and the compiler (path and version).
    Written under a temporary name and renamed, so concurrent builders in several processes
    never see a partial object. Raises BuildError if the compiler is missing, fails, or times
    out (COMPILE_TIMEOUT_S seconds).
    """
    header, runtime = runtime_sources()
    unit = _join("the tunefleet runtime, compiled alone to be linked into libraries",
                 [("tunefleet runtime header", header), ("tunefleet runtime", runtime)])
    toolchain = toolchain_versions()
    flags = object_flags(target, extra_flags)
    key = hashlib.sha256(json.dumps([unit, flags, toolchain]).encode()).hexdigest()
    out_dir = cache_dir() / "runtime" / key[:32]
    object_path = out_dir / "tunefleet_runtime.o"
    if object_path.exists():
        return object_path
    out_dir.mkdir(parents=True, exist_ok=True)
    source_path = out_dir / "tunefleet_runtime.c"
    write_atomic(source_path, unit)
    compile_atomic([*toolchain["cc"], *flags, "-c", str(source_path)], object_path, "tunefleet_runtime",
                    inputs=[out_dir])
    return object_path


def compile_shared(sources: Sequence[str], target: Target, *, name: str,
                   extra_flags: Sequence[str] = (), extra_sources: Sequence[str] = ()) -> Path:
    """Builds `sources` (C source texts) with the runtime into `<name>.so` and returns its path.

    name: a C identifier, the library's soname is `<name>.so`. extra_sources: extern
    micro-kernel C sources compiled into the same unit. The library sits in its own cache
    directory, keyed by the sha256 of the translation unit, flags and compiler (path and
    version); beside it are the unit `<name>.c` and `build.json` (see build_info). The unit
    is compiled with RUNTIME_LINKED_MACRO defined and linked with runtime_object(), so the
    runtime is compiled once per compiler and flags, not once per library.
    A cache hit returns at once. Safe with concurrent builders in several processes.
    Raises BuildError on a bad name, a compile or link error, or a timeout
    (COMPILE_TIMEOUT_S seconds per compiler run).
    """
    if not _C_IDENTIFIER.fullmatch(name):
        raise BuildError(f"library name {name!r} is not a C identifier")
    unit = translation_unit(sources, extra_sources)
    toolchain = toolchain_versions()
    flags = compile_flags(target, name, extra_flags)
    key = hashlib.sha256(json.dumps([unit, flags, toolchain]).encode()).hexdigest()
    out_dir = cache_dir() / key[:2] / key[2:32]
    so_path = out_dir / f"{name}.so"
    if so_path.exists():
        return so_path
    runtime = runtime_object(target, extra_flags)
    out_dir.mkdir(parents=True, exist_ok=True)
    source_path = out_dir / f"{name}.c"
    write_atomic(source_path, unit)
    info = {"name": name, "target": str(target), "flags": flags, "libs": list(LIBS),
            "toolchain": toolchain, "command": rebuild_command(name, flags),
            "runtime_object": str(runtime)}
    write_atomic(out_dir / "build.json", json.dumps(info, indent=2))
    compile_atomic([*toolchain["cc"], *flags, f"-D{RUNTIME_LINKED_MACRO}", str(source_path), str(runtime)],
                    so_path, name, LIBS, inputs=[out_dir, runtime.parent])
    return so_path


def build_info(so_path: str | os.PathLike) -> dict:
    """What compile_shared recorded for the library at `so_path`: name, target, flags, libs,
    toolchain, `runtime_object` (the path of the runtime object it linked), and `command`, the
    shell command that rebuilds it from `<name>.c` alone. That command compiles the unit's own
    copy of the runtime instead of linking the object: the same sources and flags as one unit
    instead of two objects, an equivalent library but not a byte-identical file.
    Raises FileNotFoundError if there is no record."""
    return json.loads((Path(so_path).parent / "build.json").read_text())


def rebuild_command(name: str, flags: Sequence[str]) -> str:
    """The shell command that rebuilds `<name>.so` from `<name>.c` with `flags` and $CC (or gcc)."""
    return "${CC:-gcc} " + shlex.join([*flags, f"{name}.c", "-o", f"{name}.so", *LIBS])


def run_compiler(command: list[str], name: str, program: str | None = None) -> None:
    """Runs the compiler in its own process group (killed whole on timeout), in the C locale
    so that its messages are plain ASCII. Its output in a BuildError is cut and stripped of
    host paths (sandbox.clean_output). `program`: the compiler's name in messages (default
    that of command[0])."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "LC_ALL": "C"})
    try:
        output, _ = proc.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise BuildError(f"compiling {name!r} timed out after {COMPILE_TIMEOUT_S} s",
                         sandbox.clean_output(output)) from None
    if proc.returncode != 0:
        status = f"killed by signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else \
            f"exit status {proc.returncode}"
        raise BuildError(f"compiling {name!r} failed ({program or Path(command[0]).name} {status}):",
                         sandbox.clean_output(output))


def compile_atomic(command: list[str], path: Path, name: str, libs: Sequence[str] = (), *,
                   inputs: Sequence[Path] = (), limits: sandbox.Limits = COMPILE_LIMITS) -> None:
    """Runs `command` + ["-o", temporary file] + `libs`, then renames the file to `path`, so
    that no process sees a partial output; the temporary file never stays.

    When builds are sandboxed (sandbox.current()), the compiler runs in the sandbox with
    `limits`, the folders `inputs` (those of the files `command` reads) shown read-only and a
    scratch directory as the only writable place: the output is written there and copied to
    `path` (a regular file only) by this process; the cache itself is never writable to it."""
    temp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex}{path.suffix}")
    box = sandbox.current()
    try:
        if box is None:
            run_compiler([*command, "-o", str(temp), *libs], name)
        else:
            with box.scratch() as scratch:
                out = scratch / path.name
                run_compiler(box.command([*command, "-o", str(out), *libs], scratch=scratch, limits=limits,
                                          read_only=inputs), name, Path(command[0]).name)
                if out.is_symlink() or not out.is_file():
                    raise BuildError(f"compiling {name!r} left no regular file {path.name}")
                shutil.copyfile(out, temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed over it: no reader sees a partial file."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}")
    temp.write_text(text)
    os.replace(temp, path)
