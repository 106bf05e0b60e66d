"""The artifact ABI: exported entry points around a generated kernel, and the user's C header.

Code generation emits the kernel as ``int <name>(const float* A, ..., float* C)`` (inputs
``const``, outputs last; ``restrict`` allowed; 0 on success, nonzero after ``tf_set_error``).
:func:`entry_points_source` declares it ``TF_EXPORT`` and defines, around it,

- ``int <name>_packed(void** args)``: the raw pointers in an array (used by the timer);
- ``int <name>_checked(DLTensor** args, int num_args)``: validates every DLTensor, then calls
  ``<name>``.

Place the entry points BEFORE the kernel in the translation unit (they only need its
prototype, and the prototype must come first for ``TF_EXPORT`` to apply), e.g.
``compile_shared([entry_points_source(name, args), kernel_source], target, name=name)``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from tunefleet.compiler.build import BuildError, runtime_sources
from tunefleet.compiler.codegen.c_names import c_identifier
from tunefleet.compiler.target import DTYPE_BYTES
from tunefleet.compiler.te import PlaceholderOp, Tensor

#: Version of the artifact ABI (entry points, manifest fields); bumped on incompatible change.
ABI_VERSION = 1

_DL_INT, _DL_FLOAT = 0, 2
#: dtype -> (C type, DLPack type code). Bits come from DTYPE_BYTES.
C_TYPES = {
    "float32": ("float", _DL_FLOAT),
    "float64": ("double", _DL_FLOAT),
    "int32": ("int32_t", _DL_INT),
    "int8": ("int8_t", _DL_INT),
}
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DLPACK_BLOCK = re.compile(r"/\* TUNEFLEET_DLPACK_BEGIN.*?\*/\n(.*?)/\* TUNEFLEET_DLPACK_END \*/",
                           re.S)


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument, in call order (outputs last).

    name: C identifier. shape: extents (elements). dtype: a key of the C type table
    ("float32", "float64", "int32", "int8"). is_output: written by the kernel. layout:
    how the dense buffer is laid out (descriptive; the buffer is row-major over `shape`).
    Raises ValueError on a bad name, shape or dtype.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool
    layout: str = "row-major"

    def __post_init__(self) -> None:
        if not _C_IDENTIFIER.fullmatch(self.name):
            raise ValueError(f"argument name {self.name!r} is not a C identifier")
        try:
            shape = tuple(operator.index(n) for n in self.shape)
        except TypeError:
            shape = ()
        if len(shape) != len(self.shape) or min(shape, default=1) < 1:
            raise ValueError(f"argument {self.name!r}: shape {self.shape} must be positive ints")
        object.__setattr__(self, "shape", shape)
        if self.dtype not in C_TYPES:
            raise ValueError(f"argument {self.name!r}: dtype {self.dtype!r} has no C type; "
                             f"allowed: {', '.join(C_TYPES)}")

    @property
    def c_type(self) -> str:
        """The C element type, e.g. "float"."""
        return C_TYPES[self.dtype][0]

    @property
    def c_pointer(self) -> str:
        """The C parameter type, e.g. "const float*" for an input."""
        return f"{'' if self.is_output else 'const '}{self.c_type}*"

    @property
    def c_name(self) -> str:
        """The name as generated C and C++ declare it: `name`, or ``tf_u_<name>`` where that is a
        keyword, a standard macro or a name the generated code uses (``codegen.c_names``)."""
        return c_identifier(self.name)

    @property
    def nbytes(self) -> int:
        """Size of the dense buffer in bytes."""
        count = 1
        for n in self.shape:
            count *= n
        return count * DTYPE_BYTES[self.dtype]

    def to_dict(self) -> dict:
        """JSON-ready form (shape as a list), inverse of from_dict."""
        return {**asdict(self), "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict) -> ArgSpec:
        """Reads the form written by to_dict."""
        return cls(data["name"], tuple(data["shape"]), data["dtype"], data["is_output"],
                   data.get("layout", "row-major"))



def arg_specs(args: Sequence[Tensor], layouts: dict[str, str] | None = None,
              reference: Sequence[Tensor] | None = None) -> list[ArgSpec]:
    """ABI specs of kernel arguments `args` (placeholders are inputs, computed tensors outputs).

    With `reference` (the operator's canonical tensors, same order), the shapes come from it: a
    template may compute over a view of an argument with the same memory (e.g. [N, CI, H·W] for
    NCHW data, [CO, CI·KH·KW] for OIHW weights) while the ABI keeps the operator's shapes.
    Raises BuildError when an argument is not such a view (name, dtype or size differ).
    """
    layouts = layouts or {}
    ref = list(reference) if reference is not None else list(args)
    if len(ref) != len(args):
        raise BuildError(f"the template's arguments {[t.name for t in args]} do not match the operator's "
                         f"{[t.name for t in ref]}")
    specs = []
    for t, r in zip(args, ref):
        if t.name != r.name or t.dtype != r.dtype or t.size != r.size:
            raise BuildError(f"template argument {t.name} {t.dtype}{list(t.shape)} is not a view of the operator's "
                             f"{r.name} {r.dtype}{list(r.shape)}")
        specs.append(ArgSpec(t.name, r.shape, t.dtype, not isinstance(t.op, PlaceholderOp),
                             layouts.get(t.name, "row-major")))
    return specs


def kernel_prototype(name: str, args: Sequence[ArgSpec]) -> str:
    """`int <name>(const float* A, ..., float* C)` (no trailing semicolon)."""
    check_signature(name, args)
    return f"int {name}({', '.join(f'{a.c_pointer} {a.c_name}' for a in args)})"


def entry_points_source(name: str, args: Sequence[ArgSpec]) -> str:
    """C source: the exported prototype of kernel `name`, `<name>_packed` and `<name>_checked`.
    Raises ValueError on a bad name or argument list."""
    prototype = kernel_prototype(name, args)
    unpacked = ", ".join(f"({a.c_pointer})args[{i}]" for i, a in enumerate(args))
    checked = f"{name}_checked"
    lines = [
        f"/* tunefleet artifact ABI v{ABI_VERSION}: entry points of kernel '{name}'. */",
        f"TF_EXPORT {prototype};",
        "",
        f"TF_EXPORT int {name}_packed(void** args) {{",
        f"  return {name}({unpacked});",
        "}",
        "",
        f"TF_EXPORT int {checked}(DLTensor** args, int num_args) {{",
    ]
    lines += checked_body(checked, args, "tf_check_tensor", lambda a: f"{dlpack_check_args(a)}, {shape_array(a)}",
                          lambda pointers: f"{name}({pointers})")
    return "\n".join(lines)


def thread_api_source(name: str) -> str:
    """C source: `<name>_set_num_threads(int)` and `<name>_get_num_threads(void)`, exported,
    calling the library's own runtime (the link binds them locally, build.LINK_FLAGS). Where
    several tunefleet libraries are linked into one program, `tunefleet_set_num_threads`
    reaches the first one loaded; these reach the pool of library `name`.
    Raises ValueError if `name` is not a C identifier."""
    if not _C_IDENTIFIER.fullmatch(name):
        raise ValueError(f"kernel name {name!r} is not a C identifier")
    return "\n".join([
        f"TF_EXPORT int {name}_set_num_threads(int n) {{ return tunefleet_set_num_threads(n); }}",
        f"TF_EXPORT int {name}_get_num_threads(void) {{ return tunefleet_get_num_threads(); }}",
        "",
    ])


def checked_prologue(checked: str, args: Sequence[ArgSpec]) -> list[str]:
    """Body lines opening `<checked>(DLTensor** args, int num_args)`: the expected shapes,
    the `data` array of unpacked pointers, and the argument-count check."""
    lines = [f"  static const int64_t shape_{a.name}[{len(a.shape)}] = {{{', '.join(map(str, a.shape))}}};"
             for a in args if a.shape]
    return lines + [
        f"  void* data[{len(args)}];",
        f"  if (args == NULL || num_args != {len(args)}) {{",
        f'    tf_set_error("{checked}: expected {len(args)} arguments '
        f'({", ".join(a.name for a in args)}), got %d%s", num_args,',
        '                 args == NULL ? " (args is NULL)" : "");',
        "    return -1;",
        "  }",
    ]


def dlpack_type(dtype: str) -> tuple[int, int]:
    """The DLPack type code (0 int, 2 float) and bits of `dtype`, a key of C_TYPES."""
    return C_TYPES[dtype][1], 8 * DTYPE_BYTES[dtype]


def dlpack_check_args(a: ArgSpec) -> str:
    """`<DLPack type code>, <bits>, <ndim>`: what a DLTensor of argument `a` must hold."""
    return f"{', '.join(map(str, dlpack_type(a.dtype)))}, {len(a.shape)}"


def shape_array(a: ArgSpec) -> str:
    """The name of the array of `a`'s expected shape that `checked_prologue` declares (NULL for a scalar)."""
    return f"shape_{a.name}" if a.shape else "NULL"


def checked_body(checked: str, args: Sequence[ArgSpec], check: str, expected: Callable[[ArgSpec], str],
                 call: Callable[[str], str], *, layout_check: str | None = None) -> list[str]:
    """The body lines of entry point `<checked>(DLTensor** args, int num_args)` and its closing brace:
    `checked_prologue`; where `layout_check` is given (CUDA: `tf_check_cuda_layout`), per argument
    `a` (the i-th) `layout_check("<checked>", "<a.name>", args[i], <type code, bits, ndim>, <shape>)`,
    every argument's before any device check; per argument the runtime's tensor check `check` (C:
    `tf_check_tensor`, CUDA: `tf_check_cuda_tensor`) as `check("<checked>", "<a.name>", args[i],
    <expected(a)>, &data[i])`; `disjoint_checks`; then `return <call(unpacked)>;` where `unpacked`
    lists the data pointers cast to the argument types."""
    lines = checked_prologue(checked, args)
    if layout_check is not None:
        lines += [f'  if ({layout_check}("{checked}", "{a.name}", args[{i}], {dlpack_check_args(a)}, '
                  f'{shape_array(a)}) != 0) return -1;' for i, a in enumerate(args)]
    for i, a in enumerate(args):
        lines.append(f'  if ({check}("{checked}", "{a.name}", args[{i}], {expected(a)}, &data[{i}]) != 0) return -1;')
    lines += disjoint_checks(checked, args)
    unpacked = ", ".join(f"({a.c_pointer})data[{i}]" for i, a in enumerate(args))
    return lines + [f"  return {call(unpacked)};", "}", ""]


def disjoint_checks(checked: str, args: Sequence[ArgSpec]) -> list[str]:
    """Body lines rejecting an output that overlaps any other argument (after `data` is filled)."""
    return [f'  if (tf_check_disjoint("{checked}", "{out.name}", data[{i}], {out.nbytes}, '
            f'"{other.name}", data[{j}], {other.nbytes}) != 0) return -1;'
            for i, out in enumerate(args) for j, other in enumerate(args)
            if out.is_output and (not other.is_output or j > i)]


def header_text(name: str, args: Sequence[ArgSpec], *, doc: str, dispatch: Sequence[str] = ()) -> str:
    """The artifact's public header `<name>.h`: prototypes of `<name>`, `<name>_checked`,
    `<name>_packed` and the runtime API, argument shapes/dtypes/layouts, DLPack declarations,
    and a usage example. `doc` (free text, e.g. workload, target, rebuild command) opens it.
    `dispatch`: the ISAs of a multi-target library (compiler.multitarget), the most capable
    first: the header then says how `<name>` chooses one and declares `<name>_isa` and the
    kernels `<name>_<isa>`."""
    prototype = kernel_prototype(name, args)
    guard = f"TUNEFLEET_KERNEL_{name.upper()}_H_"
    doc_lines = [f" * {line}".rstrip() for line in doc.replace("*/", "* /").splitlines()]
    width = max(len(a.name) for a in args)
    arg_lines = [f" *   {a.name:<{width}}  {'output' if a.is_output else 'input '}  "
                 f"{a.dtype:<8} {format_dims(a.shape):<16} {a.layout}" for a in args]
    example_decls = [f" *   static {t} " + ", ".join(
        f"{a.c_name}[{' * '.join(map(str, a.shape)) or 1}]" for a in args if a.c_type == t) + ";"
        for t in dict.fromkeys(a.c_type for a in args)]
    return "\n".join([
        "/*",
        f" * {name}.h -- tunefleet kernel '{name}' (artifact ABI v{ABI_VERSION}).",
        *(doc_lines and [" *", *doc_lines]),
        " *",
        " * Arguments, in call order (dtype, shape, layout):",
        *arg_lines,
        " * Each pointer is a dense buffer of that shape and layout; outputs must not overlap",
        " * other arguments. Every entry point returns 0 on success, else nonzero with a",
        " * message in tunefleet_last_error().",
        " *",
        " * Threads: parallel loops use a thread pool of min(requested, CPUs of the calling",
        " * thread's affinity mask, cgroup CPU quota rounded up) threads: the calling thread,",
        " * unpinned, and workers pinned one per CPU of that mask other than the caller's current",
        " * one (moved off it when the caller lands there). The mask is checked before every",
        " * parallel loop (one sched_getaffinity call), the quota (cgroup v2 cpu.max, v1",
        " * cpu.cfs_quota_us) at most once a second, so",
        " * a program that narrows or widens its mask after a first call (an MPI rank pinning",
        " * itself) gets a pool resized and re-pinned at its next call. Several threads may call",
        " * kernels at once: the pool runs one parallel loop at a time and the other callers",
        " * wait for it, asleep, so the pool never runs more threads than its CPUs and no call",
        " * can deadlock (a parallel loop inside a running one runs inline). Environment",
        " * variable TUNEFLEET_NUM_THREADS sets the initial request; TUNEFLEET_SPIN_US (default",
        " * 100) how many microseconds an idle pool thread spins before it sleeps: where other",
        " * work runs between calls for longer (a model's other operators), a sleeping thread",
        " * takes tens of microseconds to wake (about 47 on a cloud VM), so a longer spin, e.g.",
        " * 1000, saves that on every call, and keeps a CPU busy that long after each. A pool",
        " * thread whose CPU another program keeps busy (it waited for it over a tenth of the",
        " * last 20 ms) does not spin, so that the next call's wake-up lets it preempt that",
        " * program instead of waiting out the program's time slice.",
        " *",
        " * Memory: temporaries (packed panels, padded planes) are allocated per call; each",
        " * thread keeps its last 4 freed blocks of 64 KiB or more for its next calls (no page",
        " * faults on fresh memory), freed when the thread ends.",
        *dispatch_doc(name, dispatch),
        " *",
        " * Example (C or C++):",
        " *   #include <stdio.h>",
        f' *   #include "{name}.h"',
        *example_decls,
        " *   int main(void) {",
        f" *     if ({name}({', '.join(a.c_name for a in args)}) != 0) {{",
        ' *       fprintf(stderr, "%s\\n", tunefleet_last_error());',
        " *       return 1;",
        " *     }",
        " *     return 0;",
        " *   }",
        f" * Build: cc main.c -I<dir> -L<dir> -l:{name}.so -Wl,-rpath,<dir>",
        " */",
        *header_opening(guard),
        "/* The kernel, over dense buffers:",
        *[f" *   {a.name}: {a.c_pointer}, {a.dtype} {format_dims(a.shape)}, {a.layout}"
          for a in args],
        " */",
        f"{prototype};",
        "",
        f"/* The kernel over DLTensor* args[] = {{{', '.join(a.name for a in args)}}}, "
        f"num_args = {len(args)}:",
        " * checks device (kDLCPU), dtype, ndim, shape, strides (NULL or compact row-major),",
        " * data pointer and byte_offset of each, and that outputs overlap nothing, then calls",
        " * the kernel. On a mismatch returns nonzero; tunefleet_last_error() names the",
        " * argument, what was expected and what was given. */",
        f"int {name}_checked(DLTensor** args, int num_args);",
        "",
        "/* The kernel with its pointers in an array, in call order (for tunefleet_timer). */",
        f"int {name}_packed(void** args);",
        "",
        *dispatch_declarations(name, args, dispatch),
        *runtime_api_declarations(name),
        *header_closing(guard),
    ])


def header_opening(guard: str, preamble: Sequence[str] | None = None) -> list[str]:
    """The opening lines of a public header after its comment: the include guard `guard`, the
    `preamble` (default: <stdint.h> and the DLPack declarations), and `extern "C" {` for C++."""
    if preamble is None:
        preamble = ["#include <stdint.h>", "", dlpack_declarations()]
    return [f"#ifndef {guard}", f"#define {guard}", "", *preamble, "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]


def header_closing(guard: str) -> list[str]:
    """The closing lines of a public header: the tunefleet_timer declaration, then `guard_closing`."""
    return [
        "",
        "/* Times fn(args): a warm-up call, then `repeat` repeats of `number` calls (number grows",
        " * until a repeat lasts min_repeat_ms), cooldown_ms sleep between repeats, optional",
        " * cache flush before each; out_seconds[repeat] receives seconds per call. */",
        "int tunefleet_timer(int (*fn)(void** args), void** args, int number, int repeat,",
        "                    int min_repeat_ms, int cooldown_ms, int flush_cache,",
        "                    double* out_seconds);",
        "",
        *guard_closing(guard),
    ]


def guard_closing(guard: str) -> list[str]:
    """The last lines of a header: the end of `extern "C"` and of the include guard `guard`."""
    return ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]


def dispatch_doc(name: str, isas: Sequence[str]) -> list[str]:
    """Header comment lines on how multi-target library `name` chooses between `isas` ([] for
    a single-target library)."""
    if not isas:
        return []
    return [
        " *",
        f" * Multi-target: this library holds the kernel built for {', '.join(isas)}.",
        " * When it is loaded it chooses, once, the most capable of them this CPU supports",
        " * (cpuid), or the one the environment variable TUNEFLEET_ISA names (e.g.",
        " * TUNEFLEET_ISA=avx2; read at load time). Code for an ISA the CPU lacks is never run:",
        " * if TUNEFLEET_ISA names an ISA that is not inside or that this CPU does not support,",
        " * or the CPU supports none of those inside, the kernel returns -1 and",
        f" * {name}_isa() NULL, with the reason in tunefleet_last_error().",
        f" * {name}_isa() names the ISA chosen; {name}_<isa>() are the kernels of each ISA.",
    ]


def dispatch_declarations(name: str, args: Sequence[ArgSpec], isas: Sequence[str]) -> list[str]:
    """Header lines declaring `<name>_isa` and the kernel of each of `isas` of multi-target
    library `name` ([] for a single-target library)."""
    if not isas:
        return []
    lines = [
        "/* The ISA the kernel runs (e.g. \"avx2\"), chosen once at load time; NULL when none",
        " * could be chosen (tunefleet_last_error() says why). */",
        f"const char* {name}_isa(void);",
        "",
        "/* The kernel built for one ISA, called directly, and its checked entry point: only on a",
        " * CPU that supports that ISA (elsewhere it dies of an illegal instruction). */",
    ]
    for isa in isas:
        lines += [f"{kernel_prototype(f'{name}_{isa}', args)};",
                  f"int {name}_{isa}_checked(DLTensor** args, int num_args);"]
    return lines + [""]


def runtime_api_declarations(name: str) -> list[str]:
    """Header lines declaring the runtime API of library `name`: the thread-count functions
    (process-wide and `<name>_`-prefixed, see thread_api_source) and tunefleet_last_error."""
    return [
        "/* Sets the requested number of pool threads (n <= 0: one per CPU of the mask) and",
        " * returns the count parallel loops called from this thread will use now: n clamped to",
        " * the calling thread's affinity mask and the cgroup CPU quota, with a message on",
        " * stderr naming the limit and its current size when n is over it. The request is",
        " * kept: a wider mask later gets up to n threads. */",
        "int tunefleet_set_num_threads(int n);",
        "",
        "/* The number of threads a parallel loop called from this thread would use now. */",
        "int tunefleet_get_num_threads(void);",
        "",
        "/* The same for this library's pool alone. Each tunefleet library has its own pool; in a",
        " * program that links several, tunefleet_set_num_threads reaches the first one loaded",
        f" * and these reach {name}'s. */",
        f"int {name}_set_num_threads(int n);",
        f"int {name}_get_num_threads(void);",
        "",
        "/* The calling thread's last error message (\"\" if none): one per thread for all",
        " * tunefleet libraries linked into a program, so it names the last failure of any. */",
        "const char* tunefleet_last_error(void);",
    ]


def dlpack_declarations() -> str:
    """The DLPack-compatible declarations of the runtime header (guarded against dlpack.h)."""
    return _DLPACK_BLOCK.search(runtime_sources()[0]).group(1)


def format_dims(shape: Sequence[int]) -> str:
    """A shape as the headers print it: `[64, 128]`."""
    return f"[{', '.join(map(str, shape))}]"


def check_signature(name: str, args: Sequence[ArgSpec]) -> None:
    """ValueError unless `name` is a C identifier and `args` are uniquely named, inputs first, then
    at least one output."""
    if not _C_IDENTIFIER.fullmatch(name):
        raise ValueError(f"kernel name {name!r} is not a C identifier")
    if not args:
        raise ValueError(f"kernel {name!r} has no arguments")
    names = [a.name for a in args]
    if len(set(names)) != len(names):
        raise ValueError(f"kernel {name!r}: duplicate argument names in {names}")
    flags = [a.is_output for a in args]
    if not any(flags) or flags != sorted(flags):
        raise ValueError(f"kernel {name!r}: needs at least one output, outputs last; got "
                         f"{[(a.name, 'out' if a.is_output else 'in') for a in args]}")
