"""CUDA C++ code generation for NVIDIA GPU targets: the CUDA backend of `compiler.codegen.cstyle`.

From a lowered `GpuFunc` (`compiler.cuda.lower.lower_cuda`):

- the kernel `__global__ void __launch_bounds__(<threads>) <name>_kernel(const float* __restrict__ A, ...,
  float* __restrict__ C)`: the code one thread runs. A loop bound to a block or thread index
  is its variable read from `blockIdx.*` / `threadIdx.*` (guarded when the loop is shorter
  than the launch extent of its index);
- shared-memory buffers are slices of the kernel's dynamic shared memory (`extern
  __shared__`, 16-byte aligned offsets), so a block may use more than the 48 KB of static
  shared memory (the launcher raises the kernel's limit when it needs to);
- per-thread buffers are plain arrays; after unrolling their indices are constants, which
  nvcc keeps in registers. Vector statements (Ramp/Broadcast, 4 float32 lanes) become
  16-byte `float4` loads and stores where the alignment is proven (the index is a multiple
  of the lane count and the buffer is shared memory, or a global argument, whose alignment
  the launcher checks), else element by element; register arrays are always accessed
  element by element (a vector cast of a local array would push it to local memory);
- index arithmetic is in `int` when every buffer has fewer than 2^31 elements, else `long long`;
  integer division prints as C's `/` and `%` where operands are provably non-negative;
- `#pragma unroll` on loops the unroller left ('unroll_pragma') and small leftover loops.

`generate_cuda(g)` gives the kernel source (to follow `PRELUDE` once per unit); the launcher and the ABI entry
points around it come from `compiler.cuda.build` and `compiler.cuda.entry_points`.
"""

from __future__ import annotations

import math

from ..codegen.cstyle import CStyleRenderer
from ..ir import Allocate, Broadcast, Buffer, Evaluate, For, Load, Ramp, Store, lanes_of
from ..schedule import GPU_TAGS
from ..te import DTYPES, BinOp, Call, Cast, Expr, Select, dtype_of
from .lower import GpuFunc
from .shared_memory import BARRIER

