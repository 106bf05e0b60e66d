"""conv2d_nhwc: out[N, OH, OW, CO] = conv(data[N, H, W, CI], weight[KH, KW, CI, CO]) (+ bias[CO])
(+ relu/gelu), float32/float64 (TensorFlow's layouts: NHWC data, HWIO weights).

The channels are innermost in data, weights and output, so the CPU template needs no
data packing: it is the direct convolution of TVM's x86 NHWC schedules with the register
tile of its NCHWc one — tiles of reg_n output columns × oc_bn output channels
accumulated in registers (vectorized over the output channels, one input pixel
broadcast per channel), reduction in the order the `order` knob picks. Knobs also choose
whether the weights are repacked per call to `[ceil(CO/oc_bn), KH, KW, CI, oc_bn]` (one
contiguous stream per tile), whether the zero padding is inlined into the reduction or
computed as a stage per output row, and which loops run in parallel.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..schedule import create_schedule
from .common import RegisterTileFits, kernel_args, knob_choices
from .conv2d import WEIGHT_PACK_INSIDE_BYTES, tile_columns
from .conv_common import (check_conv, conv_args, conv_flop, finish, has_epilogue, load_or_zero, np_conv2d_nhwc,
                          np_finish, out_size)
from .registry import OpDef, register

ARGS = conv_args()

#: Reduction loop orders of the register tile, outermost first (`icc`: input-channel blocks).
ORDERS = {
    "kh_kw_ic": ("kh", "kw", "icc", "icb"),
    "ic_kh_kw": ("icc", "kh", "kw", "icb"),
    "kh_ic_kw": ("kh", "icc", "icb", "kw"),
}


def _inputs(a: dict):
    data = te.placeholder((a["N"], a["H"], a["W"], a["CI"]), a["dtype"], "data")
    weight = te.placeholder((a["KH"], a["KW"], a["CI"], a["CO"]), a["dtype"], "weight")
    bias = te.placeholder((a["CO"],), a["dtype"], "bias") if a["bias"] else None
    return data, weight, bias


def conv_nhwc(a: dict, data, weight, bias, *, ic_bn: int = 1, oc_bn: int = 1, pack_weight: bool = False):
    """(pad, weight_vec, conv, out): the zero-padded data (None without padding), the packed weights
    ([ceil(CO/oc_bn), KH, KW, CI, oc_bn]; None unless pack_weight), the convolution and the
    output with bias and epilogue (`conv` itself when there are none)."""
    N, H, W, CI = data.shape
    KH, KW, _, CO = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OH, OW = out_size(a)
    pad = None
    if ph or pw:
        pad = te.compute((N, H + 2 * ph, W + 2 * pw, CI),
                         lambda n, h, w, c: load_or_zero(data, (n, h - ph, w - pw, c),
                                                         tuple(d for d, p in ((1, ph), (2, pw)) if p)),
                         name="data_pad")
    src = pad if pad is not None else data
    wvec = None
    if pack_weight:
        wvec = te.compute((-(-CO // oc_bn), KH, KW, CI, oc_bn),
                          lambda o, kh, kw, c, ob: load_or_zero(weight, (kh, kw, c, o * oc_bn + ob),
                                                                (3,) if CO % oc_bn else ()),
                          name="weight_vec")
    icc, icb = te.reduce_axis(CI // ic_bn, "icc"), te.reduce_axis(ic_bn, "icb")
    kh, kw = te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw")

    def w_at(c, co):
        return wvec[co // oc_bn, kh, kw, c, co % oc_bn] if wvec is not None else weight[kh, kw, c, co]

    conv = te.compute(
        (N, OH, OW, CO),
        lambda n, oh, ow, co: te.sum(src[n, oh * sh + kh * dh, ow * sw + kw * dw, icc * ic_bn + icb]
                                     * w_at(icc * ic_bn + icb, co), axis=[kh, kw, icc, icb]),
        name="out_acc" if has_epilogue(a) else "out")
    if not has_epilogue(a):
        return pad, wvec, conv, conv
    out = te.compute((N, OH, OW, CO), lambda n, h, w, c: finish(conv[n, h, w, c], bias, c, a["epilogue"]),
                     name="out")
    return pad, wvec, conv, out


def compute(a: dict) -> list[te.Tensor]:
    data, weight, bias = _inputs(a)
    *_, out = conv_nhwc(a, data, weight, bias)
    return kernel_args(data, weight, bias, out)


def reference(a: dict, data: np.ndarray, weight: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    return [np_finish(a, np_conv2d_nhwc(a, data, weight), rest[0] if rest else None, 3)]


def flop(a: dict) -> int:
    return conv_flop(a, a["CI"] * a["KH"] * a["KW"], a["CO"])


# ----------------------------------------------------------------------------- CPU template


def define_knobs(cfg, a: dict, lanes: int, registers: int) -> None:
    """oc_bn (output channels per tile), reg_n (output columns per tile), ic_bn (input-channel
    block of the reduction), order, unroll_kw, pack_weight, pad ('inline' into the reduction or
    'row': a stage per output row; only with padding), parallel (fused loops)."""
    _, OW = out_size(a)
    cfg.define_knob("oc_bn", [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= 4 * lanes and b < 2 * a["CO"]])
    cfg.define_knob("reg_n", list(range(1, min(OW, 32) + 1)))
    cfg.define_knob("ic_bn", [d for d in range(1, min(a["CI"], 4 * lanes) + 1) if a["CI"] % d == 0])
    cfg.define_knob("order", list(ORDERS))
    cfg.define_knob("unroll_kw", [False, True])
    cfg.define_knob("pack_weight", [True, False])
    cfg.define_knob("pad", ["row", "inline"] if any(a["padding"]) else ["none"])
    cfg.define_knob("parallel", ["n_oh", "n_oh_oc"])
    cfg.define_constraint(RegisterTileFits("reg_n", "oc_bn", lanes, registers))


def schedule(sch, cfg, pad, wvec, conv, out) -> None:
    oc_bn, reg_n = cfg["oc_bn"].val, cfg["reg_n"].val
    acc = sch.cache_write(conv, "local")
    if out is not conv:
        sch[conv].compute_inline()
    so = sch[out]
    n, h, w, c = so.op.axis
    co, ci = so.split(c, factor=oc_bn)
    wo, wi = so.split(w, factor=reg_n)
    so.reorder(n, h, co, wo, wi, ci)
    if cfg["parallel"].val == "n_oh_oc":
        par = so.fuse(n, h, co)
    else:
        par = so.fuse(n, h)
    so.parallel(par)
    so.unroll(wi)
    so.vectorize(ci)

    sa = sch[acc]
    sa.compute_at(so, wo)
    an, ah, aw, ac = sa.op.axis
    red = {ax.name: ax for ax in sa.op.reduce_axis}
    sa.reorder(an, ah, *(red[r] for r in ORDERS[cfg["order"].val]), aw, ac)
    if cfg["unroll_kw"].val:
        sa.unroll(red["kw"])
    sa.unroll(aw)
    sa.vectorize(ac)

    if pad is not None:
        if cfg["pad"].val == "inline":
            sch[pad].compute_inline()
        else:
            sp = sch[pad]
            sp.compute_at(so, par)
            sp.vectorize(sp.op.axis[-1])
    if wvec is not None:
        sw = sch[wvec]
        sw.parallel(sw.op.axis[0])
        sw.vectorize(sw.op.axis[-1])


def cpu_template(cfg, workload, target):
    a = workload.args
    define_knobs(cfg, a, target.lanes(a["dtype"]), target.vector_registers)
    cfg.add_flop(flop(a))
    data, weight, bias = _inputs(a)
    pad, wvec, conv, out = conv_nhwc(a, data, weight, bias, ic_bn=cfg["ic_bn"].val, oc_bn=cfg["oc_bn"].val,
                                     pack_weight=cfg["pack_weight"].val)
    sch = create_schedule(out)
    schedule(sch, cfg, pad, wvec, conv, out)
    return sch, kernel_args(data, weight, bias, out)


def default_config(space, workload, target) -> dict:
    """One vector of output channels per tile (oc_bn = lanes, or the largest choice below), reg_n
    `conv2d.tile_columns` of OW for a tile in 28 vector registers (12 for AVX2), the whole
    input-channel loop inside (kh, kw), padding per row, (n, oh) in parallel; weights packed when
    they fit in about an L2 (WEIGHT_PACK_INSIDE_BYTES; larger ones cost more to repack on every
    call than their rows of CO channels cost to stream)."""
    a = workload.args
    lanes = target.lanes(a["dtype"])
    oc_bn = max(b for b in knob_choices(space, "oc_bn") if b <= lanes)
    regs = 28 if target.vector_bytes >= 64 else 12
    _, OW = out_size(a)
    limit = max(1, min(32, OW, regs // max(1, oc_bn // lanes)))
    reg_n = tile_columns(OW, limit)
    weight_bytes = a["CO"] * a["CI"] * a["KH"] * a["KW"] * (4 if a["dtype"] == "float32" else 8)
    return {"oc_bn": oc_bn, "reg_n": reg_n, "ic_bn": a["CI"] if a["CI"] <= 4 * lanes else 1, "order": "kh_kw_ic",
            "unroll_kw": False, "pack_weight": weight_bytes <= WEIGHT_PACK_INSIDE_BYTES,
            "pad": "row" if any(a["padding"]) else "none",
            "parallel": "n_oh"}


def _layouts(a: dict) -> dict[str, str]:
    return {"data": "NHWC [N, H, W, CI]", "weight": "HWIO [KH, KW, CI, CO]", "bias": "[CO]",
            "out": "NHWC [N, OH, OW, CO]"}


register(OpDef(
    name="conv2d_nhwc",
    description="2-D convolution, NHWC data and HWIO weights, optional bias[CO] and relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    default_config=default_config, check=check_conv, layouts=_layouts, family="conv2d",
))
