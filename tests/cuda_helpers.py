"""Shared pieces of the CUDA tests: skip reasons, workloads of each GPU template, random
valid configs (the verifier's rejections counted), and a GPU probe."""

from __future__ import annotations

import functools
import random

import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.cuda.limits import InvalidConfig
from tunefleet.compiler.cuda.nvcc import have_nvcc
from tunefleet.compiler.target import Target

NO_NVCC = "nvcc not found (install the CUDA toolkit or set $NVCC): the CUDA compile tests need it"
needs_nvcc = pytest.mark.skipif(not have_nvcc(), reason=NO_NVCC)

SM80, SM90 = Target("cuda", "sm_80"), Target("cuda", "sm_90")

#: Workloads per GPU template: shapes with tails (no tile divides them), fused epilogues, a
#: transposed B, padding, strides and dilation, and a 1×1 convolution (its GEMM-only path).
TEMPLATE_WORKLOADS = {
    "matmul": [("matmul", {"M": 1000, "N": 520, "K": 300, "bias": True, "epilogue": "gelu"}),
               ("matmul", {"M": 128, "N": 3072, "K": 768})],
    "batch_matmul": [("batch_matmul", {"batch": 12, "M": 128, "N": 100, "K": 64, "transpose_b": True}),
                     ("batch_matmul", {"batch": 4, "M": 77, "N": 64, "K": 33})],
    "conv2d_nchw": [("conv2d_nchw", {"N": 1, "CI": 64, "CO": 96, "H": 28, "W": 28, "KH": 3, "KW": 3, "padding": 1,
                                     "bias": True, "epilogue": "relu"}),
                    ("conv2d_nchw", {"N": 2, "CI": 256, "CO": 64, "H": 14, "W": 14, "KH": 1, "KW": 1})],
    "depthwise_conv2d_nchw": [
        ("depthwise_conv2d_nchw", {"N": 1, "C": 32, "H": 56, "W": 56, "KH": 3, "KW": 3, "stride": 2, "padding": 1,
                                   "bias": True, "epilogue": "relu"}),
        ("depthwise_conv2d_nchw", {"N": 2, "C": 24, "H": 19, "W": 23, "KH": 5, "KW": 5, "padding": 2,
                                   "dilation": [1, 2]})],
}


@functools.cache
def space(op: str, args_json: str, target: Target):
    import json

    w = ops.make_workload(op, json.loads(args_json))
    return w, ops.config_space(w, target)


def random_valid_configs(op: str, args: dict, target: Target, n: int, seed: int, *, build):
    """`n` results of `build(workload, config)` for random configs of the space that pass the
    verifier (InvalidConfig ones are skipped and counted). Returns (results, invalid count)."""
    import json

    w, sp = space(op, json.dumps(args, sort_keys=True), target)
    rnd = random.Random(seed)
    out, invalid, tries = [], 0, 0
    while len(out) < n:
        tries += 1
        assert tries < 50 * n, f"{op}: fewer than {n} valid configs in {tries} random tries"
        cfg = sp.get(rnd.randrange(sp.size))
        try:
            out.append(build(w, cfg))
        except InvalidConfig:
            invalid += 1
    return out, invalid