#: (dtype, lanes) -> CUDA vector type and its component names.
VECTOR_TYPES = {("float32", 4): "float4", ("float32", 2): "float2", ("float64", 2): "double2"}
_COMPONENTS = "xyzw"
PRELUDE = """\
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

static __device__ __forceinline__ long long tf_floordiv(long long a, long long b) {
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static __device__ __forceinline__ long long tf_floormod(long long a, long long b) {
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


def index_type(g: GpuFunc) -> str:
    """`int` when every buffer (and every flat index) fits in 31 bits, else `long long`."""
    sizes = [b.size for b in g.func.params] + [b.size for b, _ in g.shared]
    return "int" if max(sizes, default=0) < 2**31 - 1 else "long long"


class CudaGenerator(CStyleRenderer):
    """Emits the CUDA source of one GpuFunc (see module docstring)."""

    language = "CUDA"
    restrict = "__restrict__"
    true, false = "true", "false"
    float_min_max = "f{op}{suffix}"

    def __init__(self, g: GpuFunc):
        super().__init__(g.func)
        self.g = g
        self.index_ctype = index_type(g)
        self.n_tmp = 0
        #: global buffers accessed with vector loads/stores (the launcher checks their alignment)
        self.vector_params: set[int] = set()

    def tmp(self, hint: str) -> str:
        self.n_tmp += 1
        return f"tf_{hint}{self.n_tmp}"

    # ----------------------------------------------------------------- scalar expressions
    def load(self, e: Load) -> str:
        if lanes_of(e.index) > 1:
            raise NotImplementedError("CUDA codegen: a vector load outside a vector statement")
        return f"{self.buf(e.buffer)}[{self.expr(e.index)}]"

    def ctype(self, dtype: str) -> str:
        if dtype_of(dtype).kind == "int":
            return self.index_ctype if dtype == "int64" else DTYPES[dtype].ctype
        if dtype == "bool":
            return "bool"
        return DTYPES[dtype].ctype

    def non_finite(self, v: float, dtype: str) -> str:
        f32 = dtype == "float32"
        if math.isnan(v):
            return "__int_as_float(0x7fffffff)" if f32 else "__longlong_as_double(0x7ff8000000000000LL)"
        inf = "__int_as_float(0x7f800000)" if f32 else "__longlong_as_double(0x7ff0000000000000LL)"
        return f"(-{inf})" if v < 0 else inf

    def floor_division(self, op: str, a: str, b: str) -> str:
        return f"(({self.index_ctype}){super().floor_division(op, a, b)})"

    # ----------------------------------------------------------------- vector statements
    def may_align(self, b: Buffer) -> bool:
        return b.scope in ("global", "shared")

    def _vector_type(self, b: Buffer, r: Ramp) -> str | None:
        t = VECTOR_TYPES.get((b.dtype, r.lanes))
        if t is None or r.stride != 1 or not self.aligned(b, r.base, r.lanes):
            return None
        if b.scope == "global":
            self.vector_params.add(id(b))
        return t

    def lane(self, e: Expr, k: int, pre: list[str], loads: dict) -> str:
        """Scalar code of lane `k` of vector expression `e`; vector loads go to `pre` once."""
        if lanes_of(e) == 1:
            return self.expr(e)
        if isinstance(e, Load):
            r = e.index
            if not isinstance(r, Ramp):
                raise NotImplementedError("CUDA codegen: gather load")
            key = (id(e.buffer), repr(r.base), r.stride)
            if key not in loads:
                t = self._vector_type(e.buffer, r)
                base = self.expr(r.base)
                if t is not None:
                    name = self.tmp("v")
                    ptr = "const " + t if e.buffer.scope == "global" and self.is_input(e.buffer) else t
                    pre.append(f"const {t} {name} = *reinterpret_cast<{ptr}*>({self.buf(e.buffer)} + {base});")
                    loads[key] = ("vec", name)
                else:
                    name = self.tmp("b")
                    pre.append(f"const {self.index_ctype} {name} = {base};")
                    loads[key] = ("base", name)
            how, name = loads[key]
            if how == "vec":
                return f"{name}.{_COMPONENTS[k]}"
            off = k * r.stride
            return f"{self.buf(e.buffer)}[{name}{f' + {off}' if off else ''}]"
        if isinstance(e, Broadcast):
            return self.expr(e.value)
        if isinstance(e, BinOp):
            return self.binop(e, self.lane(e.a, k, pre, loads), self.lane(e.b, k, pre, loads))
        if isinstance(e, Call):
            return self.math_call(e.name, e.dtype, [self.lane(a, k, pre, loads) for a in e.args])
        if isinstance(e, Cast):
            return f"(({self.ctype(e.dtype)})({self.lane(e.value, k, pre, loads)}))"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.lane(e.t, k, pre, loads)} : {self.lane(e.f, k, pre, loads)})"
        if isinstance(e, Ramp):
            return f"({self.expr(e.base)} + {k * e.stride})"
        raise NotImplementedError(f"CUDA codegen: vector {type(e).__name__}")

    def vector_store(self, s: Store, pad: str) -> list[str]:
        r = s.index
        b = s.buffer
        pre: list[str] = []
        loads: dict = {}
        lanes = [self.lane(s.value, k, pre, loads) for k in range(r.lanes)]
        t = self._vector_type(b, r)
        name = self.buf(b)
        if t is not None:
            body = pre + [f"*reinterpret_cast<{t}*>({name} + {self.expr(r.base)}) = make_{t}({', '.join(lanes)});"]
        else:
            base = self.tmp("b")
            body = pre + [f"const {self.index_ctype} {base} = {self.expr(r.base)};"]
            body += [f"{name}[{base}{f' + {k * r.stride}' if k else ''}] = {v};" for k, v in enumerate(lanes)]
        return [f"{pad}{{"] + [f"{pad}  {line}" for line in body] + [f"{pad}}}"]

    # ----------------------------------------------------------------- statements
    def store(self, s: Store, ind: int) -> list[str]:
        pad = "  " * ind
        if isinstance(s.index, Ramp):
            return self.vector_store(s, pad)
        if lanes_of(s.value) > 1:
            raise NotImplementedError("CUDA codegen: vector value stored to a scalar index")
        return [f"{pad}{self.buf(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};"]

    def allocate(self, s: Allocate, ind: int) -> list[str]:
        if s.buffer.scope not in ("local",):
            raise NotImplementedError(f"CUDA codegen: allocation of {s.buffer.scope} buffer {s.buffer.name}")
        return self.scoped([f"{DTYPES[s.buffer.dtype].ctype} {self.buf(s.buffer)}[{s.buffer.size}];"], s.body, ind)

    def evaluate(self, s: Evaluate, ind: int) -> list[str]:
        if s.func == BARRIER:
            return [f"{'  ' * ind}__syncthreads();"]
        raise NotImplementedError(f"CUDA codegen: call of {s.func}")

    def loop(self, s: For, ind: int) -> list[str]:
        pad = "  " * ind
        v = self.loop_var(s)
        if s.kind in GPU_TAGS:
            launch = self.g.launch[s.kind]
            out = [f"{pad}{{", f"{pad}  const {self.index_ctype} {v} = {s.kind};"]
            if s.extent < launch:
                out += [f"{pad}  if ({v} < {s.extent}) {{"] + self.stmt(s.body, ind + 2) + [f"{pad}  }}"]
            else:
                out += self.stmt(s.body, ind + 1)
            return out + [f"{pad}}}"]
        if s.kind == "parallel":
            raise NotImplementedError("CUDA codegen: a parallel loop")
        unroll = s.kind in ("unrolled", "unroll_pragma") or (s.kind == "ivdep" and s.extent <= 16)
        return self.counted_loop(s, v, ind, "#pragma unroll" if unroll else None)

    # ----------------------------------------------------------------- kernel
    def generate(self) -> str:
        f, g = self.func, self.g
        params = self.params()
        decls = []
        if g.shared:
            decls.append("  extern __shared__ __align__(16) unsigned char tf_smem[];")
            for b, offset in g.shared:
                ct = DTYPES[b.dtype].ctype
                decls.append(f"  {ct}* __restrict__ {self.buf(b)} = reinterpret_cast<{ct}*>(tf_smem + {offset});"
                             f"  /* {b.name}{list(b.shape)} */")
        body = self.stmt(f.body, 1)
        return "\n".join([
            f"/* grid {list(g.grid)}, block {list(g.block)}, {g.shared_bytes} bytes of shared memory */",
            f"__global__ void __launch_bounds__({g.threads}) {kernel_symbol(f.name)}({', '.join(params)}) {{",
            *decls, *body, "}", ""])


def kernel_symbol(name: str) -> str:
    """The `__global__` function's name for kernel `name`."""
    return f"{name}_kernel"


def generate_cuda(g: GpuFunc) -> tuple[str, set[str]]:
    """(CUDA source of the kernel, names of the global arguments it accesses with 16-byte vectors)."""
    gen = CudaGenerator(g)
    src = gen.generate()
    vec = {b.name for b in g.func.params if id(b) in gen.vector_params}
    return src, vec


__all__ = ["CudaGenerator", "PRELUDE", "VECTOR_TYPES", "generate_cuda", "index_type", "kernel_symbol"]
