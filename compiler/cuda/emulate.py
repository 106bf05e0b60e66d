"""Run a generated CUDA kernel on the CPU, to check GPU templates where there is no GPU.

The kernel's CUDA C++ text, exactly as generated, is compiled with the host C++ compiler
against a small shim: `__global__`/`__device__`/`__launch_bounds__` vanish, `float4` and
friends are plain structs, `threadIdx`/`blockIdx` are thread-local, the dynamic shared
memory is a per-block buffer filled with NaN bytes (0xff) before each block, and
`__syncthreads()` is a barrier among host threads, one per CUDA thread of the block.

The threads of a block run one at a time, in order, each until its next barrier (or its
end), then hand over to the next: execution is deterministic, and a missing barrier shows
as a wrong answer (a thread reads shared memory another thread has not yet written, or
that it has already overwritten for the next tile) instead of a rare race. Blocks run one
after another.

This checks what lowering and code generation produce (indices, guards, shared regions,
barriers, vector accesses as code) against the numpy references; it says nothing about
speed, and nothing about what only the hardware does (the memory model beyond barriers,
alignment faults, register allocation). Use small shapes: every CUDA thread is a host thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from ..build import BuildError, compiler_command
from .codegen import PRELUDE, kernel_symbol
from .build import CudaKernelSource

SHIM = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct tf_uint3 { unsigned x, y, z; };
static thread_local tf_uint3 threadIdx, blockIdx;
static tf_uint3 blockDim, gridDim;
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) double2 { double x, y; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline double2 make_double2(double a, double b) { return double2{a, b}; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }

static std::mutex tf_m;
static std::vector<std::condition_variable> tf_cvs(1024);  /* one per thread: wake only the next */
static int tf_turn, tf_n;
static std::vector<char> tf_done;
static thread_local int tf_me;
static unsigned char* tf_emu_smem;
static long long tf_barriers;

static void tf_pass(void) {  /* with tf_m held: the next thread still running gets the turn */
  for (int k = 1; k <= tf_n; ++k) {
    int c = (tf_me + k) % tf_n;
    if (!tf_done[c]) { tf_turn = c; tf_cvs[c].notify_one(); break; }
  }
}

static void __syncthreads(void) {
  std::unique_lock<std::mutex> lock(tf_m);
  ++tf_barriers;
  tf_pass();
  tf_cvs[tf_me].wait(lock, [] { return tf_turn == tf_me; });
}

template <class F>
static void tf_emu_launch(tf_uint3 grid, tf_uint3 block, size_t smem_bytes, F kernel) {
  gridDim = grid;
  blockDim = block;
  std::vector<unsigned char> smem(smem_bytes + 16);
  unsigned char* base = (unsigned char*)(((uintptr_t)smem.data() + 15) & ~(uintptr_t)15);
  int n = (int)(block.x * block.y * block.z);
  if (n > (int)tf_cvs.size()) tf_cvs = std::vector<std::condition_variable>(n);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        memset(smem.data(), 0xff, smem.size());
        tf_emu_smem = base;
        tf_n = n;
        tf_done.assign(n, 0);
        tf_turn = 0;
        std::vector<std::thread> threads;
        for (int t = 0; t < n; ++t)
          threads.emplace_back([=] {
            tf_me = t;
            threadIdx = tf_uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            blockIdx = tf_uint3{bx, by, bz};
            {
              std::unique_lock<std::mutex> lock(tf_m);
              tf_cvs[tf_me].wait(lock, [] { return tf_turn == tf_me; });
            }
            kernel();
            std::unique_lock<std::mutex> lock(tf_m);
            tf_done[tf_me] = 1;
            tf_pass();
          });
        for (auto& th : threads) th.join();
      }
}
"""

_SHARED_DECL = "extern __shared__ __align__(16) unsigned char tf_smem[];"


