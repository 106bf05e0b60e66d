"""depthwise_conv2d_nchw: random configs of the CPU template, built with gcc and checked
against numpy, over MobileNet depthwise layers (few configs) and small odd shapes (many)."""

import pytest
from isa_targets import FAMILY, params
from ops_check import failures, sample

from tunefleet.compiler import ops

# MobileNet depthwise layers (batch 1, 3×3, pad 1): v1's first (stride 1), stride-2 ones (v1's
# 64@112², v2's 144@56², whose 28 output rows the default tiles by 4) and v1's narrow ones at the end.
MOBILENET = [
    dict(C=32, H=112, W=112, stride=1),
    dict(C=64, H=112, W=112, stride=2),
    dict(C=144, H=56, W=56, stride=2),
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


def test_tile_rows_avoid_computing_rows_that_are_never_stored():
    from tunefleet.compiler.ops.conv_common import tile_overhang
    from tunefleet.compiler.ops.depthwise import tile_rows

    heights = [1, 2, 3, 4, 6, 8]
    assert tile_rows(112, heights) == 8 and tile_rows(56, heights) == 8
    assert tile_rows(28, heights) == 4  # a divisor at least half the largest: 28 rows, not 32
    assert tile_rows(14, heights) == 8  # 16 rows for 14: a small overhang beats tiles of 2 rows
    assert tile_rows(7, heights[:-1]) == 1  # 6 would compute 12 rows for 7
    for OH in range(1, 120):
        hs = [h for h in heights if h <= OH]
        h = tile_rows(OH, hs)
        assert h in hs and 4 * tile_overhang(OH, h) <= OH + tile_overhang(OH, h)



def test_strided_default_tiles_one_vector_wide():
    """MobileNet's strided layers have 56 and 28 output columns: on every CPU target the
    default tiles them one vector wide (half of AVX-512's 16 lanes left 1.08x on a Xeon, two of
    generic's 4 lanes 1.31x), computing at most a quarter of a row's columns beyond the output;
    a narrower output takes the width that computes fewest."""
    from tunefleet.compiler.ops.conv_common import tile_overhang
    from tunefleet.compiler.ops.depthwise import strided_tile_width
    from tunefleet.compiler.target import Target

    for isa in ("avx512", "avx2", "generic"):
        lanes = Target("cpu", isa).lanes("float32")
        for C, H in ((64, 112), (128, 56)):
            w = ops.make_workload("depthwise_conv2d_nchw", {"N": 1, "C": C, "H": H, "W": H, "KH": 3, "KW": 3,
                                                             "stride": 2, "padding": 1})
            tile_w = ops.default_config(w, Target("cpu", isa))["tile_w"].val
            assert tile_w == lanes and 4 * tile_overhang(H // 2, tile_w) <= H // 2, (isa, C, tile_w)
    # 20 columns: one vector of 16 would compute 12 beyond them, so half a vector (24 computed)
    assert strided_tile_width(20, [8, 16], 16) == 8
    assert strided_tile_width(3, [8], 16) == 8


def test_default_tiles_of_two_vectors_over_a_whole_plane_take_few_rows():
    """Unstrided 128@56²: on every CPU target the default tiles two vectors over one plane per
    task, and then at most FEW_ACCUMULATORS accumulators (2 rows, not 4: 1.13-1.28x)."""
    from tunefleet.compiler.ops.depthwise import FEW_ACCUMULATORS
    from tunefleet.compiler.target import Target

    w = ops.make_workload("depthwise_conv2d_nchw", {"N": 1, "C": 128, "H": 56, "W": 56, "KH": 3, "KW": 3,
                                                     "padding": 1})
    for isa in ("avx512", "avx2", "generic"):
        target = Target("cpu", isa)
        config = ops.default_config(w, target)
        vectors = config["tile_w"].val // target.lanes("float32")
        assert (vectors, config["parallel"].val) == (2, "n_c"), (isa, config)
        assert config["tile_h"].val * vectors <= FEW_ACCUMULATORS, (isa, config)


def test_default_tiles_of_one_64_byte_vector_over_a_wider_plane_take_two_rows():
    """Unstrided 256@28² on AVX-512: a tile of one vector (16 of the 28 columns) over a whole
    plane holds WIDE_VECTOR_ACCUMULATORS rows (2, not 4: 1.10-1.12x); the same layer built for
    AVX2 (two vectors of 8) keeps FEW_ACCUMULATORS, and a plane exactly one vector wide
    (32@16²) and a strided one keep more rows."""
    from tunefleet.compiler.ops.depthwise import FEW_ACCUMULATORS, WIDE_VECTOR_ACCUMULATORS
    from tunefleet.compiler.target import Target

    def default(C, H, isa, stride=1):
        w = ops.make_workload("depthwise_conv2d_nchw", {"N": 1, "C": C, "H": H, "W": H, "KH": 3, "KW": 3,
                                                         "stride": stride, "padding": 1})
        config = ops.default_config(w, Target("cpu", isa))
        return config["tile_w"].val, config["tile_h"].val, config["parallel"].val

    lanes = Target("cpu", "avx512").lanes("float32")
    assert default(256, 28, "avx512") == (lanes, WIDE_VECTOR_ACCUMULATORS, "n_c")
    tile_w, tile_h, _ = default(256, 28, "avx2")
    vectors = tile_w // Target("cpu", "avx2").lanes("float32")
    assert vectors == 2 and tile_h * vectors == FEW_ACCUMULATORS
    assert default(32, 16, "avx512")[1] > WIDE_VECTOR_ACCUMULATORS
    tile_w, tile_h, _ = default(128, 56, "avx512", stride=2)
    assert tile_w == lanes and tile_h > WIDE_VECTOR_ACCUMULATORS


@pytest.mark.parametrize("target", params(FAMILY))
def test_default_takes_row_bands_where_the_padded_plane_outgrows_the_l1(target):
    """A strided layer whose padded plane exceeds L1D_BYTES (MobileNet's 64@112²/2: 52 KiB) is
    split into row bands, each task padding its own rows, and so is the unstrided 32@112² where
    vectors are 64 bytes (AVX-512); 144@56²/2 (13 KiB) keeps one plane per task. The strided
    bands' tiles hold at most FEW_ACCUMULATORS accumulators, the unstrided bands' more.
    The banded defaults match numpy (built only where this host does not execute the target)."""
    from tunefleet.compiler.ops.common import L1D_BYTES
    from tunefleet.compiler.ops.depthwise import FEW_ACCUMULATORS, padded_plane_bytes

    parallel, accumulators = {}, {}
    for args in MOBILENET[:3]:
        w = ops.make_workload("depthwise_conv2d_nchw",
                              {"N": 1, "KH": 3, "KW": 3, "padding": 1, "bias": True, "epilogue": "relu", **args})
        config = ops.default_config(w, target)
        parallel[args["C"]] = config["parallel"].val, padded_plane_bytes(w.args)
        accumulators[args["C"]] = config["tile_h"].val * -(-config["tile_w"].val // target.lanes("float32"))
        if parallel[args["C"]][0] == "n_c_oh":
            assert not failures(sample(w, 0, seed=0, target=target), target=target)
    assert parallel[64][0] == "n_c_oh" and parallel[64][1] > L1D_BYTES, parallel
    assert parallel[144][0] == "n_c" and parallel[144][1] <= L1D_BYTES, parallel
    assert parallel[32] == ("n_c_oh" if target.vector_bytes >= 64 else "n_c", parallel[64][1]), parallel
    assert accumulators[64] <= FEW_ACCUMULATORS, accumulators
    if parallel[32][0] == "n_c_oh":
        assert accumulators[32] > FEW_ACCUMULATORS, accumulators
