"""The exported entry points of a CUDA kernel and the public header of a GPU artifact.

Per kernel:

- ``int <name>(const float* A, ..., float* C, cudaStream_t stream)``: device pointers, an
  asynchronous launch on `stream`; returns nonzero (message in ``tunefleet_last_error()``)
  when an argument that the kernel reads or writes with 16-byte vectors is not 16-byte
  aligned, or the launch fails;
- ``int <name>_packed(void** args, cudaStream_t stream)``: the pointers in an array (the timer's
  form);
- ``int <name>_checked(DLTensor** args, int num_args)``: checks each argument's dtype, shape and
  strides, then each one's device (kDLCUDA on the current device, device memory) and alignment,
  and that outputs overlap nothing, then launches on the default stream. The layouts come
  first so that host tensors of the right layouts are refused for their device alone, with
  no CUDA call: how `GpuKernel` checks a manifest against its library on any host.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..abi import (ABI_VERSION, ArgSpec, check_signature, checked_body, dlpack_declarations, format_dims,
                   guard_closing, header_opening)
from ..build import BuildError
from .codegen import kernel_symbol
from ..target import DTYPE_BYTES
from .lower import GpuFunc

#: Dynamic shared memory a kernel may use without cudaFuncSetAttribute.
DEFAULT_SHARED_BYTES = 48 * 1024
#: Alignment, bytes, of an argument the kernel accesses with vectors.
VECTOR_ALIGN = 16


def kernel_prototype(name: str, args: Sequence[ArgSpec]) -> str:
    """`int <name>(const float* A, ..., float* C, cudaStream_t stream)` (no semicolon)."""
    check_signature(name, args)
    return f"int {name}({', '.join(f'{a.c_pointer} {a.c_name}' for a in args)}, cudaStream_t stream)"


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
    ptrs = ", ".join(a.c_name for a in args)
    lines = [f"/* tunefleet artifact ABI v{ABI_VERSION}: entry points of CUDA kernel '{name}'. */",
             f'extern "C" TF_EXPORT {kernel_prototype(name, args)} {{']
    for a in args:
        if a.name in vector_args:
            lines.append(f'  if (tf_check_aligned("{name}", "{a.name}", {a.c_name}, {VECTOR_ALIGN}) != 0) return -1;')
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
    unpacked = ", ".join(f"({a.c_pointer})args[{i}]" for i, a in enumerate(args))
    lines += [f'extern "C" TF_EXPORT int {name}_packed(void** args, cudaStream_t stream) {{',
              f"  return {name}({unpacked}, stream);", "}", ""]
    checked = f"{name}_checked"
    lines.append(f'extern "C" TF_EXPORT int {checked}(DLTensor** args, int num_args) {{')

    def alignment(a: ArgSpec) -> str:
        return str(VECTOR_ALIGN if a.name in vector_args else DTYPE_BYTES[a.dtype])

    lines += checked_body(checked, args, "tf_check_cuda_tensor", alignment,
                          lambda pointers: f"{name}({pointers}, (cudaStream_t)0)", layout_check="tf_check_cuda_layout")
    return "\n".join(lines)


def header_text(name: str, args: Sequence[ArgSpec], *, doc: str, launch: dict | None = None) -> str:
    """The public header `<name>.h` of a GPU artifact: entry points with each argument's
    shape, dtype and layout, DLPack declarations, the runtime API, and a usage example."""
    guard = f"TUNEFLEET_KERNEL_{name.upper()}_H_"
    doc_lines = [f" * {line}".rstrip() for line in doc.replace("*/", "* /").splitlines()]
    width = max(len(a.name) for a in args)
    arg_lines = [f" *   {a.name:<{width}}  {'output' if a.is_output else 'input '}  "
                 f"{a.dtype:<8} {format_dims(a.shape):<16} {a.layout}" for a in args]
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
        *header_opening(guard, [
            "#include <stddef.h>",
            "#include <stdint.h>",
            "",
            "/* cudaStream_t as <cuda_runtime.h> declares it, so this header needs no CUDA include. */",
            "#ifndef __DRIVER_TYPES_H__",
            "typedef struct CUstream_st* cudaStream_t;",
            "#endif",
            "",
            dlpack_declarations()]),
        "/* The kernel, over device buffers, launched on `stream`:",
        *[f" *   {a.name}: {a.c_pointer}, {a.dtype} {format_dims(a.shape)}, {a.layout}" for a in args],
        " */",
        f"{kernel_prototype(name, args)};",
        "",
        "/* The kernel with its pointers in an array, in call order (for tunefleet_cuda_timer). */",
        f"int {name}_packed(void** args, cudaStream_t stream);",
        "",
        f"/* The kernel over DLTensor* args[] = {{{', '.join(a.name for a in args)}}}, num_args = {len(args)}:",
        " * checks every argument's dtype, ndim, shape and strides (NULL or compact row-major), then",
        " * each one's device (kDLCUDA or kDLCUDAManaged, the current device, device memory) and",
        " * alignment, and that outputs overlap nothing, then launches on the default stream. On a",
        " * mismatch returns nonzero; tunefleet_last_error() names the argument, what was expected",
        " * and what was given. */",
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
        *guard_closing(guard),
    ])


__all__ = ["DEFAULT_SHARED_BYTES", "VECTOR_ALIGN", "header_text", "kernel_prototype", "launcher_source",
           "prototypes"]
