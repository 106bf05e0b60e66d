"""C99 code generation (GNU dialect) for CPU targets.

From a lowered `PrimFunc`:
- the kernel `int <name>(const float* restrict A, ..., float* restrict C)` returning 0;
- vector statements (Ramp/Broadcast) as GCC vector types (`tf_f32x16`), with unaligned
  loads/stores through an `aligned(4)` variant of the type and broadcasts by scalar-vector
  arithmetic, so GCC emits FMAs (the default `-ffp-contract=fast` contracts a*b+c);
- local buffers whose every access is a whole aligned vector (or a constant element) are
  promoted to vector variables, which GCC keeps in registers (a register tile);
- each outermost parallel loop is lifted into a static function run by the runtime's
  `tf_parallel_for` over a closure struct holding the captured pointers and variables.
The runtime header is included; the runtime itself is linked by `compiler.build`.
"""

from __future__ import annotations

import math
import re

from ..ir import (Address, Allocate, Broadcast, Buffer, Evaluate, For, IfThenElse, Load, PrimFunc, Ramp, Seq, Stmt, Store,
                  expr_nodes, lanes_of, stmt_exprs, walk_stmt)
from ..simplify import Simplifier
from ..te import BinOp, Call, Cast, Const, DTYPES, Expr, Select, Var, dtype_of

_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "floormod": "%", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
_INT_PREC = {"add": 4, "sub": 4, "mul": 5, "floordiv": 5, "floormod": 5}
_VEC_INT = {"float32": "int32_t", "float64": "int64_t"}
_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "abs": "fabs"}

# Vector float32 math (T: the vector type, I: its int32 vector type): exp after Cephes' expf
# (range reduction by ln 2, degree-6 polynomial, exponent bits), erf by Abramowitz & Stegun
# 7.1.26 (|error| < 1.5e-7; its Taylor series below 0.5, for relative accuracy), tanh by Cephes' tanhf (polynomial below 0.625, else from exp).
# Self-contained, so artifacts need no libmvec.
VECTOR_MATH_F32 = """\
static inline T tf_vexp_T(T x) {
  x = tf_vmin_T(tf_vmax_T(x, tf_bcast_T(-87.33654f)), tf_bcast_T(88.0f));
  T t = x * 1.44269504088896341f + 0.5f;
  T fn = __builtin_convertvector(__builtin_convertvector(t, I), T);
  fn = fn + __builtin_convertvector(fn > t, T);
  T r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
  T p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * (T)((__builtin_convertvector(fn, I) + 127) << 23);
}
static inline T tf_vsign_T(T mag, T like) {
  I neg = like < tf_bcast_T(0.0f);
  return (T)(((I)mag & ~neg) | ((I)(-mag) & neg));
}
static inline T tf_verf_T(T x) {
  T ax = tf_vmax_T(x, -x);
  T t = 1.0f / (1.0f + 0.3275911f * ax);
  T y = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  T big = tf_vsign_T(1.0f - y * tf_vexp_T(-ax * ax), x);
  T z = x * x;
  T small = 1.1283791671f * x * (1.0f + z * (-0.3333333333f + z * (0.1f + z * (-0.0238095238f + z * 0.0046296296f))));
  I use_small = ax < tf_bcast_T(0.5f);
  return (T)(((I)small & use_small) | ((I)big & ~use_small));
}
static inline T tf_vtanh_T(T x) {
  T ax = tf_vmin_T(tf_vmax_T(x, -x), tf_bcast_T(9.0f));
  T big = tf_vsign_T(1.0f - 2.0f / (tf_vexp_T(2.0f * ax) + 1.0f), x);
  T z = x * x;
  T small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
              + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  I use_small = ax < tf_bcast_T(0.625f);
  return (T)(((I)small & use_small) | ((I)big & ~use_small));
}
static inline T tf_vsigmoid_T(T x) { return 1.0f / (1.0f + tf_vexp_T(-x)); }
"""
_VECTOR_MATH = ("exp", "erf", "tanh", "sigmoid")

PRELUDE = """\
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "tunefleet_runtime.h"

static inline int64_t tf_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t tf_floormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
/* Float max/min as the vector helpers compute them (one maxss/minss; libm's fmaxf is an
   out-of-line call without -ffast-math, e.g. per element of a relu write-back). */
static inline float tf_maxf(float a, float b) { return a > b ? a : b; }
static inline float tf_minf(float a, float b) { return a < b ? a : b; }
static inline double tf_max(double a, double b) { return a > b ? a : b; }
static inline double tf_min(double a, double b) { return a < b ? a : b; }
"""


