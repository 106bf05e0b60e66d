"""Benchmark: the CUDA GEMM default rule's block tiles, each timed on every workload, on a GPU.

For the ResNet-50 convolutions of bench/ops_gpu.py (batch 1, +bias+relu), matmul 1024³, 4096³
and 128×3072×768 and two batch_matmuls: every candidate block tile (tile_m, tile_n, lanes_y,
warps_y, warps_x; the other knobs as the default has them) built and timed with CUDA events,
checked against numpy, beside the vendor library (cuDNN / cuBLAS through PyTorch, TF32 off).
Prints GFLOP/s per shape (a shape over the device's limits is left out of its row), the shape
the default rule picks and its share of the row's best, then over all rows: the sum of the
default's times against the sum of the best shapes' times.
This is the measurement `compiler/ops/gpu/common.py`'s GEMM_DEFAULT_SHAPES was chosen from.

    python bench/gemm_shapes_gpu.py [--label TEXT ...]

Needs an NVIDIA GPU and nvcc; without them it stops at once and says which is missing.

Measured 2026-12-04 on an NVIDIA H200 (sm_90, 132 SMs), 14 shapes: the re-chosen ladder's
default reached 0.93 of the rows' best shapes by the sum of times (the former ladder 0.71);
per row see bench/ops_gpu.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import (check_built, cublas_matmul_seconds, cudnn_conv_seconds, gflops, require_gpu,  # noqa: E402
                        time_built)
from ops_gpu import RESNET50  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.cuda.limits import InvalidConfig  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.ops.gpu.common import GEMM_DEFAULT_SHAPES  # noqa: E402

#: The knobs a shape sets.
KNOBS = ("tile_m", "tile_n", "lanes_y", "warps_y", "warps_x")
#: Values of KNOBS: the default's ladder and the shapes it was chosen among.
SHAPES = list(dict.fromkeys([*GEMM_DEFAULT_SHAPES, (8, 8, 8, 2, 2), (4, 4, 4, 4, 2), (4, 4, 4, 2, 2), (2, 4, 4, 2, 2),
                             (2, 4, 4, 1, 2), (1, 4, 4, 2, 2), (4, 2, 4, 1, 2), (2, 4, 8, 1, 2)]))
PRODUCTS = [("matmul 1024³", "matmul", dict(M=1024, N=1024, K=1024)),
            ("matmul 4096³", "matmul", dict(M=4096, N=4096, K=4096)),
            ("matmul 128x3072x768", "matmul", dict(M=128, N=3072, K=768)),
            ("attention Q·Kᵀ 12x128x128x64", "batch_matmul", dict(batch=12, M=128, N=128, K=64, transpose_b=True)),
            ("batch_matmul 8x512x512x512", "batch_matmul", dict(batch=8, M=512, N=512, K=512))]


def shape_of(knobs: dict) -> tuple:
    return tuple(knobs[k] for k in KNOBS)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", nargs="*", default=None, metavar="TEXT",
                   help="only the workloads whose label contains one of these texts")
    args = p.parse_args()
    _, target = require_gpu()
    rows = [(label, "conv2d_nchw", {**a, "N": 1, "bias": True, "epilogue": "relu"}) for label, a in RESNET50]
    rows += PRODUCTS
    if args.label is not None:
        rows = [r for r in rows if any(text in r[0] for text in args.label)]
    print("shapes (tile_m tile_n lanes_y warps_y warps_x):", " ".join("".join(map(str, s)) for s in SHAPES))
    sum_default = sum_best = 0.0
    for label, op, a in rows:
        t0 = time.time()
        w = ops.make_workload(op, a)
        space = ops.config_space(w, target)
        default = ops.default_config(w, target).to_json()["knobs"]
        configs = [space.from_json({"knobs": {**default, **dict(zip(KNOBS, s))}}) for s in SHAPES]

        def build(cfg):
            try:
                return build_workload(w, cfg, target)
            except InvalidConfig:  # over this device's limits: left out of the row
                return None

        with ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
            built = list(pool.map(build, configs))
        seconds = {}
        for s, b in zip(SHAPES, built):
            if b is None:
                continue
            if check_built(b, w) > 1e-4:
                raise SystemExit(f"{label}: shape {s} computes a wrong result")
            seconds[s] = time_built(b, w, repeat=5, min_repeat_ms=30)
        if op == "conv2d_nchw":
            vendor = cudnn_conv_seconds(w.args)
        else:
            vendor = cublas_matmul_seconds(a["M"], a["N"], a["K"], batch=a.get("batch", 0),
                                           transpose_b=a.get("transpose_b", False))
        pick, best = shape_of(default), min(seconds, key=seconds.get)
        sum_default, sum_best = sum_default + seconds[pick], sum_best + seconds[best]
        print(f"{label:>30} vendor {gflops(w, vendor):6.0f} | "
              + " ".join(f"{''.join(map(str, s))}:{gflops(w, t):.0f}" for s, t in seconds.items())
              + f" | default {''.join(map(str, pick))} {seconds[best] / seconds[pick]:.2f} of best"
              f" ({time.time() - t0:.0f}s)",
              flush=True)
    print(f"sum of times: default {sum_default * 1e3:.3f} ms, best shapes {sum_best * 1e3:.3f} ms "
          f"({sum_best / sum_default:.2f} of best)")


if __name__ == "__main__":
    main()
