"""Building CUDA kernels: launchers, ABI entry points, header, and nvcc into cached `.so` files.

A GPU artifact is ONE CUDA C++ translation unit (:func:`cuda_unit`): the tunefleet CUDA
runtime (errors, DLTensor checks, the GPU timer, memory helpers), the kernels, and per
kernel the exported entry points

- ``int <name>(const float* A, ..., float* C, cudaStream_t stream)``: device pointers, an
  asynchronous launch on `stream`; returns nonzero (message in ``tunefleet_last_error()``)
  when an argument that the kernel reads or writes with 16-byte vectors is not 16-byte
  aligned, or the launch fails;
- ``int <name>_packed(void** args, cudaStream_t stream)``: the pointers in an array (the timer's
  form);
- ``int <name>_checked(DLTensor** args, int num_args)``: checks device (kDLCUDA on the current
  device, device memory), dtype, shape, strides, alignment and that outputs overlap nothing,
  then launches on the default stream.

nvcc builds it for exactly one architecture (``-arch=sm_XY``; ``sm_90a`` as
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
from dataclasses import dataclass, field
from pathlib import Path

from .abi import (ABI_VERSION, ArgSpec, _C_TYPES, _check_signature, _dims, arg_specs, checked_prologue,
                  disjoint_checks, dlpack_declarations)
from . import sandbox
from .build import (COMPILE_TIMEOUT_S, BuildError, _compile_atomic, _write_atomic, cache_dir,
                    inline_dltensor_check)
from .codegen.cuda import PRELUDE, generate_cuda, kernel_symbol
from .gpu_lower import GpuFunc, lower_cuda
from .gpu_verify import DeviceLimits, limits_for, verify
from .schedule import Schedule
from .target import DTYPE_BYTES, Target
from .te import Tensor

RUNTIME = Path(__file__).resolve().parent / "runtime" / "tunefleet_cuda_runtime.cuh"
#: nvcc flags of every GPU build besides the architecture and the soname.
BASE_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
              "-cudart", "static", "-Xcompiler", "-static-libstdc++", "-Xcompiler", "-static-libgcc",
              "-Xlinker", "--exclude-libs,ALL", "-Xlinker", "--no-undefined")
#: Dynamic shared memory a kernel may use without cudaFuncSetAttribute.
DEFAULT_SHARED_BYTES = 48 * 1024
VECTOR_ALIGN = 16


# ----------------------------------------------------------------------------- toolkit


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
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"cannot run {path} --version: {exc}") from exc
    m = re.search(r"release ([0-9.]+), V([0-9.]+)", out.stdout)
    return m.group(2) if m else (out.stdout.strip().splitlines() or ["unknown"])[-1]


def nvcc_version() -> str:
    """The toolkit version of nvcc, e.g. "13.0.88"."""
    return _nvcc_version(nvcc_path())


@functools.cache
def _nvcc_archs(path: str) -> tuple[str, ...]:
    try:
        out = subprocess.run([path, "--list-gpu-arch"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"cannot run {path} --list-gpu-arch: {exc}") from exc
    return tuple(f"sm_{m}" for m in re.findall(r"compute_([0-9]+[a-z]?)", out.stdout))


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


# ----------------------------------------------------------------------------- ABI


def _c_pointer(a: ArgSpec) -> str:
    return f"{'' if a.is_output else 'const '}{a.c_type}*"


def kernel_prototype(name: str, args: Sequence[ArgSpec]) -> str:
    """`int <name>(const float* A, ..., float* C, cudaStream_t stream)` (no semicolon)."""
    _check_signature(name, args)
    return f"int {name}({', '.join(f'{_c_pointer(a)} {a.name}' for a in args)}, cudaStream_t stream)"


def prototypes(name: str, args: Sequence[ArgSpec]) -> list[str]:
    """The declarations of a kernel's three entry points (the header's and the unit's)."""
    return [f"{kernel_prototype(name, args)};",
            f"int {name}_packed(void** args, cudaStream_t stream);",
            f"int {name}_checked(DLTensor** args, int num_args);"]


