"""depthwise_conv2d_nchw: random configs of the CPU template, built with gcc and checked
against numpy, over MobileNet depthwise layers (few configs) and small odd shapes (many)."""

from ops_check import failures, sample

from tunefleet.compiler import ops

# MobileNet-v1 depthwise layers (batch 1, 3×3, pad 1): the first (stride 1), a stride-2 one,
# and the narrow ones at the end.
MOBILENET = [
    dict(C=32, H=112, W=112, stride=1),
    dict(C=64, H=112, W=112, stride=2),
    dict(C=512, H=14, W=14, stride=1),
    dict(C=1024, H=7, W=7, stride=1),
]
# Odd sizes, non-square kernels, strides that leave column phases, dilation, no padding, batch > 1.
SMALL = [
    dict(N=2, C=13, H=13, W=13, KH=3, KW=2, padding=[1, 2], stride=[2, 3], bias=True, epilogue="relu"),
    dict(C=7, H=9, W=40, KH=5, KW=3, padding=[2, 0], dilation=[1, 2], epilogue="gelu"),
    dict(C=1, H=7, W=33, KH=1, KW=4, stride=[1, 2], bias=True),
]


def test_random_configs_on_small_odd_shapes():
    cases = []
    for n, args in enumerate(SMALL):
        cases += sample(ops.make_workload("depthwise_conv2d_nchw", {"N": 1, **args}), 7, seed=n)
    assert len(cases) >= 20 + len(SMALL)
    assert not failures(cases)


def test_mobilenet_layers():
    cases = []
    for n, args in enumerate(MOBILENET):
        w = ops.make_workload("depthwise_conv2d_nchw",
                              {"N": 1, "KH": 3, "KW": 3, "padding": 1, "bias": True, "epilogue": "relu", **args})
        cases += sample(w, 2, seed=200 + n)
    assert not failures(cases)