def vec_type(dtype: str, lanes: int, aligned: bool = True) -> str:
    base = {"float32": "f32", "float64": "f64"}[dtype]
    return f"tf_{base}x{lanes}" + ("" if aligned else "u")


def c_division(simp: Simplifier, e: BinOp) -> bool:
    """Whether C's truncating / and % equal floordiv/floormod here (non-negative by a positive constant)."""
    return simp.range_of(e.a)[0] >= 0 and isinstance(e.b, Const) and e.b.value > 0


def int_arith(e: BinOp, a: str, b: str) -> str:
    """Integer index arithmetic `a op b` with only the parentheses C's precedence needs: `i * 64 + j`."""
    prec = _INT_PREC[e.op]

    def needs(child: Expr, right: bool) -> bool:
        if not (isinstance(child, BinOp) and child.op in _INT_PREC):
            return False
        p = _INT_PREC[child.op]
        return p < prec or (right and p == prec and e.op in ("sub", "floordiv", "floormod"))

    a = f"({a})" if needs(e.a, False) else a
    b = f"({b})" if needs(e.b, True) else b
    return f"{a} {_BIN[e.op]} {b}"


class _Names:
    """Unique, valid C names for variables and buffers."""

    def __init__(self, reserved=()):
        self.map: dict[int, str] = {}
        self.used: set[str] = set(reserved)

    def __call__(self, obj, hint: str) -> str:
        if id(obj) not in self.map:
            base = re.sub(r"\W", "_", hint) or "v"
            name, n = base, 1
            while name in self.used:
                name, n = f"{base}_{n}", n + 1
            self.used.add(name)
            self.map[id(obj)] = name
        return self.map[id(obj)]


