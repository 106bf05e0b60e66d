"""C99 code generation (GNU dialect) for CPU targets: the C backend of `codegen.cstyle`.

From a lowered `PrimFunc`:
- the kernel `int <name>(const float* restrict A, ..., float* restrict C)` returning 0;
- vector statements (Ramp/Broadcast) as GCC vector types (`tf_f32x16`), with unaligned
  loads/stores through an `aligned(4)` variant of the type and broadcasts by scalar-vector
  arithmetic, so GCC emits FMAs (the default `-ffp-contract=fast` contracts a*b+c);
- local buffers whose every access is a whole aligned vector (or a constant element) are
  promoted to vector variables, which GCC keeps in registers (a register tile); those whose
  vectors differ in width (a tile cut at a tensor's edge) to a variable per piece;
- each outermost parallel loop is lifted into a static function run by the runtime's
  `tf_parallel_for` over a closure struct holding the captured pointers and variables.
The runtime header is included; the runtime itself is linked by `compiler.build`.
"""

from __future__ import annotations

import math
import re

from ..ir import (Address, Allocate, Broadcast, Buffer, Evaluate, For, Load, PrimFunc, Ramp, Store, expr_nodes,
                  lanes_of, stmt_exprs, walk_stmt)
from ..te import DTYPES, BinOp, Call, Cast, Const, Expr, Var, dtype_of
from .cstyle import CStyleRenderer

#: Integer type of the lanes of a comparison of float vectors.
_VEC_INT = {"float32": "int32_t", "float64": "int64_t"}

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
    """The GCC vector type of `lanes` elements of `dtype` (`tf_f32x8`; unaligned: `tf_f32x8u`)."""
    base = {"float32": "f32", "float64": "f64"}[dtype]
    return f"tf_{base}x{lanes}" + ("" if aligned else "u")