def emulator_source(parts: Sequence[CudaKernelSource]) -> str:
    """The C++ text that runs the kernels of `parts` on the CPU: per kernel `name`,
    `extern "C" int tf_emu_run_<name>(void** args)` (names must differ)."""
    from ..te import DTYPES

    out = [SHIM, PRELUDE.replace("#include <cuda_runtime.h>", "")]
    for part in parts:
        g = part.gfunc
        out.append(part.kernel.replace(_SHARED_DECL, "unsigned char* tf_smem = tf_emu_smem;"))
        params = g.func.params
        n_in = len(params) - g.func.num_outputs
        casts = ", ".join(f"({'const ' if k < n_in else ''}{DTYPES[b.dtype].ctype}*)args[{k}]"
                          for k, b in enumerate(params))
        gx, gy, gz = g.grid
        bx, by, bz = g.block
        out += [f'extern "C" int tf_emu_run_{g.name}(void** args) {{',
                f"  tf_emu_launch(tf_uint3{{{gx}, {gy}, {gz}}}, tf_uint3{{{bx}, {by}, {bz}}}, {g.shared_bytes}, "
                f"[=] {{ {kernel_symbol(g.name)}({casts}); }});",
                "  return 0;",
                "}"]
    out.append('extern "C" long long tf_emu_barriers(void) { return tf_barriers; }')
    return "\n".join(out) + "\n"


def _build(source: str) -> Path:
    cc = compiler_command()
    cxx = os.environ.get("CXX", "g++")
    key = hashlib.sha256((source + cxx).encode()).hexdigest()[:24]
    out_dir = Path(tempfile.gettempdir()) / f"tunefleet-gpu-emulate-{os.getuid()}"
    out_dir.mkdir(exist_ok=True)
    so = out_dir / f"emu_{key}.so"
    if so.exists():
        return so
    src = out_dir / f"emu_{key}.cpp"
    src.write_text(source)
    tmp = out_dir / f".emu_{key}.{os.getpid()}.so"
    proc = subprocess.run([cxx, "-O1", "-std=c++17", "-pthread", "-shared", "-fPIC", "-w", str(src), "-o", str(tmp)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"compiling the CPU emulation of a CUDA kernel failed ({cc[0]}):", proc.stdout + proc.stderr)
    os.replace(tmp, so)
    return so


def emulate(part: CudaKernelSource, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run kernel `part` on the CPU over C-contiguous `inputs` (ABI shapes and dtypes); returns the
    outputs, allocated filled with NaN (an element the kernel does not write stays NaN)."""
    return emulate_many([(part, inputs)])[0]


def emulate_many(runs: Sequence[tuple[CudaKernelSource, Sequence[np.ndarray]]]) -> list[list[np.ndarray]]:
    """`emulate` for several kernels (distinct names) built in one compiler run."""
    names = [part.name for part, _ in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"kernel names must differ in one emulation build: {names}")
    lib = ctypes.CDLL(str(_build(emulator_source([part for part, _ in runs]))))
    results = []
    for part, inputs in runs:
        ins = [a for a in part.args if not a.is_output]
        if len(inputs) != len(ins):
            raise ValueError(f"{part.name}: expected {len(ins)} inputs, got {len(inputs)}")
        arrays = []
        for spec, x in zip(ins, inputs):
            x = np.ascontiguousarray(x, dtype=spec.dtype)
            if x.size != int(np.prod(spec.shape)):
                raise ValueError(f"{part.name}: argument {spec.name} must have shape {spec.shape}, got {x.shape}")
            arrays.append(x)
        outs = [np.full(a.shape, np.nan, a.dtype) for a in part.args if a.is_output]
        ptrs = (ctypes.c_void_p * len(arrays + outs))(*[a.ctypes.data for a in arrays + outs])
        rc = getattr(lib, f"tf_emu_run_{part.name}")(ptrs)
        if rc != 0:
            raise RuntimeError(f"{part.name}: emulation returned {rc}")
        results.append(outs)
    return results


__all__ = ["emulate", "emulate_many", "emulator_source"]
