"""batch_matmul and dense (both on matmul's GEMM template): random configs built with gcc
and checked against numpy, over BERT-sized and odd shapes."""

import pytest
from ops_check import failures, sample

from tunefleet.compiler import ops


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
