"""matmul and its fused variants, built from random configs of the CPU template's space
over shapes no tile divides, checked against numpy; the default config; bad arguments."""

import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from isa_targets import FAMILY, params
from ops_check import failures

from tunefleet.compiler import ops
from tunefleet.compiler.build import BASE_FLAGS
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.ops.conv2d import out_size
from tunefleet.compiler.ops.matmul import BALANCED_THREADS, MIN_PARALLEL_TASKS, share_imbalance
from tunefleet.compiler.target import CPU_ISAS, Target
from tunefleet.compiler.toolchain import compiler_command

TARGET = Target.host()
SHAPES = [(1, 1, 1), (17, 33, 65), (127, 255, 129), (512, 512, 512)]
VARIANTS = [{}, {"bias": True, "epilogue": "relu"}, {"bias": True, "epilogue": "gelu"}, {"epilogue": "relu"}]
CONFIGS_PER_CASE = {(1, 1, 1): 4, (17, 33, 65): 6, (127, 255, 129): 6, (512, 512, 512): 2}


def check(workload, config, seed):
    built = build_workload(workload, config, TARGET)
    rng = np.random.default_rng(seed)
    inputs = ops.random_inputs(workload.tensors(), rng)
    (out,) = built.run(*inputs)
    (ref,) = workload.reference(*inputs)
    err = np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-6)
    return err, config.to_json()["knobs"]


def cases():
    rng = np.random.default_rng(2026)
    for shape in SHAPES:
        for variant in VARIANTS:
            w = ops.make_workload("matmul", dict(M=shape[0], N=shape[1], K=shape[2], **variant))
            space = ops.config_space(w, TARGET)
            for config in space.random(rng, CONFIGS_PER_CASE[shape]):
                yield w, config


def test_random_configs_match_numpy():
    all_cases = list(cases())
    assert len(all_cases) >= 50
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: (c[0], *check(c[0], c[1], 0)), all_cases))
    bad = [(w.args, knobs, err) for w, err, knobs in results if not err < 1e-4]
    assert not bad, bad


@pytest.mark.parametrize("shape", SHAPES)
def test_default_config_matches_numpy(shape):
    w = ops.make_workload("matmul", {"M": shape[0], "N": shape[1], "K": shape[2], "bias": True, "epilogue": "relu"})
    err, _ = check(w, ops.default_config(w, TARGET), 1)
    assert err < 1e-4


def test_float64():
    w = ops.make_workload("matmul", {"M": 33, "N": 40, "K": 21, "dtype": "float64"})
    err, _ = check(w, ops.default_config(w, TARGET), 2)
    assert err < 1e-12


#: vector registers of each CPU ISA (x86-64: 16 ymm/xmm, 32 zmm with AVX-512; Armv8: 32)
VECTOR_REGISTERS = {"avx512": 32, "avx2": 16, "generic": 16, "neon": 32}


