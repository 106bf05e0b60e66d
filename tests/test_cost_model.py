"""XGBoost cost model: ranking quality, caching, persistence, transfer."""

import numpy as np
import pytest
import xgboost
from scipy.stats import spearmanr

from tunefleet.compiler.space import ConfigSpace
from tunefleet.tuner import features as features_mod
from tunefleet.tuner.cost_model import CostModel, FeatureSchema, FeatureSchemaError, FeatureSchemaWarning
from tunefleet.tuner.measure import MeasureInput, MeasureResult
from tunefleet.tuner.records import Record, Toolchain


def tiled_space(m, n):
    space = ConfigSpace()
    space.define_split("tile_m", m, 3, policy="power2")
    space.define_split("tile_n", n, 2, policy="power2")
    space.define_knob("unroll", [0, 2, 4, 8])
    space.define_knob("vec", [1, 4, 8, 16])
    space.freeze()
    return space


def features(cfg):
    """Shape-independent features: log2 of the inner factors and the knob values."""
    _, m1, m2 = cfg["tile_m"].size
    _, n1 = cfg["tile_n"].size
    return np.log2([m1, m2, n1, cfg["unroll"].val + 1, cfg["vec"].val]).astype(np.float32)


def seconds(cfg, m, n):
    """A smooth, interacting synthetic cost: best near inner tiles 2x8 by 16, penalized register pressure."""
    lm1, lm2, ln1, lu, lv = features(cfg)
    g = np.exp(-((lm2 - 3) ** 2) / 4 - ((lm1 - 1) ** 2) / 6 - ((ln1 - 4) ** 2) / 8)
    g /= 1 + max(0.0, 2.0 ** (lm2 + ln1 - lv) / 32 - 1)
    g *= 1 + 0.1 * lv - 0.02 * (lu - 2) ** 2
    return m * n * 1e-9 / g


def sample(space, m, n, count, seed):
    configs = space.random(np.random.default_rng(seed), count)
    X = np.stack([features(c) for c in configs])
    y = np.array([1 / seconds(c, m, n) for c in configs])
    return configs, X, y


def test_xgboost_version_is_in_the_pinned_range():
    major = int(xgboost.__version__.split(".")[0])
    assert 3 <= major < 4


def test_ranks_held_out_configs_well():
    space = tiled_space(256, 256)
    _, X, y = sample(space, 256, 256, 700, seed=0)
    model = CostModel()
    assert model.update(X[:200], y[:200], ["w"] * 200)
    rho = spearmanr(model.predict(X[200:]), y[200:]).statistic
    assert rho > 0.9, rho


def test_save_load_round_trip_gives_identical_predictions_and_training(tmp_path):
    space = tiled_space(128, 64)
    _, X, y = sample(space, 128, 64, 300, seed=1)
    model = CostModel(seed=3)
    model.update(X[:100], y[:100], ["a"] * 50 + ["b"] * 50)
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = CostModel.load(path)
    assert np.array_equal(loaded.predict(X[100:]), model.predict(X[100:]))
    assert (loaded.n_samples, loaded.n_features, loaded.version, loaded.params) == (
        100, 5, model.version, model.params)
    with pytest.raises(ValueError, match="width 6, the model's is 5"):  # features of a wider featurizer
        loaded.predict(np.hstack([X[100:], np.zeros((len(X) - 100, 1))]))
    for m in (model, loaded):  # both continue identically
        m.update(X[100:150], y[100:150], ["a"] * 50)
    assert np.array_equal(loaded.predict(X[150:]), model.predict(X[150:]))
    empty = tmp_path / "empty.npz"
    CostModel().save(empty)
    assert not CostModel.load(empty).trained


def tuner_model(tmp_path, *, legacy=False):
    """A model over the tuner's feature schema, trained on random rows and saved (``legacy``: as
    before schemas were recorded); returns its path."""
    rng = np.random.default_rng(7)
    X = rng.random((40, features_mod.N_FEATURES), dtype=np.float32)
    model = CostModel(schema=None if legacy else features_mod.feature_schema())
    assert model.update(X, rng.random(40), ["w"] * 40)
    path = tmp_path / "tuner-model.npz"
    model.save(path)
    return path


def test_load_refuses_a_model_whose_feature_columns_changed_meaning(tmp_path, monkeypatch):
    path = tuner_model(tmp_path)
    saved = features_mod.feature_schema()
    loaded = CostModel.load(path, features_mod.feature_schema())
    assert loaded.schema == saved and loaded.n_features == features_mod.N_FEATURES
    assert CostModel.load(path).schema == saved  # unchecked, the file's schema is kept
    # the same width, two columns swapped: a width check alone would load it
    names = list(features_mod.FEATURE_NAMES)
    i, j = names.index("shared_bytes"), names.index("local_words")
    names[i], names[j] = names[j], names[i]
    monkeypatch.setattr(features_mod, "FEATURE_NAMES", names)
    current = features_mod.feature_schema()
    assert current.width == saved.width and current.digest != saved.digest
    with pytest.raises(FeatureSchemaError) as refused:
        CostModel.load(path, current)
    message = str(refused.value)
    assert saved.digest in message and current.digest in message and str(path) in message
    assert f"column {i} is 'shared_bytes' there, 'local_words' here" in message
    assert "Retrain" in message and "delete the file" in message
    monkeypatch.setattr(features_mod, "FEATURIZER_VERSION", features_mod.FEATURIZER_VERSION + 1)
    monkeypatch.setattr(features_mod, "FEATURE_NAMES", saved.names)  # same names, computed differently
    with pytest.raises(FeatureSchemaError, match="the same columns computed by featurizer version"):
        CostModel.load(path, features_mod.feature_schema())


