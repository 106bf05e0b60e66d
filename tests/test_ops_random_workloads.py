"""Random workloads within the edge's bounds, not only random configs of chosen shapes: every
CPU operator with odd sizes, strides, paddings, dilations, groups, dtypes and epilogues; each
workload the edge accepts builds (its default and a random config) and matches numpy. Random
shapes found a dense whose blocks held one tile of W's rows (a one-output head) that failed to
build in its default config."""

from __future__ import annotations

import random

import pytest
from ops_check import failures, sample

from tunefleet.compiler import ops

WORKLOADS = 24


def _conv(rng: random.Random, depthwise: bool) -> dict:
    args = {"N": rng.choice([1, 2]), "H": rng.randint(1, 12), "W": rng.randint(1, 12),
            "KH": rng.choice([1, 2, 3, 5]), "KW": rng.choice([1, 3, 7]),
            "stride": [rng.choice([1, 2, 3]), rng.choice([1, 2])], "padding": [rng.randint(0, 3), rng.randint(0, 2)],
            "dilation": [rng.choice([1, 1, 2]), rng.choice([1, 2])], "bias": rng.random() < 0.5,
            "epilogue": rng.choice(["none", "relu", "gelu"]), "dtype": rng.choice(["float32", "float32", "float64"])}
    if depthwise:
        return {**args, "C": rng.randint(1, 24)}
    return {**args, "CI": rng.randint(1, 24), "CO": rng.randint(1, 24)}


def random_workload(rng: random.Random) -> tuple[str, dict]:
    """An operator and arguments drawn around the edges of the templates' tiles."""
    op = rng.choice(["matmul", "dense", "batch_matmul", "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw"])
    if op in ("matmul", "dense"):
        return op, {"M": rng.choice([1, 2, 3, 7, 17]), "N": rng.choice([1, 3, 5, 16, 31, 130]),
                    "K": rng.choice([1, 2, 5, 17, 64, 100]), "bias": rng.random() < 0.5,
                    "epilogue": rng.choice(["none", "relu", "gelu"]), "dtype": rng.choice(["float32", "float64"])}
    if op == "batch_matmul":
        return op, {"batch": rng.randint(1, 3), "M": rng.choice([1, 3, 17]), "N": rng.choice([1, 5, 33]),
                    "K": rng.choice([1, 7, 16]), "transpose_b": rng.random() < 0.5,
                    "dtype": rng.choice(["float32", "float64"])}
    args = _conv(rng, op.startswith("depthwise"))
    if op == "conv2d_nchw":
        groups = rng.choice([1, 1, 2, 3])
        args.update(CI=args["CI"] * groups, CO=args["CO"] * groups, groups=groups, residual=rng.random() < 0.3)
    return op, args


@pytest.mark.parametrize("seed", range(2))
def test_random_workloads_the_edge_accepts_build_and_match_numpy(seed):
    rng = random.Random(seed)
    cases = []
    while len(cases) < 2 * WORKLOADS:
        op, args = random_workload(rng)
        try:
            workload = ops.make_workload(op, args)
        except ops.WorkloadError:  # e.g. a kernel larger than the padded input: refused, naming the field
            continue
        cases += sample(workload, 1, seed)
    assert not failures(cases, seed)