def launcher_source(g: GpuFunc, args: Sequence[ArgSpec], vector_args: set[str]) -> str:
    """The entry points of kernel `g` (see the module docstring)."""
    name = g.name
    params = g.func.params
    if [p.name for p in params] != [a.name for a in args]:
        raise BuildError(f"{name}: kernel parameters {[p.name for p in params]} do not match the ABI arguments "
                         f"{[a.name for a in args]}")
    ptrs = ", ".join(a.name for a in args)
    lines = [f"/* tunefleet artifact ABI v{ABI_VERSION}: entry points of CUDA kernel '{name}'. */",
             f'extern "C" TF_EXPORT {kernel_prototype(name, args)} {{']
    for a in args:
        if a.name in vector_args:
            lines.append(f'  if (tf_check_aligned("{name}", "{a.name}", {a.name}, {VECTOR_ALIGN}) != 0) return -1;')
    grid, block = g.grid, g.block
    lines.append(f"  const dim3 grid({grid[0]}, {grid[1]}, {grid[2]}), block({block[0]}, {block[1]}, {block[2]});")
    if g.shared_bytes > DEFAULT_SHARED_BYTES:
        lines += [f"  if (tf_cuda_ok(cudaFuncSetAttribute({kernel_symbol(name)}, "
                  f"cudaFuncAttributeMaxDynamicSharedMemorySize, {g.shared_bytes}), "
                  f'"{name}: raising the shared memory limit to {g.shared_bytes} bytes") != 0) return -1;']
    lines += [f"  {kernel_symbol(name)}<<<grid, block, {g.shared_bytes}, stream>>>({ptrs});",
              f'  return tf_cuda_ok(cudaGetLastError(), "{name}: kernel launch (grid {list(grid)}, block '
              f'{list(block)}, {g.shared_bytes} bytes of shared memory)");',
              "}", ""]
    unpacked = ", ".join(f"({_c_pointer(a)})args[{i}]" for i, a in enumerate(args))
    lines += [f'extern "C" TF_EXPORT int {name}_packed(void** args, cudaStream_t stream) {{',
              f"  return {name}({unpacked}, stream);", "}", ""]
    checked = f"{name}_checked"
    lines.append(f'extern "C" TF_EXPORT int {checked}(DLTensor** args, int num_args) {{')
    lines += checked_prologue(checked, args)
    for i, a in enumerate(args):
        code = _C_TYPES[a.dtype][1]
        align = VECTOR_ALIGN if a.name in vector_args else DTYPE_BYTES[a.dtype]
        lines.append(f'  if (tf_check_cuda_tensor("{checked}", "{a.name}", args[{i}], {code}, '
                     f"{8 * DTYPE_BYTES[a.dtype]}, {len(a.shape)}, {f'shape_{a.name}' if a.shape else 'NULL'}, {align}, "
                     f"&data[{i}]) != 0) "
                     "return -1;")
    lines += disjoint_checks(checked, args)
    unpacked = ", ".join(f"({_c_pointer(a)})data[{i}]" for i, a in enumerate(args))
    lines += [f"  return {name}({unpacked}, (cudaStream_t)0);", "}", ""]
    return "\n".join(lines)


@functools.cache
def runtime_source() -> str:
    """The CUDA runtime with the DLPack declarations and the DLTensor checks in place."""
    return inline_dltensor_check(RUNTIME.read_text()).replace("/* TUNEFLEET_DLPACK_DECLARATIONS */",
                                                              dlpack_declarations())


@dataclass
class CudaKernelSource:
    """One kernel's part of a unit: its GpuFunc, ABI args, kernel and launcher sources."""

    gfunc: GpuFunc
    args: list[ArgSpec]
    kernel: str
    launcher: str
    vector_args: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.gfunc.name


def kernel_source(g: GpuFunc, args: Sequence[ArgSpec]) -> CudaKernelSource:
    kernel, vec = generate_cuda(g)
    return CudaKernelSource(g, list(args), kernel, launcher_source(g, args, vec), vec)


def cuda_unit(parts: Sequence[CudaKernelSource]) -> str:
    """The self-contained CUDA C++ text of kernels `parts` (one artifact has one; a test may
    compile many in one nvcc run). The declarations the header has come first, so a
    mismatch between header and definitions fails the build."""
    text = "/* Generated by tunefleet: one self-contained CUDA translation unit. */\n"
    text += f"\n/* ---- tunefleet CUDA runtime ---- */\n{runtime_source().rstrip()}\n"
    text += "\n/* ---- entry points (as declared in the header) ---- */\nextern \"C\" {\n"
    for p in parts:
        text += "\n".join(f"TF_EXPORT {line}" for line in prototypes(p.name, p.args)) + "\n"
    text += "}\n"
    text += f"\n/* ---- kernels ---- */\n{PRELUDE}"
    for p in parts:
        text += f"\n{p.kernel.rstrip()}\n"
    for p in parts:
        text += f"\n/* ---- launcher of {p.name} ---- */\n{p.launcher.rstrip()}\n"
    return text


