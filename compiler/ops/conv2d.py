"""conv2d_nchw: out[N, CO, OH, OW] = conv(data[N, CI, H, W], weight[CO, CI/groups, KH, KW])
(+ bias[CO]) (+ residual[N, CO, OH, OW]) (+ relu/gelu), float32/float64.

`residual` (default false, left out of the args then, as `groups` is) adds a tensor of the
output's shape before the activation: a ResNet block's shortcut, Add and Relu fused into the
convolution that ends the block (onnxruntime's and oneDNN's "sum" post-op), so neither the
sum nor the activation is another pass over memory.

`groups` (default 1) splits the channels as ONNX's Conv `group` and PyTorch's `groups` do:
output channel co reads the CI/groups input channels of its group g = co // (CO/groups),
[g·CI/groups, (g+1)·CI/groups); groups must divide CI and CO. Depthwise convolution (groups =
CI = CO) is its own operator (depthwise_conv2d_nchw). A workload with groups = 1 leaves the
argument out (ArgDef.omit_default), so its key is the one it had before groups existed.

The CPU template is the direct convolution of TVM's x86 `conv2d_NCHWc` schedule (Liu et
al., "Optimizing CNN Model Inference on CPUs", USENIX ATC 2019), inside a kernel whose
public signature stays NCHW / OIHW:

- data is padded and packed to NCHW[ic_bn]c, `data_vec[N, CI/ic_bn, H+2ph, W+2pw, ic_bn]`
  (the padding stage is inlined into the packing; for a 1×1 kernel only the pixels the
  strided output reads are packed, `data_vec[N, CI/ic_bn, OH, OW, ic_bn]`);
- weights are packed to OIHW[ic_bn]i[oc_bn]o, `kernel_vec[ceil(CO/oc_bn), CI/ic_bn, KH, KW,
  ic_bn, oc_bn]` (zero-padded output channels) — unless the workload declares the weights
  pre-packed (`weight_layout="OIHW<i>i<o>o"`), then the caller passes that array;
- the output is computed in register tiles of reg_n output columns × oc_bn output
  channels (`conv`, an NCHW[oc_bn]c tile computed at the output's column-block loop),
  vectorized over the output-channel block, accumulated over the reduction in the order
  the `order` knob picks (kw optionally unrolled) — or, with accumulate "row", over one
  block of input channels, the blocks outermost, each tile (`conv_part`) adding its sums into
  a buffer of the output row (`conv`) — then written out to NCHW: the bias and
  activation applied to whole vectors of the tile, each lane stored to its channel's plane
  (applied per lane, the epilogue's hundreds of scalar max(x, 0.0f) had GCC hoist 0.0f into
  vector registers for the whole loop nest, and a 7 × 2-vector tile spilled an accumulator:
  AMD Zen 5, AVX-512, 512@7² 3×3 with OIHW16i32o weights 247 -> 503 GFLOP/s; the other
  defaults 1.02-1.13×); with AVX-512 and whole vectors of channels the tile after its
  epilogue is transposed in registers and stored a row of columns per channel
  (`transposed_store_fits`);
- the (batch, channel block, row) loops are fused and run in parallel.

A 1×1 convolution with no padding and OIHW weights is a GEMM per image,
out[n] = weight[CO, CI] · data[n][CI, OH·OW]: it runs `matmul`'s CPU schedule (register tiles,
cache blocking, zero-padded packed panels; its knobs and default rule) over views of the NCHW
and OIHW arguments, with no packing into NCHWc and back (`gemm_template`); with a stride
(ResNet's downsampling 1×1 convolutions) B is the strided pixels, gathered first into a
contiguous [N, CI, OH·OW] stage and then packed into panels. An ungrouped convolution over
OIHW weights with at most IM2COL_MAX_PIXELS output pixels (ResNet's 7² layers) has both
methods in its space, switched by the knob "method"
(METHODS; `compiler.space` on switches): the GEMM weight[CO, CI·KH·KW] · im2col(data[n]),
which reads the weights in place, and NCHWc, whose tiles are at most OW columns wide and
whose weight packing per call takes about 15% of it (AMD Zen 4, 512@7²) — which wins depends
on the host, and the search measures both defaults first. With so few pixels the GEMM also has
a dot-product form (knob `dot_rows`, `dot_gemm_template`): rows of weights times rows of the
transposed im2col, vectorized along CI·KH·KW, so no lane idles on a pixel count like 49 and no
weight is packed; on targets with 32 vector registers and long reductions it is the default.
Weights that come pre-packed (OIHW<i>i<o>o, as model bundles pass the constant weights of
layers with few pixels) are the panels of a GEMM's B already: with at most PREPACK_MAX_PIXELS
output pixels the space also holds that GEMM, pixels (transposed im2col) × panels
(`panel_gemm_template`, knob "method" = "gemm"), the default on AVX2 (`panel_gemm_first`).
"""

from __future__ import annotations

import re

import numpy as np

from .. import te
from ..schedule import create_schedule
from ..space import ConfigSpace
from . import dot
from . import matmul as gemm
from .common import L1D_BYTES, RegisterTileFits, kernel_args, knob_choices
from .conv_common import (MAX_DIM, check_conv, conv_args, conv_flop, finish, has_epilogue, load_or_zero,
                          np_conv2d_nchw, np_finish, out_size, residual_input, tile_overhang)
from .registry import ArgDef, OpDef, Workload, WorkloadError, register
from .transpose_pack import tensorize_transposed_pack, tensorize_transposed_store

_PACKED_LAYOUT = re.compile(r"OIHW([1-9][0-9]*)i([1-9][0-9]*)o")

ARGS = conv_args() + [
    ArgDef("weight_layout", "str", "OIHW",
           description="OIHW, or OIHW<i>i<o>o for weights pre-packed to "
                       "[ceil(CO/o), CI/i, KH, KW, i, o] (output channels zero-padded; i must divide CI)"),
    ArgDef("groups", "int", 1, 1, MAX_DIM, omit_default=True,
           description="channel groups (ONNX Conv group): each output channel reads CI/groups input channels; "
                       "must divide CI and CO"),
    ArgDef("residual", "bool", False, omit_default=True,
           description="add residual[N, CO, OH, OW] (the output's layout) before the epilogue: a shortcut's sum"),
]

#: Reduction loop orders (outermost first) of the register tile; `ic` is the input-channel
#: block loop, `icb` the channels inside a block.
ORDERS = {
    "ic_kh_kw_icb": ("icc", "kh", "kw", "icb"),
    "ic_kh_icb_kw": ("icc", "kh", "icb", "kw"),
    "kh_kw_ic_icb": ("kh", "kw", "icc", "icb"),
}
#: The choices of the NCHWc knob "accumulate": "tile" (each register tile sums the whole reduction
#: in the order of the knob `order`, what configs meant before the knob existed) or "row" (the
#: blocks of input channels run outside the tiles of an output row: each tile sums one block,
#: whose packed weights stay in the L1 for all the row's tiles, into the row's NCHWc buffer).
ACCUMULATE = ("tile", "row")


def packed_blocks(a: dict) -> tuple[int, int] | None:
    """(ic_bn, oc_bn) of pre-packed weights, None for plain OIHW."""
    m = _PACKED_LAYOUT.fullmatch(a["weight_layout"])
    return (int(m.group(1)), int(m.group(2))) if m else None


def groups(a: dict) -> int:
    """The workload's channel groups (1 when the args leave it out)."""
    return a.get("groups", 1)


def check(a: dict) -> None:
    check_conv(a)
    g = groups(a)
    for channels in ("CI", "CO"):
        if a[channels] % g:
            raise WorkloadError("groups", f"{g} does not divide {channels}={a[channels]}")
    if g > 1 and a["weight_layout"] != "OIHW":
        raise WorkloadError("weight_layout", f"grouped convolutions (groups={g}) take OIHW weights only")
    if a["weight_layout"] != "OIHW":
        blocks = packed_blocks(a)
        if blocks is None:
            raise WorkloadError("weight_layout", f"{a['weight_layout']!r} is not OIHW or OIHW<i>i<o>o (e.g. OIHW16i16o)")
        if a["CI"] % blocks[0]:
            raise WorkloadError("weight_layout", f"input-channel block {blocks[0]} does not divide CI={a['CI']}")


