"""conv2d_nchw (NCHWc and im2col GEMM templates) and conv2d_nhwc: random configs of the CPU templates, built
with gcc and checked against numpy, over ResNet-50 layers (few configs: they are big) and
small odd shapes (many configs); pre-packed weights; the public signature stays NCHW/OIHW."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from isa_targets import FAMILY, params
from ops_check import TARGET, failures, relative_error, sample

from tunefleet.compiler import ops
from tunefleet.compiler.abi import header_text
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.ops import WorkloadError
from tunefleet.compiler.ops.common import knob_choices
from tunefleet.compiler.ops.conv2d import pack_weight_np, packed_blocks, tile_columns, transposed_store_fits
from tunefleet.compiler.ops.transpose_pack import STORE_FUNC
from tunefleet.compiler.ops.prepacked import with_prepacked_weights
from tunefleet.compiler.target import Target

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
# Grouped convolutions (1 < groups < channels): ResNeXt-like 3×3, a grouped 1×1 (not the GEMM
# path), odd channels per group with stride, dilation and a non-square kernel, batch > 1.
GROUPED = [
    dict(N=2, CI=12, CO=8, H=9, W=7, KH=3, KW=3, padding=1, groups=4, bias=True, epilogue="relu"),
    dict(CI=16, CO=32, H=8, W=8, KH=1, KW=1, groups=2),
    dict(CI=6, CO=9, H=7, W=11, KH=3, KW=2, stride=[2, 1], padding=[1, 0], dilation=[1, 2], groups=3,
         epilogue="gelu"),
]


def _workload(op, args):
    return ops.make_workload(op, {"N": 1, **args})


def _nchwc_default(workload, target):
    """The NCHWc default of a conv2d_nchw workload (where its space has several methods, the
    preferred config whose method is "nchwc")."""
    return next(c for c in ops.preferred_configs(workload, target)
                if c.to_json()["knobs"].get("method", "nchwc") == "nchwc")


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
    """A 1×1, stride-1, unpadded NCHW convolution runs the matmul template (its knobs; with at
    most IM2COL_MAX_PIXELS pixels also `dot_rows`; `prefetch_b` for B read in place) on [CO, CI]
    · [CI, H·W] per image; the kernel's arguments keep the operator's shapes."""
    w = _workload("conv2d_nchw", dict(N=2, CI=40, CO=24, H=6, W=9, KH=1, KW=1, bias=True, epilogue="relu"))
    space = ops.config_space(w, TARGET)
    assert set(space.knobs) == {"dot_rows", "prefetch_b"} | set(ops.config_space(
        ops.make_workload("matmul", {"M": 24, "N": 54, "K": 40}), TARGET).knobs)
    in_place = {**ops.default_config(w, TARGET).to_json()["knobs"], "pack_b": False, "prefetch_b": 4}
    # the prefetch only where the GEMM's tiles read B in place, not in the dot products' form
    assert [space.valid(space.from_json({"knobs": {**in_place, "dot_rows": d}})) for d in (0, 4)] == [True, False]
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    assert [a.shape for a in built.args] == [(2, 40, 6, 9), (24, 40, 1, 1), (24,), (2, 24, 6, 9)]
    rng = np.random.default_rng(4)
    inputs = ops.random_inputs(w.tensors(), rng)
    (out,) = built.run(*inputs)
    assert relative_error(out, w.reference(*inputs)[0]) < 1e-4


@pytest.mark.parametrize("target", params(FAMILY))
def test_pointwise_prefetch_of_the_input_read_in_place(target):
    """prefetch_b > 0 with B (the input) read in place puts PREFETCHT0s (locality 3) of its rows
    in the tiles' K loop, and random configs with it match numpy, batch 2; the search never
    proposes it with B packed; the default has none (its index is the one it had before the
    knob: defined last, absent 0)."""
    w = _workload("conv2d_nchw", dict(N=2, CI=64, CO=24, H=16, W=16, KH=1, KW=1, bias=True, epilogue="relu"))
    default = ops.default_config(w, target)
    assert default["prefetch_b"].val == 0 and "__builtin_prefetch" not in build_workload(w, default, target).source
    space = ops.config_space(w, target)
    # prefetch_b is the last, most significant digit of the index: its 0 leaves the others' indices as they were
    assert default.index < space.size // 2 and list(space.knobs)[-1] == "prefetch_b"
    configs = [space.from_json({"knobs": {**c.to_json()["knobs"], "pack_b": False, "prefetch_b": 4}})
               for c in space.random(np.random.default_rng(3), 6)]
    assert all(space.valid(c) for c in configs)
    assert not space.valid(space.from_json({"knobs": {**configs[0].to_json()["knobs"], "pack_b": True}}))
    source = build_workload(w, configs[0], target).source
    assert re.search(r"__builtin_prefetch\(\(data \+ [^;]*, 0, 3\);", source), source
    assert not failures([(w, c) for c in configs], target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_pointwise_default_reads_its_input_in_place_where_the_blocks_divide_the_pixels(target):
    """The default of an unstrided 1×1 convolution reads data in place as B where its blocks of
    bn·nr columns divide H·W (48² pixels: a multiple of every ISA's tile width), and packs it
    where they do not (47·49 pixels, odd), though B outgrows half an L2 in both (the rule of
    a matmul's B); both defaults match numpy, batch 2."""
    cases = []
    for h, w, in_place in ((48, 48, True), (47, 49, False)):
        workload = _workload("conv2d_nchw", dict(N=2, CI=64, CO=20, H=h, W=w, KH=1, KW=1, bias=True,
                                                 epilogue="relu"))
        config = ops.default_config(workload, target)
        knobs = config.to_json()["knobs"]
        assert (knobs["pack_b"] is False) == in_place == (h * w % (knobs["nr"] * knobs["bn"]) == 0), knobs
        cases.append((workload, config))
    assert not failures(cases, target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_pointwise_default_at_14x14_reads_its_input_in_place_with_avx512(target):
    """ResNet's 1×1 layers at 14² (196 pixels, which no block of whole vectors divides): with 32
    vector registers the default reads data in place, by tiles of 6 rows, the blocks of weights
    outermost (12 rows of a 1024-long reduction, 4 KiB apart, crowd one set of the L1), with
    AVX-512 4 vectors wide (B read in place pads no columns, so the widest tile); with fewer
    registers it packs B. Both match numpy, with the residual and batch 2."""
    workload = _workload("conv2d_nchw", dict(N=2, CI=1024, CO=40, H=14, W=14, KH=1, KW=1, bias=True,
                                             residual=True, epilogue="relu"))
    config = ops.default_config(workload, target)
    knobs = config.to_json()["knobs"]
    if target.vector_registers >= 32:
        assert (knobs["pack_b"], knobs["mr"], knobs["order"]) == (False, 6, "mn_nm"), knobs
        assert target.vector_bytes < 64 or knobs["nr"] == 4 * target.lanes("float32"), knobs
    else:
        assert knobs["pack_b"] is True and knobs["order"] == "nm_nm", knobs
    assert not failures([(workload, config)], target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_convolution_with_few_output_pixels_is_an_im2col_gemm_or_nchwc_or_a_panel_gemm(target):
    """A convolution with at most IM2COL_MAX_PIXELS output pixels per image has three methods in
    its space: "gemm" runs the matmul template (its knobs, and `dot_rows` for its dot-product
    form) on weight [CO, CI·KH·KW] · pixels [CI·KH·KW, OH·OW] per image, the pixels gathered
    from NCHW data into a stage of their own, then packed into B's panels;
    "nchwc" the direct NCHWc schedule (its knobs prefixed); "panel" the pixels × the weights
    packed per call into panels (matmul's knobs, prefixed). The search measures every default
    first, the panel GEMM's first with vectors of at least 32 bytes; their random configs
    (padding, stride, dilation, a non-square kernel, batch > 1) match numpy on each ISA of the
    host's family, and the kernel's arguments keep the operator's shapes whichever method built it."""
    w = _workload("conv2d_nchw", dict(N=2, CI=12, CO=20, H=9, W=8, KH=3, KW=2, padding=[1, 0], stride=[2, 1],
                                      dilation=[1, 2], bias=True, epilogue="relu"))
    space = ops.config_space(w, target)
    gemm_knobs = set(ops.config_space(ops.make_workload("matmul", {"M": 20, "N": 30, "K": 72}), target).knobs)
    direct_knobs = {k for k in space.knobs if k.startswith("nchwc_")}
    panel_knobs = {k for k in space.knobs if k.startswith("panel_")}
    assert set(space.knobs) == {"method", "dot_rows"} | gemm_knobs | direct_knobs | panel_knobs
    assert {k[len("nchwc_"):] for k in direct_knobs} == {"ic_bn", "oc_bn", "reg_n", "order", "unroll_kw", "parallel",
                                                         "accumulate"}
    assert {k[len("panel_"):] for k in panel_knobs} == gemm_knobs
    preferred = ops.preferred_configs(w, target)
    others = ["gemm", "nchwc"]
    assert [c["method"].val for c in preferred] == (["panel", *others] if target.vector_bytes >= 32 else
                                                    [*others, "panel"])
    assert preferred[0].to_json() == ops.default_config(w, target).to_json()
    nchwc = next(c for c in preferred if c["method"].val == "nchwc")
    assert set(nchwc.to_json()["knobs"]) == {"method"} | direct_knobs
    cases = sample(w, 12, seed=11, target=target) + [(w, c) for c in preferred]
    assert {c["method"].val for _, c in cases[1:-3]} == {"gemm", "nchwc", "panel"}
    for case in cases[-3:]:
        assert [a.shape for a in build_workload(*case, target).args] == [(2, 12, 9, 8), (20, 12, 3, 2), (20,),
                                                                          (2, 20, 5, 6)]
    assert not failures(cases, target=target)


# Convolutions with at most IM2COL_MAX_PIXELS output pixels: 3×3 padded, stride 2 from odd
# sizes with batch 2, 1×1 over data in place, a strided 1×1; CI·KH·KW not a multiple of any
# vector (tails) in all but the last.
FEW_PIXELS = [
    dict(CI=13, CO=9, H=7, W=7, KH=3, KW=3, padding=1, bias=True, epilogue="relu"),
    dict(N=2, CI=7, CO=10, H=11, W=9, KH=3, KW=2, padding=[1, 0], stride=2, bias=True, epilogue="gelu"),
    dict(N=2, CI=37, CO=11, H=5, W=7, KH=1, KW=1),
    dict(CI=32, CO=6, H=12, W=10, KH=1, KW=1, stride=[2, 3], bias=True, epilogue="relu"),
]


@pytest.mark.parametrize("target", params(FAMILY))
def test_dot_products_of_few_pixel_convolutions_match_numpy(target):
    """The GEMM of a convolution with few output pixels has a dot-product form (`dot_rows` > 0:
    weight rows · rows of the transposed pixels, both along CI·KH·KW): random configs of it,
    with K tails, batch 2, stride, padding and every tile shape, match numpy on each ISA of
    the host's family, through the operator's NCHW / OIHW arguments."""
    cases = []
    for n, args in enumerate(FEW_PIXELS):
        w = _workload("conv2d_nchw", args)
        space = ops.config_space(w, target)
        dots = [c for c in space.random(np.random.default_rng(300 + n), 60) if c["dot_rows"].val > 0]
        assert len({c["dot_rows"].val for c in dots}) > 1
        cases += [(w, c) for c in dots[:6]]
    assert len(cases) == 6 * len(FEW_PIXELS)
    assert not failures(cases, target=target)


def test_dot_products_are_the_default_of_long_few_pixel_gemms_with_32_vector_registers():
    """Where 32 vector registers hold 6 × 4 accumulators and CI·KH·KW at least DOT_MIN_K_VECTORS
    vectors, the dot products come first among the configs a search measures first (then the
    GEMM's tiles, then NCHWc's), in one block of tiles over all the pixels, so the weights are
    read once per call; with AVX2's 16 registers or a short reduction the GEMM's tiles stay
    the default, and at 1×1 also where the dot products' 6 rows of weights overflow a 32 KiB L1
    (CI 2048: 48 KiB; at CI 512 and 1024 they fit), the dot products second. (The rule, for
    targets of every ISA, whatever this host runs.)"""
    avx512, avx2 = Target("cpu", "avx512"), Target("cpu", "avx2")
    resnet_3x3 = _workload("conv2d_nchw", RESNET[1])
    resnet_1x1 = _workload("conv2d_nchw", dict(CI=2048, CO=512, H=7, W=7, KH=1, KW=1))
    resnet_1x1_up = _workload("conv2d_nchw", dict(CI=512, CO=2048, H=7, W=7, KH=1, KW=1))
    resnet_1x1_s2 = _workload("conv2d_nchw", dict(CI=1024, CO=2048, H=14, W=14, KH=1, KW=1, stride=2))
    short = _workload("conv2d_nchw", dict(CI=128, CO=512, H=7, W=7, KH=1, KW=1))

    def firsts(w, target):
        return [(c.to_json()["knobs"].get("method", "gemm"), c["dot_rows"].val)
                for c in ops.preferred_configs(w, target)]

    assert firsts(resnet_3x3, avx512) == [("panel", 0), ("gemm", 4), ("gemm", 0), ("nchwc", 0)]
    assert firsts(resnet_1x1_up, avx512) == firsts(resnet_1x1_s2, avx512) == [("gemm", 4), ("gemm", 0)]
    assert firsts(resnet_1x1, avx512) == [("gemm", 0), ("gemm", 4)]
    dot = ops.preferred_configs(resnet_3x3, avx512)[1]
    assert dot["mr"].val * dot["dot_rows"].val == 24 and dot["bn"].val * dot["dot_rows"].val >= 49
    assert firsts(resnet_3x3, avx2) == [("panel", 0), ("gemm", 0), ("nchwc", 0)]
    assert firsts(resnet_1x1, avx2) == firsts(short, avx512) == [("gemm", 0)]
    narrow = _workload("conv2d_nchw", dict(N=2, CI=512, CO=4, H=7, W=5, KH=3, KW=3, padding=1, bias=True))
    narrow_dot = ops.preferred_configs(narrow, avx512)[1]
    assert firsts(narrow, avx512)[1] == ("gemm", 4) and narrow_dot["mr"].val == 4
    assert not failures([(narrow, narrow_dot)], target=avx512)


def test_im2col_gemm_configs_written_before_the_method_knob_keep_their_meaning():
    """A record of a 7² convolution written when its space was the GEMM's alone (no "method"
    knob) still parses, as the GEMM config it was."""
    w = _workload("conv2d_nchw", dict(CI=16, CO=8, H=7, W=7, KH=3, KW=3, padding=1))
    space = ops.config_space(w, TARGET)
    gemm_config = next(c for c in ops.preferred_configs(w, TARGET) if c["method"].val == "gemm").to_json()
    old = {"index": 5, "knobs": {k: v for k, v in gemm_config["knobs"].items() if k != "method"}}
    assert space.from_json(old).to_json() == gemm_config


@pytest.mark.parametrize("target", params(FAMILY))
def test_grouped_convolutions_random_configs(target):
    """Random configs of the grouped space against numpy, built for each ISA of the host's family."""
    cases = [c for n, args in enumerate(GROUPED)
             for c in sample(_workload("conv2d_nchw", args), 5, seed=200 + n, target=target)]
    assert not failures(cases, target=target)


# NCHWc shapes for the row accumulation: tails of the row's tiles, stride and padding, batch 2,
# groups, pre-packed weights, a 1×1 NCHWc kernel (grouped), several input-channel blocks.
ROW_ACCUMULATION = [
    dict(N=2, CI=24, CO=40, H=13, W=11, KH=3, KW=3, padding=1, bias=True, epilogue="relu"),
    dict(CI=16, CO=16, H=15, W=17, KH=3, KW=2, stride=[2, 1], padding=[1, 0], dilation=[1, 2]),
    dict(CI=12, CO=8, H=9, W=7, KH=3, KW=3, padding=1, groups=4, bias=True, epilogue="gelu"),
    dict(CI=16, CO=32, H=8, W=9, KH=1, KW=1, groups=2, bias=True),
    dict(CI=16, CO=32, H=7, W=7, KH=3, KW=3, padding=1, weight_layout="OIHW8i16o", bias=True),
]


@pytest.mark.parametrize("target", params(FAMILY))
def test_row_accumulation_matches_numpy(target):
    """NCHWc configs with accumulate = "row" (each register tile sums one block of input channels
    into the output row's buffer, the blocks outermost) in every parallel mode, random otherwise,
    match numpy on each ISA of the host's family."""
    cases = []
    for n, args in enumerate(ROW_ACCUMULATION):
        w = _workload("conv2d_nchw", args)
        space = ops.config_space(w, target)
        rows = [c for c in space.random(np.random.default_rng(400 + n), 80) if c["accumulate"].val == "row"]
        by_parallel = {c["parallel"].val: c for c in rows}
        assert len(by_parallel) >= 3
        cases += [(w, c) for c in by_parallel.values()]
    assert not failures(cases, target=target)


# NCHWc shapes for the tiles' transposed store: a stem (CI = 3, stride 2; 15 columns, so a tail of
# the tiles), batch 2 with the residual, groups with gelu.
TRANSPOSED_STORE = [
    dict(CI=3, CO=32, H=31, W=29, KH=3, KW=3, padding=1, stride=2, bias=True, epilogue="relu"),
    dict(N=2, CI=16, CO=64, H=9, W=13, KH=3, KW=3, padding=1, bias=True, epilogue="relu", residual=True),
    dict(CI=32, CO=64, H=7, W=11, KH=3, KW=3, padding=1, groups=2, epilogue="gelu"),
]


def test_avx512_nchwc_tiles_of_whole_vectors_are_stored_by_register_transposes():
    """Built for AVX-512, NCHWc configs whose blocks of output channels are whole vectors
    (`transposed_store_fits`) store their tiles to the NCHW output by register transposes
    (STORE_FUNC; a tail of columns by the loops), in both accumulations and every parallel mode,
    the others lane by lane; random configs of each kind match numpy where this host runs
    AVX-512. Built for AVX2 or SSE, the tiles store lane by lane."""
    target = Target("cpu", "avx512")
    cases = []
    for n, args in enumerate(TRANSPOSED_STORE):
        w = _workload("conv2d_nchw", args)
        configs = ops.config_space(w, target).random(np.random.default_rng(500 + n), 300)
        fitting = [c for c in configs if transposed_store_fits(w.args, c["oc_bn"].val, target)]
        by_parallel = {c["parallel"].val: c for c in fitting}
        picked = [*by_parallel.values(), next(c for c in fitting if c["accumulate"].val == "row"),
                  next(c for c in configs if c not in fitting)]
        assert len(by_parallel) >= 3
        for config in picked:
            stored = f"{STORE_FUNC}(" in build_workload(w, config, target).source
            assert stored == (config in fitting)
        cases += [(w, c) for c in picked]
    assert not failures(cases, target=target)
    for other in (Target("cpu", "avx2"), Target("cpu", "generic")):
        w = _workload("conv2d_nchw", TRANSPOSED_STORE[0])
        assert f"{STORE_FUNC}(" not in build_workload(w, ops.default_config(w, other), other).source


def test_groups_are_validated_and_leave_ungrouped_workloads_as_they_were():
    args = dict(CI=8, CO=16, H=8, W=8, KH=3, KW=3, padding=1, bias=True)
    plain, explicit = _workload("conv2d_nchw", args), _workload("conv2d_nchw", {**args, "groups": 1})
    assert "groups" not in explicit.args
    assert explicit.key == plain.key == "acacabdb5c4b0ec82aa1765e"  # its key before groups existed
    grouped = _workload("conv2d_nchw", {**args, "groups": 4})
    assert grouped.key != plain.key and grouped.flop * 4 == plain.flop
    assert [t.shape for t in grouped.tensors()[:2]] == [(1, 8, 8, 8), (16, 2, 3, 3)]
    with pytest.raises(WorkloadError, match="groups: 3 does not divide CI=8"):
        _workload("conv2d_nchw", {**args, "groups": 3})
    with pytest.raises(WorkloadError, match="groups: 8 does not divide CO=12"):
        _workload("conv2d_nchw", {**args, "CO": 12, "groups": 8})
    with pytest.raises(WorkloadError, match="weight_layout: grouped"):
        _workload("conv2d_nchw", {**args, "groups": 2, "weight_layout": "OIHW4i8o"})


def test_strided_pointwise_convolution_is_a_gemm_that_packs_the_pixels_it_reads():
    """A 1×1 convolution with a stride (ResNet's downsampling) is the GEMM too: the strided
    pixels are gathered, then packed, so every config packs B (the space has no other choice),
    and random configs on odd sizes and strides match numpy."""
    w = _workload("conv2d_nchw", dict(N=2, CI=11, CO=9, H=9, W=8, KH=1, KW=1, stride=[2, 3], bias=True,
                                      epilogue="relu"))
    space = ops.config_space(w, TARGET)
    assert "ic_bn" not in space.knobs and knob_choices(space, "pack_b") == [True]
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    assert [a.shape for a in built.args] == [(2, 11, 9, 8), (9, 11, 1, 1), (9,), (2, 9, 5, 3)]
    assert not failures(sample(w, 8, seed=11))


@pytest.mark.parametrize("args", [RESNET[1], dict(CI=512, CO=512, H=14, W=14, KH=3, KW=3, padding=1, stride=2),
                                  RESNET[4]])
def test_im2col_pixels_are_gathered_without_a_division_per_element(args):
    """The GEMM's gathered pixels are a stage whose loops run over (ci, kh, kw) and (oh, ow), so
    no store of it divides (each element of B's panels, packed straight from data, took a
    division and a modulo by OW, KH·KW, KW and KH: 18% of a 512@14² 3×3 stride-2 call), and the
    panels copy whole vectors of it; so do the transposed pixels of the dot-product form and of
    the panel GEMM."""
    w = _workload("conv2d_nchw", {**args, "bias": True, "epilogue": "relu"})
    space = ops.config_space(w, TARGET)
    preferred = [c.to_json()["knobs"] for c in ops.preferred_configs(w, TARGET)]
    gemm = {**next(c for c in preferred if c.get("method", "gemm") == "gemm"), "dot_rows": 0}
    configs = [("pixels[", {k: v for k, v in gemm.items() if k in space.knobs})]
    if "dot_rows" in space.knobs:
        configs += [("pixels_t[", {**gemm, "dot_rows": 4})]
        configs += [("pixels_t[", c) for c in preferred if c.get("method") == "panel"]
    for stage, knobs in configs:
        source = build_workload(w, space.from_json({"knobs": knobs}), TARGET).source
        stores = [line for line in source.splitlines() if line.strip().startswith(stage)]
        assert stores and not [line for line in stores if "/" in line or "%" in line]
        panels = any(line.strip().startswith("*(") and "pixels_packed" in line for line in source.splitlines())
        assert panels == (stage == "pixels[")  # the dot products and the panel GEMM read the pixels in place


def test_tile_columns_pads_a_prime_width_instead_of_taking_one_column():
    """The default's output columns per register tile: a divisor of OW where one fits the
    registers' width range, else the width with the fewest padded columns (widest on a tie)."""
    assert tile_columns(56, 28) == 28 and tile_columns(28, 14) == 14
    assert tile_columns(7, 7) == 7
    assert tile_columns(73, 28) == 25  # 3 tiles, 2 columns padded (a divisor: 1)
    assert tile_columns(58, 28) == 20  # 2·29: 3 tiles, 2 padded (a divisor: 2)
    assert tile_columns(73, 14) == 11


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("target", params(FAMILY))
def test_default_tiles_a_prime_output_width_and_matches_numpy(op, target):
    """A layer of 73 output columns (Inception-v3's 73×73 stage; prime): the default config's
    register tile spans several columns, not the single one a divisor rule gives, and its
    guarded last tile computes the right values on each ISA of the host's family."""
    w = _workload(op, dict(CI=8, CO=8, H=4, W=73, KH=3, KW=3, padding=1, bias=True, epilogue="relu"))
    config = ops.default_config(w, target)
    assert config["reg_n"].val >= 4
    assert not failures([(w, config)], target=target)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (GNU binutils) is not installed")
@pytest.mark.parametrize("args", [
    dict(CI=512, CO=512, H=7, W=7, KH=3, KW=3, padding=1, weight_layout="OIHW16i32o"),  # 7 columns × 2 vectors
    dict(CI=128, CO=128, H=28, W=28, KH=3, KW=3, padding=1),  # 14 columns × 2 vectors
])
def test_nchwc_register_tile_stays_in_the_registers(args):
    """AVX-512 defaults (built, not run) whose register tile fits the 32 vector registers: no FMA of
    the kernel reads an accumulator from the stack. With bias and relu applied per lane, GCC hoisted
    the epilogue's 0.0f constants into vector registers and spilled an accumulator of the 7-column
    tile, which then ran at half its speed."""
    target = Target("cpu", "avx512")
    w = _workload("conv2d_nchw", {**args, "bias": True, "epilogue": "relu"})
    fmas = _fmas(build_workload(w, ops.default_config(w, target), target).so_path)
    assert fmas and not [line for line in fmas if "(%rsp)" in line]


def _fmas(so_path) -> list[str]:
    """The FMA instructions of a built kernel, as objdump disassembles them."""
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so_path], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in asm.splitlines() if "vfmadd" in line]


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (GNU binutils) is not installed")
@pytest.mark.parametrize("args", [
    dict(CI=16, CO=64, H=13, W=13, KH=3, KW=3, padding=1),  # 13 columns: 4 tiles of 3, the last guarded
    dict(N=2, CI=8, CO=40, H=27, W=28, KH=3, KW=3, padding=1, stride=2),  # CO: a block and a padded one
    dict(CI=16, CO=32, H=7, W=7, KH=3, KW=3, padding=1, weight_layout="OIHW8i32o"),  # 7 columns in 9
])
def test_avx2_default_tile_is_three_columns_by_four_vectors_in_the_registers(args):
    """Built for AVX2, a 3×3 layer with room for 4 vectors of output channels takes the default
    tile of 3 columns × 4 vectors (oneDNN's AVX2 blocking): 12 accumulators and the broadcast in
    the 16 registers, no FMA reading the stack, the weights FMA memory operands; the kernel
    matches numpy where this host runs AVX2."""
    target = Target("cpu", "avx2")
    w = _workload("conv2d_nchw", {**args, "bias": True, "epilogue": "relu"})
    config = _nchwc_default(w, target)
    assert (config["reg_n"].val, config["oc_bn"].val // target.lanes("float32")) == (3, 4)
    fmas = _fmas(build_workload(w, config, target).so_path)
    assert fmas and not [line for line in fmas if "(%rsp)" in line]
    assert [line for line in fmas if "(%r" in line]
    assert not failures([(w, config)], target=target)


def test_nchwc_configs_written_before_the_accumulate_knob_keep_their_meaning():
    """A record of an NCHWc config written before the knob "accumulate" existed parses as the
    tile accumulation it was, and builds the same kernel source."""
    w = _workload("conv2d_nchw", dict(CI=16, CO=32, H=9, W=9, KH=3, KW=3, padding=1, bias=True))
    target = Target("cpu", "avx2")
    space = ops.config_space(w, target)
    tile = space.from_json({"knobs": {**ops.default_config(w, target).to_json()["knobs"], "accumulate": "tile"}})
    old = {"knobs": {k: v for k, v in tile.to_json()["knobs"].items() if k != "accumulate"}}
    assert space.from_json(old).to_json() == tile.to_json()
    assert build_workload(w, space.from_json(old), target).source == build_workload(w, tile, target).source


def test_avx2_nchwc_defaults_accumulate_by_rows():
    """The rule, for targets of every ISA whatever this host runs: built for AVX2, the default 3 ×
    4-vector tile sums one block of input channels at a time into the output row (accumulate
    "row") at stride 1 and where the tasks pack their weights themselves; a strided layer whose
    weights are packed beforehand, AVX-512 and SSE keep the tile's whole reduction. At 7 output
    columns AVX2 takes 2 vectors × 4 columns by rows instead."""
    avx2, avx512, generic = Target("cpu", "avx2"), Target("cpu", "avx512"), Target("cpu", "generic")

    def default(args, target):
        knobs = ops.default_config(_workload("conv2d_nchw", args), target).to_json()["knobs"]
        return knobs["parallel"], knobs["accumulate"]

    strided_packw = dict(CI=256, CO=512, H=28, W=28, KH=3, KW=3, padding=1, stride=2)
    assert default(RESNET[0], avx2) == ("n_oc_oh", "row")
    assert default(strided_packw, avx2) == ("n_oc_packw", "row")
    assert default(RESNET[2], avx2) == ("n_oc_oh", "tile")
    assert default(RESNET[0], avx512)[1] == default(RESNET[0], generic)[1] == "tile"
    # 7 output columns: 3-column tiles would compute 9, so 2 vectors × 4 columns (4 + 3), by rows
    # (per call, and as the layout a model bundle pre-packs the weights to), also at stride 2
    seven = _workload("conv2d_nchw", dict(RESNET[1], stride=1))
    nchwc = _nchwc_default(seven, avx2).to_json()["knobs"]
    assert (nchwc["nchwc_oc_bn"], nchwc["nchwc_reg_n"], nchwc["nchwc_accumulate"]) == (16, 4, "row")
    for args in (RESNET[1], dict(CI=512, CO=512, H=14, W=14, KH=3, KW=3, padding=1, stride=2)):
        packed = with_prepacked_weights(_workload("conv2d_nchw", args), avx2)
        knobs = _nchwc_default(packed, avx2).to_json()["knobs"]
        assert (packed.args["weight_layout"], knobs["reg_n"], knobs["accumulate"]) == ("OIHW8i16o", 4, "row")
    assert ops.default_config(seven, generic)["method"].val == "gemm"
    assert _nchwc_default(seven, generic)["nchwc_reg_n"].val == 3


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (GNU binutils) is not installed")
@pytest.mark.parametrize("layout", ["OIHW8i8o", "OIHW8i16o", "OIHW16i16o", "OIHW16i32o"])
def test_avx2_default_tile_for_pre_packed_weights_fits_the_registers(layout):
    """Built for AVX2: the default tile over the layout's output-channel vectors spans at least 3
    columns and no FMA of the kernel reads a spilled accumulator from the stack (7 columns × 2
    vectors did; with 4 vectors the old register budget, counting the weight vectors, which are
    FMA memory operands, left 1 column)."""
    target = Target("cpu", "avx2")
    w = _workload("conv2d_nchw", dict(CI=512, CO=512, H=7, W=7, KH=3, KW=3, padding=1, weight_layout=layout))
    configs = ops.preferred_configs(w, target)  # with blocks of 2 vectors the panel GEMM's default first
    assert [c["method"].val for c in configs] == (["gemm", "nchwc"] if layout.endswith("i16o") else ["nchwc", "gemm"])
    assert _nchwc_default(w, target)["reg_n"].val >= 3
    for config in configs:
        fmas = _fmas(build_workload(w, config, target).so_path)
        assert fmas and not [line for line in fmas if "(%rsp)" in line]


def test_configs_written_before_the_panel_method_keep_their_indices():
    """The panel GEMM is the third choice of "method", so the im2col GEMM's and NCHWc's configs
    of a 7² convolution keep the indices they had before it (written down then, for AVX2 and
    AVX-512), and records holding them parse as what they were."""
    w = _workload("conv2d_nchw", dict(CI=16, CO=8, H=7, W=7, KH=3, KW=3, padding=1))
    written = {"avx2": [{"index": 21581, "knobs": {
        "method": "gemm", "mr": 6, "nr": 16, "ku": 4, "bm": 1, "bn": 1, "order": "nm_nm", "parallel": "fused",
        "pack_b": True, "pack_a": False, "kc": 144, "dot_rows": 0}}, {"index": 1290378, "knobs": {
        "method": "nchwc", "nchwc_ic_bn": 8, "nchwc_oc_bn": 8, "nchwc_reg_n": 7, "nchwc_order": "ic_kh_kw_icb",
        "nchwc_unroll_kw": False, "nchwc_parallel": "n_oc_oh", "nchwc_accumulate": "tile"}}],
        "avx512": [{"index": 21591, "knobs": {
            "method": "gemm", "mr": 8, "nr": 48, "ku": 4, "bm": 1, "bn": 1, "order": "nm_nm", "parallel": "fused",
            "pack_b": True, "pack_a": False, "kc": 144, "dot_rows": 0}}, {"index": 1290379, "knobs": {
                "method": "nchwc", "nchwc_ic_bn": 16, "nchwc_oc_bn": 8, "nchwc_reg_n": 7, "nchwc_order": "ic_kh_kw_icb",
                "nchwc_unroll_kw": False, "nchwc_parallel": "n_oc_oh", "nchwc_accumulate": "tile"}}]}
    for isa, records in written.items():
        space = ops.config_space(w, Target("cpu", isa))
        assert [space.from_json(r).to_json() for r in records] == records
        assert [space.get(r["index"]).to_json() for r in records] == records


@pytest.mark.parametrize("target", params(FAMILY))
def test_panel_gemm_of_oihw_weights_matches_numpy(target):
    """Random configs of the "panel" method (the pixels × OIHW weights packed into panels per
    call, by register transposes where no panel is padded) of convolutions with few output
    pixels match numpy on each ISA of the host's family; the weight argument keeps its OIHW shape."""
    cases = []
    for n, args in enumerate([FEW_PIXELS[0], FEW_PIXELS[1], dict(CI=8, CO=32, H=8, W=8, KH=3, KW=3, padding=1)]):
        w = _workload("conv2d_nchw", args)
        space = ops.config_space(w, target)
        panels = [c for c in space.random(np.random.default_rng(700 + n), 60) if c["method"].val == "panel"][:5]
        assert len(panels) == 5 and {c["panel_pack_b"].val for c in panels} <= {True, "block"}
        cases += [(w, c) for c in panels]
    built = build_workload(*cases[0], target)
    assert {a.name: a.shape for a in built.args}["weight"] == (9, 13, 3, 3)
    assert not failures(cases, target=target)


def test_per_call_panel_default_packs_each_panel_right_before_its_tiles_read_it():
    """The panel GEMM's default over OIHW weights packs the weights per block of one panel inside
    the parallel loop over the panels (each thread packs the panel its tiles read next), not in a
    pass over all of them first. (The rule, for targets of every ISA with vectors of at least 32
    bytes, whatever this host runs.)"""
    for isa in ("avx512", "avx2"):
        target = Target("cpu", isa)
        for args in (RESNET[1], dict(CI=512, CO=512, H=14, W=14, KH=3, KW=3, padding=1, stride=2)):
            knobs = ops.default_config(_workload("conv2d_nchw", args), target).to_json()["knobs"]
            assert knobs["method"] == "panel", (isa, knobs)
            assert (knobs["panel_pack_b"], knobs["panel_parallel"], knobs["panel_bn"]) == ("block", "outer", 1), knobs


def test_gemm_tiles_come_first_where_the_pixels_fill_their_panels():
    """At 8² (64 pixels: whole panels of 2 vectors, AVX-512's and AVX2's) the GEMM's tiles lead
    the configs a search measures first, the panel GEMM second; at 7² the panel GEMM stays first
    (the rule for both ISAs, whatever this host runs). The host's first default at 8² matches
    numpy."""
    def firsts(args, target):
        return [(c.to_json()["knobs"]["method"], c.to_json()["knobs"].get("dot_rows"))
                for c in ops.preferred_configs(_workload("conv2d_nchw", args), target)][:2]

    inception = dict(CI=448, CO=384, H=8, W=8, KH=3, KW=3, padding=1, bias=True, epilogue="relu")
    for isa in ("avx512", "avx2"):
        assert firsts(inception, Target("cpu", isa)) == [("gemm", 0), ("panel", None)]
        assert firsts(RESNET[1], Target("cpu", isa))[0] == ("panel", None)
    small = _workload("conv2d_nchw", dict(CI=16, CO=24, H=8, W=8, KH=1, KW=3, padding=[0, 1], bias=True))
    assert not failures([(small, ops.default_config(small, TARGET))], target=TARGET)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (GNU binutils) is not installed")
def test_avx2_per_call_panel_default_fits_the_registers():
    """Built for AVX2, the default of a 7² layer over OIHW weights is the panel GEMM, whose tiles
    of 5 rows × 2 vectors keep their accumulators in registers: no FMA reads the stack."""
    target = Target("cpu", "avx2")
    w = _workload("conv2d_nchw", dict(CI=512, CO=512, H=7, W=7, KH=3, KW=3, padding=1, bias=True, epilogue="relu"))
    config = ops.default_config(w, target)
    assert (config["method"].val, config["panel_mr"].val, config["panel_nr"].val) == ("panel", 5, 16)
    fmas = _fmas(build_workload(w, config, target).so_path)
    assert fmas and not [line for line in fmas if "(%rsp)" in line]


# Pre-packed weights over few output pixels (the panel GEMM's space): channel counts that leave
# a partly padded block of output channels, stride / padding / dilation, batch 2, a 1×1 kernel,
# more pixels than IM2COL_MAX_PIXELS.
PANEL_GEMM = [
    dict(CI=16, CO=32, H=7, W=7, KH=3, KW=3, padding=1, weight_layout="OIHW8i16o", bias=True, epilogue="relu"),
    dict(N=2, CI=12, CO=20, H=7, W=5, KH=3, KW=2, stride=[2, 1], padding=[1, 0], dilation=[1, 2],
         weight_layout="OIHW4i8o", epilogue="gelu"),
    dict(CI=8, CO=24, H=5, W=6, KH=1, KW=1, weight_layout="OIHW8i16o", bias=True),
    dict(CI=8, CO=16, H=10, W=11, KH=3, KW=3, padding=1, weight_layout="OIHW8i16o", epilogue="relu"),  # 110 pixels
]


@pytest.mark.parametrize("target", params(FAMILY))
def test_panel_gemm_of_pre_packed_weights_matches_numpy(target):
    """Random configs of the "gemm" method of convolutions whose weights come pre-packed (the
    OIHW<i>i<o>o array read in place as the panels of B, the pixels gathered in its k order)
    match numpy on each ISA of the host's family; the kernel's weight argument keeps the
    pre-packed shape."""
    cases = []
    for n, args in enumerate(PANEL_GEMM):
        w = _workload("conv2d_nchw", args)
        space = ops.config_space(w, target)
        gemms = [c for c in space.random(np.random.default_rng(500 + n), 40) if c["method"].val == "gemm"][:4]
        assert len(gemms) == 4 and {c["gemm_nr"].val for c in gemms} == {packed_blocks(w.args)[1]}
        cases += [(w, c) for c in gemms]
    built = build_workload(*cases[0], target)
    assert {a.name: a.shape for a in built.args}["weight"] == (2, 2, 3, 3, 8, 16)
    assert not failures(cases, target=target)


def test_pre_packed_configs_written_before_the_panel_gemm_keep_their_meaning():
    """A record of a pre-packed 7² convolution written when its space was NCHWc's alone (no
    "method" knob) parses as that NCHWc config and builds the same kernel source."""
    w = _workload("conv2d_nchw", PANEL_GEMM[0])
    target = Target("cpu", "avx2")
    space = ops.config_space(w, target)
    nchwc = _nchwc_default(w, target)
    old = {"index": 3, "knobs": {k: v for k, v in nchwc.to_json()["knobs"].items() if k != "method"}}
    assert space.from_json(old).to_json() == nchwc.to_json()
    assert build_workload(w, space.from_json(old), target).source == build_workload(w, nchwc, target).source


def test_pre_packed_few_pixel_defaults_by_isa():
    """The rule, for targets of every ISA whatever this host runs: built for AVX2 a pre-packed 7²
    layer's first default is the panel GEMM, 5 rows of pixels per tile (50 computed for 49; 6
    would compute 54) and one block of rows holding all of them (each panel of weights read once);
    AVX-512 and SSE keep NCHWc first; so do AVX2 blocks of 4 vectors (OIHW8i32o). Built for AVX2
    model bundles pre-pack to blocks of 2 vectors (OIHW8i16o) at 14² too, and 1×1 layers at 7²
    (at most IM2COL_MAX_PIXELS pixels) on AVX2 for the panel GEMM and on AVX-512 to the NCHWc
    default's blocks; SSE reads them in place."""
    args = dict(RESNET[1], bias=True, epilogue="relu")
    preferred = {isa: ops.preferred_configs(with_prepacked_weights(_workload("conv2d_nchw", args), Target("cpu", isa)),
                                            Target("cpu", isa)) for isa in ("avx2", "avx512", "generic")}
    assert {isa: [c["method"].val for c in configs] for isa, configs in preferred.items()} == {
        "avx2": ["gemm", "nchwc"], "avx512": ["nchwc", "gemm"], "generic": ["nchwc", "gemm"]}
    knobs = preferred["avx2"][0].to_json()["knobs"]
    assert (knobs["gemm_mr"], knobs["gemm_nr"], knobs["gemm_bm"] >= 10, knobs["gemm_pack_b"]) == (5, 16, True, False)
    fourteen = with_prepacked_weights(_workload("conv2d_nchw", dict(args, H=14, W=14)), Target("cpu", "avx2"))
    assert fourteen.args["weight_layout"] == "OIHW8i16o"
    assert ops.default_config(fourteen, Target("cpu", "avx2"))["method"].val == "gemm"
    four_vectors = _workload("conv2d_nchw", dict(args, weight_layout="OIHW8i32o"))
    assert ops.default_config(four_vectors, Target("cpu", "avx2"))["method"].val == "nchwc"
    # 1×1 layers at 7² (also strided from 14²) pre-pack for the panel GEMM on AVX2, for NCHWc on AVX-512
    for pointwise in (dict(CI=2048, CO=512, H=7, W=7, KH=1, KW=1), dict(CI=1024, CO=2048, H=14, W=14, KH=1, KW=1,
                                                                           stride=2)):
        w = _workload("conv2d_nchw", pointwise)
        packed = with_prepacked_weights(w, Target("cpu", "avx2"))
        assert packed.args["weight_layout"] == "OIHW8i16o"
        assert ops.default_config(packed, Target("cpu", "avx2"))["method"].val == "gemm"
        wide = with_prepacked_weights(w, Target("cpu", "avx512"))
        assert wide.args["weight_layout"] == "OIHW8i32o"  # NCHWc's 7 columns × 2 vectors, half-vector input blocks
        assert ops.default_config(wide, Target("cpu", "avx512"))["method"].val == "nchwc"
        assert with_prepacked_weights(w, Target("cpu", "generic")) is w
    assert with_prepacked_weights(_workload("conv2d_nchw", RESNET[3]), Target("cpu", "avx2")).args == \
        _workload("conv2d_nchw", RESNET[3]).args  # 1×1 at 56²: read in place


# Residual sums (a shortcut's Add fused before the activation): NCHWc with tails and batch 2,
# a 7² layer (im2col GEMM, its dot products, NCHWc, the per-call panel GEMM), pre-packed weights
# (NCHWc, the panel GEMM), 1×1 GEMMs over data in place and strided, a grouped convolution.
RESIDUAL = [
    dict(N=2, CI=24, CO=40, H=13, W=11, KH=3, KW=3, padding=1, bias=True, epilogue="relu"),
    dict(CI=16, CO=24, H=7, W=7, KH=3, KW=3, padding=1, bias=True, epilogue="relu"),
    dict(CI=16, CO=32, H=7, W=7, KH=3, KW=3, padding=1, weight_layout="OIHW8i16o", epilogue="relu"),
    dict(N=2, CI=19, CO=21, H=5, W=7, KH=1, KW=1, bias=True, epilogue="relu"),
    dict(CI=16, CO=40, H=14, W=14, KH=1, KW=1, stride=2, bias=True),
    dict(CI=12, CO=8, H=9, W=7, KH=3, KW=3, padding=1, groups=4, epilogue="gelu"),
]


def _form(config) -> str:
    knobs = config.to_json()["knobs"]
    return f"{knobs.get('method', '-')}/{'dot' if knobs.get('dot_rows') else 'tiles'}"


@pytest.mark.parametrize("target", params(FAMILY))
def test_residual_sum_matches_numpy_in_every_method(target):
    """out = epilogue(conv + bias + residual): the default and one random config of each form the
    space holds (method, and for the im2col GEMM tiles or dot products) match numpy on each ISA of
    the host's family, the residual an argument between the bias and the output."""
    cases = []
    for n, args in enumerate(RESIDUAL):
        w = _workload("conv2d_nchw", {**args, "residual": True})
        forms = {_form(c): c for c in reversed(ops.config_space(w, target).random(np.random.default_rng(600 + n), 60))}
        cases += [(w, ops.default_config(w, target)), *((w, c) for c in forms.values())]
    assert {_form(c) for _, c in cases} >= {"nchwc/tiles", "gemm/tiles", "gemm/dot", "panel/tiles", "-/tiles"}
    assert [a.name for a in cases[0][0].tensors()] == ["data", "weight", "bias", "residual", "out"]
    assert not failures(cases, target=target)


def test_residual_is_left_out_of_workloads_without_one():
    """A workload without a residual keeps the args (and key) it had before the argument existed."""
    args = dict(N=1, CI=8, CO=16, H=8, W=8, KH=3, KW=3, padding=1, bias=True)
    assert "residual" not in _workload("conv2d_nchw", args).args
    assert _workload("conv2d_nchw", {**args, "residual": False}).key == _workload("conv2d_nchw", args).key
    assert _workload("conv2d_nchw", {**args, "residual": True}).key != _workload("conv2d_nchw", args).key
