"""conv2d_nchw (NCHWc template) and conv2d_nhwc: random configs of the CPU templates, built
with gcc and checked against numpy, over ResNet-50 layers (few configs: they are big) and
small odd shapes (many configs); pre-packed weights; the public signature stays NCHW/OIHW."""

import numpy as np
import pytest
from ops_check import TARGET, failures, relative_error, sample

from tunefleet.compiler import ops
from tunefleet.compiler.abi import header_text
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.ops.conv2d import pack_weight_np

# ResNet-50 layers (batch 1): 3×3 pad 1 at 56×56 and 7×7, the stride-2 3×3 and the 1×1 layers.
RESNET = [
    dict(CI=64, CO=64, H=56, W=56, KH=3, KW=3, padding=1),
    dict(CI=512, CO=512, H=7, W=7, KH=3, KW=3, padding=1),
    dict(CI=128, CO=128, H=56, W=56, KH=3, KW=3, padding=1, stride=2),
    dict(CI=256, CO=64, H=56, W=56, KH=1, KW=1),
    dict(CI=256, CO=512, H=56, W=56, KH=1, KW=1, stride=2),
]
# Odd sizes (7, 13, 1), non-square kernels, asymmetric stride/padding, dilation, batch > 1.
SMALL = [
    dict(N=2, CI=13, CO=7, H=13, W=7, KH=3, KW=2, padding=[1, 2], stride=[2, 1], bias=True, epilogue="relu"),
    dict(CI=1, CO=13, H=7, W=13, KH=1, KW=5, padding=[0, 2], dilation=[1, 2], bias=True, epilogue="gelu"),
    dict(CI=16, CO=1, H=9, W=11, KH=5, KW=3, stride=2, epilogue="relu"),
    dict(N=3, CI=19, CO=21, H=5, W=7, KH=1, KW=1, bias=True, epilogue="gelu"),  # a GEMM per image
]
OPS = ["conv2d_nchw", "conv2d_nhwc"]


def _workload(op, args):
    return ops.make_workload(op, {"N": 1, **args})


@pytest.mark.parametrize("op", OPS)
def test_random_configs_on_small_odd_shapes(op):
    cases = [c for n, args in enumerate(SMALL) for c in sample(_workload(op, args), 7, seed=n)]
    assert len(cases) >= 20 + len(SMALL)
    assert not failures(cases)


@pytest.mark.parametrize("op", OPS)
def test_resnet50_layers(op):
    """The default config of every layer, and one random config of the first two."""
    cases = []
    for n, args in enumerate(RESNET):
        cases += sample(_workload(op, {**args, "bias": True, "epilogue": "relu"}), int(n < 2), seed=100 + n)
    assert not failures(cases)


def test_prepacked_weights_match_plain_weights():
    plain = _workload("conv2d_nchw", dict(CI=16, CO=13, H=9, W=9, KH=3, KW=3, padding=1, bias=True))
    packed = _workload("conv2d_nchw", {**plain.args, "weight_layout": "OIHW8i16o"})
    assert [a.shape for a in packed.tensors()[:2]] == [(1, 16, 9, 9), (1, 2, 3, 3, 8, 16)]
    assert not failures(sample(packed, 3, seed=7))
    rng = np.random.default_rng(3)
    data, weight, bias = ops.random_inputs(plain.tensors(), rng)
    (out,) = build_workload(packed, ops.default_config(packed, TARGET), TARGET).run(
        data, pack_weight_np(weight, 8, 16), bias)
    assert relative_error(out, plain.reference(data, weight, bias)[0]) < 1e-4


@pytest.mark.parametrize("op, layouts", [
    ("conv2d_nchw", {"data": (1, 64, 14, 14), "weight": (32, 64, 3, 3), "out": (1, 32, 14, 14)}),
    ("conv2d_nhwc", {"data": (1, 14, 14, 64), "weight": (3, 3, 64, 32), "out": (1, 14, 14, 32)}),
])
def test_packed_layouts_stay_inside_the_kernel(op, layouts):
    w = _workload(op, dict(CI=64, CO=32, H=14, W=14, KH=3, KW=3, padding=1))
    space = ops.config_space(w, TARGET)
    for config in [ops.default_config(w, TARGET), *space.random(np.random.default_rng(0), 2)]:
        built = build_workload(w, config, TARGET)
        assert {a.name: a.shape for a in built.args} == layouts
        header = header_text(built.name, built.args, doc="")
        assert op[-4:].upper() in header and not any(s in header for s in ("_vec", "_pad", "_acc", "NCHWc"))


def test_float64():
    w = _workload("conv2d_nchw", dict(CI=5, CO=9, H=8, W=8, KH=3, KW=3, padding=1, dtype="float64"))
    assert not failures(sample(w, 2, seed=5))


def test_pointwise_convolution_is_a_gemm_over_views_of_its_arguments():
    """A 1×1, stride-1, unpadded NCHW convolution runs the matmul template (its knobs) on
    [CO, CI] · [CI, H·W] per image; the kernel's arguments keep the operator's shapes."""
    w = _workload("conv2d_nchw", dict(N=2, CI=40, CO=24, H=6, W=9, KH=1, KW=1, bias=True, epilogue="relu"))
    assert set(ops.config_space(w, TARGET).knobs) == set(ops.config_space(
        ops.make_workload("matmul", {"M": 24, "N": 54, "K": 40}), TARGET).knobs)
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    assert [a.shape for a in built.args] == [(2, 40, 6, 9), (24, 40, 1, 1), (24,), (2, 24, 6, 9)]
    rng = np.random.default_rng(4)
    inputs = ops.random_inputs(w.tensors(), rng)
    (out,) = built.run(*inputs)
    assert relative_error(out, w.reference(*inputs)[0]) < 1e-4
    strided = _workload("conv2d_nchw", dict(CI=40, CO=24, H=6, W=9, KH=1, KW=1, stride=2))
    assert "ic_bn" in ops.config_space(strided, TARGET).knobs  # strided 1×1 stays on the NCHWc template
