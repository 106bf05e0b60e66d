"""Multi-target CPU libraries: one `.so` holding a workload's kernel built for several x86 ISAs,
which picks one of them once, when it is loaded, from what the CPU supports (cpuid), as
OpenBLAS's DYNAMIC_ARCH does.

Library `<name>.so` (name: ``workload.kernel_name()``, the workload's name without a target) is
built from ONE C file, `<name>.c`, compiled once per part:

- for each ISA, with ``-DTUNEFLEET_PART_<isa>`` and that ISA's flags: the kernel ``<name>_<isa>``
  (the config given for that ISA) with its ``_packed`` and ``_checked`` entry points. The
  object's hidden symbols are then made local (``objcopy --localize-hidden``), so that the
  parts' private functions (parallel bodies, extern micro-kernels) never clash;
- without a part macro and without ISA flags (it runs before anything is known of the CPU):
  the dispatcher and the runtime. A constructor reads the CPU's features once
  (``__builtin_cpu_supports``: cpuid and xgetbv, from libgcc, linked statically) and picks the
  most capable ISA inside that the CPU runs, or the one named by the environment variable
  ``TUNEFLEET_ISA`` (ISA_ENV). ``<name>`` (and its ``_packed``, ``_checked``) call the chosen
  kernel; ``const char* <name>_isa(void)`` names it. When none can be chosen (TUNEFLEET_ISA
  names an ISA that is not inside or that the CPU lacks, or the CPU runs none of those inside)
  ``<name>_isa()`` returns NULL and ``<name>`` returns -1, with the reason in
  ``tunefleet_last_error()``: code for an ISA the CPU lacks is never run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .abi import ArgSpec, entry_points_source, kernel_prototype, thread_api_source
from .build import LINK_FLAGS, BuildError, object_flags, translation_unit
from .codegen.c import generate_c
from .driver import lower_workload
from .parts import build_parts, part_macro
from .space import ConfigEntity
from .target import DISPATCH_ISAS, Target, TargetError, cpu_features

#: The environment variable that forces one ISA of a multi-target library (read at load time).
ISA_ENV = "TUNEFLEET_ISA"
#: The target the dispatcher and the runtime are compiled for: they run on any x86 CPU.
_BASE = Target("cpu", "generic")


@dataclass
class MultiTargetKernel:
    """A built multi-target library: `name` (its dispatcher), `so_path` (cached), `source` (the
    one C file of all parts), `args` (ABI specs, the same for every ISA), `isas` (inside, the most
    capable first)."""

    name: str
    so_path: Path
    source: str
    args: list[ArgSpec]
    isas: list[str]


def part_macro(isa: str) -> str:
    """The macro selecting the part of `isa` in a multi-target library's C file."""
    return f"TUNEFLEET_PART_{isa}"


def build_multi_target(workload, configs: Mapping[str, ConfigEntity]) -> MultiTargetKernel:
    """Builds `workload` (a compiler.ops Workload) into one library that dispatches at load time
    between the ISAs of `configs` ({isa: config of the workload's space for Target("cpu", isa)};
    isas among target.DISPATCH_ISAS). Cached like compile_shared, keyed by the sha256 of the C
    file, every part's flags and the compiler; beside the library are `<name>.c` and build.json
    (build.build_info: name, target, targets, flags per ISA, libs, toolchain, the rebuild command).

    Raises TargetError for an ISA that cannot be dispatched to or for no ISA at all,
    ScheduleError for a config that does not lower, BuildError for a compiler or objcopy failure.
    """
    for isa in configs:
        cpu_features(isa)  # TargetError for neon or an unknown ISA
    isas = [isa for isa in DISPATCH_ISAS if isa in configs]
    if not isas:
        raise TargetError(f"a multi-target library needs at least one ISA of {', '.join(DISPATCH_ISAS)}")
    name = workload.kernel_name()
    parts, specs = [], None
    for isa in isas:
        func, args = lower_workload(workload, configs[isa], Target("cpu", isa))
        if specs is not None and args != specs:
            raise BuildError(f"{name}: the {isa} kernel's arguments differ from the others'")
        specs = args
        source = "\n".join([generate_c(func), entry_points_source(func.name, args)])
        parts.append((isa, translation_unit([source], func.extern_sources)))
    base = translation_unit([dispatcher_source(name, specs, isas)])
    flags = {isa: object_flags(Target("cpu", isa), ()) for isa in isas}
    link_flags = [*object_flags(_BASE, ()), *LINK_FLAGS, f"-Wl,-soname,{name}.so"]
    info = {"name": name, "target": f"cpu, dispatching between {', '.join(isas)}",
            "targets": [str(Target("cpu", isa)) for isa in isas]}
    so_path, text = build_parts(name, _opening(name, isas), parts, ("the dispatcher and the runtime", base), flags,
                                link_flags, _BASE, info)
    return MultiTargetKernel(name, so_path, text, list(specs), isas)


