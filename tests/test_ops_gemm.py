"""batch_matmul and dense (both on matmul's GEMM template): random configs built with gcc
and checked against numpy, over BERT-sized and odd shapes."""

import pytest
from isa_targets import FAMILY, params
from ops_check import failures, sample

from tunefleet.compiler import ops
from tunefleet.compiler.ops.common import knob_choices


@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_matmul(transpose_b):
    """5 random configs per small shape and one on BERT's attention product, per transpose
    (over both: more than 20 random configs of the operator)."""
    small = [dict(batch=3, M=13, N=7, K=17), dict(batch=2, M=1, N=40, K=9)]
    cases = []
    for n, args in enumerate(small):
        cases += sample(ops.make_workload("batch_matmul", {**args, "transpose_b": transpose_b}), 5, seed=n)
    bert = ops.make_workload("batch_matmul", dict(batch=12, M=128, N=128, K=64, transpose_b=transpose_b))
    cases += sample(bert, 1, seed=9)
    assert not failures(cases)


def test_dense():
    small = [dict(M=13, N=37, K=19, epilogue="gelu"), dict(M=1, N=7, K=65, bias=False),
             dict(M=17, N=48, K=8, epilogue="relu")]
    cases = []
    for n, args in enumerate(small):
        cases += sample(ops.make_workload("dense", args), 7, seed=n)
    cases += sample(ops.make_workload("dense", dict(M=128, N=768, K=768, epilogue="gelu")), 0, seed=9)
    assert len(cases) >= 20
    assert not failures(cases)


@pytest.mark.parametrize("target", params(FAMILY))
def test_dense_skinny_dot_products(target):
    """Dense at M = 1 and a few rows, K at least a vector of every ISA (so the space has the
    dot-product form), with and without a K tail: the default (dot products, `dot_rows` > 0,
    taken from the space) and random configs of the target's space, N and M not multiples of
    any tile, each ISA of the host's family built and checked against numpy where it runs."""
    cases = []
    for n, args in enumerate([dict(M=1, N=37, K=64), dict(M=5, N=21, K=133, epilogue="gelu"),
                              dict(M=1, N=130, K=51, bias=False, epilogue="relu")]):
        w = ops.make_workload("dense", args)
        space = ops.config_space(w, target)
        assert ops.default_config(w, target)["dot_rows"].val in knob_choices(space, "dot_rows")[1:]
        cases += sample(w, 8, seed=n, target=target)
    assert sum(config["dot_rows"].val > 0 for _, config in cases) >= 12
    assert not failures(cases, target=target)
