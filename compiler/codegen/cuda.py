"""CUDA C++ code generation for NVIDIA GPU targets.

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

`generate_cuda(g)` gives the kernel source (to follow `PRELUDE` once per unit); the launcher and the ABI entry points around it
come from `compiler.cuda.build` and `compiler.cuda.entry_points`.
"""

from __future__ import annotations

import math

from ..cuda.lower import GpuFunc
from ..cuda.shared_memory import BARRIER
from ..ir import (Address, Allocate, Broadcast, Buffer, Evaluate, For, IfThenElse, Load, Ramp, Seq, Stmt, Store,
                  expr_nodes, lanes_of, stmt_exprs, walk_stmt)
from ..schedule import BLOCK_TAGS, GPU_TAGS
from ..simplify import Simplifier
from ..te import BinOp, Call, Cast, Const, DTYPES, Expr, Select, Var, dtype_of
from .c import _INT_PREC, _Names, c_division, int_arith

_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "floormod": "%", "lt": "<", "le": "<=",
        "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "abs": "fabs"}
#: (dtype, lanes) -> CUDA vector type and its component names.
VECTOR_TYPES = {("float32", 4): "float4", ("float32", 2): "float2", ("float64", 2): "double2"}
_COMPONENTS = "xyzw"
_RESERVED = {"tf_smem", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "min", "max", "float4",
             "float2", "double2", "signed", "unsigned", "long", "short", "char", "bool", "true", "false", "new",
             "delete", "class", "template", "this", "operator", "namespace", "using", "virtual", "private",
             "public", "protected", "friend", "typename", "explicit", "mutable", "export", "asm", "try", "catch",
             "throw", "nullptr", "and", "or", "not", "xor"}

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


