"""Every CPU operator template's code path for the other ISAs of this host's family, not only
its best: built with gcc for the named target (default config and random configs of that
target's config space, over shapes no tile divides) and checked against numpy where this
host executes the target, so an AVX-512 CI machine catches an AVX2 or generic regression
and an AVX2 host checks generic and compiles AVX-512. The host's own ISA is covered by the
operator tests (test_ops_*.py, test_matmul.py)."""

import pytest
from isa_targets import OTHERS, params
from ops_check import failures, sample

from tunefleet.compiler import ops

#: one small odd shape per CPU template (and matmul's ragged edge, fused epilogue)
CASES = [
    ("matmul", dict(M=37, N=45, K=29, bias=True, epilogue="relu")),
    ("batch_matmul", dict(batch=2, M=13, N=21, K=17, transpose_b=True)),
    ("dense", dict(M=9, N=40, K=19, epilogue="gelu")),
    ("conv2d_nchw", dict(N=2, CI=13, CO=7, H=13, W=7, KH=3, KW=2, padding=[1, 2], stride=[2, 1], bias=True,
                         epilogue="relu")),
    ("conv2d_nchw", dict(N=1, CI=19, CO=21, H=5, W=7, KH=1, KW=1, bias=True)),  # the GEMM path
    ("conv2d_nchw", dict(N=2, CI=11, CO=9, H=9, W=8, KH=1, KW=1, stride=[2, 3])),  # the GEMM of strided pixels
    ("conv2d_nhwc", dict(N=1, CI=16, CO=9, H=9, W=11, KH=3, KW=3, stride=2, epilogue="relu")),
    ("depthwise_conv2d_nchw", dict(N=1, C=13, H=13, W=13, KH=3, KW=2, padding=[1, 2], stride=[2, 3], bias=True)),
]
#: random configs per case beside the default
RANDOM = 2


@pytest.mark.parametrize("target", params(OTHERS))
@pytest.mark.parametrize("op, args", CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)])
def test_each_isa_builds_and_matches_numpy(target, op, args):
    cases = sample(ops.make_workload(op, args), RANDOM, seed=len(args), target=target)
    assert len(cases) == RANDOM + 1
    assert not failures(cases, target=target)