def weight_shape(a: dict) -> tuple[int, ...]:
    blocks = packed_blocks(a)
    if blocks is None:
        return (a["CO"], a["CI"] // groups(a), a["KH"], a["KW"])
    ib, ob = blocks
    return (-(-a["CO"] // ob), a["CI"] // ib, a["KH"], a["KW"], ib, ob)


def pack_weight_np(weight: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """OIHW weights → OIHW[ic_bn]i[oc_bn]o as a caller with pre-packed weights would pass them."""
    co, ci, kh, kw = weight.shape
    oc = -(-co // oc_bn)
    w = np.zeros((oc * oc_bn, ci, kh, kw), weight.dtype)
    w[:co] = weight
    return np.ascontiguousarray(w.reshape(oc, oc_bn, ci // ic_bn, ic_bn, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def _inputs(a: dict):
    data = te.placeholder((a["N"], a["CI"], a["H"], a["W"]), a["dtype"], "data")
    weight = te.placeholder(weight_shape(a), a["dtype"], "weight")
    bias = te.placeholder((a["CO"],), a["dtype"], "bias") if a["bias"] else None
    return data, weight, bias


def conv_nchwc(a: dict, data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None, ic_bn: int, oc_bn: int,
               by_block: bool = False, residual: te.Tensor | None = None, tile_store: bool = False):
    """(data_vec, kernel_vec, conv, out): the packed stages, the NCHW[oc_bn]c convolution and the
    NCHW output (bias, `residual` [N, CO, OH, OW] and epilogue applied). kernel_vec is `weight`
    itself when pre-packed. With groups > 1, ic_bn divides CI/groups and oc_bn divides CO/groups
    (a block is in one group).
    `tile_store` (`transposed_store_fits`): the epilogue is a stage of its own in the NCHWc
    layout, "conv_epi", and out a copy of it into NCHW (`schedule` stores its tiles by register
    transposes).
    `by_block`: conv is the sum over the input-channel blocks icc of `conv_part` [CI/ic_bn, N,
    ceil(CO/oc_bn), OH, OW, oc_bn], each block's partial sum over (kh, kw, icb) (the "row"
    accumulation of `schedule`)."""
    N, _, H, W = data.shape
    CO, KH, KW, g = a["CO"], a["KH"], a["KW"], groups(a)
    CI = a["CI"] // g  # the input channels each output channel reads
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OH, OW = out_size(a)
    guard = tuple(d for d, p in ((2, ph), (3, pw)) if p)
    if KH == KW == 1:  # a 1×1 kernel reads one pixel per output: pack only those (the stride folds in)
        vec_hw, sh, sw, rows, cols = (OH, OW), 1, 1, a["stride"][0], a["stride"][1]
    else:
        vec_hw, rows, cols = (H + 2 * ph, W + 2 * pw), 1, 1
    data_vec = te.compute(
        (N, a["CI"] // ic_bn, *vec_hw, ic_bn),
        lambda n, cc, h, w, cb: load_or_zero(data, (n, cc * ic_bn + cb, h * rows - ph, w * cols - pw), guard),
        name="data_vec")
    if packed_blocks(a) is not None:
        kernel_vec = weight
    else:
        kernel_vec = te.compute(
            (-(-CO // oc_bn), CI // ic_bn, KH, KW, ic_bn, oc_bn),
            lambda oc, ic, kh, kw, ib, ob: load_or_zero(weight, (oc * oc_bn + ob, ic * ic_bn + ib, kh, kw),
                                                        (0,) if CO % oc_bn else ()),
            name="kernel_vec")
    icc, icb = te.reduce_axis(CI // ic_bn, "icc"), te.reduce_axis(ic_bn, "icb")
    kh, kw = te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw")

    def in_block(oc, ic):  # the input-channel block of reduction step ic for output block oc
        return ic if g == 1 else oc // (CO // g // oc_bn) * (CI // ic_bn) + ic

    def block_sum(n, oc, oh, ow, ob, ic, axis):
        return te.sum(data_vec[n, in_block(oc, ic), oh * sh + kh * dh, ow * sw + kw * dw, icb]
                      * kernel_vec[oc, ic, kh, kw, icb, ob], axis=axis)

    shape = (N, -(-CO // oc_bn), OH, OW, oc_bn)
    if by_block:
        part = te.compute((CI // ic_bn, *shape), lambda ic, *idx: block_sum(*idx, ic, [kh, kw, icb]), name="conv_part")
        conv = te.compute(shape, lambda *idx: te.sum(part[(icc, *idx)], axis=icc), name="conv")
    else:
        conv = te.compute(shape, lambda *idx: block_sum(*idx, icc, [icc, kh, kw, icb]), name="conv")

    def finished(x, n, c, h, w):  # output element (n, c, h, w) from its sum x
        return finish(x, bias, c, a["epilogue"], residual, (n, c, h, w))

    if tile_store:
        epi = te.compute(shape, lambda n, oc, h, w, ob: finished(conv[n, oc, h, w, ob], n, oc * oc_bn + ob, h, w),
                         name="conv_epi")
        out = te.compute((N, CO, OH, OW), lambda n, c, h, w: epi[n, c // oc_bn, h, w, c % oc_bn], name="out")
    else:
        out = te.compute((N, CO, OH, OW), lambda n, c, h, w: finished(conv[n, c // oc_bn, h, w, c % oc_bn], n, c, h, w),
                         name="out")
    return data_vec, kernel_vec, conv, out


def transposed_store_fits(a: dict, oc_bn: int, target) -> bool:
    """Whether the NCHWc tiles store to NCHW by register transposes (`conv_nchwc`'s tile_store):
    float32 on AVX-512 (its masked stores write a tile's partial block of columns at once), whole
    vectors of channels per block (oc_bn a multiple of the lanes) and no zero-padded block (oc_bn
    divides CO). Otherwise each vector of a tile's channels is stored lane by lane, an extract
    and a store per output: in a stem convolution (CI = 3, a short reduction) that was a quarter
    of the call (AMD Zen 4, 2 threads, 5 interleaved rounds against the stores by lane:
    MobileNet's 3 -> 32 3×3 stride 2 at 224² 1.43×, ResNet's 3 -> 64 7×7 stride 2 1.09×,
    ResNet-50's 3×3 layers 1.00-1.015×, 512 -> 2048 1×1 at 7² with the residual 1.01×; AMD Zen
    5, 512-bit units, 7 rounds: 1.50×, 1.14×, 3×3 64@56² 1.05×, stride 2 128@56² 1.05×). AVX2's
    tiles of 3-6 columns × 8 lanes gain nothing from 8 × 8 transposes (with vmaskmovps,
    microcoded on AMD's cores, the ResNet stem ran at 0.76×; 11 columns 0.99×)."""
    return (a["dtype"] == "float32" and target.vector_bytes == 64 and a["CO"] % oc_bn == 0
            and oc_bn % target.lanes(a["dtype"]) == 0)


def compute(a: dict) -> list[te.Tensor]:
    data, weight, bias = _inputs(a)
    ib, ob = packed_blocks(a) or (1, 1)
    residual = residual_input(a)
    *_, out = conv_nchwc(a, data, weight, bias, ib, ob, residual=residual)
    return kernel_args(data, weight, bias, residual, out)


def reference(a: dict, data: np.ndarray, weight: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    blocks = packed_blocks(a)
    if blocks is not None:  # unpack [oc, ic, kh, kw, ib, ob] -> OIHW
        oc, ic, kh, kw, ib, ob = weight.shape
        weight = weight.transpose(0, 5, 1, 4, 2, 3).reshape(oc * ob, ic * ib, kh, kw)[:a["CO"]]
    g, ci, co = groups(a), a["CI"] // groups(a), a["CO"] // groups(a)
    out = np.concatenate([np_conv2d_nchw(a, data[:, i * ci:(i + 1) * ci], weight[i * co:(i + 1) * co])
                          for i in range(g)], axis=1)
    bias = rest[0] if a["bias"] else None
    return [np_finish(a, out, bias, 1, rest[-1] if a.get("residual") else None)]


def flop(a: dict) -> int:
    return conv_flop(a, a["CI"] // groups(a) * a["KH"] * a["KW"], a["CO"])


# ----------------------------------------------------------------------------- CPU template


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def define_knobs(cfg, a: dict, lanes: int, registers: int) -> None:
    """ic_bn / oc_bn (channel blocks; fixed by pre-packed weights), reg_n (output columns per
    register tile), order (reduction loop order), unroll_kw, parallel: the loops fused into the
    parallel loop — (n, oc block, row) or (n, oc block) with data and weights packed
    beforehand; "n_oc_packw": (n, oc block) with each task packing its block's weights itself,
    while they are hot in its cache (weight-heavy layers); "n_oh_packd": (n, row) with each
    task packing the input rows it reads, then computing every oc block of its output row
    (activation-heavy layers, e.g. 1×1 convolutions at high resolution). The reg_n × oc_bn
    tile fits the target's `registers` vector registers (RegisterTileFits)."""
    OH, OW = out_size(a)
    blocks = packed_blocks(a)
    if blocks is not None:
        cfg.define_knob("ic_bn", [blocks[0]])
        cfg.define_knob("oc_bn", [blocks[1]])
    elif groups(a) > 1:  # a channel block lies in one group
        cfg.define_knob("ic_bn", _divisors(a["CI"] // groups(a), 4 * lanes))
        cfg.define_knob("oc_bn", _divisors(a["CO"] // groups(a), 4 * lanes))
    else:
        cfg.define_knob("ic_bn", _divisors(a["CI"], 4 * lanes))
        cfg.define_knob("oc_bn", [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= 4 * lanes and b < 2 * a["CO"]])
    cfg.define_knob("reg_n", list(range(1, min(OW, 32) + 1)))
    cfg.define_knob("order", list(ORDERS))
    cfg.define_knob("unroll_kw", [False, True])
    cfg.define_knob("parallel", ["n_oc_oh", "n_oc", "n_oh_packd"] + (["n_oc_packw"] if blocks is None else []))
    cfg.define_knob("accumulate", list(ACCUMULATE), absent="tile")
    cfg.define_constraint(RegisterTileFits("reg_n", "oc_bn", lanes, registers))


def schedule(sch, cfg, data_vec, kernel_vec, conv, out, pack_weight: bool) -> None:
    """The NCHWc schedule (see the module docstring) on the stages of `conv_nchwc`; where out
    copies the epilogue's NCHWc stage (tile_store), that stage is a local tile computed at the
    output's column-block loop and out's tiles are stored by `tensorize_transposed_store`."""
    oc_bn, reg_n = cfg["oc_bn"].val, cfg["reg_n"].val
    so = sch[out]
    n, c, h, w = so.op.axis
    co, ci = so.split(c, factor=oc_bn)
    wo, wi = so.split(w, factor=reg_n)
    parallel = cfg["parallel"].val
    if parallel == "n_oh_packd":
        so.reorder(n, h, co, wo, wi, ci)
        par = so.fuse(n, h)
    else:
        so.reorder(n, co, h, wo, wi, ci)
        par = so.fuse(n, co, h) if parallel == "n_oc_oh" else so.fuse(n, co)
    so.parallel(par)
    epi = out.op.input_tensors()[0]
    if epi.name == "conv_epi":
        se = sch[epi]
        se.set_scope("local")
        se.compute_at(so, wo)
        *_, ew, eb = se.op.axis
        se.unroll(ew)
        se.vectorize(eb)
        tensorize_transposed_store(sch, out, epi, wi, ci)
    else:
        so.unroll(wi)
        so.vectorize(ci)

    sc = sch[conv]
    if cfg["accumulate"].val == "row":
        # conv: the row's NCHWc buffer, summing the blocks' register tiles (conv_part) block by block
        sc.compute_at(so, par if parallel == "n_oc_oh" else co if parallel == "n_oh_packd" else h)
        cn, coc, coh, cow, cob = sc.op.axis
        cwo, cwi = sc.split(cow, factor=reg_n)
        sc.reorder(cn, coc, coh, *sc.op.reduce_axis, cwo, cwi, cob)
        sc.unroll(cwi)
        sc.vectorize(cob)
        sc = sch[conv.op.input_tensors()[0]]
        sc.set_scope("local")
        sc.compute_at(sch[conv], cwo)
        _, cn, coc, coh, cow, cob = sc.op.axis
    else:
        sc.compute_at(so, wo)
        cn, coc, coh, cow, cob = sc.op.axis
    red = {ax.name: ax for ax in sc.op.reduce_axis}
    sc.reorder(cn, coc, coh, *(red[r] for r in ORDERS[cfg["order"].val] if r in red), cow, cob)
    if cfg["unroll_kw"].val:
        sc.unroll(red["kw"])
    sc.unroll(cow)
    sc.vectorize(cob)

    # [n, cc, h, w, cb]: each vector of cb gathered from ic_bn rows of data and stored whole. Storing
    # lane by lane while reading the rows (cb outside w) took 1-3% longer (AMD Zen 4, 2 threads,
    # 3×3 64@56² 1.034×, 128@28² 1.012×, 256@14² 1.007× by 7 rounds; AVX2 builds 1.021×, 1.010×).
    sd = sch[data_vec]
    dn, dc, dh, dw, db = sd.op.axis
    sd.reorder(dn, dc, dh, dw, db)
    sd.vectorize(db)
    if parallel == "n_oh_packd":
        sd.compute_at(so, par)
    else:
        sd.parallel(sd.fuse(dn, dc, dh))
    if pack_weight:
        # [oc, ic, kh, kw, ib, ob], one L1-sized block per (oc, ic): each vector of ob gathered from
        # oc_bn OIHW rows and stored whole. Reading the rows' runs of ib*KH*KW and storing lane by
        # lane took twice as long (AMD Zen 4, AVX-512, 2 threads: 512@7² 3×3 164 -> 189 GFLOP/s
        # including the packing, 256@14² 195 -> 212, 3×3 s2 256@28² 191 -> 209; AVX2 build 1.03-1.09×).
        sk = sch[kernel_vec]
        ko, ki, kh, kw, kb, kob = sk.op.axis
        sk.reorder(ko, ki, kb, kh, kw, kob)
        sk.vectorize(kob)
        if parallel == "n_oc_packw":
            sk.compute_at(so, par)
        else:
            sk.parallel(sk.fuse(ko, ki))


def is_pointwise(a: dict) -> bool:
    """An ungrouped 1×1 convolution with no padding over OIHW weights: a GEMM per image (any stride)."""
    return (a["KH"] == a["KW"] == 1 and tuple(a["padding"]) == (0, 0) and packed_blocks(a) is None
            and groups(a) == 1)


#: Convolutions with at most this many output pixels per image (and KH·KW > 1, ungrouped,
#: OIHW weights) may run as an im2col GEMM (`gemm_template`): their few output columns make
#: NCHWc register tiles of at most OW columns (7 at 7², 14 at 14²) while the weights, read
#: in place as the GEMM's A, need no packing per call. Which of the two wins depends on the
#: host, not only its ISA (512@7² 3×3, 2 threads, defaults, GEMM vs NCHWc: Xeon model 207
#: 201 vs 203 GFLOP/s; AMD Zen 4, AVX-512 on 256-bit units: 148 vs 189), so their space is
#: the union of both, switched by the knob "method" (METHODS).
IM2COL_MAX_PIXELS = 64
#: With AVX-512, a 1×1 convolution's GEMM over more than IM2COL_MAX_PIXELS and at most this many
#: output pixels (ResNet's layers at 14² and 28²) reads its input in place also where its blocks
#: do not divide the pixels (`gemm_conv_default`).
IN_PLACE_MAX_PIXELS = 28 * 28

#: The choices of the "method" knob of a convolution with at most IM2COL_MAX_PIXELS output
#: pixels: "gemm" (`gemm_template`; the knobs of matmul, what such configs meant before the
#: knob existed) or "nchwc" (the direct NCHWc schedule; its knobs prefixed "nchwc_").
METHODS = ("gemm", "nchwc")
#: The prefix of the NCHWc knobs' names in a space with a method choice.
DIRECT_PREFIX = "nchwc_"


def has_method_choice(a: dict) -> bool:
    """Whether the convolution's space is the union of the im2col GEMM and the NCHWc schedule
    (METHODS): ungrouped, KH·KW > 1 or padded, OIHW weights, at most IM2COL_MAX_PIXELS output
    pixels per image."""
    OH, OW = out_size(a)
    return (not is_pointwise(a) and packed_blocks(a) is None and groups(a) == 1
            and OH * OW <= IM2COL_MAX_PIXELS)


def gemm_template(cfg, workload, target):
    """The "gemm" method: out[n] = weight[CO, CI·KH·KW] · pixels[n][CI·KH·KW, OH·OW] (+ bias
    per row, epilogue) on the CPU GEMM schedule of `matmul` (register tiles, cache blocking,
    packed panels), over views of the NCHW / OIHW arguments with their own memory layout: the
    weights are the GEMM's A, read in place (OIHW rows are contiguous runs of CI·KH·KW), no
    packing into NCHWc and back.

    A 1×1 convolution with stride 1 and no padding reads data itself as B, [N, CI, H·W]; its
    knob `prefetch_b` (gemm.define_prefetch_b_knob) prefetches B's rows ahead of the tiles.
    Otherwise B is the pixels each output reads (im2col, Chellapilla et al. 2006): B[n, (ci,
    kh, kw), oh·OW + ow] = data[n, ci, oh·sh + kh·dh - ph, ow·sw + kw·dw - pw] (0 in the
    padding), a stage of its own whose loops run over (ci, kh, kw) and (oh, ow) — no division
    per element — and run in parallel over (n, ci); the packing of B into panels then copies
    whole vectors of it (pack_b is always on: the micro-kernel streams whole vectors of B,
    which a gathered view does not have).

    With at most IM2COL_MAX_PIXELS output pixels the knob `dot_rows` > 0 selects its dot-product form
    instead (`dot_gemm_template`)."""
    a = workload.args
    N, CI, CO, KH, KW = a["N"], a["CI"], a["CO"], a["KH"], a["KW"]
    OH, OW = out_size(a)
    gathered = is_gathered(a)
    K = CI * KH * KW
    lanes = target.lanes(a["dtype"])
    gemm.define_gemm_knobs(cfg, CO, OH * OW, K, lanes, target.vector_registers,
                           pack_b=(True,) if gathered else (True, False))
    few_pixels = OH * OW <= IM2COL_MAX_PIXELS
    if few_pixels:
        cfg.define_knob("dot_rows", dot.dot_rows_choices(K, lanes), absent=0)
    if not gathered:
        gemm.define_prefetch_b_knob(cfg, dot_rows=few_pixels)
    cfg.add_flop(flop(a))
    dt = a["dtype"]
    data = te.placeholder((N, CI, a["H"], a["W"]) if gathered else (N, CI, OH * OW), dt, "data")
    weight = te.placeholder((CO, K), dt, "weight")
    bias = te.placeholder((CO,), dt, "bias") if a["bias"] else None
    residual = residual_input(a, (N, CO, OH * OW))
    if few_pixels and cfg["dot_rows"].val:
        return dot_gemm_template(cfg, a, data, weight, bias, residual, lanes)
    pixels = data
    if gathered:
        pixels = te.compute((N, K, OH * OW), lambda n, k, q: pixel(a, data, n, k, q), name="pixels")
    ap, bp, packs = gemm.packed_panels(cfg, weight, pixels)
    prod, _ = gemm.matmul_expr(weight, pixels, None, "none", b_panel=bp, nr=cfg["nr"].val, a_panel=ap,
                               mr=cfg["mr"].val, name="out_acc" if has_epilogue(a) else "out", kc=cfg["kc"].val)
    out = prod
    if prod.name == "out_acc":
        out = te.compute((N, CO, OH * OW), lambda n, co, q: finish(prod[n, co, q], bias, co, a["epilogue"],
                                                                   residual, (n, co, q)), name="out")
    sch = create_schedule(out)
    gemm.schedule_gemm(sch, cfg, prod, out, packs, K, b_in_place=None if gathered else data)
    if gathered:
        # Packed straight from data, each element of the panels took a division and a modulo by
        # OW, KH·KW, KW and KH in a scalar loop: 18% of a 512@14² 3×3 stride-2 call. As a stage
        # of its own, 5% + 4% for its copy into panels (Intel Xeon model 85, AVX-512, 2 threads,
        # defaults by 7 rounds: that layer 1.17×, 512@7² 3×3 1.27×, 1×1 s2 256 -> 512@56² 1.34×).
        sp = sch[pixels]
        n, k, q = sp.op.axis
        ci, _, _ = split_reduction(sp, k, a)
        sp.split(q, factor=OW)
        sp.parallel(sp.fuse(n, ci))
    return sch, kernel_args(data, weight, bias, residual, out)


def is_gathered(a: dict) -> bool:
    """Whether the GEMM's pixels are a gathered stage (im2col) rather than data itself: a
    stride, a kernel larger than 1×1 or padding."""
    return tuple(a["stride"]) != (1, 1) or a["KH"] * a["KW"] > 1 or tuple(a["padding"]) != (0, 0)


def pixel(a: dict, data: te.Tensor, n, k, q) -> te.Expr:
    """The input element that output pixel q (oh·OW + ow) of image n multiplies with weight
    column k ((ci·KH + kh)·KW + kw): `tap`; data[n, k, q] where data is the [N, CI, OH·OW] view
    of an ungathered GEMM."""
    if not is_gathered(a):
        return data[n, k, q]
    KH, KW = a["KH"], a["KW"]
    return tap(a, data, n, k // (KH * KW), k // KW % KH, k % KW, q)


def tap(a: dict, data: te.Tensor, n, ci, kh, kw, q) -> te.Expr:
    """data[n, ci, oh·sh + kh·dh - ph, ow·sw + kw·dw - pw] for output pixel q = oh·OW + ow of
    image n (data NCHW [N, CI, H, W]), 0 in the padding."""
    OW = out_size(a)[1]
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    guard = tuple(d for d, p in ((2, ph), (3, pw)) if p)
    return load_or_zero(data, (n, ci, q // OW * sh + kh * dh - ph, q % OW * sw + kw * dw - pw), guard)


def split_reduction(stage, k, a: dict) -> tuple:
    """Split a stage's im2col column axis k into (ci, kh, kw) loops (no division per element)."""
    k_o, kw = stage.split(k, factor=a["KW"])
    ci, kh = stage.split(k_o, factor=a["KH"])
    return ci, kh, kw


def dot_gemm_template(cfg, a: dict, data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None,
                      residual: te.Tensor | None, lanes: int):
    """The dot-product form of the "gemm" method (`compiler.ops.dot`, knob dot_rows > 0):
    out[n, co, q] = Σ_k weight[co, k] · pixels_t[n, q, k], both operands contiguous along k =
    (ci, kh, kw) and vectorized over it, so neither is packed into panels and no lane idles: a
    GEMM vectorized over pixels pads 49 of them to 64 (4 vectors of 16), one vectorized over
    output channels packs the weights per call. pixels_t [N, OH·OW, CI·KH·KW] (the transposed
    im2col, `pixel`) is a stage of its own, run in parallel over (n, oh) with its (ow, ci, kh,
    kw) loops inside (no division per element)."""
    N, OH, OW = a["N"], *out_size(a)
    K = weight.shape[1]
    pixels_t = te.compute((N, OH * OW, K), lambda n, q, k: pixel(a, data, n, k, q), name="pixels_t")
    part, out = dot.dot_expr(weight, pixels_t, lanes,
                             lambda x, n, co, q: finish(x, bias, co, a["epilogue"], residual, (n, co, q)), "out")
    sch = create_schedule(out)
    dot.schedule_dot(sch, cfg, part, out)
    sp = sch[pixels_t]
    n, q, k = sp.op.axis
    if is_gathered(a):
        split_reduction(sp, k, a)
        q, _ = sp.split(q, factor=OW)
    sp.parallel(sp.fuse(n, q))
    return sch, kernel_args(data, weight, bias, residual, out)


#: The prefix of the panel GEMM's knobs (`panel_gemm_template`) in the space of a convolution
#: with pre-packed weights, whose NCHWc knobs keep the names they had before it had a method choice.
PANEL_PREFIX = "gemm_"
#: The third choice of the "method" knob of a convolution with OIHW weights and a method choice
#: (`has_method_choice`): the panel GEMM with the weights packed into panels on every call; its
#: knobs are prefixed PANEL_METHOD + "_". Appended after METHODS, so the configs of the other two
#: keep their indices.
PANEL_METHOD = "panel"


def has_panel_gemm(a: dict) -> bool:
    """Whether a convolution whose weights come pre-packed (OIHW<i>i<o>o) has the panel GEMM
    (`panel_gemm_template`) beside NCHWc in its space, switched by the knob "method" (absent:
    "nchwc", what its configs meant before): ungrouped, at most PREPACK_MAX_PIXELS output pixels
    per image (the layers model bundles pre-pack)."""
    OH, OW = out_size(a)
    return packed_blocks(a) is not None and groups(a) == 1 and OH * OW <= PREPACK_MAX_PIXELS


def panel_view(cfg, a: dict):
    """The branch of `cfg` that the panel GEMM's knobs are defined on and read from, or None where
    the convolution's space has no panel GEMM: "gemm" (prefixed PANEL_PREFIX) with pre-packed
    weights (`has_panel_gemm`), PANEL_METHOD with OIHW weights (`has_method_choice`)."""
    if has_panel_gemm(a):
        return cfg.branch("method", "gemm", prefix=PANEL_PREFIX)
    if has_method_choice(a):
        return cfg.branch("method", PANEL_METHOD, prefix=PANEL_METHOD + "_")
    return None


def define_panel_knobs(cfg, a: dict, target) -> None:
    """The panel GEMM's knobs: matmul's (`gemm.define_gemm_knobs`) for N·OH·OW × CO × CI·KH·KW,
    nr the pre-packed weights' block of output channels, or for OIHW weights any width with the
    weights packed into panels (all before the product, or per block of them inside the
    parallel loop: read in place they would be gathered along output channels)."""
    OH, OW = out_size(a)
    blocks = packed_blocks(a)
    gemm.define_gemm_knobs(cfg, a["N"] * OH * OW, a["CO"], a["CI"] * a["KH"] * a["KW"], target.lanes(a["dtype"]),
                           target.vector_registers, pack_b=(True, "block"),
                           b_panels=None if blocks is None else blocks[1])


def panel_gemm_template(cfg, a: dict):
    """The GEMM of the pixels × the weights, for weights pre-packed (OIHW<i>i<o>o) or packed per
    call (OIHW), in a config with `define_panel_knobs`' knobs. A pre-packed weight array,
    [ceil(CO/o), CI/i, KH, KW, i, o], is the column panels [ceil(CO/o), K, o] of a GEMM's B[K, CO]
    with k = ((icc·KH + kh)·KW + kw)·i + icb (matmul's b_layout KN<o>n), so

        res[n·OH·OW + q, co] = Σ_k pixels_t[n·OH·OW + q, k] · B[k, co] (+ bias[co], epilogue)

    runs matmul's CPU schedule (`gemm.schedule_gemm`) with B read in place; OIHW weights are
    B transposed, [CO, K] with k = (ci·KH + kh)·KW + kw (i = 1), packed into panels of nr output
    channels by register transposes (`tensorize_transposed_pack`, as dense packs W), once per
    call or per block of panels (knob pack_b). A = pixels_t, the transposed im2col in that k
    order (a stage of its own, in parallel over rows of output pixels, no division per
    element), and out[n, co, oh, ow] = res[n·OH·OW + oh·OW + ow, co]. The pixels are the tiles'
    rows and the output channels their vectors, so no lane idles on a pixel count like 49, and
    each vector of weights loaded serves mr pixels (NCHWc's tiles at 7², 2 vectors × 4 + 3
    columns with AVX2, serve 4 or 3; the im2col GEMM's vectors of 16 pixels compute 64 for 49)."""
    N, CI, CO, KH, KW, dt = a["N"], a["CI"], a["CO"], a["KH"], a["KW"], a["dtype"]
    OH, OW = out_size(a)
    blocks = packed_blocks(a)
    ib = 1 if blocks is None else blocks[0]
    Q, K, nr = OH * OW, CI * KH * KW, cfg["nr"].val
    cfg.add_flop(flop(a))
    data = te.placeholder((N, CI, a["H"], a["W"]), dt, "data")
    # a view of the OIHW<i>i<o>o array, or of the OIHW one
    weight = te.placeholder((CO, K) if blocks is None else (-(-CO // nr), K, nr), dt, "weight")
    bias = te.placeholder((CO,), dt, "bias") if a["bias"] else None
    pixels_t = te.compute((N * Q, K), lambda m, k: tap(a, data, m // Q, k // (KH * KW * ib) * ib + k % ib,
                                                       k // (KW * ib) % KH, k // ib % KW, m % Q), name="pixels_t")
    ap, bp, packs = gemm.packed_panels(cfg, pixels_t, weight, transpose_b=blocks is None)
    residual = residual_input(a)
    # with a residual, the epilogue comes after it, in the transposing stage that adds it
    prod, res = gemm.matmul_expr(pixels_t, weight, bias, "none" if residual else a["epilogue"],
                                 b_panel=weight if blocks else bp, nr=nr, a_panel=ap, mr=cfg["mr"].val, name="res",
                                 kc=cfg["kc"].val, n=CO if blocks else None, transpose_b=blocks is None)
    out = te.compute((N, CO, OH, OW), lambda n, co, h, w: finish(res[n * Q + h * OW + w, co], None, co,
                                                                 a["epilogue"] if residual else "none",
                                                                 residual, (n, co, h, w)), name="out")
    sch = create_schedule(out)
    gemm.schedule_gemm(sch, cfg, prod, res, packs, K, bp)
    if bp is not None:
        tensorize_transposed_pack(sch, bp, weight, CO, nr)
    sp = sch[pixels_t]
    m, k = sp.op.axis
    k, _ = sp.split(k, factor=ib)
    k, _ = sp.split(k, factor=KW)
    sp.split(k, factor=KH)
    rows, _ = sp.split(m, factor=OW)
    sp.parallel(rows)
    so = sch[out]
    n, co, _, _ = so.op.axis
    so.parallel(so.fuse(n, co))
    return sch, kernel_args(data, weight, bias, residual, out)


def direct_view(cfg, a: dict):
    """What the NCHWc knobs are defined on and read from: `cfg` itself (a config or a space),
    or its "nchwc" branch where the convolution has a method choice (knobs prefixed
    DIRECT_PREFIX) or a panel GEMM (knobs unprefixed)."""
    if has_method_choice(a):
        return cfg.branch("method", "nchwc", prefix=DIRECT_PREFIX)
    return cfg.branch("method", "nchwc") if has_panel_gemm(a) else cfg


def direct_template(cfg, a: dict, target):
    """The NCHWc schedule (module docstring) in a config that has `define_knobs`' knobs."""
    cfg.add_flop(flop(a))
    data, weight, bias = _inputs(a)
    residual = residual_input(a)
    oc_bn = cfg["oc_bn"].val
    data_vec, kernel_vec, conv, out = conv_nchwc(a, data, weight, bias, cfg["ic_bn"].val, oc_bn,
                                                 by_block=cfg["accumulate"].val == "row", residual=residual,
                                                 tile_store=transposed_store_fits(a, oc_bn, target))
    sch = create_schedule(out)
    schedule(sch, cfg, data_vec, kernel_vec, conv, out, pack_weight=kernel_vec is not weight)
    return sch, kernel_args(data, weight, bias, residual, out)


def cpu_template(cfg, workload, target):
    a = workload.args
    if is_pointwise(a):
        return gemm_template(cfg, workload, target)
    if has_method_choice(a):
        cfg.define_knob("method", [*METHODS, PANEL_METHOD], absent="gemm")
    elif has_panel_gemm(a):
        cfg.define_knob("method", list(METHODS), absent="nchwc")
    direct = direct_view(cfg, a)
    define_knobs(direct, a, target.lanes(a["dtype"]), target.vector_registers)
    panel = panel_view(cfg, a)
    if panel is not None:
        define_panel_knobs(panel, a, target)
    if direct is cfg or cfg["method"].val == "nchwc":
        return direct_template(direct, a, target)
    if cfg["method"].val == "gemm" and not has_panel_gemm(a):
        return gemm_template(cfg.branch("method", "gemm"), workload, target)
    return panel_gemm_template(panel, a)


#: The default's tile with 16 vector registers (AVX2, SSE), where 4 vectors of output channels are
#: a choice (or the pre-packed layout's block): AVX2_TILE_COLUMNS output columns × 4 vectors, 12
#: accumulators and a broadcast in the registers, the weight vectors read as FMA memory operands —
#: the blocking of oneDNN's AVX2 direct convolution (ur_w 3 × 4 blocks of 8 output channels) and of
#: Bolt's 3×32 AVX2 kernel. Where CO is too small for 4 vectors and OW is at least
#: NARROW_TILE_MIN_OW, two vectors × one of NARROW_TILES columns (at most 6: 12 accumulators, 2
#: weight vectors and a broadcast).
AVX2_TILE_COLUMNS = 3
#: Where AVX2_TILE_COLUMNS-column tiles put less than this fraction of the columns they compute to
#: use (7 columns in 9 at 7²), the default takes two vectors × one of NARROW_TILES columns instead.
AVX2_TILE_MIN_USE = 0.8
NARROW_TILES = (4, 5, 6)
NARROW_TILE_MIN_OW = 12

#: The default's AVX-512 tiles of two vectors of output channels need at least this many
#: output columns (a divisor of OW up to 14: 28 accumulators).
WIDE_TILE_MIN_COLUMNS = 7

#: Weights (or packed input) larger than this many bytes, about an L2, are packed by the tasks
#: that use them in the default config (parallel "n_oc_packw" / "n_oh_packd").
WEIGHT_PACK_INSIDE_BYTES = 1 << 20


def direct_default(space, a: dict, target) -> dict:
    """TVM's x86 fallback rule: channel blocks of one vector (the largest divisor of CI up to the
    vector width for ic_bn), reg_n the largest divisor of OW that keeps the reg_n × oc_bn tile in
    28 vector registers (AVX-512 has 32) or 14 (AVX2's 16 less the weight vector and the
    broadcast input; TVM takes 12, which gives OW = 14, 28, 56 tiles of 7 or 8 accumulators, too
    few to cover the FMA latency: Zen 3, one thread, 256@28² → 512 3×3 stride 2 reg_n 7 → 14,
    39 → 68 GF/s; 3×3 stride 1 at 14², 28², 56² about 69 → 75); where OW has no divisor of at
    least half that many, the width of `tile_columns` with the fewest padded columns (73 columns:
    25, not 1). On AVX2 oc_bn is four vectors and reg_n AVX2_TILE_COLUMNS (OW >= 3), or, where
    CO has no room for four and OW >= NARROW_TILE_MIN_OW, two vectors and one of NARROW_TILES
    (the least padding, then the widest): a tile of reg_n × 1 vector takes one broadcast load per
    FMA, which Zen 3's load ports cannot sustain at 2 FMAs a cycle; 2 vectors halve that (one
    thread, 128@28² 3×3 75 → 88, 256@28² → 512 stride 2 63 → 70 GF/s; at OW 7 it lost to one
    vector × 7 columns), 3 × 4 take 7 loads per 12 FMAs (AMD Zen 5 built for AVX2, 2 threads,
    3×3 layers against the 2-vector tiles, 5 rounds: 64@56² 1.10×, 128@28² 1.07×, 256@14² 1.03×,
    stride 2 128@56² 1.07×, 256@28² 1.04×; 6 × 2 vectors won at 28² and 56² but lost 4-10% at
    14²; 512@7², 9 columns computed for 7: 1.04× per call, 1.10× with pre-packed weights
    (OIHW8i32o against OIHW8i8o × 7 columns); built for SSE ("generic", 16 registers too):
    128@28² 1.21×, 256@14² 1.56×). With 32 registers (AVX-512) likewise, where
    OW has a divisor of at least WIDE_TILE_MIN_COLUMNS up to 14: two vectors × that many
    columns, input-channel blocks of half a vector (Xeon model 167, 2 threads, 3×3 layers,
    GFLOP/s: 64@56² 310 → 345, 128@28² 342 → 379, 128@56² stride 2 247 → 273, 256@14² 313 →
    354; blocks of a whole vector gave 334, 373, 254, 347). kw not unrolled; (n, oc, oh) in parallel,
    except for weights beyond WEIGHT_PACK_INSIDE_BYTES in 8 or more blocks, which each task packs
    per output-channel block ("n_oc_packw": the packed block is read from cache, not memory), and
    for 1×1 kernels whose packed input is beyond it and 4× the weights, which each task packs per
    output row ("n_oh_packd"). Built for AVX2, that 3 × 4-vector tile accumulates by rows
    (accumulate "row": the input-channel blocks outside the row's tiles, so each block's packed
    weights, 9 KB for a 3×3 kernel, are read from the L1 by every tile of the row instead of all
    of them from the L2 by each tile; MLAS's NCHWc kernels loop so) for stride 1 and where the
    tasks pack their weights: AMD Zen 3, 2 threads, against "tile", medians of 21 alternating
    timings: 64@56² 1.13×, 128@28² 1.06×, 256@14² 1.02×, 512@14² 1.06×, 64@28² 1.03×, stride 2
    256@28² 1.07×; stride 2 128@56² (weights packed beforehand) 0.96×, so it keeps "tile"; SSE
    ("generic") 0.96-1.08× and AVX-512 (not measured) keep "tile". Where 3-column tiles compute
    fewer than AVX2_TILE_MIN_USE of their columns for the output (OW 7: 9 columns for 7), 2
    vectors × NARROW_TILES columns (7 = 4 + 3), also by rows: 512@7², weights pre-packed
    (OIHW8i16o against OIHW8i32o, both by rows) 1.10×, packed per call (NCHWc method) 1.36×;
    stride 2 from 14², pre-packed, against 3 × 4 vectors by tiles: 1.11× by tiles, 1.32× by rows
    (so these accumulate by rows at any stride); at 14² (15 columns for 14) they lost (2 × 4:
    0.78-0.91×).
    """
    lanes = target.lanes(a["dtype"])
    choices = {k: knob_choices(space, k) for k in ("ic_bn", "oc_bn", "parallel")}
    ic_bn = max(b for b in choices["ic_bn"] if b <= lanes) if min(choices["ic_bn"]) <= lanes else choices["ic_bn"][0]
    oc_bn = max(b for b in choices["oc_bn"] if b <= lanes) if min(choices["oc_bn"]) <= lanes else choices["oc_bn"][0]
    regs = 28 if target.vector_bytes >= 64 else 14
    _, OW = out_size(a)
    vectors = max(1, oc_bn // lanes)
    # AVX2's 14 leave room for one weight vector; each further one takes an accumulator's register:
    # 7 columns × 2 vectors (OIHW16i16o at 7²) spilled an accumulator, 4 columns ran 1.46× faster
    # (AMD Zen 5, built for AVX2). AVX-512's 7 × 4 (OIHW16i64o) spills too but hides it behind 28
    # FMAs: 1.3-1.4× faster than 4-6 columns.
    budget = regs if regs == 28 else regs + 1 - vectors
    limit = max(1, min(32, OW, budget // vectors))
    reg_n = tile_columns(OW, limit)
    wasteful = (target.vector_bytes == 32 and OW >= AVX2_TILE_COLUMNS
                and OW < AVX2_TILE_MIN_USE * -(-OW // AVX2_TILE_COLUMNS) * AVX2_TILE_COLUMNS)
    narrow = regs == 14 and 2 * lanes in choices["oc_bn"] and (OW >= NARROW_TILE_MIN_OW or wasteful)
    if regs == 14 and 4 * lanes in choices["oc_bn"] and OW >= AVX2_TILE_COLUMNS and not (wasteful and narrow):
        oc_bn, reg_n = 4 * lanes, AVX2_TILE_COLUMNS
    elif narrow:
        oc_bn, reg_n = 2 * lanes, min(NARROW_TILES, key=lambda r: (tile_overhang(OW, r), -r))
    wide_n = max(d for d in range(1, min(OW, regs // 2) + 1) if OW % d == 0)
    if regs == 28 and 2 * lanes in choices["oc_bn"] and wide_n >= WIDE_TILE_MIN_COLUMNS:
        oc_bn, reg_n = 2 * lanes, wide_n
        ic_bn = max([b for b in choices["ic_bn"] if b <= lanes // 2] or [ic_bn])
    OH = out_size(a)[0]
    item = 4 if a["dtype"] == "float32" else 8
    weight_bytes = a["CO"] * a["CI"] // groups(a) * a["KH"] * a["KW"] * item
    input_bytes = a["N"] * a["CI"] * OH * OW * item
    if ("n_oc_packw" in choices["parallel"] and weight_bytes > WEIGHT_PACK_INSIDE_BYTES
            and -(-a["CO"] // oc_bn) >= 8):
        parallel = "n_oc_packw"
    elif a["KH"] == a["KW"] == 1 and input_bytes > max(WEIGHT_PACK_INSIDE_BYTES, 4 * weight_bytes):
        parallel = "n_oh_packd"
    else:
        parallel = "n_oc_oh"
    # AVX2's tiles stream 4 (2) vectors of weights per 3 (4) broadcasts: summing one block of input
    # channels at a time keeps the block's weights in the L1 for the row (see the docstring)
    four = target.vector_bytes == 32 and (oc_bn, reg_n) == (4 * lanes, AVX2_TILE_COLUMNS)
    by_row = wasteful and (narrow or four) or four and (tuple(a["stride"]) == (1, 1) or parallel == "n_oc_packw")
    return {"ic_bn": ic_bn, "oc_bn": oc_bn, "reg_n": reg_n, "order": "ic_kh_kw_icb", "unroll_kw": False,
            "parallel": parallel, "accumulate": "row" if by_row else "tile"}


def default_config(space, workload, target) -> list[dict]:
    """The default (`direct_default`, or `gemm_conv_default` for a GEMM); for a space with a
    method choice every method's default (the search measures them first): with pre-packed
    weights the panel GEMM's and NCHWc's, `panel_gemm_first` deciding which comes first; with
    OIHW weights the im2col GEMM's (where `dot_conv_default` applies, its dot products first,
    the GEMM's tiles second; at 1×1 the other way round where the dot products' rows of weights
    overflow the L1: `dot_weights_stay_in_l1`), NCHWc's and the panel GEMM's, which comes first with vectors of
    at least 32 bytes (AVX2, AVX-512): packing the weights per call into panels of 2 vectors
    costs less than the lanes the other two leave idle at 7² (AMD Zen 5, 2 threads, medians of
    11 alternating timings against the best of the others' defaults: 512@7² 3×3 1.10×, its
    stride-2 layer from 14² 1.20×, 512@7² built for AVX2 1.10×) — except where the pixels of an
    image fill the GEMM's panels of pixels (8²: 64 in 2 vectors of 32 or 4 of 16), which leave
    no lane idle: there the GEMM's tiles come first (Intel Xeon model 167, 2 threads, medians of
    7 alternating timings against the panel GEMM's default: Inception-v3's 448 -> 384 3×3 at 8²
    1.18×, 384 -> 384 1×3 1.16×; built for AVX2 1.11× and 1.12×)."""
    a = workload.args
    panel = panel_view(space, a)
    if panel is not None:
        panel_config = {"method": PANEL_METHOD if has_method_choice(a) else "gemm",
                        **{panel.prefix + k: v for k, v in panel_gemm_default(panel, a, target).items()}}
    if has_panel_gemm(a):
        nchwc = {"method": "nchwc", **direct_default(space, a, target)}
        return [panel_config, nchwc] if panel_gemm_first(a, target) else [nchwc, panel_config]
    if not is_pointwise(a) and not has_method_choice(a):
        return [direct_default(space, a, target)]
    lanes = target.lanes(a["dtype"])
    gemms = [gemm_conv_default(space, a, lanes, target.vector_bytes, target.vector_registers)]
    if (dot := dot_conv_default(space, a, lanes, target.vector_bytes)) is not None:
        dot = {**gemms[0], **dot}
        if is_pointwise(a) and not dot_weights_stay_in_l1(a, dot):
            return [gemms[0], dot]
        gemms.insert(0, dot)
    if is_pointwise(a):
        return gemms
    direct = direct_default(direct_view(space, a), a, target)
    nchwc = {"method": "nchwc", **{DIRECT_PREFIX + k: v for k, v in direct.items()}}
    *dots, tiles = [{"method": "gemm", **g} for g in gemms]
    if target.vector_bytes < 32:
        return [*dots, tiles, nchwc, panel_config]
    OH, OW = out_size(a)
    if OH * OW % tiles["nr"] == 0:  # the pixels fill the GEMM's panels
        return [tiles, panel_config, *dots, nchwc]
    return [panel_config, *dots, tiles, nchwc]


def panel_gemm_default(space, a: dict, target) -> dict:
    """The default of `panel_gemm_template` (`space` its branch): matmul's rule
    (`gemm.gemm_default`) for N·OH·OW × CO × CI·KH·KW, with B the pre-packed panels read in
    place, or OIHW weights packed per call into panels of 2 vectors (as model bundles pre-pack
    them for AVX2: 4 vectors × 6 rows compute 54 rows for 49 pixels; AMD Zen 5, AVX-512, 2
    threads, 512@7² 3×3, 7 rows × 2 vectors 1.11× over 5 rows × 4 vectors), each panel packed
    by the thread whose blocks of one panel (bn = 1, threads splitting the panels: parallel
    "outer") read it next, from the L2, instead of one pass writing all the packed weights to
    memory before the tiles read them back (Intel Xeon model 167, AVX-512, 2 MiB L2, 2 threads,
    medians of 7 alternating timings: 512@7² 3×3 1.35×, its stride-2 layer from 14² 1.33×,
    256@7² 1.31×, 448 → 384 at 8² 1.30×; built for AVX2, 512@7² 1.19×); rows per tile
    from the rule's down to half of them, the fewest rows computed beyond the pixels
    (`gemm.least_padding_width`: 49 pixels in tiles of 5 rows compute 50, of 6 rows 54; with 32
    registers 7 rows compute 49) and that tile's unroll (`gemm.tile_unroll`; built for AVX2 on an
    Intel Xeon, 512@7² 3×3, 5 rows by 4 against by 2, medians of 9 rounds: 1.01×); where the
    weights outnumber the pixels (CO > N·OH·OW), one block of rows holding every row tile (bm),
    so each panel of weights is read from memory once per call, then from the L2 by each row
    tile, the blocks of panels running in parallel (the rule's blocks of 2 row tiles read every
    panel 5 times at 7²: AMD Zen 3, AVX2, 2 threads, 512@7² 3×3 1.35×)."""
    OH, OW = out_size(a)
    M, lanes, item = a["N"] * OH * OW, target.lanes(a["dtype"]), 4 if a["dtype"] == "float32" else 8
    config = gemm.gemm_default(space, M, a["CO"], a["CI"] * a["KH"] * a["KW"], lanes, item,
                               registers=target.vector_registers)
    per_call = packed_blocks(a) is None
    config["pack_b"] = per_call
    if per_call and 2 * lanes in knob_choices(space, "nr"):
        nr = 2 * lanes
        config.update(nr=nr, mr=gemm.tile_rows(knob_choices(space, "mr"), nr, lanes, item), bn=1, parallel="outer",
                      pack_b="block")
    rows = [m for m in knob_choices(space, "mr") if config["mr"] // 2 < m <= config["mr"]]
    config["mr"] = gemm.least_padding_width(M, rows, config["mr"])
    config["ku"] = gemm.tile_unroll(config["mr"], config["nr"], lanes, item, target.vector_registers)
    if a["CO"] > M:
        tiles = -(-M // config["mr"])
        config["bm"] = min((b for b in knob_choices(space, "bm") if b >= tiles), default=max(knob_choices(space, "bm")))
    return config


def panel_gemm_first(a: dict, target) -> bool:
    """Whether the panel GEMM, not NCHWc, is the first default of a convolution that has both
    (`has_panel_gemm`): on AVX2 with blocks of 2 vectors of output channels (OIHW<i>i16o), whose
    tiles of 5-6 rows of pixels × 2 vectors load each vector of weights for 5-6 pixels, where
    NCHWc's 16 registers hold 2 vectors × 4-5 columns (a row's width bounds its tiles). AMD Zen 3,
    2 threads, medians of 11 alternating timings against NCHWc's default: 512@7² 3×3 1.13×,
    stride 2 from 14² 1.26×, 256@14² 1.15-1.17× (against OIHW8i32o's 3 × 4-vector tiles), stride
    2 256@28² 1.23×; with OIHW8i32o the GEMM's 3 rows × 4 vectors lost at 14² (0.6×). Built for
    SSE ("generic": 3 rows × 4 vectors) it lost (0.92×); AVX-512's NCHWc default reaches about
    95% of the FMA peak at 7² (AMD Zen 5, OIHW16i32o)."""
    return target.vector_bytes == 32 and packed_blocks(a)[1] == 2 * target.lanes(a["dtype"])


def tile_columns(OW: int, limit: int) -> int:
    """Output columns per register tile of at most `limit` (>= 1) columns: the largest divisor of
    OW up to `limit`, unless that is below half of it (OW prime or twice a prime beyond the
    registers, e.g. Inception-v3's 73, 71 and 149 output columns with 28 AVX-512 accumulators: a
    divisor rule gives 1 or 2 columns, so every FMA waits on the one before); then the width from
    limit // 2 to limit with the fewest padded columns, the widest of those (73 columns, limit
    28: 25, 3 tiles)."""
    widths = range(max(1, limit // 2), limit + 1)
    divisor = max(d for d in range(1, limit + 1) if OW % d == 0)
    if divisor >= widths.start:
        return divisor
    return min(widths, key=lambda r: (tile_overhang(OW, r), -r))


def gemm_conv_default(space, a: dict, lanes: int, vector_bytes: int, registers: int) -> dict:
    """The default of `gemm_template`: matmul's rule (`gemm.gemm_default`) for CO × OH·OW ×
    CI·KH·KW, B packed where its choices demand it. With at most IM2COL_MAX_PIXELS output
    pixels (ResNet's 7² layers), tiles of 2 vectors of pixels (12 rows of weights with 32
    vector registers, 6 with 16) in blocks of one tile each: matmul's rule takes the widest
    tile that fits the pixels, which leaves most of its second panel empty (49 pixels: 48 + 1),
    and blocks of several rows of weights, which are long (CI·KH·KW) and read from memory.
    Xeon model 167, 2 threads, 512@7² 3×3: 148 -> 230-256 GFLOP/s (NCHWc's default 178); 1×1
    2048 -> 512 at 7²: 175 -> 279; the same 3×3 built for AVX2: 101 -> 157 (NCHWc 138).

    A 1×1 convolution that reads data itself as B (`is_gathered` false) reads it in place
    where the blocks of bn·nr columns divide OH·OW (56², 112² with panels of 4 vectors: no
    tile guards its lanes): B is the layer's input, used by only CO rows of weights, so
    packing it costs a pass over the largest operand for little reuse. AMD Zen 5, 2 threads,
    ResNet-50's 1×1 layers at 56² (64 -> 64, 256 -> 64, 256 -> 128, 64 -> 256), against
    packing: 1.04-1.18× timed in a loop, 1.01-1.19× called once after the caches were
    evicted and the input rewritten (as in a model run); built for AVX2 1.02-1.08× and
    1.02-1.20×, its layers at 28² (tiles of 16 columns divide 784) 1.00-1.05× and 0.99-1.10×;
    for SSE 0.98-1.04× and 1.03-1.11×. Where the edge block is partial, B in place was 8-13×
    slower (AVX-512 at 28² and 14²) until partition_tails split off the tile at N's edge; since
    then, AMD Zen 4, 5 rounds, ResNet-50's 1×1 layers at 14² and 28²: 0.94-1.11× built for
    AVX-512, 0.80-0.88× for AVX2, so B stays packed there with AVX2. With AVX-512 (32 vector
    registers) and more than IM2COL_MAX_PIXELS but at most IN_PLACE_MAX_PIXELS output pixels,
    B is read in place there too, by tiles of 6 rows, the blocks of M outermost (order mn_nm:
    each thread reads its half of the weights, which outweigh the pixels): with K = 1024 the
    12 rows of a 12 × 2-vector tile, 4 KiB apart, fall in one set of a 32 KiB 8-way L1. AMD
    Zen 4, 2 threads, 5 rounds, against the former default: 1024 -> 256 at 14² 1.32×, 1024 ->
    512 1.20×, 256 -> 1024 1.08×; at 28² 512 -> 128 1.06×, 128 -> 512 1.10×, 512 -> 256 1.07×
    (216-220 GFLOP/s, 93% of the peak); B in place alone 1.01-1.11×, with the 6-row tiles but
    the blocks of N outermost 1.08-1.23× at K = 1024; the blocks of M outermost at 56² 0.88×
    (the pixels outweigh the weights there), and with AVX2 0.89-0.98×, so neither takes them.
    With AVX-512 those 6-row tiles are 4 vectors wide (24 accumulators): matmul's rule narrows
    the tile where it pads fewer columns (196 pixels: 2 vectors), which B read in place does not
    pad (its last tile is partial). AMD Zen 5, 2 threads, 7 rounds, 6 × 4 vectors against 6 × 2
    at 14², timed in a loop / called once after the caches were flushed: 1024 -> 256 1.08× /
    1.12×, 1024 -> 512 1.12× / 1.05×, 256 -> 1024 1.01× / 1.00×, with the residual 1.02× /
    1.12×; MobileNet's 512 -> 512 1.08× / 1.04×, 256 -> 512 1.04× / 1.01×; in ResNet-50's model
    order (bench/model_cpu.py's chained runs, 7 rounds) 1024 -> 256 1.11×, 1024 -> 512 1.13×. AMD
    Zen 4 (256-bit units), 7 rounds, same order of columns: 1.015× / 1.02×, 1.01× / 1.01×, 1.01×
    / 1.03×, 512 -> 512 1.00×: level there, both at 94% of the FMA peak in a loop."""
    OH, OW = out_size(a)
    config = gemm.gemm_default(space, a["CO"], OH * OW, a["CI"] * a["KH"] * a["KW"], lanes,
                               4 if a["dtype"] == "float32" else 8, registers=registers)
    pack_b = knob_choices(space, "pack_b")
    if False in pack_b and OH * OW % (config["nr"] * config["bn"]) == 0:
        config["pack_b"] = False
    elif False in pack_b and registers >= 32 and IM2COL_MAX_PIXELS < OH * OW <= IN_PLACE_MAX_PIXELS \
            and 6 in knob_choices(space, "mr"):
        nr = 4 * lanes if vector_bytes >= 64 and 4 * lanes in knob_choices(space, "nr") else config["nr"]
        config.update(pack_b=False, mr=6, nr=nr, order="mn_nm",
                      bn=gemm.pick_at_most(knob_choices(space, "bn"), config["bn"] * config["nr"] // nr),
                      ku=gemm.tile_unroll(6, nr, lanes, vector_bytes // lanes, registers))
    elif config["pack_b"] not in pack_b:
        config["pack_b"] = True
    rows = 12 if vector_bytes >= 64 else 6
    if OH * OW <= IM2COL_MAX_PIXELS and 2 * lanes in knob_choices(space, "nr") and rows in knob_choices(space, "mr"):
        config.update(nr=2 * lanes, mr=rows, bm=1, bn=1, parallel="fused", pack_b=True,
                      ku=gemm.tile_unroll(rows, 2 * lanes, lanes, vector_bytes // lanes, registers))
    return config


#: The dot products (`dot_gemm_template`) are the default of a GEMM over at most
#: IM2COL_MAX_PIXELS pixels where CI·KH·KW holds at least this many vectors: each register tile
#: ends in a horizontal sum per accumulator, which a shorter reduction does not amortize (AMD
#: Zen 4, AVX-512, 2 threads, 1×1 convolutions at 7² against the GEMM's default, 5 rounds: CI
#: 512 = 32 vectors 1.11×, 256 1.21×, 128 0.89×).
DOT_MIN_K_VECTORS = 16
#: Rows of pixels per register tile of the default dot products (with 24 // DOT_ROWS rows of weights).
DOT_ROWS = 4


def dot_weights_stay_in_l1(a: dict, dot: dict) -> bool:
    """Whether the rows of weights one tile of the dot products `dot` (knobs, `mr` rows of
    CI·KH·KW elements of a["dtype"]) reads fit L1D_BYTES (the smallest L1d of the fleet), so
    they stay in the L1 while the tile moves over the pixels. Where they do not, a 1×1
    convolution's default is the GEMM's tiles and its dot products come second: 2048 -> 512 at
    7² (6 rows × 2048 × 4 bytes = 48 KiB), 2 threads, the GEMM's tiles against the dot
    products: AMD Zen 5 1.21× (9 rounds; 512 -> 2048 at 7², 24 KiB, 0.87×, and 1024 -> 2048
    stride 2 from 14², 24 KiB, 0.88×, keep the dot products first), Intel Xeon model 167
    1.23-1.32×, model 207 1.41×; only the AMD Zen 4 (AVX-512 on 256-bit units, where the GEMM's
    49 pixels in 4 vectors cost most) measured the dot products ahead there (1.19-1.23×), which
    the search's second trial finds."""
    return dot["mr"] * a["CI"] * a["KH"] * a["KW"] * te.dtype_of(a["dtype"]).bytes <= L1D_BYTES


def dot_conv_default(space, a: dict, lanes: int, vector_bytes: int) -> dict | None:
    """The default dot products of `dot_gemm_template`, or None where the GEMM's tiles stay the
    default: more than IM2COL_MAX_PIXELS output pixels, fewer than 32 vector registers (AVX2's
    16 hold 3 × 4 accumulators, whose operands then come from L2 faster than its bandwidth:
    Zen 4 built for AVX2, 512@7² 3×3, 150 GFLOP/s against the GEMM's 162), or a reduction
    shorter than DOT_MIN_K_VECTORS vectors. Tiles of DOT_ROWS rows of pixels × 6 rows of
    weights (24 accumulators; fewer where CO is smaller), one block of tiles covering all the pixels of an image (bn), so
    each row of weights — the large operand, 9.4 MB at 512@7² 3×3 — is read once per call
    while the pixels stay in L2 (blocks of 4 or 8 of its 13 tiles: 113 GFLOP/s instead of
    193). AMD Zen 4 (AVX-512 on 256-bit units), 2 threads, against the GEMM's default (49
    pixels in 4 vectors of 16: at most 77% of the FMA peak): 512@7² 3×3 1.15-1.18×, its
    stride-2 layer from 14² 1.20×, 1×1 2048 -> 512 at 7² 1.09× (1.19-1.23× once the horizontal
    sums took a shuffle tree: `tf_hsum_*`), 1×1 stride 2 1024 -> 2048 1.19×. On an Intel Xeon
    (model 207; model 167 alike) the GEMM's tiles win instead, 1×1 at 7², 5 rounds: CI 2048 1.41×,
    512 1.21×, 256 1.42× — the horizontal sums at a short reduction, and at CI 2048 the tile's 6
    rows of weights (48 KB) leaving the L1 between pixel tiles (hand-edited C: K blocks of 512
    1.15× the default, with the transposed pixels' rows also padded off their 8 KiB stride, which
    put all 10 operand streams in one L1 set, 1.37×: still 0.89× the GEMM's tiles). The ISA does
    not tell the two hosts apart; a search measures both forms first (`default_config` lists both).
    Since the horizontal sums of a tile's 4 pixels are taken together and its bias and relu run
    on vectors (`dot.schedule_dot`), on an AMD Zen 5 (AVX-512 on 512-bit units, 2 threads, 5-7
    rounds; before -> after against the GEMM's tiles, the default's own gain): CI 256 0.88 ->
    1.10× (1.24×), 512 1.00 -> 1.14× (1.13×), stride 2 1024 -> 2048 1.07-1.10 -> 1.18× (1.08×),
    2048 0.91 -> 0.95× (1.02×: the L1 misses above); a generated-code version of the K blocks
    (a buffer of partial sums per block of tiles, `kc`) measured 0.81-0.88× the default there,
    GCC spilling its 24 accumulators. An Intel Xeon (model 167) since, 7 rounds, the GEMM's
    tiles against the default (was 1.41× / 1.21× / 1.42× on the Xeons): CI 256 1.01×, 512 0.98×,
    stride 2 1024 -> 2048 1.03×, 2048 1.23-1.24× — the dot products now level except at the
    longest reduction, where other tiles (8 pixels × 3 or 2 rows of weights, whose rows stay in
    the L1; 2 × 12) measured 0.80-0.86× and 0.40× the default: a host-dependent choice at CI
    2048 (the GEMM's tiles 1.05× on Zen 5 and 1.23× on the Xeon model 167; the dot products ahead
    on Zen 4), which the search's first two trials make; since re-timed on Zen 5 at 1.21×, so
    the GEMM's tiles come first there (`dot_weights_stay_in_l1`)."""
    OH, OW = out_size(a)
    if (vector_bytes < 64 or OH * OW > IM2COL_MAX_PIXELS or a["CI"] * a["KH"] * a["KW"] < DOT_MIN_K_VECTORS * lanes
            or DOT_ROWS not in knob_choices(space, "dot_rows")):
        return None
    tiles = -(-OH * OW // DOT_ROWS)
    return {"dot_rows": DOT_ROWS, "mr": max(m for m in knob_choices(space, "mr") if m <= 24 // DOT_ROWS), "bm": 1,
            "order": "nm_nm", "parallel": "fused",
            "bn": min((b for b in knob_choices(space, "bn") if b >= tiles), default=max(knob_choices(space, "bn")))}


#: A convolution with at most this many output pixels whose weights are constants of a model
#: takes them pre-packed in the model's bundle (`prepacked_layout`): per call, packing OIHW
#: weights costs about one load and store per weight against OH·OW multiply-adds (about 15%
#: of a 7² 3×3 layer, 3-8% at 14²: AMD Zen 4, AVX-512, 512@7² 148 GFLOP/s as an im2col GEMM,
#: 189 packing per call, 225 pre-packed), while the blocks it fixes are no longer tuned.
PREPACK_MAX_PIXELS = 14 * 14


def prepacked_layout(workload: Workload, target) -> str | None:
    """The OIHW<i>i<o>o layout (`weight_layout`) that a model bundle pre-packs the constant
    weights of `workload` (conv2d_nchw, OIHW weights) to for `target`: built for AVX2, blocks of a
    vector of input channels and 2 vectors of output channels, the panels of the panel GEMM's
    default tile (`panel_gemm_first`); otherwise the channel blocks of the NCHWc default
    (`direct_default`). A 1×1 GEMM (is_pointwise) is pre-packed only with at most
    IM2COL_MAX_PIXELS output pixels and vectors of at least 32 bytes, where its per-call GEMM
    leaves lanes idle or packs the weights on every call (AMD Zen 3, AVX2, 2 threads, the panel
    GEMM against the 1×1 GEMM over OIHW weights, medians of 21 alternating timings: 2048 -> 512
    at 7² 1.24×, 512 -> 2048 1.05×, stride 2 1024 -> 2048 from 14² 1.10×, 1024 -> 256 at 14²
    0.93×; AMD Zen 5, AVX-512, NCHWc over OIHW8i32o against the best per-call default, 11
    timings: 2048 -> 512 1.25×, 512 -> 2048 1.23×, the stride-2 one 1.17×, at 14² 1024 -> 256
    1.09×, 256 -> 1024 0.99×). None where the weights are better read in place or packed per
    call: another 1×1 GEMM, a grouped convolution, more than PREPACK_MAX_PIXELS output pixels
    per image, or weights already pre-packed."""
    a = workload.args
    OH, OW = out_size(a)
    if groups(a) > 1 or packed_blocks(a) is not None or OH * OW > PREPACK_MAX_PIXELS:
        return None
    if is_pointwise(a) and (OH * OW > IM2COL_MAX_PIXELS or target.vector_bytes < 32):
        return None
    lanes = target.lanes(a["dtype"])
    panels = f"OIHW{max(_divisors(a['CI'], lanes))}i{2 * lanes}o"
    if panel_gemm_first({**a, "weight_layout": panels}, target):
        return panels
    space = ConfigSpace()
    define_knobs(space, a, lanes, target.vector_registers)
    direct = direct_default(space, a, target)
    return f"OIHW{direct['ic_bn']}i{direct['oc_bn']}o"


def pack_weight(weight: np.ndarray, layout: str) -> np.ndarray:
    """OIHW weights [CO, CI, KH, KW] → `layout` (OIHW<i>i<o>o, `pack_weight_np`); ValueError for
    another layout."""
    blocks = packed_blocks({"weight_layout": layout})
    if blocks is None:
        raise ValueError(f"{layout!r} is not OIHW<i>i<o>o")
    return pack_weight_np(weight, *blocks)


def pack_weight_c(symbol: str, workload: Workload) -> str:
    """C source of ``static inline void <symbol>_pack_weight(const T *oihw, T *packed)`` for a
    header: it packs OIHW weights [CO, CI, KH, KW] into the pre-packed `weight_layout` of
    `workload` (what `pack_weight_np` does), so a C or C++ caller packs a constant weight once.
    T is the workload's C type (float / double)."""
    a = workload.args
    ib, ob = packed_blocks(a)
    CO, CI, KH, KW = a["CO"], a["CI"], a["KH"], a["KW"]
    t = "float" if a["dtype"] == "float32" else "double"
    oc = -(-CO // ob)
    return "\n".join([
        f"/* Packs OIHW weights [{CO}, {CI}, {KH}, {KW}] into {symbol}'s weight argument, {a['weight_layout']}",
        f" * [{oc}, {CI // ib}, {KH}, {KW}, {ib}, {ob}] (output channels zero-padded): call it once per weight. */",
        f"static inline void {symbol}_pack_weight(const {t} *oihw, {t} *packed) {{",
        f"  for (long o = 0; o < {oc}; ++o) for (long i = 0; i < {CI // ib}; ++i)",
        f"    for (long h = 0; h < {KH}; ++h) for (long w = 0; w < {KW}; ++w)",
        f"      for (long ib = 0; ib < {ib}; ++ib) for (long ob = 0; ob < {ob}; ++ob) {{",
        f"        long co = o * {ob} + ob, ci = i * {ib} + ib;",
        f"        *packed++ = co < {CO} ? oihw[((co * {CI} + ci) * {KH} + h) * {KW} + w] : ({t})0;",
        "      }",
        "}",
        "",
    ])


def _layouts(a: dict) -> dict[str, str]:
    blocks = packed_blocks(a)
    weight = (f"OIHW [CO, CI{'/groups' if groups(a) > 1 else ''}, KH, KW]" if blocks is None else
              f"{a['weight_layout']} [ceil(CO/{blocks[1]}), CI/{blocks[0]}, KH, KW, {blocks[0]}, {blocks[1]}], "
              f"output channels zero-padded")
    return {"data": "NCHW [N, CI, H, W]", "weight": weight, "bias": "[CO]", "residual": "NCHW [N, CO, OH, OW]",
            "out": "NCHW [N, CO, OH, OW]"}


register(OpDef(
    name="conv2d_nchw",
    description="2-D convolution, NCHW data and OIHW weights, optional bias[CO], residual sum and relu/gelu epilogue",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    default_config=default_config, check=check, layouts=_layouts, family="conv2d",
))
