"""CUDA template of depthwise_conv2d_nchw (+bias, +relu/gelu): direct convolution.

A block computes a tile of rows × columns of one (image, channel) plane: blockIdx.z is the
plane, blockIdx.y / blockIdx.x the row / column blocks; threadIdx.y / threadIdx.x its
threads, each a tile_h × tile_w register tile of outputs (adjacent columns, so a warp's
stores cover contiguous runs), accumulated over the KH·KW taps with the plane's taps in
registers. With `shared`, the zero-padded input window of the block (its halo included) is
first fetched cooperatively into shared memory; without, threads read the input directly
(clamped reads, zero outside), relying on the L1 cache.
"""

from __future__ import annotations

from ... import te
from ...schedule import create_schedule
from ..common import kernel_args, knob_choices
from ..conv_common import finish, has_epilogue, load_or_zero, out_size
from ..depthwise import schedule_tile_at


def depthwise_template(cfg, workload, target):
    a = workload.args
    N, C, H, W, KH, KW = a["N"], a["C"], a["H"], a["W"], a["KH"], a["KW"]
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OH, OW = out_size(a)
    cfg.define_knob("tile_h", [t for t in (1, 2, 4) if t <= OH] or [1])
    cfg.define_knob("tile_w", [t for t in (1, 2, 4) if t <= OW] or [1])
    cfg.define_knob("threads_x", [t for t in (4, 8, 16, 32) if t <= max(4, OW)] or [4])
    cfg.define_knob("threads_y", [t for t in (1, 2, 4, 8, 16) if t <= max(1, OH)] or [1])
    cfg.define_knob("shared", [True, False])
    cfg.define_knob("unroll_taps", [True, False])
    cfg.add_flop(workload.flop)
    dt = a["dtype"]
    data = te.placeholder((N, C, H, W), dt, "data")
    weight = te.placeholder((C, KH * KW), dt, "weight")
    bias = te.placeholder((C,), dt, "bias") if a["bias"] else None
    guard = tuple(d for d, p in ((2, ph), (3, pw)) if p)
    pad = te.compute((N, C, H + 2 * ph, W + 2 * pw),
                     lambda n, c, h, w: load_or_zero(data, (n, c, h - ph, w - pw), guard), name="data_pad")
    kh, kw = te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw")
    conv = te.compute((N, C, OH, OW),
                      lambda n, c, oh, ow: te.sum(pad[n, c, oh * sh + kh * dh, ow * sw + kw * dw]
                                                  * weight[c, kh * KW + kw], axis=[kh, kw]),
                      name="out_acc" if has_epilogue(a) else "out")
    out = conv
    if has_epilogue(a):
        out = te.compute((N, C, OH, OW), lambda n, c, h, w: finish(conv[n, c, h, w], bias, c, a["epilogue"]),
                         name="out")
    sch = create_schedule(out)
    TH, TW = cfg["tile_h"].val, cfg["tile_w"].val
    TX, TY = cfg["threads_x"].val, cfg["threads_y"].val
    acc = sch.cache_write(conv, "local")
    if out is not conv:
        sch[conv].compute_inline()
    w_local = sch.cache_read(weight, "local", [acc])
    so = sch[out]
    n, c, h, w = so.op.axis
    h, yi = so.split(h, factor=TH)
    by, ty = so.split(h, factor=TY)
    w, xi = so.split(w, factor=TW)
    bx, tx = so.split(w, factor=TX)
    so.reorder(n, c, by, bx, ty, tx, yi, xi)
    so.bind(so.fuse(n, c), "blockIdx.z")
    so.bind(by, "blockIdx.y")
    so.bind(bx, "blockIdx.x")
    so.bind(ty, "threadIdx.y")
    so.bind(tx, "threadIdx.x")
    so.unroll(yi)
    so.unroll(xi)
    schedule_tile_at(sch, acc, so, tx, unrolled_taps=2 if cfg["unroll_taps"].val else 0, vector_columns=False)
    sw_ = sch[w_local]
    sw_.compute_at(so, tx)
    sw_.unroll(sw_.op.axis[1])
    sp = sch[pad]
    if cfg["shared"].val:
        sp.set_scope("shared")
        sp.compute_at(so, bx)
        pn, pc, phh, pww = sp.op.axis
        fused = sp.fuse(pn, pc, phh, pww)
        # the threads the output loops really have (a tile larger than the plane shrinks to it)
        tx_e = min(TX, -(-OW // min(TW, OW)))
        ty_e = min(TY, -(-OH // min(TH, OH)))
        rest, tx2 = sp.split(fused, factor=tx_e)
        if ty_e > 1:
            rest, ty2 = sp.split(rest, factor=ty_e)
            sp.bind(ty2, "threadIdx.y")
        sp.bind(tx2, "threadIdx.x")
    else:
        sp.compute_inline()
    return sch, kernel_args(data, weight, bias, out)


def depthwise_default(space, workload, target) -> dict:
    """32×4 threads, 2×2 outputs each (a 8×64 output tile per block), input window in shared
    memory, taps unrolled; narrower for small planes."""
    a = workload.args
    OH, OW = out_size(a)

    def pick(name, want):
        values = knob_choices(space, name)
        return max([v for v in values if v <= want] or [values[0]])

    return {"tile_h": pick("tile_h", 2), "tile_w": pick("tile_w", 2 if OW >= 32 else 1),
            "threads_x": pick("threads_x", 32 if OW >= 32 else 8), "threads_y": pick("threads_y", 4),
            "shared": True, "unroll_taps": True}