def _opening(name: str, isas: Sequence[str]) -> str:
    """The opening comment of the library's C file."""
    return (f"/* Generated by tunefleet: the multi-target library {name}, one part per ISA\n"
            f" * ({', '.join(isas)}) compiled with -D{part_macro('<isa>')} and its\n"
            " * flags, and the dispatcher with the runtime, compiled without (see manifest.json's\n"
            " * build_command). */\n")


def dispatcher_source(name: str, args: Sequence[ArgSpec], isas: Sequence[str]) -> str:
    """C source of the dispatcher of library `name` between the kernels `<name>_<isa>` for
    `isas` (the most capable first): the load-time choice, `<name>`, `<name>_isa`, the entry
    points of `<name>` and its thread API (see the module docstring)."""
    params = ", ".join(a.c_pointer for a in args)
    call_args = ", ".join(a.c_name for a in args)
    inside = ", ".join(isas)
    lines = [
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "",
        *[f"{kernel_prototype(f'{name}_{isa}', args)};" for isa in isas],
        "",
        f"typedef int (*tf_kernel_fn)({params});",
        "static const struct { const char* isa; tf_kernel_fn fn; } tf_paths[] = {",
        *[f'  {{"{isa}", {name}_{isa}}},' for isa in isas],
        "};",
        "static tf_kernel_fn tf_chosen_fn;",
        "static const char* tf_chosen_isa;",
        "static char tf_dispatch_error[512];",
        "",
        "/* Whether this CPU (and its OS: libgcc checks xgetbv) executes code built for `isa`. */",
        "static int tf_cpu_runs(const char* isa) {",
    ]
    for isa in isas:
        needed = " && ".join(f'__builtin_cpu_supports("{f}")' for f in cpu_features(isa)) or "1"
        lines.append(f'  if (strcmp(isa, "{isa}") == 0) return {needed};')
    lines += [
        "  return 0;",
        "}",
        "",
        f"/* Chooses the kernel once, when the library is loaded: ${ISA_ENV} if set, else the most",
        " * capable ISA inside that this CPU runs. */",
        "__attribute__((constructor)) static void tf_dispatch_init(void) {",
        "  char runs[128] = \"\";",
        "  size_t count = sizeof tf_paths / sizeof tf_paths[0];",
        "  __builtin_cpu_init();",
        "  for (size_t i = 0; i < count; ++i) {",
        "    if (!tf_cpu_runs(tf_paths[i].isa)) continue;",
        "    if (runs[0] != '\\0') strcat(runs, \", \");",
        "    strcat(runs, tf_paths[i].isa);",
        "  }",
        f'  const char* forced = getenv("{ISA_ENV}");',
        "  if (forced != NULL && forced[0] != '\\0') {",
        "    for (size_t i = 0; i < count; ++i) {",
        "      if (strcmp(forced, tf_paths[i].isa) != 0) continue;",
        "      if (tf_cpu_runs(forced)) {",
        "        tf_chosen_fn = tf_paths[i].fn;",
        "        tf_chosen_isa = tf_paths[i].isa;",
        "      } else {",
        "        snprintf(tf_dispatch_error, sizeof tf_dispatch_error,",
        f'                 "{ISA_ENV}=%s: this CPU does not support %s; of the ISAs inside ({inside}) it runs: %s",',
        '                 forced, forced, runs[0] ? runs : "none");',
        "      }",
        "      return;",
        "    }",
        "    snprintf(tf_dispatch_error, sizeof tf_dispatch_error,",
        f'             "{ISA_ENV}=%.64s: not inside this library, which holds {inside}", forced);',
        "    return;",
        "  }",
        "  for (size_t i = 0; i < count; ++i) {",
        "    if (tf_cpu_runs(tf_paths[i].isa)) {",
        "      tf_chosen_fn = tf_paths[i].fn;",
        "      tf_chosen_isa = tf_paths[i].isa;",
        "      return;",
        "    }",
        "  }",
        "  snprintf(tf_dispatch_error, sizeof tf_dispatch_error,",
        f'           "this CPU supports none of the ISAs inside this library ({inside})");',
        "}",
        "",
        f"TF_EXPORT const char* {name}_isa(void) {{",
        f'  if (tf_chosen_fn == NULL) tf_set_error("{name}: %s", tf_dispatch_error);',
        "  return tf_chosen_isa;",
        "}",
        "",
        f"TF_EXPORT {kernel_prototype(name, args)} {{",
        "  if (tf_chosen_fn == NULL) {",
        f'    tf_set_error("{name}: %s", tf_dispatch_error);',
        "    return -1;",
        "  }",
        f"  return tf_chosen_fn({call_args});",
        "}",
        "",
    ]
    return "\n".join([entry_points_source(name, args), *lines, thread_api_source(name)])