class CudaGenerator:
    """Emits the CUDA source of one GpuFunc (see module docstring)."""

    def __init__(self, g: GpuFunc):
        self.g = g
        self.func = g.func
        self.names = _Names(reserved=_RESERVED)
        self.simp = Simplifier()
        self.idx = index_type(g)
        self.n_tmp = 0
        #: global buffers accessed with vector loads/stores (the launcher checks their alignment)
        self.vector_params: set[int] = set()

    # ----------------------------------------------------------------- names
    def var(self, v: Var) -> str:
        return self.names(v, v.name)

    def buf(self, b: Buffer) -> str:
        return self.names(b, b.name)

    def tmp(self, hint: str) -> str:
        self.n_tmp += 1
        return f"tf_{hint}{self.n_tmp}"

    # ----------------------------------------------------------------- scalar expressions
    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            return self.var(e)
        if isinstance(e, Load):
            if lanes_of(e.index) > 1:
                raise NotImplementedError("CUDA codegen: a vector load outside a vector statement")
            return f"{self.buf(e.buffer)}[{self.expr(e.index)}]"
        if isinstance(e, Address):
            return f"({self.buf(e.buffer)} + {self.expr(e.index)})"
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Call):
            return self.call(e.name, e.dtype, [self.expr(a) for a in e.args])
        if isinstance(e, Cast):
            return f"(({self.ctype(e.dtype)})({self.expr(e.value)}))"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, (Ramp, Broadcast)):
            raise NotImplementedError(f"CUDA codegen: {type(e).__name__} outside a vector statement")
        raise NotImplementedError(f"CUDA codegen: {type(e).__name__}")

    def ctype(self, dtype: str) -> str:
        if dtype_of(dtype).kind == "int":
            return self.idx if dtype == "int64" else DTYPES[dtype].ctype
        if dtype == "bool":
            return "bool"
        return DTYPES[dtype].ctype

    @staticmethod
    def const(e: Const) -> str:
        if e.dtype == "bool":
            return "true" if e.value else "false"
        if dtype_of(e.dtype).kind == "int":
            return f"{e.value}" if abs(e.value) < 2**31 else f"{e.value}LL"
        v = float(e.value)
        f32 = e.dtype == "float32"
        if math.isinf(v):
            inf = "__int_as_float(0x7f800000)" if f32 else "__longlong_as_double(0x7ff0000000000000LL)"
            return f"(-{inf})" if v < 0 else inf
        if math.isnan(v):
            return "__int_as_float(0x7fffffff)" if f32 else "__longlong_as_double(0x7ff8000000000000LL)"
        return f"{v!r}f" if f32 else repr(v)

    def binop(self, e: BinOp, a: str | None = None, b: str | None = None) -> str:
        a = self.expr(e.a) if a is None else a
        b = self.expr(e.b) if b is None else b
        kind = dtype_of(e.dtype).kind
        if e.op in ("min", "max"):
            if kind == "float":
                f = ("fmin" if e.op == "min" else "fmax") + ("f" if e.dtype == "float32" else "")
                return f"{f}({a}, {b})"
            return f"(({a}) {'<' if e.op == 'min' else '>'} ({b}) ? ({a}) : ({b}))"
        if e.op in ("floordiv", "floormod"):
            if kind == "float":
                f = "floor" + ("f" if e.dtype == "float32" else "")
                return f"{f}(({a}) / ({b}))" if e.op == "floordiv" else f"(({a}) - {f}(({a}) / ({b})) * ({b}))"
            if not c_division(self.simp, e):
                return f"(({self.idx})tf_{e.op}({a}, {b}))"
        if e.op in _INT_PREC and kind == "int":
            return int_arith(e, a, b)
        return f"({a} {_BIN[e.op]} {b})"

    def call(self, name: str, dtype: str, args: list[str]) -> str:
        f = "f" if dtype == "float32" else ""
        if name == "sigmoid":
            one = "1.0f" if f else "1.0"
            return f"({one} / ({one} + exp{f}(-({args[0]}))))"
        return f"{_MATH[name]}{f}({', '.join(args)})"

    # ----------------------------------------------------------------- vector statements
    def _aligned(self, b: Buffer, base: Expr, lanes: int) -> bool:
        if b.scope not in ("global", "shared"):
            return False
        lin = self.simp.lin(base)
        return lin.const % lanes == 0 and all(c % lanes == 0 for c, _ in lin.terms.values())

    def _vector_type(self, b: Buffer, r: Ramp) -> str | None:
        t = VECTOR_TYPES.get((b.dtype, r.lanes))
        if t is None or r.stride != 1 or not self._aligned(b, r.base, r.lanes):
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
                    ptr = "const " + t if e.buffer.scope == "global" and self._is_input(e.buffer) else t
                    pre.append(f"const {t} {name} = *reinterpret_cast<{ptr}*>({self.buf(e.buffer)} + {base});")
                    loads[key] = ("vec", name)
                else:
                    name = self.tmp("b")
                    pre.append(f"const {self.idx} {name} = {base};")
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
            return self.call(e.name, e.dtype, [self.lane(a, k, pre, loads) for a in e.args])
        if isinstance(e, Cast):
            return f"(({self.ctype(e.dtype)})({self.lane(e.value, k, pre, loads)}))"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.lane(e.t, k, pre, loads)} : {self.lane(e.f, k, pre, loads)})"
        if isinstance(e, Ramp):
            return f"({self.expr(e.base)} + {k * e.stride})"
        raise NotImplementedError(f"CUDA codegen: vector {type(e).__name__}")

    def _is_input(self, b: Buffer) -> bool:
        n_in = len(self.func.params) - self.func.num_outputs
        return any(b is p for p in self.func.params[:n_in])

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
            body = pre + [f"const {self.idx} {base} = {self.expr(r.base)};"]
            body += [f"{name}[{base}{f' + {k * r.stride}' if k else ''}] = {v};" for k, v in enumerate(lanes)]
        return [f"{pad}{{"] + [f"{pad}  {line}" for line in body] + [f"{pad}}}"]

    # ----------------------------------------------------------------- statements
    def stmt(self, s: Stmt, ind: int) -> list[str]:
        pad = "  " * ind
        if isinstance(s, Seq):
            return [line for x in s.stmts for line in self.stmt(x, ind)]
        if isinstance(s, Store):
            if isinstance(s.index, Ramp):
                return self.vector_store(s, pad)
            if lanes_of(s.value) > 1:
                raise NotImplementedError("CUDA codegen: vector value stored to a scalar index")
            return [f"{pad}{self.buf(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};"]
        if isinstance(s, For):
            return self.loop(s, ind)
        if isinstance(s, IfThenElse):
            out = [f"{pad}if ({self.expr(s.cond)}) {{"] + self.stmt(s.then, ind + 1)
            if s.otherwise is not None:
                out += [f"{pad}}} else {{"] + self.stmt(s.otherwise, ind + 1)
            return out + [f"{pad}}}"]
        if isinstance(s, Allocate):
            if s.buffer.scope not in ("local",):
                raise NotImplementedError(f"CUDA codegen: allocation of {s.buffer.scope} buffer {s.buffer.name}")
            ct = DTYPES[s.buffer.dtype].ctype
            return ([f"{pad}{{", f"{pad}  {ct} {self.buf(s.buffer)}[{s.buffer.size}];"]
                    + self.stmt(s.body, ind + 1) + [f"{pad}}}"])
        if isinstance(s, Evaluate):
            if s.func == BARRIER:
                return [f"{pad}__syncthreads();"]
            raise NotImplementedError(f"CUDA codegen: call of {s.func}")
        raise NotImplementedError(f"CUDA codegen: {type(s).__name__}")

    def loop(self, s: For, ind: int) -> list[str]:
        pad = "  " * ind
        v = self.var(s.var)
        self.simp.ranges[s.var] = (0, s.extent - 1)
        if s.kind in GPU_TAGS:
            launch = self.g.launch[s.kind]
            out = [f"{pad}{{", f"{pad}  const {self.idx} {v} = {s.kind};"]
            if s.extent < launch:
                out += [f"{pad}  if ({v} < {s.extent}) {{"] + self.stmt(s.body, ind + 2) + [f"{pad}  }}"]
            else:
                out += self.stmt(s.body, ind + 1)
            return out + [f"{pad}}}"]
        if s.kind == "parallel":
            raise NotImplementedError("CUDA codegen: a parallel loop")
        head = []
        if s.kind in ("unrolled", "unroll_pragma") or (s.kind == "ivdep" and s.extent <= 16):
            head.append(f"{pad}#pragma unroll")
        head.append(f"{pad}for ({self.idx} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        return head + self.stmt(s.body, ind + 1) + [f"{pad}}}"]

    # ----------------------------------------------------------------- kernel
    def generate(self) -> str:
        f, g = self.func, self.g
        n_in = len(f.params) - f.num_outputs
        params = []
        for k, b in enumerate(f.params):
            const = "const " if k < n_in else ""
            params.append(f"{const}{DTYPES[b.dtype].ctype}* __restrict__ {self.buf(b)}")
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


__all__ = ["generate_cuda", "kernel_symbol", "index_type", "VECTOR_TYPES"]
_ = (BLOCK_TAGS, stmt_exprs, expr_nodes, walk_stmt)
