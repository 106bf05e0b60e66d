"""Loop-nest features: fixed width across operators and shapes, values read from the nest, caching."""

import math

import helpers_ops  # noqa: F401  (registers the test operator "faulty")
import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.tuner.features import FEATURE_NAMES, N_FEATURES, N_LEVELS, Featurizer, config_features
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
