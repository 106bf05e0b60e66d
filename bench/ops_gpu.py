"""Benchmark: tunefleet's CUDA operators against cuDNN / cuBLAS (fp32, TF32 off), on a GPU.

The ResNet-50 convolutions (batch 1, NCHW, each with bias + relu as a fused layer would
have them: the 7×7 stem, the 3×3 and 1×1 convolutions of the four stages, the strided
ones), a MobileNet-style depthwise convolution and a batch_matmul of attention's Q·Kᵀ:
our default config, our best after a short search (see gpu_common), and the vendor library
through PyTorch (cuDNN with benchmark mode for convolutions, cuBLAS for batch_matmul).
Prints GFLOP/s and our best / the vendor's.

    python bench/ops_gpu.py [--configs 32] [--only conv] [--batch 1] [--label TEXT ...]

Needs an NVIDIA GPU and nvcc; without them it stops at once and says which is missing.

Measured 2026-11-26 on an NVIDIA H200 (sm_90), 16 configs per row, tuned ÷ cuDNN: the 1×1
layers 0.82–9.4 (cuDNN at batch 1 runs small 1×1 layers at 0.6–3 TFLOP/s: launches, not
arithmetic, dominate; ours is one fused kernel), the 7×7 stem 1.73, 3×3 at 56² and 28² 0.86–1.18,
3×3 at 14² and 7² 0.53–0.68; depthwise 5.2–6.2, attention Q·Kᵀ 5.7, batch_matmul 8×512³ 0.86.

Again 2026-12-04 (H200, sm_90), 16 configs per row (the ResNet-50 rows; the run's time was up
before the others): the 1×1 layers 1.21–9.5, the stem 1.71, 3×3 64@56² 1.36, 128@28² 0.97, the
strided 3×3 0.52–0.72, 3×3 at 14² and 7² 0.65 and 0.68. Most of that gap was the default's block
tile: at 14² and 7² the product (256 × 196, 512 × 49 outputs) fills the 132 SMs only with small
blocks. With the re-chosen default (see `compiler/ops/gpu/common.py`), default GFLOP/s before ->
after, cuDNN: 3×3 256@14² 1387 -> 2521 (3805), 512@7² 752 -> 1056 (2042), stride 2 256@28²
1417 -> 1901 (3797), 512@14² 790 -> 1314 (2049), 128@28² 2974 -> 3873 (5845); the other 1×1
layers 1.00–1.52×, attention Q·Kᵀ 0.96×; the 56² layers of 64 output channels 0.84–0.85× (5.9
-> 5.0 TFLOP/s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from gpu_common import (cublas_matmul_seconds, cudnn_conv_seconds, describe, elapsed, gemm_keep, gflops,  # noqa: E402
                        require_gpu, search, vendor)

from tunefleet.compiler import ops  # noqa: E402

#: ResNet-50's distinct convolutions (torchvision's v1.5: the stride on the 3×3 of a bottleneck).
RESNET50 = [
    ("conv1 7x7/2", dict(CI=3, CO=64, H=224, W=224, KH=7, KW=7, stride=2, padding=3)),
    ("res2 1x1 64->64", dict(CI=64, CO=64, H=56, W=56, KH=1, KW=1)),
    ("res2 3x3 64", dict(CI=64, CO=64, H=56, W=56, KH=3, KW=3, padding=1)),
    ("res2 1x1 64->256", dict(CI=64, CO=256, H=56, W=56, KH=1, KW=1)),
    ("res2 1x1 256->64", dict(CI=256, CO=64, H=56, W=56, KH=1, KW=1)),
    ("res3 1x1 256->128", dict(CI=256, CO=128, H=56, W=56, KH=1, KW=1)),
    ("res3 3x3/2 128", dict(CI=128, CO=128, H=56, W=56, KH=3, KW=3, stride=2, padding=1)),
    ("res3 1x1 128->512", dict(CI=128, CO=512, H=28, W=28, KH=1, KW=1)),
    ("res3 down 1x1/2 256->512", dict(CI=256, CO=512, H=56, W=56, KH=1, KW=1, stride=2)),
    ("res3 3x3 128", dict(CI=128, CO=128, H=28, W=28, KH=3, KW=3, padding=1)),
    ("res4 1x1 512->256", dict(CI=512, CO=256, H=28, W=28, KH=1, KW=1)),
    ("res4 3x3/2 256", dict(CI=256, CO=256, H=28, W=28, KH=3, KW=3, stride=2, padding=1)),
    ("res4 3x3 256", dict(CI=256, CO=256, H=14, W=14, KH=3, KW=3, padding=1)),
    ("res4 1x1 256->1024", dict(CI=256, CO=1024, H=14, W=14, KH=1, KW=1)),
    ("res4 1x1 1024->256", dict(CI=1024, CO=256, H=14, W=14, KH=1, KW=1)),
    ("res5 3x3/2 512", dict(CI=512, CO=512, H=14, W=14, KH=3, KW=3, stride=2, padding=1)),
    ("res5 3x3 512", dict(CI=512, CO=512, H=7, W=7, KH=3, KW=3, padding=1)),
    ("res5 1x1 512->2048", dict(CI=512, CO=2048, H=7, W=7, KH=1, KW=1)),
    ("res5 1x1 2048->512", dict(CI=2048, CO=512, H=7, W=7, KH=1, KW=1)),
]
OTHERS = [
    ("depthwise 3x3 32x112²", "depthwise_conv2d_nchw", dict(C=32, H=112, W=112, KH=3, KW=3, padding=1, bias=True,
                                                            epilogue="relu")),
    ("depthwise 3x3/2 144x56²", "depthwise_conv2d_nchw", dict(C=144, H=56, W=56, KH=3, KW=3, stride=2, padding=1,
                                                              bias=True, epilogue="relu")),
    ("attention Q·Kᵀ 12x128x128x64", "batch_matmul", dict(batch=12, M=128, N=128, K=64, transpose_b=True)),
    ("batch_matmul 8x512x512x512", "batch_matmul", dict(batch=8, M=512, N=512, K=512)),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", type=int, default=32, help="configs built and timed per workload")
    p.add_argument("--only", choices=["conv", "other"], default=None)
    p.add_argument("--batch", type=int, default=1, help="images per convolution")
    p.add_argument("--label", nargs="*", default=None, metavar="TEXT",
                   help="only the workloads whose label contains one of these texts, e.g. '3x3/2' 'res5'")
    args = p.parse_args()
    info, target = require_gpu()
    print(describe(info, target))
    name, _ = vendor()
    print(f"baseline: {'cuDNN / cuBLAS through PyTorch' if name == 'torch' else 'cuBLAS through CuPy' if name else 'none'}"
          ", fp32, TF32 off")
    print(f"{'workload':>30} {'default':>9} {'tuned':>9} {'vendor':>9} {'tuned/vendor':>13}  best config")
    rows = []
    if args.only != "other":
        rows += [(label, "conv2d_nchw", {**a, "N": args.batch, "bias": True, "epilogue": "relu"})
                 for label, a in RESNET50]
    if args.only != "conv":
        rows += [(label, op, {**a, **({"N": args.batch} if op.startswith("depthwise") else {})})
                 for label, op, a in OTHERS]
    if args.label is not None:
        rows = [r for r in rows if any(text in r[0] for text in args.label)]
    total_ours = total_vendor = 0.0
    for label, op, a in rows:
        w = ops.make_workload(op, a)
        t0 = time.time()
        found = search(w, target, args.configs, keep=gemm_keep if op != "depthwise_conv2d_nchw" else None)
        t_default = found["default"][0]
        t_best, cfg, _ = found["best"]
        t_best = min(t_best, t_default)
        if op == "batch_matmul":
            full = w.args
            t_vendor = cublas_matmul_seconds(full["M"], full["N"], full["K"], batch=full["batch"],
                                             transpose_b=full["transpose_b"])
        else:
            t_vendor = cudnn_conv_seconds(w.args)
        if op == "conv2d_nchw" and t_vendor:
            total_ours, total_vendor = total_ours + t_best, total_vendor + t_vendor
        ratio = f"{t_vendor / t_best:12.0%}" if t_vendor else f"{'n/a':>12}"
        print(f"{label:>30} {gflops(w, t_default):9.0f} {gflops(w, t_best):9.0f} {gflops(w, t_vendor):9.0f} "
              f"{ratio}   {cfg.to_json()['knobs']} ({found['tried']} configs, {elapsed(t0)})", flush=True)
    if total_vendor:
        print(f"ResNet-50 convolutions, sum of times: ours {total_ours * 1e3:.2f} ms, cuDNN {total_vendor * 1e3:.2f} ms "
              f"({total_vendor / total_ours:.0%})")


if __name__ == "__main__":
    main()