def test_load_of_a_model_saved_without_a_schema_checks_the_width_only(tmp_path):
    path = tuner_model(tmp_path, legacy=True)
    schema = features_mod.feature_schema()
    with pytest.warns(FeatureSchemaWarning, match="does not say what its 285 feature columns mean"):
        loaded = CostModel.load(path, schema)
    assert loaded.trained and loaded.schema is None
    narrower = FeatureSchema(schema.names[:-1], schema.version)
    with pytest.raises(FeatureSchemaError, match=f"no feature schema, .*: {schema.width} columns there, "
                                                 f"{schema.width - 1} here"):
        CostModel.load(path, narrower)
    empty = tmp_path / "empty.npz"
    CostModel().save(empty)
    assert CostModel.load(empty, schema).schema == schema  # nothing to misread: it takes the schema


def test_a_model_with_a_schema_has_its_width_before_any_data():
    model = CostModel(schema=FeatureSchema(("a", "b", "c")))
    assert model.n_features == 3
    with pytest.raises(ValueError, match="width 2, the model's is 3"):
        model.add(np.ones((1, 2)), [1.0], ["w"])


def test_normalization_makes_groups_of_different_scales_comparable():
    """Two workloads, the second 1000x slower: per-workload normalization keeps both rankings intact."""
    space = tiled_space(256, 256)
    _, X, y = sample(space, 256, 256, 400, seed=2)
    model = CostModel()
    model.update(X[:300], np.concatenate([y[:150], y[150:300] / 1000]), ["fast"] * 150 + ["slow"] * 150)
    assert spearmanr(model.predict(X[300:]), y[300:]).statistic > 0.9


def test_untrained_and_malformed_inputs():
    model = CostModel()
    with pytest.raises(RuntimeError, match="not been trained"):
        model.predict(np.zeros((1, 3), np.float32))
    assert not model.update(np.ones((4, 3)), [1.0] * 4, ["w"] * 4)  # one label only: nothing to rank
    assert not model.trained and model.n_features == 3
    with pytest.raises(ValueError, match="width 2, the model's is 3"):
        model.add(np.ones((1, 2)), [1.0], ["w"])
    with pytest.raises(ValueError, match="differ in length"):
        model.add(np.ones((2, 3)), [1.0], ["w", "w"])
    with pytest.raises(ValueError, match="finite and >= 0"):
        model.add(np.ones((1, 3)), [-1.0], ["w"])
    with pytest.raises(ValueError, match="2-D"):
        model.add(np.ones(3), [1.0], ["w"])
    assert model.update(np.eye(3), [0.0, 1.0, 2.0], ["w"] * 3) and model.version == 1


def test_prediction_and_feature_caches():
    space = tiled_space(64, 64)
    calls = []

    def featurize(indices):
        calls.append(list(indices))
        return np.stack([features(space.get(i)) for i in indices])

    _, X, y = sample(space, 64, 64, 100, seed=4)
    model = CostModel()
    model.update(X, y, ["w"] * 100)
    first = model.predict_configs("w", [5, 7, 5], featurize)
    assert calls == [[5, 7]] and first[0] == first[2]
    assert np.array_equal(model.predict_configs("w", [7, 5], featurize), first[[1, 0]])
    assert calls == [[5, 7]]
    assert np.array_equal(first, model.predict(featurize([5, 7, 5])))
    calls.clear()
    model.update(X[:10], y[:10] * 2, ["v"] * 10)  # refit clears predictions, not features
    model.predict_configs("w", [5, 7, 9], featurize)
    assert calls == [[9]]
    model.predict_configs("other", [5], featurize)  # keys are per workload
    assert calls == [[9], [5]]
    small = CostModel(feature_cache_size=2)
    small.features("w", [1, 2, 3], featurize)
    assert len(small._features) == 2


def record(space, cfg, m, n, device="cpu-2c"):
    workload = {"op": "tiled", "M": m, "N": n}
    inp = MeasureInput(workload, "cpu", cfg.to_json())
    return Record.of(inp, MeasureResult("ok", [seconds(cfg, m, n)]), device, Toolchain("gcc", "12"))


def test_transfer_from_other_shapes_ranks_a_new_shape_before_any_trial():
    shapes = [(64, 512), (512, 64), (128, 128)]
    spaces = {s: tiled_space(*s) for s in shapes}
    records = [record(spaces[s], c, *s) for s in shapes for c in spaces[s].random(np.random.default_rng(5), 150)]

    def featurize(recs):
        return np.stack([features(spaces[(r.workload["M"], r.workload["N"])].from_json(r.config)) for r in recs])

    model = CostModel()
    assert model.seed_from_records(records, featurize) == 450 and model.trained
    new = tiled_space(256, 1024)
    configs, X, y = sample(new, 256, 1024, 300, seed=6)
    assert spearmanr(model.predict(X), y).statistic > 0.9
    with pytest.raises(ValueError, match="several device keys"):
        CostModel().seed_from_records(records + [record(spaces[shapes[0]], configs[0], 64, 512, "gpu")], featurize)
    assert CostModel().seed_from_records([], featurize) == 0
