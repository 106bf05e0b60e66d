"""Loop-nest features: fixed width across operators, shapes and targets, values read from the nest (GPU
launch and memory features too, checked against the lowered CUDA kernel), caching."""

import hashlib
import json
import math
import os
import signal
from pathlib import Path

import helpers_ops  # noqa: F401  (registers the test operator "faulty")
import numpy as np
import pytest
from cuda_helpers import TEMPLATE_WORKLOADS

from tunefleet.compiler import ops
from tunefleet.compiler.cuda.build import workload_kernel
from tunefleet.compiler.cuda.limits import InvalidConfig
from tunefleet.compiler.target import Target
from tunefleet.tuner.features import (FEATURE_NAMES, FEATURIZER_VERSION, GPU_FEATURES, KINDS, N_FEATURES, N_LEVELS,
                                      PARALLEL_MIN_CONFIGS, Featurizer, config_features)
from tunefleet.tuner.measure import MeasureInput, MeasureResult
from tunefleet.tuner.records import Record, Toolchain

TARGET = Target.host()
INNER, OUTER = f"L{N_LEVELS - 1}", f"L{N_LEVELS - 2}"


def named(vector):
    return dict(zip(FEATURE_NAMES, vector.tolist()))


def faulty_features(mode, vec):
    w = ops.make_workload("faulty", {"n": 64})
    config = ops.config_space(w, TARGET).from_json({"knobs": {"mode": mode, "vec": vec}})
    return named(config_features(w, TARGET, config))


def log2p1(x):
    return math.log2(1 + x)


def unlog(feature):
    """The count a log2(1 + x) feature holds."""
    return round(2 ** feature - 1)


def test_values_come_from_the_loop_nest():
    """B[i] = 2 A[i] over 64 float32: one serial loop, or 16 serial x 4 vectorized."""
    f = faulty_features("ok", 1)
    assert f[f"{INNER}_extent"] == pytest.approx(log2p1(64)) and f[f"{INNER}_kind_serial"] == 1
    assert f[f"{OUTER}_extent"] == 0  # padding above the only loop
    for buf in ("buf0", "buf1"):  # B (stored), then A (loaded)
        assert f[f"{INNER}_{buf}_stride"] == pytest.approx(1.0)
        assert f[f"{INNER}_{buf}_bytes"] == pytest.approx(log2p1(256))
        assert f[f"{INNER}_{buf}_reuse"] == pytest.approx(log2p1(1))
    assert f["depth"] == 1 and f["n_global"] == 2 and f["invalid"] == 0
    assert f["flop"] == pytest.approx(log2p1(64))

    v = faulty_features("ok", 4)
    assert v[f"{INNER}_kind_vectorized"] == 1 and v[f"{OUTER}_kind_serial"] == 1
    assert v[f"{INNER}_extent"] == pytest.approx(log2p1(4)) and v[f"{OUTER}_extent"] == pytest.approx(log2p1(16))
    assert v[f"{OUTER}_buf0_stride"] == pytest.approx(log2p1(4))
    assert v[f"{INNER}_buf0_bytes"] == pytest.approx(log2p1(16)) and v[f"{OUTER}_buf0_bytes"] == pytest.approx(
        log2p1(256))
    assert v["vector_extent"] == pytest.approx(log2p1(4)) and v["depth"] == 2


def test_matmul_features_see_the_register_tile_and_the_parallel_loop():
    w = ops.make_workload("matmul", {"M": 256, "N": 256, "K": 256})
    space = ops.config_space(w, TARGET)
    knobs = {**ops.default_config(w, TARGET).to_json()["knobs"], "pack_b": True}  # B panels: a heap buffer
    fused = named(config_features(w, TARGET, space.from_json({"knobs": {**knobs, "parallel": "fused"}})))
    outer = named(config_features(w, TARGET, space.from_json({"knobs": {**knobs, "parallel": "outer"}})))
    # the main statement is the update of the local accumulator tile, innermost loop vectorized
    assert fused["main_is_local"] == 1 and fused[f"{INNER}_kind_vectorized"] == 1
    assert fused[f"{INNER}_buf0_stride"] == pytest.approx(1.0)  # the tile row is contiguous
    assert fused["parallel_extent"] > outer["parallel_extent"]  # fusing two loops gives more parallel work
    assert fused["main_share"] > 0.9 and fused["n_heap"] >= 1


def test_fixed_width_across_operators_shapes_and_invalid_configs():
    rows = []
    for shape in ((1, 1, 1), (64, 64, 64), (127, 255, 129)):
        w = ops.make_workload("matmul", dict(zip("MNK", shape)))
        space = ops.config_space(w, TARGET)
        rows += [config_features(w, TARGET, c) for c in space.random(np.random.default_rng(0), 5)]
    rows.append(np.array(list(faulty_features("ok", 8).values()), np.float32))
    assert all(r.shape == (N_FEATURES,) and r.dtype == np.float32 and np.isfinite(r).all() for r in rows)
    illegal = faulty_features("illegal", 1)
    assert illegal["invalid"] == 1 and sum(abs(x) for x in illegal.values()) == 1


