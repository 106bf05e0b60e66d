"""CUDA template of conv2d_nchw (+bias, +relu/gelu): implicit GEMM.

out[n, co, q] (q = oh·OW + ow, the NCHW output seen as [N, CO, OH·OW]) =
Σ_r weight[co, r] · im2col[n, r, q] with r = (ci·KH + kh)·KW + kw (the OIHW weights seen as
[CO, CI·KH·KW], their own memory layout) and im2col[n, r, q] = data[n, ci, oh·sh + kh·dh - ph,
ow·sw + kw·dw - pw] (0 in the padding). The GEMM runs on `common.schedule_gemm`: per K tile,
the weights go to shared memory transposed (W_shared[r, co]) and the im2col tile is gathered
from the data straight into shared memory (X_shared[n, r, q]), never materialized in global
memory; images are blockIdx.z. The bias and activation are applied when the register tile is
written out. A 1×1 convolution with stride 1 and no padding reads the data as [N, CI, H·W]
(a plain GEMM, 16-byte loads).
"""

from __future__ import annotations

from ... import te
from ...gpu_verify import limits_for
from ...schedule import ScheduleError, create_schedule
from ..conv_common import finish, load_or_zero, out_size
from . import common


def conv2d_nchw_template(cfg, workload, target):
    a = workload.args
    if a["weight_layout"] != "OIHW":
        raise ScheduleError(f"conv2d_nchw: the cuda template takes OIHW weights, not {a['weight_layout']}")
    N, CI, H, W, CO, KH, KW = a["N"], a["CI"], a["H"], a["W"], a["CO"], a["KH"], a["KW"]
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OH, OW = out_size(a)
    R, Q = CI * KH * KW, OH * OW
    common.define_gemm_knobs(cfg, CO, Q, R)
    cfg.add_flop(workload.flop)
    dt = a["dtype"]
    pointwise = KH == KW == 1 and (sh, sw) == (1, 1) and (ph, pw) == (0, 0)
    data = te.placeholder((N, CI, H * W) if pointwise else (N, CI, H, W), dt, "data")
    weight = te.placeholder((CO, R), dt, "weight")
    bias = te.placeholder((CO,), dt, "bias") if a["bias"] else None
    w_sh = te.compute((R, CO), lambda r, co: weight[co, r], name="W_shared")
    guard = tuple(d for d, p in ((2, ph), (3, pw)) if p)

    def gather(n, r, q):
        if pointwise:
            return data[n, r, q]
        ci, kh, kw = r // (KH * KW), (r // KW) % KH, r % KW
        h = (q // OW) * sh + kh * dh - ph
        w = (q % OW) * sw + kw * dw - pw
        return load_or_zero(data, (n, ci, h, w), guard)

    x_sh = te.compute((N, R, Q), gather, name="X_shared")
    r = te.reduce_axis(R, "r")
    has_epi = bias is not None or a["epilogue"] != "none"
    prod = te.compute((N, CO, Q), lambda n, co, q: te.sum(w_sh[r, co] * x_sh[n, r, q], axis=r),
                      name="out_acc" if has_epi else "out")
    out = prod
    if has_epi:
        out = te.compute((N, CO, Q), lambda n, co, q: finish(prod[n, co, q], bias, co, a["epilogue"]), name="out")
    sch = create_schedule(out)
    common.schedule_gemm(sch, cfg, prod, out, w_sh, x_sh, a_contiguous=0, b_contiguous=2)
    return sch, [data, weight, *([bias] if bias is not None else []), out]


def conv2d_nchw_default(space, workload, target) -> dict:
    a = workload.args
    OH, OW = out_size(a)
    return common.gemm_default(space, a["CO"], OH * OW, a["CI"] * a["KH"] * a["KW"], batch=a["N"],
                               sm_count=limits_for(target).sm_count)
