"""Libraries of several parts: ONE C file, compiled once per part, the parts linked into one `.so`.

The file holds each part's self-contained translation unit under ``#if defined(<part macro>)``
and, under ``#else``, the base unit (what the library needs besides the parts, with the
runtime). Each part is compiled with its macro and its own flags into an object whose hidden
symbols are then made local (``objcopy --localize-hidden``), so that the parts' private
functions (their generated helpers, parallel bodies, extern micro-kernels) never clash; the
base unit is compiled without a part macro and linked with the part objects and the runtime.

Used by compiler.multitarget (one part per ISA, the base a dispatcher) and
compiler.kernel_library (one part per kernel, e.g. a model's).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from shlex import join

from .build import (LIBS, RUNTIME_LINKED_MACRO, BuildError, cache_dir, compile_atomic, run_compiler, runtime_object,
                    toolchain_versions, write_atomic)
from .target import Target


def part_macro(part: str) -> str:
    """The macro selecting part `part` of a library's C file."""
    return f"TUNEFLEET_PART_{part}"


def build_parts(name: str, opening: str, parts: Sequence[tuple[str, str]], base: tuple[str, str],
                flags: Mapping[str, Sequence[str]], link_flags: Sequence[str], base_target: Target,
                info: Mapping) -> tuple[Path, str]:
    """Builds library `<name>.so` from `parts` ((part name, translation unit), in order, each
    compiled with `flags[part]`) and the `base` unit ((what it holds, its text), compiled and
    linked with `link_flags` and the runtime object of `base_target`); `opening` is the C
    file's opening comment.
    Cached like build.compile_shared, keyed by the sha256 of the C file, every part's flags,
    the link flags and the compiler; beside the library are `<name>.c` and build.json (`info`
    plus flags, libs, toolchain, command: the rebuild command, runtime_object).
    Returns (the library's path, the C file's text).

    Raises BuildError for a compiler or objcopy failure, or without objcopy.
    """
    text = c_file(opening, parts, base)
    toolchain = toolchain_versions()
    flags = {part: list(flags[part]) for part, _ in parts}
    key = hashlib.sha256(json.dumps([text, flags, list(link_flags), toolchain]).encode()).hexdigest()
    out_dir = cache_dir() / key[:2] / key[2:32]
    so_path = out_dir / f"{name}.so"
    if so_path.exists():
        return so_path, text
    objcopy = shutil.which("objcopy")
    if objcopy is None:
        raise BuildError(f"objcopy (GNU binutils) not found: a library of several parts ({name}) needs it")
    runtime = runtime_object(base_target)
    out_dir.mkdir(parents=True, exist_ok=True)
    source_path = out_dir / f"{name}.c"
    write_atomic(source_path, text)
    names = [part for part, _ in parts]
    full = {**info, "flags": flags, "libs": list(LIBS), "toolchain": toolchain,
            "command": rebuild_command(name, names, flags, link_flags), "runtime_object": str(runtime)}
    write_atomic(out_dir / "build.json", json.dumps(full, indent=2))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".parts-") as tmp:
        os.chmod(tmp, 0o755)  # the sandboxed link (an unprivileged uid) reads the objects
        objects = []
        for part in names:
            obj = Path(tmp) / f"{name}_{part}.o"
            compile_atomic([*toolchain["cc"], *flags[part], f"-D{part_macro(part)}", f"-D{RUNTIME_LINKED_MACRO}",
                            "-c", str(source_path)], obj, f"{name}_{part}", inputs=[out_dir])
            run_compiler([objcopy, "--localize-hidden", str(obj)], f"{name}_{part}")
            objects.append(str(obj))
        compile_atomic([*toolchain["cc"], *link_flags, f"-D{RUNTIME_LINKED_MACRO}", str(source_path),
                         *objects, str(runtime)], so_path, name, LIBS, inputs=[out_dir, Path(tmp), runtime.parent])
    return so_path, text


def rebuild_command(name: str, parts: Sequence[str], flags: Mapping[str, Sequence[str]],
                    link_flags: Sequence[str]) -> str:
    """The shell command that rebuilds `<name>.so` from `<name>.c` with $CC (or gcc) and objcopy:
    one object per part, then the base unit with the runtime, linked with them."""
    steps = []
    for part in parts:
        obj = f"{name}_{part}.o"
        steps.append("${CC:-gcc} " + join([*flags[part], f"-D{part_macro(part)}", f"-D{RUNTIME_LINKED_MACRO}",
                                           "-c", f"{name}.c", "-o", obj]))
        steps.append(join(["objcopy", "--localize-hidden", obj]))
    steps.append("${CC:-gcc} " + join([*link_flags, f"{name}.c", *(f"{name}_{part}.o" for part in parts),
                                       "-o", f"{name}.so", *LIBS]))
    return " && ".join(steps)


def c_file(opening: str, parts: Sequence[tuple[str, str]], base: tuple[str, str]) -> str:
    """The one C file: `opening`, each part's unit under its part macro, else the base unit
    (`base`: what it holds, its text)."""
    text = opening
    for i, (part, unit) in enumerate(parts):
        text += f"\n#{'if' if i == 0 else 'elif'} defined({part_macro(part)})\n{unit.rstrip()}\n"
    title, unit = base
    return text + f"\n#else /* {title} */\n{unit.rstrip()}\n#endif\n"