def test_featurizer_caches_per_config_and_featurizes_records_alike():
    w = ops.make_workload("matmul", {"M": 64, "N": 64, "K": 64})
    space = ops.config_space(w, TARGET)
    configs = space.random(np.random.default_rng(1), 6)
    fz = Featurizer(cache_size=4)
    first = fz.configs(w, TARGET, configs[:3] + configs[:3])
    assert first.shape == (6, N_FEATURES) and np.array_equal(first[:3], first[3:])
    assert len(fz._cache) == 3
    fz.configs(w, TARGET, configs[3:])
    assert len(fz._cache) == 4  # least recently used evicted
    records = [Record.of(MeasureInput(w.to_json(), str(TARGET), c.to_json()), MeasureResult("ok", [1e-3]),
                         "cpu-test-2c", Toolchain("gcc", "12")) for c in configs]
    assert np.array_equal(fz.records(records), Featurizer().configs(w, TARGET, configs))


def test_a_featurizer_with_workers_lowers_batches_in_its_processes_alike_and_goes_on_without_them():
    w = ops.make_workload("matmul", {"M": 96, "N": 80, "K": 64})
    configs = ops.config_space(w, TARGET).random(np.random.default_rng(2), 2 * PARALLEL_MIN_CONFIGS + 3)
    expected = Featurizer().configs(w, TARGET, configs)
    fz = Featurizer(workers=2, cpus=sorted(os.sched_getaffinity(0)))
    try:
        assert np.array_equal(fz.configs(w, TARGET, configs[:PARALLEL_MIN_CONFIGS]), expected[:PARALLEL_MIN_CONFIGS])
        pids = list(fz._pool._processes)
        assert len(pids) == 2 and os.getpid() not in pids
        for pid in pids:  # the pool breaks: the next batch is lowered in this process
            os.kill(pid, signal.SIGKILL)
        rest = fz.configs(w, TARGET, configs[PARALLEL_MIN_CONFIGS:])
        assert np.array_equal(rest, expected[PARALLEL_MIN_CONFIGS:])
        assert fz._pool is None and fz.workers == 0
    finally:
        fz.close()


CUDA = Target("cuda", "sm_90")
GEMM_1024 = ops.make_workload("matmul", {"M": 1024, "N": 1024, "K": 1024})


def cuda_gemm_features(**knobs):
    """Features of a cuda matmul 1024³ config: the default's knobs with ``knobs`` overridden."""
    space = ops.config_space(GEMM_1024, CUDA)
    config = space.from_json({"knobs": {**ops.default_config(GEMM_1024, CUDA).to_json()["knobs"], **knobs}})
    return named(config_features(GEMM_1024, CUDA, config))