class CGenerator:
    """Emits the C source of one PrimFunc (see module docstring)."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.names = _Names(reserved={"tf_c", "tf_begin", "tf_end", "tf_cl"})
        self.helpers: list[str] = []
        self.vec_types: set[tuple[str, int]] = set()
        self.promoted: dict[int, tuple[Buffer, int]] = {}  # buffer id -> (buffer, lanes)
        self.n_closures = 0
        self.in_parallel = False
        self.heap_in_scope: list[Buffer] = []
        self.simp = Simplifier()

    # ----------------------------------------------------------------- expressions
    def var(self, v: Var) -> str:
        return self.names(v, v.name)

    def buf(self, b: Buffer) -> str:
        return self.names(b, b.name)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            return self.var(e)
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, Address):
            return f"({self.buf(e.buffer)} + {self.expr(e.index)})"
        if isinstance(e, Broadcast):
            self.vec_types.add((e.dtype, e.lanes))
            return f"tf_bcast_{vec_type(e.dtype, e.lanes)}({self.expr(e.value)})"
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Cast):
            ct = DTYPES[e.dtype].ctype
            if lanes_of(e) > 1:
                self.vec_types.add((e.dtype, lanes_of(e)))
                return f"__builtin_convertvector({self.expr(e.value)}, {vec_type(e.dtype, lanes_of(e))})"
            return f"(({ct})({self.expr(e.value)}))"
        if isinstance(e, Select):
            if lanes_of(e.cond) > 1:
                raise NotImplementedError("select with a per-lane condition")
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        raise NotImplementedError(f"C codegen: {type(e).__name__}")

    @staticmethod
    def const(e: Const) -> str:
        if e.dtype == "bool":
            return "1" if e.value else "0"
        if dtype_of(e.dtype).kind == "int":
            return f"{e.value}" if abs(e.value) < 2**31 else f"{e.value}LL"
        v = float(e.value)
        suffix = "f" if e.dtype == "float32" else ""
        if math.isinf(v):
            return ("-" if v < 0 else "") + ("INFINITY" if suffix else "((double)INFINITY)")
        if math.isnan(v):
            return "NAN"
        return f"{v!r}{suffix}"

    def binop(self, e: BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        lanes = lanes_of(e)
        if e.op in ("min", "max"):
            if lanes > 1:
                self.vec_types.add((e.dtype, lanes))
                return f"tf_v{e.op}_{vec_type(e.dtype, lanes)}({a}, {b})"
            if dtype_of(e.dtype).kind == "float":
                return f"tf_{e.op}{'f' if e.dtype == 'float32' else ''}({a}, {b})"
            return f"(({a}) {'<' if e.op == 'min' else '>'} ({b}) ? ({a}) : ({b}))"
        if e.op in ("floordiv", "floormod"):
            if dtype_of(e.dtype).kind == "float":
                f = "floor" + ("f" if e.dtype == "float32" else "")
                return f"{f}(({a}) / ({b}))" if e.op == "floordiv" else f"(({a}) - {f}(({a}) / ({b})) * ({b}))"
            if not c_division(self.simp, e):
                return f"tf_{e.op}({a}, {b})"
        if e.op in _INT_PREC and dtype_of(e.dtype).kind == "int":
            return int_arith(e, a, b)
        return f"({a} {_BIN[e.op]} {b})"

    def call(self, e: Call) -> str:
        lanes = lanes_of(e)
        suffix = "f" if e.dtype == "float32" else ""

        def scalar(x: str) -> str:
            if e.name == "sigmoid":
                one = "1.0f" if suffix else "1.0"
                return f"({one} / ({one} + exp{suffix}(-({x}))))"
            return f"{_MATH[e.name]}{suffix}({x})"

        if lanes == 1:
            return scalar(self.expr(e.args[0]))
        t = vec_type(e.dtype, lanes)
        self.vec_types.add((e.dtype, lanes))
        if e.dtype == "float32" and e.name in _VECTOR_MATH:
            return f"tf_v{e.name}_{t}({self.expr(e.args[0])})"
        elems = ", ".join(scalar(f"tf_t[{i}]") for i in range(lanes))
        return f"({{ {t} tf_t = {self.expr(e.args[0])}; ({t}){{{elems}}}; }})"

    def _aligned(self, b: Buffer, base: Expr, lanes: int) -> bool:
        if b.scope == "global":
            return False
        lin = self.simp.lin(base)
        return lin.const % lanes == 0 and all(c % lanes == 0 for c, _ in lin.terms.values())

    def load(self, e: Load) -> str:
        b = e.buffer
        if id(b) in self.promoted:
            return self.promoted_access(b, e.index)
        name = self.buf(b)
        if isinstance(e.index, Ramp):
            r = e.index
            self.vec_types.add((b.dtype, r.lanes))
            if r.stride == 1:
                t = vec_type(b.dtype, r.lanes, self._aligned(b, r.base, r.lanes))
                return f"(*({t}*)({name} + {self.expr(r.base)}))"
            base = self.expr(r.base)
            elems = ", ".join(f"{name}[{base} + {i * r.stride}]" for i in range(r.lanes))
            return f"(({vec_type(b.dtype, r.lanes)}){{{elems}}})"
        return f"{name}[{self.expr(e.index)}]"

    def promoted_access(self, b: Buffer, index: Expr) -> str:
        _, lanes = self.promoted[id(b)]
        name = self.buf(b)
        if isinstance(index, Ramp):
            return f"{name}_{index.base.value // lanes}"
        return f"{name}_{index.value // lanes}[{index.value % lanes}]"

    # ----------------------------------------------------------------- statements
    def stmt(self, s: Stmt, ind: int) -> list[str]:
        pad = "  " * ind
        if isinstance(s, Seq):
            return [line for x in s.stmts for line in self.stmt(x, ind)]
        if isinstance(s, Store):
            b = s.buffer
            value = self.expr(s.value)
            if id(b) in self.promoted:
                return [f"{pad}{self.promoted_access(b, s.index)} = {value};"]
            name = self.buf(b)
            if isinstance(s.index, Ramp):
                r = s.index
                self.vec_types.add((b.dtype, r.lanes))
                if r.stride == 1:
                    t = vec_type(b.dtype, r.lanes, self._aligned(b, r.base, r.lanes))
                    return [f"{pad}*({t}*)({name} + {self.expr(r.base)}) = {value};"]
                t = vec_type(b.dtype, r.lanes)
                base = self.expr(r.base)
                out = [f"{pad}{{ {t} tf_s = {value};"]
                out += [f"{pad}  {name}[{base} + {i * r.stride}] = tf_s[{i}];" for i in range(r.lanes)]
                return out + [f"{pad}}}"]
            return [f"{pad}{name}[{self.expr(s.index)}] = {value};"]
        if isinstance(s, For):
            if s.kind == "parallel" and not self.in_parallel:
                return self.parallel_for(s, ind)
            v = self.var(s.var)
            self.simp.ranges[s.var] = (0, s.extent - 1)
            head = []
            if s.kind == "ivdep":
                head.append(f"{pad}#pragma GCC ivdep")
            elif s.kind == "unrolled":
                head.append(f"{pad}#pragma GCC unroll {min(s.extent, 64)}")
            head.append(f"{pad}for (int64_t {v} = 0; {v} < {s.extent}; ++{v}) {{")
            return head + self.stmt(s.body, ind + 1) + [f"{pad}}}"]
        if isinstance(s, IfThenElse):
            out = [f"{pad}if ({self.expr(s.cond)}) {{"] + self.stmt(s.then, ind + 1)
            if s.otherwise is not None:
                out += [f"{pad}}} else {{"] + self.stmt(s.otherwise, ind + 1)
            return out + [f"{pad}}}"]
        if isinstance(s, Allocate):
            return self.allocate(s, ind)
        if isinstance(s, Evaluate):
            return [f"{pad}{s.func}({', '.join(self.expr(a) for a in s.args)});"]
        raise NotImplementedError(f"C codegen: {type(s).__name__}")

    def allocate(self, s: Allocate, ind: int) -> list[str]:
        pad = "  " * ind
        b = s.buffer
        name = self.buf(b)
        ct = DTYPES[b.dtype].ctype
        if b.scope == "heap":
            self.heap_in_scope.append(b)
            fail = "tf_c->failed = 1; return;" if self.in_parallel else "return -1;"
            free_outer = "".join(f" tf_free({self.buf(x)});" for x in self.heap_in_scope[:-1])
            out = [f"{pad}{{", f"{pad}  {ct}* restrict {name} = ({ct}*)tf_alloc_aligned({b.size * dtype_of(b.dtype).bytes});",
                   f"{pad}  if (!{name}) {{ tf_set_error(\"out of memory allocating {b.name} ({b.size} elements)\");"
                   f"{free_outer} {fail} }}"]
            out += self.stmt(s.body, ind + 1)
            out += [f"{pad}  tf_free({name});", f"{pad}}}"]
            self.heap_in_scope.pop()
            return out
        lanes = self._promotable(s)
        if lanes:
            self.promoted[id(b)] = (b, lanes)
            t = vec_type(b.dtype, lanes)
            self.vec_types.add((b.dtype, lanes))
            decl = ", ".join(f"{name}_{i}" for i in range(b.size // lanes))
            out = [f"{pad}{{", f"{pad}  {t} {decl};"] + self.stmt(s.body, ind + 1) + [f"{pad}}}"]
            del self.promoted[id(b)]
            return out
        return ([f"{pad}{{", f"{pad}  {ct} {name}[{b.size}] __attribute__((aligned(64)));"]
                + self.stmt(s.body, ind + 1) + [f"{pad}}}"])

    def _promotable(self, s: Allocate) -> int:
        """Vector width if every access to the buffer is a constant element or an aligned whole vector."""
        b = s.buffer
        if any(isinstance(n, For) and n.kind == "parallel" for n in walk_stmt(s.body)):
            return 0
        lanes = None
        idxs = [n.index for n in walk_stmt(s.body) if isinstance(n, Store) and n.buffer is b]
        idxs += [n.index for e in stmt_exprs(s.body) for n in expr_nodes(e) if isinstance(n, Load) and n.buffer is b]
        if any(isinstance(n, Address) and n.buffer is b for e in stmt_exprs(s.body) for n in expr_nodes(e)):
            return 0
        for i in idxs:
            if isinstance(i, Ramp):
                if i.stride != 1 or not isinstance(i.base, Const) or (lanes not in (None, i.lanes)):
                    return 0
                lanes = i.lanes
                if i.base.value % lanes:
                    return 0
            elif not isinstance(i, Const):
                return 0
        if lanes is None or b.size % lanes:
            return 0
        return lanes

    def parallel_for(self, s: For, ind: int) -> list[str]:
        pad = "  " * ind
        fn = f"{self.func.name}_par{self.n_closures}"
        self.n_closures += 1
        bound = {n.var for n in walk_stmt(s) if isinstance(n, For)}
        allocated = {id(n.buffer) for n in walk_stmt(s.body) if isinstance(n, Allocate)}
        free_vars: dict[int, Var] = {}
        bufs: dict[int, Buffer] = {}
        for e in stmt_exprs(s.body):
            for n in expr_nodes(e):
                if isinstance(n, Var) and n not in bound:
                    free_vars[id(n)] = n
                if isinstance(n, (Load, Address)) and id(n.buffer) not in allocated:
                    bufs[id(n.buffer)] = n.buffer
        for n in walk_stmt(s.body):
            if isinstance(n, Store) and id(n.buffer) not in allocated:
                bufs[id(n.buffer)] = n.buffer
        for b in bufs.values():
            if id(b) in self.promoted:
                raise NotImplementedError(f"register-promoted buffer {b.name} used inside a parallel loop")
        n_in = len(self.func.params) - self.func.num_outputs
        inputs = {id(b) for b in self.func.params[:n_in]}
        ptr = {id(b): ("const " if id(b) in inputs else "") + f"{DTYPES[b.dtype].ctype}*" for b in bufs.values()}
        fields = [f"  {ptr[id(b)]} {self.buf(b)};" for b in bufs.values()]
        fields += [f"  int64_t {self.var(v)};" for v in free_vars.values()]
        unpack = [f"  {ptr[id(b)]} restrict {self.buf(b)} = tf_c->{self.buf(b)};" for b in bufs.values()]
        unpack += [f"  int64_t {self.var(v)} = tf_c->{self.var(v)};" for v in free_vars.values()]
        v = self.var(s.var)
        self.simp.ranges[s.var] = (0, s.extent - 1)
        saved, self.in_parallel = self.in_parallel, True
        saved_heap, self.heap_in_scope = self.heap_in_scope, []
        body = self.stmt(s.body, 2)
        self.in_parallel, self.heap_in_scope = saved, saved_heap
        self.helpers.append("\n".join([
            f"typedef struct {{", *fields, "  int failed;", f"}} {fn}_t;", "",
            f"static void {fn}(int64_t tf_begin, int64_t tf_end, void* tf_cl) {{",
            f"  {fn}_t* tf_c = ({fn}_t*)tf_cl;", *unpack,
            f"  for (int64_t {v} = tf_begin; {v} < tf_end; ++{v}) {{", *body, "  }", "}", ""]))
        init = ", ".join([self.buf(b) for b in bufs.values()] + [self.var(x) for x in free_vars.values()] + ["0"])
        free_heap = "".join(f" tf_free({self.buf(x)});" for x in self.heap_in_scope)
        return [f"{pad}{{", f"{pad}  {fn}_t tf_c = {{{init}}};",
                f"{pad}  tf_parallel_for({s.extent}, {fn}, &tf_c);",
                f"{pad}  if (tf_c.failed) {{{free_heap} return -1; }}", f"{pad}}}"]

    # ----------------------------------------------------------------- function
    def generate(self) -> str:
        f = self.func
        n_in = len(f.params) - f.num_outputs
        params = []
        for k, b in enumerate(f.params):
            const = "const " if k < n_in else ""
            params.append(f"{const}{DTYPES[b.dtype].ctype}* restrict {self.buf(b)}")
        body = self.stmt(f.body, 1)
        typedefs = []
        for dtype, lanes in sorted(self.vec_types):
            ct = DTYPES[dtype].ctype
            nbytes = lanes * dtype_of(dtype).bytes
            t, tu = vec_type(dtype, lanes), vec_type(dtype, lanes, False)
            it = f"tf_i{dtype_of(dtype).bits}x{lanes}"
            splat = ", ".join(["x"] * lanes)
            typedefs += [
                f"typedef {ct} {t} __attribute__((vector_size({nbytes})));",
                f"static inline {t} tf_bcast_{t}({ct} x) {{ return ({t}){{{splat}}}; }}",
                f"typedef {ct} {tu} __attribute__((vector_size({nbytes}), aligned({dtype_of(dtype).bytes})));",
                f"typedef {_VEC_INT[dtype]} {it} __attribute__((vector_size({nbytes})));",
                f"static inline {t} tf_vmax_{t}({t} a, {t} b) {{ {it} m = a > b; "
                f"return ({t})((m & ({it})a) | (~m & ({it})b)); }}",
                f"static inline {t} tf_vmin_{t}({t} a, {t} b) {{ {it} m = a < b; "
                f"return ({t})((m & ({it})a) | (~m & ({it})b)); }}",
            ]
            if dtype == "float32":
                typedefs.append(re.sub(r"\bT\b", t, re.sub(r"\bI\b", it, VECTOR_MATH_F32)).replace("_T(", f"_{t}("))
        return "\n".join([
            PRELUDE, *typedefs, "", *self.helpers,
            f"TF_EXPORT int {f.name}({', '.join(params)}) {{", *body, "  return 0;", "}", ""])


def generate_c(func: PrimFunc) -> str:
    """The C source of kernel `func` (without the ABI wrappers and the runtime)."""
    return CGenerator(func).generate()