class CGenerator(CStyleRenderer):
    """Emits the C source of one PrimFunc (see module docstring)."""

    language = "C"
    restrict = "restrict"
    true, false = "1", "0"
    float_min_max = "tf_{op}{suffix}"
    index_ctype = "int64_t"

    def __init__(self, func: PrimFunc):
        super().__init__(func)
        self.helpers: list[str] = []
        self.vec_types: set[tuple[str, int]] = set()
        self.lane_sums: set[tuple[str, int, int]] = set()  # (dtype, lanes, width) of horizontal sums
        self.promoted: dict[int, tuple[Buffer, int]] = {}  # buffer id -> (buffer, lanes)
        self.pieces: dict[int, dict[int, int]] = {}  # buffer id -> {first element: lanes} (_pieces)
        self.n_closures = 0
        self.in_parallel = False
        self.heap_in_scope: list[Buffer] = []

    # ----------------------------------------------------------------- expressions
    def vector_expr(self, e: Expr) -> str:
        if isinstance(e, Broadcast):
            self.vec_types.add((e.dtype, e.lanes))
            return f"tf_bcast_{vec_type(e.dtype, e.lanes)}({self.expr(e.value)})"
        return super().vector_expr(e)

    def cast(self, e: Cast) -> str:
        if lanes_of(e) > 1:
            self.vec_types.add((e.dtype, lanes_of(e)))
            return f"__builtin_convertvector({self.expr(e.value)}, {vec_type(e.dtype, lanes_of(e))})"
        return super().cast(e)

    def non_finite(self, v: float, dtype: str) -> str:
        if math.isnan(v):
            return "NAN"
        return ("-" if v < 0 else "") + ("INFINITY" if dtype == "float32" else "((double)INFINITY)")

    def binop(self, e: BinOp, a: str | None = None, b: str | None = None) -> str:
        if a is None and b is None and (whole := self.lane_sum(e)) is not None:
            buffer, vector, width = whole
            _, lanes = self.promoted[id(buffer)]
            t = vec_type(buffer.dtype, lanes)
            self.lane_sums.add((buffer.dtype, lanes, width))
            if width == 1:
                return f"tf_hsum_{t}({self.buf(buffer)}_{vector})"
            self.vec_types.add((buffer.dtype, width))
            return f"tf_hsum{width}_{t}({', '.join(f'{self.buf(buffer)}_{vector + v}' for v in range(width))})"
        if e.op in ("min", "max") and lanes_of(e) > 1:
            a = self.expr(e.a) if a is None else a
            b = self.expr(e.b) if b is None else b
            self.vec_types.add((e.dtype, lanes_of(e)))
            return f"tf_v{e.op}_{vec_type(e.dtype, lanes_of(e))}({a}, {b})"
        return super().binop(e, a, b)

    def lane_sum(self, e: BinOp) -> tuple[Buffer, int, int] | None:
        """(buffer, vector, width) where `e` is a tree of additions of the lanes of `width`
        consecutive vector registers of a promoted buffer from register `vector` on, each lane
        once — the horizontal sums of a dot product's partial sums: of one register (width 1,
        a scalar tree of lane extracts), or of `width` registers at once (a vector of `width`
        lanes whose lane v sums register vector + v: a tree of strided loads, as vectorizing
        the loop over the outputs of a tile makes it) — else None. Rendered as one
        `tf_hsum*_*` call (`hsum_helper`): for width 1 a log2(lanes) tree of shuffles and
        vector additions, where GCC turned a tree of scalar lane extracts into about 40
        instructions per sum of 16 lanes (AMD Zen 4, AVX-512: more than the FMAs of a 512-long
        reduction)."""
        loads, stack = [], [e]
        while stack:  # the additions' leaves, all loads of promoted buffers (most binops fail here at once)
            node = stack.pop()
            if isinstance(node, BinOp) and node.op == "add":
                stack += [node.a, node.b]
            elif isinstance(node, Load) and id(node.buffer) in self.promoted:
                loads.append(node)
            else:
                return None
        width = lanes_of(e)  # each leaf _lane_base accepts has `width` lanes, and so has every addition
        leaves = [(n.buffer, _lane_base(n.index, width, self.promoted[id(n.buffer)][1])) for n in loads]
        if any(base is None for _, base in leaves):
            return None
        buffer = leaves[0][0]
        _, lanes = self.promoted[id(buffer)]
        vector = leaves[0][1] // lanes
        if any(b is not buffer for b, _ in leaves) or sorted(i for _, i in leaves) != list(
                range(vector * lanes, (vector + 1) * lanes)) or lanes & (lanes - 1) or width & (width - 1):
            return None
        return buffer, vector, width

    def call(self, e: Call) -> str:
        lanes = lanes_of(e)
        if lanes == 1:
            return super().call(e)
        t = vec_type(e.dtype, lanes)
        self.vec_types.add((e.dtype, lanes))
        if e.dtype == "float32" and e.name in _VECTOR_MATH:
            return f"tf_v{e.name}_{t}({self.expr(e.args[0])})"
        elems = ", ".join(self.math_call(e.name, e.dtype, [f"tf_t[{i}]"]) for i in range(lanes))
        return f"({{ {t} tf_t = {self.expr(e.args[0])}; ({t}){{{elems}}}; }})"

    def may_align(self, b: Buffer) -> bool:
        return b.scope != "global"

    def load(self, e: Load) -> str:
        b = e.buffer
        if id(b) in self.promoted:
            return self.promoted_access(b, e.index)
        if id(b) in self.pieces:
            return self.piece_load(b, e.index)
        name = self.buf(b)
        if isinstance(e.index, Ramp):
            r = e.index
            self.vec_types.add((b.dtype, r.lanes))
            if r.stride == 1:
                return f"({self.contiguous_vector(b, r)})"
            base = self.expr(r.base)
            elems = ", ".join(f"{name}[{base} + {i * r.stride}]" for i in range(r.lanes))
            return f"(({vec_type(b.dtype, r.lanes)}){{{elems}}})"
        return f"{name}[{self.expr(e.index)}]"

    def contiguous_vector(self, b: Buffer, r: Ramp) -> str:
        """`*(tf_f32x8*)(B + base)`: the `r.lanes` elements of `b` from `r.base` on, as one vector
        lvalue (of the unaligned type unless the alignment is proven)."""
        t = vec_type(b.dtype, r.lanes, self.aligned(b, r.base, r.lanes))
        return f"*({t}*)({self.buf(b)} + {self.expr(r.base)})"

    def promoted_access(self, b: Buffer, index: Expr) -> str:
        _, lanes = self.promoted[id(b)]
        name = self.buf(b)
        if isinstance(index, Ramp) and index.stride != 1:  # one lane of each of several registers
            self.vec_types.add((b.dtype, index.lanes))
            elems = ", ".join(f"{name}_{i // lanes}[{i % lanes}]"
                              for i in range(index.base.value, index.base.value + index.stride * index.lanes, index.stride))
            return f"(({vec_type(b.dtype, index.lanes)}){{{elems}}})"
        if isinstance(index, Ramp):
            return f"{name}_{index.base.value // lanes}"
        return f"{name}_{index.value // lanes}[{index.value % lanes}]"

    def piece_access(self, b: Buffer, index: Expr) -> tuple[str, list[str]]:
        """A Const or stride-1 Ramp `index` of a buffer promoted in pieces (`_pieces`): (the
        piece's variable where `index` names all of it, [ ]), else ("", the lvalues of the lanes
        of the piece it names)."""
        first, lanes = (index.base.value, index.lanes) if isinstance(index, Ramp) else (index.value, 1)
        base = max(f for f in self.pieces[id(b)] if f <= first)
        var = f"{self.buf(b)}_p{base}"
        if first == base and lanes == self.pieces[id(b)][base]:
            return var, []
        return "", [f"{var}[{first - base + i}]" for i in range(lanes)]

    def piece_load(self, b: Buffer, index: Expr) -> str:
        """A load of a buffer promoted in pieces: a piece's variable, one of its lanes, or a
        vector built from several of its lanes."""
        whole, lanes = self.piece_access(b, index)
        if whole or len(lanes) == 1:
            return whole or lanes[0]
        self.vec_types.add((b.dtype, len(lanes)))
        return f"(({vec_type(b.dtype, len(lanes))}){{{', '.join(lanes)}}})"

    # ----------------------------------------------------------------- statements
    def store(self, s: Store, ind: int) -> list[str]:
        pad = "  " * ind
        b = s.buffer
        value = self.expr(s.value)
        if id(b) in self.promoted:
            return [f"{pad}{self.promoted_access(b, s.index)} = {value};"]
        if id(b) in self.pieces:
            whole, lanes = self.piece_access(b, s.index)
            if whole or len(lanes) == 1:
                return [f"{pad}{whole or lanes[0]} = {value};"]
            self.vec_types.add((b.dtype, len(lanes)))
            t = vec_type(b.dtype, len(lanes))
            return [f"{pad}{{ {t} tf_s = {value};", *(f"{pad}  {x} = tf_s[{i}];" for i, x in enumerate(lanes)),
                    f"{pad}}}"]
        name = self.buf(b)
        if isinstance(s.index, Ramp):
            r = s.index
            self.vec_types.add((b.dtype, r.lanes))
            if r.stride == 1:
                return [f"{pad}{self.contiguous_vector(b, r)} = {value};"]
            t = vec_type(b.dtype, r.lanes)
            base = self.expr(r.base)
            out = [f"{pad}{{ {t} tf_s = {value};"]
            out += [f"{pad}  {name}[{base} + {i * r.stride}] = tf_s[{i}];" for i in range(r.lanes)]
            return out + [f"{pad}}}"]
        return [f"{pad}{name}[{self.expr(s.index)}] = {value};"]

    def loop(self, s: For, ind: int) -> list[str]:
        if s.kind == "parallel" and not self.in_parallel:
            return self.parallel_for(s, ind)
        v = self.loop_var(s)
        pragma = None
        if s.kind == "ivdep":
            pragma = "#pragma GCC ivdep"
        elif s.kind == "unrolled":
            pragma = f"#pragma GCC unroll {min(s.extent, 64)}"
        return self.counted_loop(s, v, ind, pragma)

    def evaluate(self, s: Evaluate, ind: int) -> list[str]:
        return [f"{'  ' * ind}{s.func}({', '.join(self.expr(a) for a in s.args)});"]

    def allocate(self, s: Allocate, ind: int) -> list[str]:
        b = s.buffer
        name = self.buf(b)
        ct = DTYPES[b.dtype].ctype
        if b.scope == "heap":
            self.heap_in_scope.append(b)
            fail = "tf_c->failed = 1; return;" if self.in_parallel else "return -1;"
            free_outer = "".join(f" tf_free({self.buf(x)});" for x in self.heap_in_scope[:-1])
            declarations = [f"{ct}* restrict {name} = ({ct}*)tf_alloc_aligned({b.size * dtype_of(b.dtype).bytes});",
                            f"if (!{name}) {{ tf_set_error(\"out of memory allocating {b.name} ({b.size} elements)\");"
                            f"{free_outer} {fail} }}"]
            out = self.scoped(declarations, s.body, ind, after=(f"tf_free({name});",))
            self.heap_in_scope.pop()
            return out
        lanes = self._promotable(s)
        if lanes:
            self.promoted[id(b)] = (b, lanes)
            t = vec_type(b.dtype, lanes)
            self.vec_types.add((b.dtype, lanes))
            out = self.scoped([""], s.body, ind)
            # only the vectors the block names: a tail's copy of a tile reads a few of them, and
            # a library rebuilt with -Wall would warn of each vector it declares and never uses
            used = set(re.findall(rf"\b{name}_(\d+)\b", "\n".join(out[2:])))
            decl = ", ".join(f"{name}_{i}" for i in range(b.size // lanes) if str(i) in used)
            out[1:2] = [f"{out[1]}{t} {decl};"] if decl else []
            del self.promoted[id(b)]
            return out
        pieces = self._pieces(s)
        if pieces:
            self.pieces[id(b)] = pieces
            decls = []
            for first, lanes in pieces.items():
                t = DTYPES[b.dtype].ctype if lanes == 1 else vec_type(b.dtype, lanes)
                if lanes > 1:
                    self.vec_types.add((b.dtype, lanes))
                decls.append(f"{t} {name}_p{first};")
            out = self.scoped(decls, s.body, ind)
            del self.pieces[id(b)]
            return out
        return self.scoped([f"{ct} {name}[{b.size}] __attribute__((aligned(64)));"], s.body, ind)

    def _promotable(self, s: Allocate) -> int:
        """Vector width if every access to the buffer is a constant element or an aligned whole
        vector, or a load of one lane of each of several of them (a strided Ramp of constant base)."""
        b = s.buffer
        accesses = _register_accesses(s)
        if accesses is None:
            return 0
        idxs, loads = accesses
        lanes = None
        strided = [i for i in loads if isinstance(i, Ramp) and i.stride != 1]
        if any(not isinstance(i.base, Const) or i.stride < 1 or i.base.value < 0
               or i.base.value + i.stride * (i.lanes - 1) >= b.size for i in strided):
            return 0
        idxs += [i for i in loads if not (isinstance(i, Ramp) and i.stride != 1)]
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

    def _pieces(self, s: Allocate) -> dict[int, int]:
        """{first element: lanes} of a local buffer whose accesses are constant elements and
        stride-1 vectors of constant base but not all of one width (a register tile cut at a
        tensor's edge into vectors of 16, 8 and 4 lanes and single lanes: `passes.vectorize`):
        its pieces, each the widest access from its first element on, none overlapping
        another; every access lies within one piece, and each becomes a variable (a vector, or
        a scalar for a lone element) that GCC keeps in a register. Empty where that does not
        hold (the buffer then stays an array)."""
        b = s.buffer
        accesses = _register_accesses(s)
        if accesses is None:
            return {}
        spans = []
        for i in [*accesses[0], *accesses[1]]:
            if isinstance(i, Ramp) and i.stride == 1 and isinstance(i.base, Const):
                spans.append((i.base.value, i.lanes))
            elif isinstance(i, Const):
                spans.append((i.value, 1))
            else:
                return {}
        pieces: dict[int, int] = {}
        end = -1
        for first, lanes in sorted(set(spans), key=lambda x: (x[0], -x[1])):
            if first + lanes <= end:
                continue  # inside the piece before
            if first < end or first < 0 or first + lanes > b.size:
                return {}
            pieces[first] = lanes
            end = first + lanes
        return pieces if any(lanes > 1 for lanes in pieces.values()) else {}

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
            if id(b) in self.promoted or id(b) in self.pieces:
                raise NotImplementedError(f"register-promoted buffer {b.name} used inside a parallel loop")
        ptr = {id(b): ("const " if self.is_input(b) else "") + f"{DTYPES[b.dtype].ctype}*" for b in bufs.values()}
        fields = [f"  {ptr[id(b)]} {self.buf(b)};" for b in bufs.values()]
        fields += [f"  int64_t {self.var(v)};" for v in free_vars.values()]
        unpack = [f"  {ptr[id(b)]} restrict {self.buf(b)} = tf_c->{self.buf(b)};" for b in bufs.values()]
        unpack += [f"  int64_t {self.var(v)} = tf_c->{self.var(v)};" for v in free_vars.values()]
        v = self.loop_var(s)
        saved, self.in_parallel = self.in_parallel, True
        saved_heap, self.heap_in_scope = self.heap_in_scope, []
        body = self.stmt(s.body, 2)
        self.in_parallel, self.heap_in_scope = saved, saved_heap
        self.helpers.append("\n".join([
            "typedef struct {", *fields, "  int failed;", f"}} {fn}_t;", "",
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
        params = self.params()
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
            typedefs += [hsum_helper(ct, t, it, lanes, width, vec_type(dtype, width))
                         for d, n, width in sorted(self.lane_sums) if (d, n) == (dtype, lanes)]
            if dtype == "float32":
                typedefs.append(re.sub(r"\bT\b", t, re.sub(r"\bI\b", it, VECTOR_MATH_F32)).replace("_T(", f"_{t}("))
        return "\n".join([
            PRELUDE, *typedefs, "", *self.helpers,
            f"TF_EXPORT int {f.name}({', '.join(params)}) {{", *body, "  return 0;", "}", ""])


def hsum_helper(ct: str, t: str, it: str, lanes: int, width: int, tw: str) -> str:
    """The horizontal sums of vector type `t` (element C type `ct`, integer vector type `it` of
    its shape). Width 1: `tf_hsum_<t>(v)`, the sum of v's lanes, adding to v the lanes `half`
    apart for half = lanes/2, ..., 1 with whole-register shuffles (GCC's `__builtin_shuffle`).
    Width w > 1 (a power of two up to lanes): `tf_hsum<w>_<t>(v0, ..., v<w-1>)`, the vector of
    type `tw` (w lanes) of their w sums, by transposing while adding: each step adds the low
    and the high halves of the lane groups of two vectors into one vector of twice the groups
    (log2 w steps of two two-source shuffles and an addition for every pair, w - 1 pairs in
    all), then sums each of the w groups of lanes/w lanes by shuffles within it and gathers
    the w sums: 4 sums of 16 lanes take 9 shuffles and 5 additions where 4 separate trees take
    16 and 16 (AMD Zen 5, AVX-512, 2 threads, 1×1 convolutions at 7² as dot products of 4
    pixels × 6 output channels, with the bias and relu then computed on 4 outputs at once:
    CI 256 1.24×, 512 1.13×, stride 2 from 1024 1.08×, 2048 1.02×)."""
    if width == 1:
        return f"static inline {ct} tf_hsum_{t}({t} v) {{ {' '.join(_group_sums('v', it, lanes, lanes))} return v[0]; }}"
    vectors, group, groups, body = [f"v{i}" for i in range(width)], lanes, 1, []
    while len(vectors) > 1:
        half = group // 2
        low = [g * group + o if g < groups else (g - groups) * group + o + lanes
               for g, o in (divmod(p, half) for p in range(lanes))]
        masks = [", ".join(str(i + h) for i in low) for h in (0, half)]
        pairs = list(zip(vectors[0::2], vectors[1::2]))
        vectors = [f"{a}{b}" for a, b in pairs]
        body += [f"{t} {a}{b} = __builtin_shuffle({a}, {b}, ({it}){{{masks[0]}}}) + "
                 f"__builtin_shuffle({a}, {b}, ({it}){{{masks[1]}}});" for a, b in pairs]
        group, groups = half, 2 * groups
    x = vectors[0]
    body += _group_sums(x, it, lanes, group)
    if width < lanes:
        gather = ", ".join(str(g * group) for g in range(width)) + ", 0" * (lanes - width)
        body += [f"{x} = __builtin_shuffle({x}, ({it}){{{gather}}});", f"{tw} r; memcpy(&r, &{x}, sizeof r);"]
        x = "r"
    params = ", ".join(f"{t} v{i}" for i in range(width))
    return "\n".join([f"static inline {tw} tf_hsum{width}_{t}({params}) {{", *(f"  {line}" for line in body),
                      f"  return {x};", "}"])


def _group_sums(x: str, it: str, lanes: int, group: int) -> list[str]:
    """C statements that leave in every lane of vector `x` (`lanes` lanes, integer vector type
    `it`) the sum of its group of `group` lanes (a power of two): x += x's lanes `half` apart,
    for half = group/2, ..., 1 (whole-register shuffles)."""
    steps, half = [], group // 2
    while half:
        steps.append(f"{x} += __builtin_shuffle({x}, ({it}){{{', '.join(str(i ^ half) for i in range(lanes))}}});")
        half //= 2
    return steps


def _register_accesses(s: Allocate) -> tuple[list[Expr], list[Expr]] | None:
    """(indices of the stores, indices of the loads) of the local buffer `s` allocates, or None
    where it cannot live in registers: a parallel loop inside its scope, or its address taken."""
    b = s.buffer
    if any(isinstance(n, For) and n.kind == "parallel" for n in walk_stmt(s.body)):
        return None
    stores = [n.index for n in walk_stmt(s.body) if isinstance(n, Store) and n.buffer is b]
    accesses = [n for e in stmt_exprs(s.body) for n in expr_nodes(e)
                if isinstance(n, (Load, Address)) and n.buffer is b]
    if any(isinstance(n, Address) for n in accesses):
        return None
    return stores, [n.index for n in accesses]


def _lane_base(index: Expr, width: int, lanes: int) -> int | None:
    """The first element a load of a promoted buffer at `index` reads as a leaf of a horizontal
    sum of `width` registers of `lanes` lanes (`CGenerator.lane_sum`): a constant element
    (width 1), or a Ramp of `width` lanes of constant base and stride `lanes` (one lane of
    each register); else None."""
    if width == 1:
        return index.value if isinstance(index, Const) else None
    if isinstance(index, Ramp) and index.lanes == width and index.stride == lanes and isinstance(index.base, Const):
        return index.base.value
    return None


def generate_c(func: PrimFunc) -> str:
    """The C source of kernel `func` (without the ABI wrappers and the runtime)."""
    return CGenerator(func).generate()
