"""Pieces shared by the 2-D convolution operators: argument schema, validation, output
size, FLOP count, zero-padded reads and the numpy references.

Conventions (those of TVM's `topi.nn.conv2d` and PyTorch's `conv2d`): `stride`, `padding`
and `dilation` are per-dimension pairs `[h, w]` (an int means the same for both);
padding is symmetric (`padding[0]` rows above and below, `padding[1]` columns left and
right); the output is `OH = (H + 2*ph - ((KH-1)*dh + 1)) // sh + 1` (same for W).
"""

from __future__ import annotations

import numpy as np

from .. import te
from .common import EPILOGUES, apply_epilogue, np_epilogue
from .registry import ArgDef, WorkloadError

MAX_DIM = 1 << 16
MAX_KERNEL = 64


def conv_args(*, channels: bool = True) -> list[ArgDef]:
    """The shape arguments of a 2-D convolution (`channels=False` for depthwise, which has C only)
    followed by stride/padding/dilation, bias, epilogue and dtype."""
    shape = [ArgDef("N", "int", 1, 1, MAX_DIM, description="batch size")]
    if channels:
        shape += [ArgDef("CI", "int", 64, 1, MAX_DIM, description="input channels"),
                  ArgDef("CO", "int", 64, 1, MAX_DIM, description="output channels")]
    else:
        shape += [ArgDef("C", "int", 32, 1, MAX_DIM, description="channels (input = output)")]
    return shape + [
        ArgDef("H", "int", 56, 1, MAX_DIM, description="input height"),
        ArgDef("W", "int", 56, 1, MAX_DIM, description="input width"),
        ArgDef("KH", "int", 3, 1, MAX_KERNEL, description="kernel height"),
        ArgDef("KW", "int", 3, 1, MAX_KERNEL, description="kernel width"),
        ArgDef("stride", "int2", [1, 1], 1, MAX_KERNEL, description="[sh, sw] (or one int for both)"),
        ArgDef("padding", "int2", [0, 0], 0, MAX_KERNEL,
               description="[ph, pw] zeros on each side (or one int for both)"),
        ArgDef("dilation", "int2", [1, 1], 1, MAX_KERNEL, description="[dh, dw] (or one int for both)"),
        ArgDef("bias", "bool", False, description="add bias[CO] per output channel"),
        ArgDef("epilogue", "str", "none", choices=EPILOGUES, description="activation applied last"),
        ArgDef("dtype", "str", "float32", choices=("float32", "float64")),
    ]


def out_size(a: dict) -> tuple[int, int]:
    """(OH, OW) of a convolution with arguments `a` (may be < 1 before `check_conv`)."""
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    oh = (a["H"] + 2 * ph - ((a["KH"] - 1) * dh + 1)) // sh + 1
    ow = (a["W"] + 2 * pw - ((a["KW"] - 1) * dw + 1)) // sw + 1
    return oh, ow


