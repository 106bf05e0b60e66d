"""CUDA template of conv2d_nchw (+bias, +residual, +relu/gelu): implicit GEMM.

out[n, co, q] (q = oh·OW + ow, the NCHW output seen as [N, CO, OH·OW]) =
Σ_{kh, kw, ci} weight[co, ci, kh, kw] · data[n, ci, oh·sh + kh·dh - ph, ow·sw + kw·dw - pw]
(0 in the padding). The GEMM runs on `common.schedule_gemm` with the reduction in the order
kh, kw, ci and its K tiles over ci: per (kh, kw) and K tile, the weights go to shared memory
transposed (W_shared[kh, kw, ci, co]) and the input tile is gathered from the data straight
into shared memory (X_shared[n, kh, kw, ci, q]), never materialized in global memory. Keeping
kh and kw as loops (rather than one fused reduction axis r = (ci·KH + kh)·KW + kw) spares the
gather a division and modulo by KH and KW per element: its row and column offsets are loop
variables, and oh, ow of a thread's columns are invariant across the K loop. Images are
blockIdx.z. The bias, the residual and the activation are applied when the register tile is
written out. A 1×1 convolution with stride 1 and no padding reads the data as [N, CI, H·W] (a
plain GEMM over ci, 16-byte loads).
"""

from __future__ import annotations

from ... import te
from ...cuda.limits import limits_for
from ...schedule import ScheduleError, create_schedule
from ..common import kernel_args
from ..conv_common import finish, has_epilogue, load_or_zero, out_size, residual_input
from . import common


def conv2d_nchw_template(cfg, workload, target):
    a = workload.args
    if a["weight_layout"] != "OIHW":
        raise ScheduleError(f"conv2d_nchw: the cuda template takes OIHW weights, not {a['weight_layout']}")
    if a.get("groups", 1) > 1:
        raise ScheduleError(f"conv2d_nchw: the cuda template has no grouped convolution (groups={a['groups']})")
    N, CI, H, W, CO, KH, KW = a["N"], a["CI"], a["H"], a["W"], a["CO"], a["KH"], a["KW"]
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OH, OW = out_size(a)
    Q = OH * OW
    common.define_gemm_knobs(cfg, CO, Q, CI)
    cfg.add_flop(workload.flop)
    dt = a["dtype"]
    pointwise = KH == KW == 1 and (sh, sw) == (1, 1) and (ph, pw) == (0, 0)
    bias = te.placeholder((CO,), dt, "bias") if a["bias"] else None
    residual = residual_input(a, (N, CO, Q))
    has_epi = has_epilogue(a)
    acc_name = "out_acc" if has_epi else "out"
    ci = te.reduce_axis(CI, "ci")
    if pointwise:
        data = te.placeholder((N, CI, H * W), dt, "data")
        weight = te.placeholder((CO, CI), dt, "weight")
        w_sh = te.compute((CI, CO), lambda c, co: weight[co, c], name="W_shared")
        x_sh = te.compute((N, CI, Q), lambda n, c, q: data[n, c, q], name="X_shared")
        prod = te.compute((N, CO, Q), lambda n, co, q: te.sum(w_sh[ci, co] * x_sh[n, ci, q], axis=ci), name=acc_name)
        contiguous = (0, 2)
    else:
        data = te.placeholder((N, CI, H, W), dt, "data")
        weight = te.placeholder((CO, CI, KH, KW), dt, "weight")
        guard = tuple(d for d, p in ((2, ph), (3, pw)) if p)
        w_sh = te.compute((KH, KW, CI, CO), lambda kh, kw, c, co: weight[co, c, kh, kw], name="W_shared")
        x_sh = te.compute((N, KH, KW, CI, Q), lambda n, kh, kw, c, q: load_or_zero(
            data, (n, c, (q // OW) * sh + kh * dh - ph, (q % OW) * sw + kw * dw - pw), guard), name="X_shared")
        rkh, rkw = te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw")
        prod = te.compute((N, CO, Q), lambda n, co, q: te.sum(
            w_sh[rkh, rkw, ci, co] * x_sh[n, rkh, rkw, ci, q], axis=[rkh, rkw, ci]), name=acc_name)
        contiguous = (2, 4)
    out = prod
    if has_epi:
        out = te.compute((N, CO, Q), lambda n, co, q: finish(prod[n, co, q], bias, co, a["epilogue"], residual,
                                                             (n, co, q)), name="out")
    sch = create_schedule(out)
    common.schedule_gemm(sch, cfg, prod, out, w_sh, x_sh, a_contiguous=contiguous[0], b_contiguous=contiguous[1])
    return sch, kernel_args(data, weight, bias, residual, out)


def conv2d_nchw_default(space, workload, target) -> dict:
    a = workload.args
    OH, OW = out_size(a)
    return common.gemm_default(space, a["CO"], OH * OW, a["CI"], batch=a["N"],
                               sm_count=limits_for(target).sm_count)