def test_cuda_features_count_the_threads_and_blocks_of_the_launch():
    """8x8 register tiles, lanes 8x4, 1 or 2 x 4 warps: 128 or 256 threads, block tiles of 64 or 128 x 128."""
    tile = {"tile_m": 8, "tile_n": 8, "lanes_y": 8, "warps_x": 4, "unroll_k": True}
    small, large = cuda_gemm_features(**tile, warps_y=1), cuda_gemm_features(**tile, warps_y=2)
    assert small["threads_per_block"] == pytest.approx(log2p1(128))
    assert large["threads_per_block"] == pytest.approx(log2p1(256))
    assert small["threadIdx_x_len"] == large["threadIdx_x_len"] == pytest.approx(log2p1(32))  # a warp's lanes
    assert small["threadIdx_y_len"] == pytest.approx(log2p1(4)) and large["threadIdx_y_len"] == pytest.approx(log2p1(8))
    assert small["blockIdx_x_len"] == large["blockIdx_x_len"] == pytest.approx(log2p1(1024 // 128))
    assert small["blockIdx_y_len"] == pytest.approx(log2p1(1024 // 64))
    assert large["blockIdx_y_len"] == pytest.approx(log2p1(1024 // 128))
    assert small["blocks"] == pytest.approx(log2p1(128)) and large["blocks"] == pytest.approx(log2p1(64))
    assert small["warp_fill"] == large["warp_fill"] == 1
    # the register-tile update runs under blockIdx.y, blockIdx.x, threadIdx.y, threadIdx.x, k_o, k_i, i, j
    kinds = [[k for k in KINDS if small[f"L{lv}_kind_{k}"]] for lv in range(N_LEVELS - 8, N_LEVELS)]
    assert kinds == [["block"], ["block"], ["thread"], ["thread"], ["serial"], ["unrolled"], ["unrolled"],
                     ["unrolled"]]
    assert small["main_is_local"] == 1 and small[f"L{N_LEVELS - 9}_extent"] == 0


@pytest.mark.parametrize("op, args, knobs", [
    ("matmul", {"M": 1024, "N": 1024, "K": 1024}, {}),  # double-buffered
    ("matmul", {"M": 1024, "N": 1024, "K": 1024}, {"double_buffer": False}),
    ("batch_matmul", {"batch": 4, "M": 77, "N": 64, "K": 33}, {}),  # tails
    ("conv2d_nchw", {"N": 1, "CI": 64, "CO": 96, "H": 28, "W": 28, "KH": 3, "KW": 3, "padding": 1}, {}),
    ("depthwise_conv2d_nchw", {"N": 1, "C": 32, "H": 56, "W": 56, "KH": 3, "KW": 3, "padding": 1}, {}),
])
def test_cuda_features_agree_with_the_lowered_kernel(op, args, knobs):
    """Launch, shared memory and per-thread arrays read from the pre-pass nest are lower_cuda's numbers."""
    w = ops.make_workload(op, args)
    space = ops.config_space(w, CUDA)
    config = space.from_json({"knobs": {**ops.default_config(w, CUDA).to_json()["knobs"], **knobs}})
    f = named(config_features(w, CUDA, config))
    g = workload_kernel(w, config, CUDA).gfunc
    assert g.shared_bytes > 0 and f["shared_bytes"] == pytest.approx(log2p1(g.shared_bytes))
    assert f["n_shared"] == len(g.shared)
    assert f["local_words"] == pytest.approx(log2p1(g.local_words))
    assert f["threads_per_block"] == pytest.approx(log2p1(g.threads))
    assert f["blocks"] == pytest.approx(log2p1(math.prod(g.grid)))
    for tag, extent in g.launch.items():
        assert f[f"{tag.replace('.', '_')}_len"] == pytest.approx(log2p1(extent))


def test_cuda_features_see_vector_copies_and_shared_refills():
    """Block tiles of 128 x 64 (8x8 thread tiles, lanes 8x4, 2x2 warps), K tiles of 8. With 16-byte
    copies, every global access is a vector, and of the shared ones all but A's transposed writes
    (a column of the tile per thread): those are M·K·(N / 64) of M·K·(N / 64) + K·N·(M / 128) copy
    writes and M·N·K·(1/8 + 1/8) register-copy reads."""
    tile = {"tile_m": 8, "tile_n": 8, "lanes_y": 8, "warps_y": 2, "warps_x": 2, "bk": 8}
    vec, scalar = cuda_gemm_features(**tile, vec=True), cuda_gemm_features(**tile, vec=False)
    assert vec["vec_global"] == 1 and scalar["vec_global"] == 0
    assert vec["vec_shared"] == pytest.approx(1 - 16 / (16 + 8 + 256)) and scalar["vec_shared"] == 0
    assert vec["shared_fills"] == pytest.approx(log2p1(1024 // 8))  # one per K tile
    assert cuda_gemm_features(**{**tile, "bk": 32})["shared_fills"] == pytest.approx(log2p1(1024 // 32))
    single, double = (cuda_gemm_features(**tile, double_buffer=d) for d in (False, True))
    assert single["double_buffered"] == 0 and double["double_buffered"] == 1
    assert unlog(double["shared_bytes"]) == 2 * unlog(single["shared_bytes"])  # two halves of 16-byte multiples
    assert double["local_words"] > single["local_words"]  # the registers staging the next K tile


#: Shapes large enough for the biggest block tiles of each GPU template (the tiles of TEMPLATE_WORKLOADS'
#: small shapes are mostly clamped to them).
LARGE_WORKLOADS = {
    "matmul": ("matmul", {"M": 4096, "N": 2048, "K": 512, "bias": True}),
    "batch_matmul": ("batch_matmul", {"batch": 8, "M": 1024, "N": 1024, "K": 256}),
    "conv2d_nchw": ("conv2d_nchw", {"N": 8, "CI": 512, "CO": 512, "H": 28, "W": 28, "KH": 3, "KW": 3, "padding": 1}),
    "depthwise_conv2d_nchw": ("depthwise_conv2d_nchw", {"N": 8, "C": 256, "H": 112, "W": 112, "KH": 7, "KW": 7,
                                                        "padding": 3}),
}
#: What the featurizer checks of the verifier's limits (not "barrier": that needs the lowered kernel).
FEATURIZED_LIMITS = {"threads", "grid", "shared_memory", "registers"}


def sampled_configs(space, rng, n, *, large):
    """``n`` random configs; ``large``: each knob from its last two choices (the largest tiles, where
    configs exceed the device's limits; uniformly drawn, 1 in a few hundred does)."""
    if not large:
        return [space.get(int(rng.integers(space.size))) for _ in range(n)]
    out = []
    for _ in range(n):
        index, radix = 0, 1
        for knob in space.knobs.values():
            index += int(rng.integers(max(0, len(knob) - 2), len(knob))) * radix
            radix *= len(knob)
        out.append(space.get(index))
    return out


def verifier_rejection(w, config):
    """The limit the CUDA verifier rejects ``config`` of ``w`` for (InvalidConfig.limit), None when it accepts it."""
    try:
        workload_kernel(w, config, CUDA)
    except InvalidConfig as exc:
        return exc.limit
    return None


@pytest.mark.parametrize("template", sorted(TEMPLATE_WORKLOADS))
def test_cuda_features_mark_exactly_the_configs_the_verifier_rejects_for_the_device_limits(template):
    """Random configs (uniform over the test shapes, the largest tiles over a large shape): a config the
    featurizer marks invalid is one the verifier rejects, and one it rejects for threads, grid, shared
    memory or registers is marked invalid (the featurizer's totals are the lowered kernel's)."""
    rng = np.random.default_rng(0)
    cases = []
    for (op, args), large in [*((wl, False) for wl in TEMPLATE_WORKLOADS[template]), (LARGE_WORKLOADS[template], True)]:
        w = ops.make_workload(op, args)
        cases += [(w, c) for c in sampled_configs(ops.config_space(w, CUDA), rng, 24 if large else 8, large=large)]
    for w, config in cases:
        invalid = named(config_features(w, CUDA, config))["invalid"] == 1
        rejected = verifier_rejection(w, config)
        assert rejected is not None if invalid else rejected not in FEATURIZED_LIMITS, (w.to_json(), config.to_json())


def test_cuda_features_mark_a_block_tile_over_the_shared_memory_or_registers_invalid():
    """1024 x 8 block tiles (8x8 thread tiles, lanes 32x1, 4 warps on y) with K tiles of 32, double-buffered:
    2 x (1024 + 8) x 32 float32 = 265 KB of shared memory, over sm_90's 227 KB; with 2 warps on y, 512 x 8
    tiles fit, but each thread stages 256 words of the next A tile: ~364 registers, over 255."""
    knobs = {"tile_m": 8, "tile_n": 8, "lanes_y": 32, "warps_x": 1, "bk": 32, "double_buffer": True}
    space = ops.config_space(GEMM_1024, CUDA)
    for warps_y, limit in ((4, "shared_memory"), (2, "registers")):
        config = space.from_json({"knobs": {**ops.default_config(GEMM_1024, CUDA).to_json()["knobs"], **knobs,
                                            "warps_y": warps_y}})
        assert verifier_rejection(GEMM_1024, config) == limit
        f = cuda_gemm_features(**knobs, warps_y=warps_y)
        assert f["invalid"] == 1 and sum(abs(x) for x in f.values()) == 1
    fits = cuda_gemm_features(**{**knobs, "double_buffer": False}, warps_y=4)  # one copy of the tile: 132 KB
    assert fits["invalid"] == 0 and unlog(fits["shared_bytes"]) == 132608


def test_cpu_configs_have_no_gpu_features():
    w = ops.make_workload("matmul", {"M": 256, "N": 256, "K": 256})
    f = named(config_features(w, TARGET, ops.default_config(w, TARGET)))
    assert all(f[name] == 0 for name in GPU_FEATURES)
    assert all(f[f"L{lv}_kind_{k}"] == 0 for lv in range(N_LEVELS) for k in ("block", "thread"))


RECORDED = json.loads((Path(__file__).parent / "data" / "features_recorded.json").read_text())


@pytest.mark.parametrize("case", RECORDED["configs"], ids=lambda c: f"{c['op']}-{c['target'].split()[0]}")
def test_features_are_the_ones_recorded_before_the_gpu_accounting_moved_to_the_compiler(case):
    """The GPU totals (launch, shared memory, registers) now come from compiler.cuda.resources;
    the vectors stay bit for bit those the featurizer computed on its own (sha256 of the float32
    bytes, recorded with FEATURIZER_VERSION 2; a change of what a column holds bumps the version
    and re-records them). A change of the program lowered re-records the configs it changes:
    batch_matmul's second CPU config has one guard fewer since a split of K that does not divide
    it no longer keeps the register tile's columns guarded."""
    assert FEATURIZER_VERSION == RECORDED["featurizer_version"]
    w = ops.make_workload(case["op"], case["args"])
    target = Target.parse(case["target"])
    vector = config_features(w, target, ops.config_space(w, target).from_json({"knobs": case["knobs"]}))
    nonzero = {name: value for name, value in named(vector).items() if value}
    assert hashlib.sha256(vector.tobytes()).hexdigest() == case["sha256"], nonzero