@pytest.mark.parametrize("isa", CPU_ISAS)
@pytest.mark.parametrize("N", [1024, 40, 5])
def test_default_register_tile_fits_the_vector_registers(N, isa):
    """For every ISA (a config rule, nothing built): the mr x nr/lanes accumulators, the
    nr/lanes vectors of B and A's broadcast fit the ISA's vector registers, with at least 6
    accumulators to cover the FMA latency."""
    target = Target("cpu", isa)
    w = ops.make_workload("matmul", {"M": 1024, "N": N, "K": 1024})
    knobs = ops.default_config(w, target).to_json()["knobs"]
    lanes = target.lanes("float32")
    vectors = -(-knobs["nr"] // lanes)
    accumulators = knobs["mr"] * vectors
    # B packed when larger than half the L2 (N 1024), or when blocks of columns do not divide N
    assert bool(knobs["pack_b"]) is (N == 1024 or N % (knobs["nr"] * knobs["bn"]) != 0)
    assert 6 <= accumulators and accumulators + vectors + 1 <= VECTOR_REGISTERS[isa]
    assert knobs["nr"] <= max(N, lanes)


def innermost_loops(assembly: str) -> list[list[str]]:
    """The instructions of each innermost loop of GCC's assembly output: from a label to a
    backward jump to it, with no such loop inside."""
    lines = [x.strip() for x in assembly.splitlines()]
    labels = {x[:-1]: i for i, x in enumerate(lines) if re.fullmatch(r"\.L\d+:", x)}
    spans = [(labels[m.group(1)], i) for i, x in enumerate(lines)
             if (m := re.fullmatch(r"j\w+\s+(\.L\d+)", x)) and labels.get(m.group(1), i) < i]
    return [lines[a + 1:b] for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]


@pytest.mark.parametrize("isa, op, args", [
    ("avx2", "matmul", {"M": 1024, "N": 1024, "K": 1024}),  # 6 × 2 vectors
    ("avx2", "matmul", {"M": 512, "N": 512, "K": 512}),
    ("avx512", "matmul", {"M": 1024, "N": 1024, "K": 1024}),  # 6 × 4 vectors
    ("avx512", "conv2d_nchw", {"N": 1, "CI": 1024, "CO": 256, "H": 14, "W": 14, "KH": 1, "KW": 1}),  # 12 × 2
])
def test_the_default_tile_keeps_its_operands_in_registers(isa, op, args):
    """Built for AVX2 (16 vector registers: 12 accumulators, 2 vectors of B, a broadcast of
    A) or AVX-512 (32: 24 accumulators, 2-4 vectors of B, a broadcast), the default tile's loop
    over K touches no stack slot: GCC 12 unrolled by 4 there spilled registers in the loop (the
    default's ku 2: 1.04-1.08× on AVX2, 1.03-1.19× on AVX-512). Compiled only (`gcc -S`), so it
    holds on any host."""
    target = Target("cpu", isa)
    w = ops.make_workload(op, args)
    built = build_workload(w, ops.default_config(w, target), target)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.c"
        source.write_text(built.source)
        assembly = subprocess.run([*compiler_command(), *BASE_FLAGS, *target.cflags, "-S", "-o", "-", str(source)],
                                  capture_output=True, text=True, check=True).stdout
    tiles = [b for b in innermost_loops(assembly) if sum(x.startswith("vfmadd") for x in b) >= 12]
    assert tiles
    assert not [x for b in tiles for x in b if "%rsp" in x]


#: (rows, columns) knobs of the register tiles of the CPU templates, as their spaces name them
REGISTER_TILES = [("mr", "nr"), ("panel_mr", "panel_nr"), ("nchwc_reg_n", "nchwc_oc_bn"), ("reg_n", "oc_bn"),
                  ("tile_h", "tile_w")]
CONV_3X3 = {"N": 1, "KH": 3, "KW": 3, "padding": [1, 1]}


@pytest.mark.parametrize("isa", CPU_ISAS)
@pytest.mark.parametrize("op, args", [
    ("matmul", {"M": 1024, "N": 1024, "K": 1024}),
    ("conv2d_nchw", {**CONV_3X3, "CI": 512, "CO": 512, "H": 7, "W": 7}),  # im2col GEMM, NCHWc, panel GEMM
    ("conv2d_nchw", {**CONV_3X3, "CI": 64, "CO": 64, "H": 56, "W": 56}),
    ("conv2d_nhwc", {**CONV_3X3, "CI": 64, "CO": 64, "H": 56, "W": 56}),
    ("depthwise_conv2d_nchw", {**CONV_3X3, "C": 32, "H": 112, "W": 112}),
])
def test_the_search_proposes_no_register_tile_that_overflows_the_vector_registers(op, args, isa):
    """For every ISA (spaces only, nothing built): random configs, mutations and steps of the
    templates' spaces keep each register tile's accumulators (rows × vectors of columns) within
    the ISA's vector registers less one (for A's broadcast); the spaces still hold tiles up to
    that bound, and a spilling config of the space still parses (records of one stay readable)."""
    target = Target("cpu", isa)
    lanes, registers = target.lanes("float32"), VECTOR_REGISTERS[isa]
    w = ops.make_workload(op, args)
    space = ops.config_space(w, target)
    rng = np.random.default_rng(7)
    configs = space.random(rng, 300)
    configs += [space.mutate(c, rng) for c in configs] + [space.step(c, rng) for c in configs]
    accumulators, largest = [], 0
    for rows, cols in (t for t in REGISTER_TILES if t[0] in space.knobs):
        largest = max([largest] + [r * -(-c // lanes) for r in space.knobs[rows].choices
                                   for c in space.knobs[cols].choices if r * -(-c // lanes) < registers])
        accumulators += [c[rows].val * -(-c[cols].val // lanes) for c in configs if rows in c.to_json()["knobs"]]
    assert accumulators and max(accumulators) == largest  # the largest tile that fits, and none larger
    rows, cols = next(t for t in REGISTER_TILES if t[0] in space.knobs)
    widest = space.knobs[cols].choices[-1]
    spilling = next(c for c in map(space.get, range(space.size))
                    if c[rows].val * -(-c[cols].val // lanes) >= registers and c[cols].val == widest)
    assert not space.valid(spilling) and space.from_json(spilling.to_json()) == spilling


@pytest.mark.parametrize("isa", CPU_ISAS)
@pytest.mark.parametrize("M", [1, 3])
def test_default_for_skinny_a_reads_b_in_place_and_splits_n(M, isa):
    """GEMV-like shapes (a config rule, nothing built): B is read in place (no packing pass
    for so few rows), the register tile still fits the vector registers, and N is split into
    at least MIN_PARALLEL_TASKS blocks for the threads."""
    target = Target("cpu", isa)
    w = ops.make_workload("matmul", {"M": M, "N": 3072, "K": 768})
    knobs = ops.default_config(w, target).to_json()["knobs"]
    vectors = -(-knobs["nr"] // target.lanes("float32"))
    assert knobs["pack_b"] is False and knobs["mr"] <= M
    assert knobs["mr"] * vectors + vectors + 1 <= VECTOR_REGISTERS[isa]
    assert -(-3072 // (knobs["nr"] * knobs["bn"])) >= MIN_PARALLEL_TASKS


def test_share_imbalance_of_blocks_at_the_edge_of_n():
    """86 × 13 register tiles in blocks of 8 × 8: the blocks of N hold 8 and 5 tiles; 2 threads
    take the first 11 and the last 11 of the 22 blocks, so one computes the first block of N
    (8 × 86 tiles) and the other the rest; with 4 threads the 22 blocks split 6, 6, 5, 5."""
    assert share_imbalance(86, 13, 8, 8, 2) == pytest.approx(8 * 86 * 2 / (86 * 13))
    assert share_imbalance(86, 13, 8, 8, 4) == pytest.approx((6 * 8 * 8) * 4 / (86 * 13))
    assert share_imbalance(86, 13, 1, 1, 2) == 1.0
    assert share_imbalance(86, 13, 1, 1, 4) == pytest.approx(280 * 4 / (86 * 13))  # 280, 280, 279, 279 blocks
    assert share_imbalance(16, 16, 4, 4, 4) == 1.0


@pytest.mark.parametrize("isa", CPU_ISAS)
@pytest.mark.parametrize("op, args", [
    ("matmul", {"M": 512, "N": 512, "K": 512}), ("matmul", {"M": 256, "N": 256, "K": 256}),
    ("conv2d_nchw", {"CI": 256, "CO": 512, "H": 56, "W": 56, "KH": 1, "KW": 1, "stride": 2}),
    ("conv2d_nchw", {"CI": 128, "CO": 512, "H": 28, "W": 28, "KH": 1, "KW": 1}),
    ("conv2d_nchw", {"CI": 1024, "CO": 256, "H": 14, "W": 14, "KH": 1, "KW": 1}),
    ("conv2d_nchw", {"CI": 64, "CO": 64, "H": 56, "W": 56, "KH": 1, "KW": 1}),
])
def test_default_blocks_share_the_tiles_evenly(op, args, isa):
    """The default's blocks give 2 and 4 threads nearly equal numbers of register tiles (a
    config rule, nothing built): before even_blocks, ResNet-50's 1×1 layers at 28² gave one of
    2 threads 1.23 × an even share on AVX-512, the layers at 14² likewise on AVX2."""
    w = ops.make_workload(op, {"N": 1, **args} if op.startswith("conv") else args)
    knobs = ops.default_config(w, Target("cpu", isa)).to_json()["knobs"]
    M, N = (w.args["CO"], out_size(w.args)[0] * out_size(w.args)[1]) if op.startswith("conv") else (args["M"], args["N"])
    m_tiles, n_tiles = -(-M // knobs["mr"]), -(-N // knobs["nr"])
    assert max(share_imbalance(m_tiles, n_tiles, knobs["bm"], knobs["bn"], t) for t in BALANCED_THREADS) < 1.05


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_default_packs_b_per_block_where_the_threads_reread_little_of_a(isa):
    """A config rule, nothing built: where B is packed and splits into enough blocks of N,
    AVX-512 packs it per block inside the parallel loop; AVX2 only where A fits half the L2
    (each block of N reads all of A again: BERT's 128 × 768 → 3072, not 1024³)."""
    target = Target("cpu", isa)
    for (M, N, K), small_a in (((128, 3072, 768), True), ((1024, 1024, 1024), False)):
        knobs = ops.default_config(ops.make_workload("matmul", {"M": M, "N": N, "K": K}), target).to_json()["knobs"]
        blocked = isa == "avx512" or small_a
        assert knobs["pack_b"] == ("block" if blocked else True), (M, N, K, knobs)
        assert knobs["parallel"] == ("outer" if blocked else "fused")


@pytest.mark.parametrize("isa", CPU_ISAS)
def test_default_tile_width_computes_few_columns_beyond_n(isa):
    """The GEMMs of ResNet-50's 1×1 layers with B packed (a config rule, nothing built; the
    convolutions themselves read B in place, conv2d.gemm_conv_default): at 14² (196 pixels) AVX-512
    tiles of 2 vectors (7 × 32 = 224 columns computed) instead of 4 (4 × 64 = 256), with twice the
    rows; at 28² (784 = 12.25 × 64) the widest tile wastes little and stays. The other ISAs' tiles
    are as wide at both. Every tile fits the vector registers."""
    target = Target("cpu", isa)
    lanes = target.lanes("float32")
    widths = {}
    for hw in (14, 28):
        w = ops.make_workload("matmul", {"M": 256, "N": hw * hw, "K": 1024})
        knobs = ops.default_config(w, target).to_json()["knobs"]
        vectors = -(-knobs["nr"] // lanes)
        assert knobs["mr"] * vectors + vectors + 1 <= VECTOR_REGISTERS[isa]
        widths[hw] = vectors
    assert widths == ({14: 2, 28: 4} if isa == "avx512" else {14: widths[28], 28: widths[28]})  # others: 2 vectors


@pytest.mark.parametrize("args, field", [
    ({"M": 0, "N": 4, "K": 4}, "M"), ({"M": 4, "N": -3, "K": 4}, "N"), ({"M": 4, "N": 4, "K": 4, "epilogue": "tanh"},
                                                                      "epilogue"),
    ({"M": 4, "N": 4, "K": 4, "colour": 1}, "colour"), ({"M": "4", "N": 4, "K": 4}, "M"),
])
def test_bad_arguments_name_the_field(args, field):
    with pytest.raises(ops.WorkloadError) as e:
        ops.make_workload("matmul", args)
    assert e.value.field == field and field in str(e.value)


def test_unknown_operator_lists_the_known_ones():
    with pytest.raises(ops.WorkloadError, match="available: .*matmul"):
        ops.make_workload("matmull", {})
    assert any(op["name"] == "matmul" and op["targets"] == ["cpu", "cuda"] for op in ops.list())


@pytest.mark.parametrize("target", params(FAMILY))
@pytest.mark.parametrize("shape", [(37, 45, 29), (70, 200, 33), (9, 130, 17)])
def test_b_packed_per_block_matches_numpy(shape, target):
    """pack_b = "block" (B's panels packed inside the parallel loop, per block of N) over
    random configs of the space with it, shapes no tile or block divides, each ISA of this
    host's family (built only where the host cannot run it): the packed block's region, its
    zero padding at N's edge and the parallel loop's tail iterations."""
    rng = np.random.default_rng(sum(shape))
    cases = []
    for variant in ({}, {"bias": True, "epilogue": "relu"}):
        w = ops.make_workload("matmul", dict(M=shape[0], N=shape[1], K=shape[2], **variant))
        space = ops.config_space(w, target)
        configs = [c for c in space.random(rng, 60) if c["pack_b"].val == "block"][:4]
        assert configs
        cases += [(w, c) for c in configs]
    assert not failures(cases, target=target)


@pytest.mark.parametrize("target", params(FAMILY))
@pytest.mark.parametrize("op, args", [
    ("matmul", {"M": 37, "N": 45, "K": 96}),
    ("matmul", {"M": 70, "N": 200, "K": 160, "bias": True, "epilogue": "gelu"}),
    ("dense", {"M": 9, "N": 130, "K": 128, "bias": True, "epilogue": "relu"}),
    ("batch_matmul", {"batch": 3, "M": 20, "N": 40, "K": 128, "transpose_b": True}),
    ("conv2d_nchw", {"N": 2, "CI": 128, "CO": 24, "H": 9, "W": 7, "KH": 1, "KW": 1, "bias": True, "epilogue": "relu"}),
    ("conv2d_nchw", {"N": 1, "CI": 192, "CO": 20, "H": 11, "W": 9, "KH": 1, "KW": 1, "stride": 2}),
])
def test_k_blocked_configs_match_numpy(op, args, target):
    """kc < K (the reduction in blocks, each block's register tile added to the output or,
    with an epilogue, to a buffer of the parallel loop's region) over random configs of the
    space, on every GEMM template, shapes no tile divides, each ISA of this host's family:
    the blocks' sum, the output's initialisation, B packed per K block."""
    w = ops.make_workload(op, args)
    space = ops.config_space(w, target)
    K = args.get("K", args.get("CI"))
    configs = [c for c in space.random(np.random.default_rng(K), 200)
               if c["kc"].val < K and not (c.to_json()["knobs"].get("dot_rows"))][:5]
    assert len({c["kc"].val for c in configs}) > 1
    assert not failures([(w, c) for c in configs], target=target)
