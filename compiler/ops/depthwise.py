"""depthwise_conv2d_nchw: out[N, C, OH, OW] = depthwise conv(data[N, C, H, W], weight[C, 1, KH, KW])
(+ bias[C]) (+ relu/gelu), float32/float64 (channel multiplier 1, as in MobileNet; the weight
shape is PyTorch's for groups=C).

Each channel is a small 2-D stencil (KH·KW multiply-adds per output), so the CPU template
keeps the public NCHW layout and vectorizes along the output width, like TVM's x86
depthwise schedule for NCHW: tiles of tile_h rows × tile_w columns accumulate in
registers over (kh, kw), with the weight tap broadcast. The zero padding is a stage
computed per (batch, channel) plane, or per tile row band, inside the parallel loop. For
a column stride s > 1 that stage also splits the columns into s phases,
`pad[n, c, p, ih, q] = padded(data)[n, c, ih, q*s + p]`, so that the strided reads of the
convolution become unit-stride vector loads (`pad[..., (kw*dw) % s, oh*sh + kh*dh, ow + (kw*dw) // s]`).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..schedule import create_schedule
from .common import L1D_BYTES, RegisterTileFits, kernel_args, knob_choices
from .conv_common import (check_conv, conv_args, conv_flop, finish, has_epilogue, load_or_zero, np_depthwise_nchw,
                          np_finish, out_size, tile_overhang)
from .registry import OpDef, register

ARGS = conv_args(channels=False)


def _inputs(a: dict):
    data = te.placeholder((a["N"], a["C"], a["H"], a["W"]), a["dtype"], "data")
    weight = te.placeholder((a["C"], 1, a["KH"], a["KW"]), a["dtype"], "weight")
    bias = te.placeholder((a["C"],), a["dtype"], "bias") if a["bias"] else None
    return data, weight, bias


def depthwise_nchw(a: dict, data, weight, bias):
    """(pad, conv, out): the padded, column-phase-split data (None when there is neither padding nor
    a column stride), the convolution, and the output with bias/epilogue (`conv` when none)."""
    N, C, H, W = data.shape
    KH, KW = a["KH"], a["KW"]
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OH, OW = out_size(a)
    pad = None
    if ph or pw or sw > 1:
        guard = tuple(d for d, g in ((2, ph), (3, pw or W % sw)) if g)
        pad = te.compute((N, C, sw, H + 2 * ph, -(-(W + 2 * pw) // sw)),
                         lambda n, c, p, h, q: load_or_zero(data, (n, c, h - ph, q * sw + p - pw), guard),
                         name="data_pad")
    kh, kw = te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw")

    def tap(n, c, oh, ow):
        if pad is None:
            return data[n, c, oh * sh + kh * dh, ow + kw * dw]
        return pad[n, c, (kw * dw) % sw, oh * sh + kh * dh, ow + (kw * dw) // sw]

    conv = te.compute((N, C, OH, OW),
                      lambda n, c, oh, ow: te.sum(tap(n, c, oh, ow) * weight[c, 0, kh, kw], axis=[kh, kw]),
                      name="out_acc" if has_epilogue(a) else "out")
    if not has_epilogue(a):
        return pad, conv, conv
    out = te.compute((N, C, OH, OW), lambda n, c, h, w: finish(conv[n, c, h, w], bias, c, a["epilogue"]), name="out")
    return pad, conv, out


def compute(a: dict) -> list[te.Tensor]:
    data, weight, bias = _inputs(a)
    *_, out = depthwise_nchw(a, data, weight, bias)
    return kernel_args(data, weight, bias, out)


def reference(a: dict, data: np.ndarray, weight: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    return [np_finish(a, np_depthwise_nchw(a, data, weight), rest[0] if rest else None, 1)]


def flop(a: dict) -> int:
    return conv_flop(a, a["KH"] * a["KW"], a["C"])


# ----------------------------------------------------------------------------- CPU template


def define_knobs(cfg, a: dict, lanes: int, registers: int) -> None:
    """tile_w (output columns per tile, in half-vector steps), tile_h (rows per tile), unroll_kw,
    parallel ('n_c': one task per plane, padding per plane; 'n_c_oh': one per row band,
    padding per band)."""
    OH, OW = out_size(a)
    widths = [w for w in (lanes // 2, lanes, 2 * lanes, 3 * lanes, 4 * lanes) if w < OW + lanes // 2] or [lanes // 2]
    cfg.define_knob("tile_w", widths)
    cfg.define_knob("tile_h", [h for h in (1, 2, 3, 4, 6, 8) if h <= OH])
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("parallel", ["n_c", "n_c_oh"])
    cfg.define_constraint(RegisterTileFits("tile_h", "tile_w", lanes, registers))


def schedule_tile_at(sch, acc: te.Tensor, out_stage, loop, *, unrolled_taps: int, vector_columns: bool) -> None:
    """Compute the register tile `acc` (a cache_write of the convolution) at `loop` of the output
    stage `out_stage`, its taps outermost: loops (n, c, kh, kw, rows, columns), so each weight tap
    is loaded once per tile. Unrolls the innermost `unrolled_taps` tap loops (0: none, 1: kw,
    2: kh and kw) and the rows; vectorizes the columns (`vector_columns`), else unrolls them (a
    CUDA thread's tile). Shared by the CPU and CUDA templates."""
    stage = sch[acc]
    stage.compute_at(out_stage, loop)
    n, c, rows, cols = stage.op.axis
    kh, kw = stage.op.reduce_axis
    stage.reorder(n, c, kh, kw, rows, cols)
    for tap in (kh, kw)[2 - unrolled_taps:]:
        stage.unroll(tap)
    stage.unroll(rows)
    if vector_columns:
        stage.vectorize(cols)
    else:
        stage.unroll(cols)


def schedule(sch, cfg, pad, conv, out) -> None:
    acc = sch.cache_write(conv, "local")
    if out is not conv:
        sch[conv].compute_inline()
    so = sch[out]
    n, c, h, w = so.op.axis
    ho, hi = so.split(h, factor=cfg["tile_h"].val)
    wo, wi = so.split(w, factor=cfg["tile_w"].val)
    so.reorder(n, c, ho, wo, hi, wi)
    par = so.fuse(n, c, ho) if cfg["parallel"].val == "n_c_oh" else so.fuse(n, c)
    so.parallel(par)
    so.unroll(hi)
    so.vectorize(wi)

    schedule_tile_at(sch, acc, so, wo, unrolled_taps=1 if cfg["unroll_kw"].val else 0, vector_columns=True)
    if pad is not None:
        sp = sch[pad]
        sp.compute_at(so, par)
        sp.unroll(sp.op.axis[2])  # the column phases: constant phases let the borders be peeled off


def cpu_template(cfg, workload, target):
    a = workload.args
    define_knobs(cfg, a, target.lanes(a["dtype"]), target.vector_registers)
    cfg.add_flop(flop(a))
    data, weight, bias = _inputs(a)
    pad, conv, out = depthwise_nchw(a, data, weight, bias)
    sch = create_schedule(out)
    schedule(sch, cfg, pad, conv, out)
    return sch, kernel_args(data, weight, bias, out)


#: Accumulators of a tile (rows × vectors) where the default takes few: a tile of two vectors
#: over a whole plane, or a strided layer's tile over a row band. Intel Xeon model 167, medians
#: of 7-9 interleaved rounds, 2 rows × 2 vectors against 4 × 2: 32@112² 1.24× (AVX2 build) and
#: 1.18× (generic), 128@56² 1.28× / 1.19× / 1.13× (AVX-512), 256@28² 1.52× (AVX2); MobileNet's
#: 112² stride-2 layers in bands, one vector × 4 rows against × 8: 1.065-1.085× (AVX-512), 1.40×
#: (AVX2), 1.32× (generic). Tiles of one vector over whole planes keep up to 8 (512@14², AVX2: 2
#: or 4 rows against 8 0.98×; 512@14²/2: 4 rows against 1 0.79× with AVX-512), and so do
#: unstrided bands (32@112², AVX-512: 2 rows × 2 vectors against 4 × 2, 0.77×: each band pads
#: two more rows than it computes).
FEW_ACCUMULATORS = 4
#: Accumulators of a tile one 64-byte vector wide over a whole plane wider than the vector
#: (AVX-512, unstrided, 17-31 output columns: two tiles per row): 2, i.e. 2 rows. Medians of 9
#: interleaved rounds, 2 rows against the former 4 or 8: AMD Zen 5 256@28² 1.12×, 96@20² 1.13×,
#: 64@24² 1.005× (against 8); Intel Xeon model 167 256@28² 1.10×. Not where the plane is exactly
#: one vector wide (32@16²: 0.97×), nor strided (128@56²/2: 0.98×), nor with AVX2's 32-byte
#: vectors (512@14², one vector of 8 over 14 columns: 8 rows; 4 rows 0.93×, 2 rows 0.94×).
WIDE_VECTOR_ACCUMULATORS = 2


def default_config(space, workload, target) -> dict:
    """Rows of two vectors (one when the output is narrower; for a strided one at most one
    vector, `strided_tile_width`), rows per tile by `tile_rows` up to
    about 8 accumulators (half the AVX2 register file, a quarter of AVX-512's, leaving room
    for the unrolled taps; FEW_ACCUMULATORS for a tile of two vectors over a whole plane and for
    a strided layer in row bands, WIDE_VECTOR_ACCUMULATORS for one 64-byte vector over a whole
    plane wider than it), kw unrolled, one plane per task — but where the padded plane
    outgrows L1D_BYTES one row band per task (parallel "n_c_oh", each task padding the rows of
    its band), as the tiles otherwise read the plane's padded copy from the L2: for a strided
    convolution on any ISA, for an unstrided one with AVX-512's vectors (whose tiles outrun the
    L2; AVX2's, a third as fast there, do not). 2 threads, medians of 7-9 interleaved rounds,
    bands against planes: MobileNet's 64@112²/2 and 96@112²/2 (52 KiB padded planes) on an AMD
    Zen 5 1.15× / 1.13× (AVX-512), 1.06× / 1.03× (AVX2 build), on an Intel Xeon model 167 1.72×
    (AVX-512, tiles one vector wide); with 13 KiB planes (128@56²/2) bands lose (0.92×);
    unstrided 32@112²: 1.07× (Zen 5) and 1.31× (Xeon 167) with AVX-512, 0.88× and 0.95× built
    for AVX2."""
    a = workload.args
    lanes = target.lanes(a["dtype"])
    OH, OW = out_size(a)
    widths, heights = knob_choices(space, "tile_w"), knob_choices(space, "tile_h")
    fitting = [w for w in widths if w <= max(widths[0], min(2 * lanes, OW))]
    strided = a["stride"][1] > 1
    tile_w = strided_tile_width(OW, fitting, lanes) if strided else fitting[-1]
    bands = padded_plane_bytes(a) > L1D_BYTES and (strided or target.vector_bytes >= 64)
    vectors = max(1, tile_w // lanes)
    many = (bands and not strided) or (not bands and vectors == 1)
    accumulators = 8 if many else FEW_ACCUMULATORS
    if not (strided or bands) and tile_w == lanes < OW and target.vector_bytes >= 64:
        accumulators = WIDE_VECTOR_ACCUMULATORS
    tile_h = tile_rows(OH, [h for h in heights if h * vectors <= accumulators])
    return {"tile_w": tile_w, "tile_h": tile_h, "unroll_kw": True, "parallel": "n_c_oh" if bands else "n_c"}


def strided_tile_width(OW: int, widths: list[int], lanes: int) -> int:
    """Output columns per tile of a strided depthwise convolution, from `widths` (ascending):
    the widest of at most one vector whose last tile computes at most a quarter of its columns
    beyond OW, else the one that computes fewest. Each column computed beyond OW costs `stride`
    more columns of the padded plane to fill, and a tile of two vectors reads twice as many
    phase-split input columns per tap as one. Per-round medians, 7-9 interleaved rounds:
    MobileNet's 64@112²/2 (56 columns), Intel Xeon model 167: one AVX-512 vector (16, 64
    computed) against half (8, none beyond) 1.08×, and built for generic 4 against 8 1.31×; AMD
    Zen 5: 16 against 8 1.07-1.14×; Xeon model 207: 8 against two vectors (32) 1.14×. 28 columns
    (128@56²/2), built for AVX2: 8 against 4 1.05× (Xeon 167) and 1.20× (Zen 5); generic 4
    against 8 1.26×."""
    one_vector = [w for w in widths if w <= lanes and 4 * tile_overhang(OW, w) <= OW + tile_overhang(OW, w)]
    return one_vector[-1] if one_vector else min(widths, key=lambda w: (tile_overhang(OW, w), -w))


def padded_plane_bytes(a: dict) -> int:
    """Bytes of one (image, channel) plane of `depthwise_nchw`'s padded, column-phase-split data:
    stride_w × (H + 2·pad_h) × ceil((W + 2·pad_w) / stride_w) elements of a["dtype"]."""
    (_, sw), (ph, pw) = a["stride"], a["padding"]
    return sw * (a["H"] + 2 * ph) * -(-(a["W"] + 2 * pw) // sw) * te.dtype_of(a["dtype"]).bytes


def tile_rows(OH: int, heights: list[int]) -> int:
    """Output rows per tile from `heights` (ascending): the largest that divides OH if it is at
    least half the largest; else the largest unless its last tile wastes over a quarter of the
    rows computed, then the one that wastes fewest (the widest of those). Rows beyond OH are
    computed and never stored, and the padded input plane grows to feed them. Xeon model 207
    (AVX-512), MobileNet layers, per-round ratios: 28 output rows (C=32 56² /2), 4 rows vs 8
    (32 computed): 1.25×; C=144: 1.18×; 7 rows (C=1024 7²), 1 vs 6 (12 computed): 1.42×; 14 rows
    (C=512 14²), 8 (16 computed) stays: 2 rows 0.84×, 4 rows 0.91×."""
    divisor = max((h for h in heights if OH % h == 0), default=0)
    if 2 * divisor >= heights[-1]:
        return divisor
    overhang = tile_overhang(OH, heights[-1])
    if 4 * overhang <= OH + overhang:
        return heights[-1]
    return min(heights, key=lambda h: (tile_overhang(OH, h), -h))


def _layouts(a: dict) -> dict[str, str]:
    return {"data": "NCHW [N, C, H, W]", "weight": "[C, 1, KH, KW]", "bias": "[C]", "out": "NCHW [N, C, OH, OW]"}


register(OpDef(
    name="depthwise_conv2d_nchw",
    description="depthwise 2-D convolution (channel multiplier 1), NCHW data, weights [C, 1, KH, KW], "
                "optional bias[C] and relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    default_config=default_config, check=check_conv, layouts=_layouts, family="depthwise_conv2d",
))