def tile_overhang(extent: int, tile: int) -> int:
    """Elements a loop of `extent` split by `tile` computes beyond its end (its last tile's
    overhang: computed, never stored)."""
    return -(-extent // tile) * tile - extent


def check_conv(a: dict) -> None:
    """WorkloadError naming KH or KW when the dilated kernel is larger than the padded input."""
    for k, size, d, p, dim in (("KH", "H", 0, 0, "height"), ("KW", "W", 1, 1, "width")):
        extent = (a[k] - 1) * a["dilation"][d] + 1
        padded = a[size] + 2 * a["padding"][p]
        if extent > padded:
            raise WorkloadError(k, f"dilated kernel {dim} {extent} is larger than the padded input {dim} {padded} "
                                   f"({size}={a[size]} + 2*padding)")


def conv_flop(a: dict, reduction: int, out_channels: int) -> int:
    """2 FLOPs per multiply-add: 2 * N * out_channels * OH * OW * reduction."""
    oh, ow = out_size(a)
    return 2 * a["N"] * out_channels * oh * ow * reduction


def load_or_zero(t: te.Tensor, indices: tuple, guard_dims: tuple[int, ...]) -> te.Expr:
    """`t[indices]`, or 0 where an index in `guard_dims` falls outside the tensor.

    The load itself uses indices clamped into range (both branches of a select may be
    evaluated, so the load must stay in bounds).
    """
    conds, clamped = [], list(indices)
    for d in guard_dims:
        i = indices[d]
        conds += [i >= 0, i < t.shape[d]]
        clamped[d] = te.max(te.min(i, t.shape[d] - 1), 0)
    if not conds:
        return t[tuple(indices)]
    return te.if_then_else(te.all_of(*conds), t[tuple(clamped)], te.const(0.0, t.dtype))


def finish(x: te.Expr, bias: te.Tensor | None, c, epilogue: str, residual: te.Tensor | None = None,
           at: tuple = ()) -> te.Expr:
    """`x + bias[c]` (when there is a bias) `+ residual[at]` (when there is a residual, `at`
    the output element's indices in its view) with the epilogue applied."""
    if bias is not None:
        x = x + bias[c]
    if residual is not None:
        x = x + residual[at]
    return apply_epilogue(x, epilogue)


def residual_input(a: dict, shape: tuple[int, ...] | None = None) -> te.Tensor | None:
    """The residual argument of a workload that has one (None otherwise), in `shape`: the view of
    the output its template computes in (default NCHW [N, CO, OH, OW]; [N, CO, OH·OW] is the same
    memory)."""
    if not a.get("residual"):
        return None
    return te.placeholder(shape or (a["N"], a["CO"], *out_size(a)), a["dtype"], "residual")


def has_epilogue(a: dict) -> bool:
    """Whether the output is more than the bare sum: a bias, a residual or an activation."""
    return a["bias"] or a.get("residual", False) or a["epilogue"] != "none"


# ----------------------------------------------------------------------------- numpy references


def _padded_windows(a: dict, data: np.ndarray, h_axis: int):
    """Yield (kh, kw, view) for each kernel tap: view = the pixels of the zero-padded input
    (float64) that tap (kh, kw) meets over all output positions, i.e.
    padded[..., kh*dh + sh*oh, kw*dw + sw*ow, ...] (H at `h_axis`, W next)."""
    oh, ow = out_size(a)
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    pads = [(0, 0)] * data.ndim
    pads[h_axis], pads[h_axis + 1] = (ph, ph), (pw, pw)
    xp = np.pad(data.astype(np.float64), pads)
    for kh in range(a["KH"]):
        for kw in range(a["KW"]):
            idx = [slice(None)] * xp.ndim
            idx[h_axis] = slice(kh * dh, kh * dh + sh * (oh - 1) + 1, sh)
            idx[h_axis + 1] = slice(kw * dw, kw * dw + sw * (ow - 1) + 1, sw)
            yield kh, kw, xp[tuple(idx)]


def np_conv2d_nchw(a: dict, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Reference NCHW × OIHW convolution in float64: out[N, CO, OH, OW]."""
    w = weight.astype(np.float64)
    return sum(np.einsum("nchw,oc->nohw", view, w[:, :, kh, kw], optimize=True)
               for kh, kw, view in _padded_windows(a, data, 2))


def np_conv2d_nhwc(a: dict, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Reference NHWC × HWIO convolution in float64: out[N, OH, OW, CO]."""
    w = weight.astype(np.float64)
    return sum(view @ w[kh, kw] for kh, kw, view in _padded_windows(a, data, 1))


def np_depthwise_nchw(a: dict, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Reference depthwise NCHW convolution (weight [C, 1, KH, KW]) in float64: out[N, C, OH, OW]."""
    w = weight.astype(np.float64)
    return sum(view * w[None, :, 0, kh, kw, None, None] for kh, kw, view in _padded_windows(a, data, 2))


def np_finish(a: dict, out: np.ndarray, bias: np.ndarray | None, channel_axis: int,
              residual: np.ndarray | None = None) -> np.ndarray:
    """Add `bias` along `channel_axis` and `residual` (out's shape) when given, cast to the
    workload dtype, apply the epilogue."""
    if bias is not None:
        shape = [1] * out.ndim
        shape[channel_axis] = -1
        out = out + bias.astype(np.float64).reshape(shape)
    if residual is not None:
        out = out + residual.astype(np.float64)
    return np_epilogue(out.astype(a["dtype"]), a["epilogue"])