# ----------------------------------------------------------------------------- nvcc


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
    _write_atomic(source_path, unit)
    info = {"name": name, "kind": "cuda", "target": str(target), "flags": flags, "libs": [],
            "toolchain": toolchain, "source": f"{name}.cu", "command": rebuild_command(name, flags)}
    _write_atomic(out_dir / "build.json", json.dumps(info, indent=2))
    _compile_atomic([toolchain["nvcc"], *flags, str(source_path)], so_path, name, inputs=[out_dir],
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


# ----------------------------------------------------------------------------- header


def header_text(name: str, args: Sequence[ArgSpec], *, doc: str, launch: dict | None = None) -> str:
    """The public header `<name>.h` of a GPU artifact: entry points with each argument's
    shape, dtype and layout, DLPack declarations, the runtime API, and a usage example."""
    guard = f"TUNEFLEET_KERNEL_{name.upper()}_H_"
    doc_lines = [f" * {line}".rstrip() for line in doc.replace("*/", "* /").splitlines()]
    width = max(len(a.name) for a in args)
    arg_lines = [f" *   {a.name:<{width}}  {'output' if a.is_output else 'input '}  "
                 f"{a.dtype:<8} {_dims(a.shape):<16} {a.layout}" for a in args]
    launch_lines = []
    if launch:
        launch_lines = [" *", f" * Launch: grid {launch['grid']}, block {launch['block']}, "
                              f"{launch['shared_bytes']} bytes of dynamic shared memory."]
    alloc = [f" *   {a.c_type}* d_{a.name};  cudaMalloc((void**)&d_{a.name}, {a.nbytes});" for a in args]
    return "\n".join([
        "/*",
        f" * {name}.h -- tunefleet CUDA kernel '{name}' (artifact ABI v{ABI_VERSION}).",
        *(doc_lines and [" *", *doc_lines]),
        " *",
        " * Arguments, in call order (dtype, shape, layout), all in CUDA device memory:",
        *arg_lines,
        " * Each pointer is a dense buffer of that shape and layout in device memory (cudaMalloc),",
        f" * aligned to {VECTOR_ALIGN} bytes (cudaMalloc's are); outputs must not overlap other arguments.",
        " * The kernel is launched asynchronously on `stream` (0: the default stream); errors of",
        " * its execution show at the next synchronization. Every entry point returns 0 on",
        " * success, else nonzero with a message in tunefleet_last_error(). The library links",
        " * the CUDA runtime statically: it needs only the NVIDIA driver.",
        *launch_lines,
        " *",
        " * Example (C++, compiled with nvcc or with -I<cuda>/include -L<dir>):",
        " *   #include <cuda_runtime.h>",
        " *   #include <stdio.h>",
        f' *   #include "{name}.h"',
        " *   int main() {",
        *[line.replace(" *   ", " *     ", 1) for line in alloc],
        " *     cudaStream_t s; cudaStreamCreate(&s);",
        f" *     if ({name}({', '.join('d_' + a.name for a in args)}, s) != 0) {{",
        ' *       fprintf(stderr, "%s\\n", tunefleet_last_error());',
        " *       return 1;",
        " *     }",
        " *     cudaStreamSynchronize(s);",
        " *     return 0;",
        " *   }",
        f" * Build: nvcc main.cu -I<dir> -L<dir> -l:{name}.so -Xlinker -rpath,<dir>",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        "/* cudaStream_t as <cuda_runtime.h> declares it, so this header needs no CUDA include. */",
        "#ifndef __DRIVER_TYPES_H__",
        "typedef struct CUstream_st* cudaStream_t;",
        "#endif",
        "",
        dlpack_declarations(),
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* The kernel, over device buffers, launched on `stream`:",
        *[f" *   {a.name}: {_c_pointer(a)}, {a.dtype} {_dims(a.shape)}, {a.layout}" for a in args],
        " */",
        f"{kernel_prototype(name, args)};",
        "",
        "/* The kernel with its pointers in an array, in call order (for tunefleet_cuda_timer). */",
        f"int {name}_packed(void** args, cudaStream_t stream);",
        "",
        f"/* The kernel over DLTensor* args[] = {{{', '.join(a.name for a in args)}}}, num_args = {len(args)}:",
        " * checks device (kDLCUDA or kDLCUDAManaged, the current device, device memory), dtype, ndim,",
        " * shape, strides (NULL or compact row-major), alignment, and that outputs overlap nothing,",
        " * then launches on the default stream. On a mismatch returns nonzero; tunefleet_last_error()",
        " * names the argument, what was expected and what was given. */",
        f"int {name}_checked(DLTensor** args, int num_args);",
        "",
        "/* The calling thread's last error message (\"\" if none). */",
        "const char* tunefleet_last_error(void);",
        "",
        "/* Times fn(args, stream) with CUDA events: a warm-up launch, then `repeat` repeats of",
        " * `number` launches (number grows until a repeat lasts min_repeat_ms), cooldown_ms of",
        " * sleep between repeats, an L2 flush (a write of twice the L2 size) before each repeat",
        " * if flush_l2; out_seconds[repeat] receives seconds per launch. */",
        "int tunefleet_cuda_timer(int (*fn)(void** args, cudaStream_t stream), void** args, int number,",
        "                         int repeat, int min_repeat_ms, int cooldown_ms, int flush_l2,",
        "                         double* out_seconds);",
        "",
        "/* Helpers, so a caller needs no other CUDA library: device count (0 without a driver or",
        " * device), device selection, device memory, synchronous copies (kind 1: host to device,",
        " * 2: device to host, 3: device to device), memset, synchronize. */",
        "int tunefleet_cuda_device_count(int* count);",
        "int tunefleet_cuda_set_device(int device);",
        "int tunefleet_cuda_malloc(void** ptr, size_t bytes);",
        "int tunefleet_cuda_free(void* ptr);",
        "int tunefleet_cuda_memcpy(void* dst, const void* src, size_t bytes, int kind);",
        "int tunefleet_cuda_memset(void* ptr, int value, size_t bytes);",
        "int tunefleet_cuda_synchronize(void);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ])


# ----------------------------------------------------------------------------- building


@dataclass
class CudaBuiltKernel:
    """A compiled CUDA kernel: `so_path` (cached .so), `source` (the whole unit, what an artifact
    ships as `<name>.cu`), `args` (ABI specs), `gfunc` (the lowered kernel with its launch)."""

    name: str
    so_path: Path
    source: str
    args: list[ArgSpec]
    gfunc: GpuFunc
    kind: str = "cuda"

    @property
    def func(self):
        return self.gfunc.func

    @property
    def launch(self) -> dict:
        return {"grid": list(self.gfunc.grid), "block": list(self.gfunc.block),
                "shared_bytes": self.gfunc.shared_bytes}

    def header(self, doc: str = "") -> str:
        return header_text(self.name, self.args, doc=doc, launch=self.launch)

    def run(self, *inputs):
        """Run on the current CUDA device over numpy inputs (copies in and out); see gpu_kernel."""
        from .gpu_kernel import GpuKernel

        return GpuKernel(self.so_path, {"name": self.name, "args": [a.to_dict() for a in self.args]}).run(*inputs)


def lower_and_verify(sch: Schedule, tensors: Sequence[Tensor], target: Target, name: str,
                     limits: DeviceLimits | None = None) -> GpuFunc:
    """lower_cuda + verify (InvalidConfig before any build)."""
    g = lower_cuda(sch, tensors, name, lanes=target.lanes("float32"))
    verify(g, limits or limits_for(target))
    return g


def build_cuda(sch: Schedule, tensors: Sequence[Tensor], target: Target, name: str, *,
               specs: Sequence[ArgSpec] | None = None, limits: DeviceLimits | None = None) -> CudaBuiltKernel:
    """Lower, verify, generate and build a GPU schedule. Raises ScheduleError / InvalidConfig /
    BuildError."""
    g = lower_and_verify(sch, tensors, target, name, limits)
    specs = list(specs) if specs is not None else arg_specs(tensors)
    part = kernel_source(g, specs)
    unit = cuda_unit([part])
    so = compile_cuda_shared(unit, target, name=name)
    return CudaBuiltKernel(name, so, unit, specs, g)


def workload_kernel(workload, config, target: Target, *, name: str | None = None,
                    limits: DeviceLimits | None = None) -> CudaKernelSource:
    """The verified kernel source of `config` of `workload` (no nvcc): for batch compile checks."""
    sch, tensors = workload.template(target.kind)(config, workload, target)
    name = name or workload.kernel_name(target)
    g = lower_and_verify(sch, tensors, target, name, limits)
    return kernel_source(g, arg_specs(tensors, workload.layouts(), workload.tensors()))


def build_cuda_workload(workload, config, target: Target, limits: DeviceLimits | None = None) -> CudaBuiltKernel:
    """Build `config` of `workload` for a cuda `target` as kernel `workload.kernel_name(target)`."""
    part = workload_kernel(workload, config, target, limits=limits)
    unit = cuda_unit([part])
    so = compile_cuda_shared(unit, target, name=part.name)
    return CudaBuiltKernel(part.name, so, unit, part.args, part.gfunc)


__all__ = ["BASE_FLAGS", "CudaBuiltKernel", "CudaKernelSource", "arch_flags", "build_cuda",
           "build_cuda_workload", "check_compiles", "compile_cuda_shared", "cuda_unit", "have_nvcc",
           "header_text", "kernel_prototype", "kernel_source", "launcher_source", "lower_and_verify", "nvcc_path",
           "nvcc_version", "prototypes", "supported_archs", "toolchain_versions", "workload_kernel",
           "COMPILE_TIMEOUT_S"]
