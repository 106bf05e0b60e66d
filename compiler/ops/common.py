"""Pieces shared by operators: fused epilogues, packing stages, numpy helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..te import Tensor

EPILOGUES = ("none", "relu", "gelu")
#: The L1 data cache that default rules count on: the smallest of the fleet's hosts (AMD Zen 3 and
#: Zen 4: 32 KiB; Zen 5 and Intel Xeon models 167 and 207: 48 KiB).
L1D_BYTES = 32 << 10
_SQRT1_2 = 1.0 / math.sqrt(2.0)


def apply_epilogue(x: te.Expr, kind: str) -> te.Expr:
    """relu: max(x, 0); gelu: 0.5*x*(1 + erf(x/sqrt(2))) (exact GELU, Hendrycks & Gimpel 2016)."""
    if kind == "none":
        return x
    if kind == "relu":
        return te.max(x, te.const(0.0, x.dtype))
    if kind == "gelu":
        return x * te.const(0.5, x.dtype) * (te.erf(x * te.const(_SQRT1_2, x.dtype)) + te.const(1.0, x.dtype))
    raise ValueError(f"epilogue {kind!r}; allowed: {', '.join(EPILOGUES)}")


def np_epilogue(x: np.ndarray, kind: str) -> np.ndarray:
    """numpy version of apply_epilogue (float64 math, cast back to x's dtype)."""
    if kind == "relu":
        return np.maximum(x, 0).astype(x.dtype)
    if kind == "gelu":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        x64 = x.astype(np.float64)
        return (0.5 * x64 * (1.0 + erf(x64 * _SQRT1_2))).astype(x.dtype)
    return x


def pack_blocked(t: Tensor, axis: int, factor: int, name: str, outer_multiple: int = 1) -> Tensor:
    """Layout transform: split dim `axis` of `t` into (outer, factor) and move the inner
    block last, zero-padding the tail. E.g. B[K, N] with axis=1 -> Bp[ceil(N/f), K, f],
    Bp[no, k, ni] = B[k, no*f + ni] (0 where no*f + ni >= N). The outer extent is rounded
    up to a multiple of `outer_multiple`, so blocked consumers never read past the end."""
    extent = t.shape[axis]
    outer = -(-extent // factor)
    outer = -(-outer // outer_multiple) * outer_multiple
    rest = [d for n, d in enumerate(t.shape) if n != axis]
    shape = (outer, *rest, factor)

    def body(*idx):
        o, inner, others = idx[0], idx[-1], list(idx[1:-1])
        src = o * factor + inner
        full = others[:axis] + [src] + others[axis:]
        if outer * factor == extent:
            return t[tuple(full)]
        clamped = others[:axis] + [te.min(src, extent - 1)] + others[axis:]
        return te.if_then_else(src < extent, t[tuple(clamped)], te.const(0.0, t.dtype))

    return te.compute(shape, body, name=name)


def kernel_args(*tensors: Tensor | None) -> list[Tensor]:
    """A kernel's argument list: `tensors` in order (inputs, then outputs), leaving out the
    optional ones that a workload does not have (None, e.g. no bias)."""
    return [t for t in tensors if t is not None]


def knob_choices(space, name: str) -> list:
    """The values of choice knob `name` of a config space (for default-config rules)."""
    knob = space.knobs[name]
    return [knob.entity(i).val for i in range(len(knob))]


@dataclass(frozen=True)
class RegisterTileFits:
    """A space's constraint (``cfg.define_constraint``): the register tile of knob `rows`
    (rows of accumulators) × knob `cols` (columns, in elements, `lanes` to a vector register)
    keeps its accumulators in at most `registers` − 1 of the target's vector registers, the
    one left for A's broadcast (or a vector of B, the other FMA operand then coming from
    memory). A larger tile spills accumulators to the stack in its reduction loop (matmul
    512³ on an Intel Xeon model 207: AVX-512 tiles of 8-14 rows × 4 vectors ran at 0.45-0.75×
    of the 6 × 4 default, AVX2 ones at most 0.80× of its 6 × 2 default), and its unrolled body
    is the slowest to compile (a generic k-blocked 12 × 12 tile with ku 8: 440 KB of C, 10.5 s
    of gcc)."""

    rows: str
    cols: str
    lanes: int
    registers: int

    def __call__(self, cfg) -> bool:
        return cfg[self.rows].val * -(-cfg[self.cols].val // self.lanes) < self.registers
