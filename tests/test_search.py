"""Search strategies on real config spaces with a synthetic, deterministic objective."""

import numpy as np
import pytest

from tunefleet.compiler.space import ConfigSpace
from tunefleet.tuner.cost_model import CostModel
from tunefleet.tuner.measure import MeasureResult
from tunefleet.tuner.search import EarlyStopping, GridSearch, ModelGuidedSearch, RandomSearch


def small_space(constraint=None):
    space = ConfigSpace()
    space.define_split("s", 12, 3)
    space.define_knob("k", ["a", "b", "c"])
    if constraint is not None:
        space.define_constraint(constraint)
    space.freeze()
    return space  # 54 configs


def tiled_space():
    space = ConfigSpace()
    space.define_split("tile_m", 64, 3)
    space.define_split("tile_n", 64, 2)
    space.define_knob("unroll", [0, 2, 4, 8])
    space.define_knob("vec", [1, 4, 8, 16])
    space.freeze()
    return space  # 28 * 7 * 4 * 4 = 3136 configs


def seconds(cfg):
    """Smooth in log2 of the inner tiles, with a register-pressure interaction; one best config."""
    _, m1, m2 = cfg["tile_m"].size
    _, n1 = cfg["tile_n"].size
    u, v = cfg["unroll"].val, cfg["vec"].val
    lm1, lm2, ln1, lv = np.log2([m1, m2, n1, v])
    g = np.exp(-((lm2 - 3) ** 2) / 4 - ((lm1 - 1) ** 2) / 6 - ((ln1 - 4) ** 2) / 8)
    g /= 1 + max(0.0, m2 * n1 / v / 32 - 1)
    g *= 1 + 0.1 * lv - 0.02 * (np.log2(u + 1) - 2) ** 2
    return 1e-3 / g


def knob_features(configs):
    return np.stack([c.knob_values() for c in configs])


def measure(configs):
    return [MeasureResult("ok", [seconds(c)]) for c in configs]


def small_measure(configs):
    """An arbitrary but deterministic cost for the small space."""
    return [MeasureResult("ok", [1e-3 * (1 + c["s"].size[2] + (c.index % 5))]) for c in configs]


EVERY_STRATEGY = pytest.mark.parametrize(
    "make",
    [
        lambda s: RandomSearch(s, seed=1),
        lambda s: GridSearch(s),
        lambda s: ModelGuidedSearch(s, knob_features, seed=1, plan_size=8, retrain_every=4),
    ],
    ids=["random", "grid", "model"],
)


def drain(strategy, batch=5):
    seen = []
    while True:
        configs = strategy.next_batch(batch)
        if not configs:
            return seen
        strategy.update(configs, small_measure(configs))
        seen.extend(c.index for c in configs)


def trials_to_optimum(strategy, optimum, budget, batch=8):
    for done in range(0, budget, batch):
        configs = strategy.next_batch(batch)
        for k, c in enumerate(configs):
            if c.index == optimum:
                return done + k + 1
        strategy.update(configs, measure(configs))
    return budget


@EVERY_STRATEGY
def test_never_repeats_and_covers_a_small_space(make):
    space = small_space()
    strategy = make(space)
    strategy.mark_measured([0, 17, 53])  # measured in an earlier run
    seen = drain(strategy)
    assert len(seen) == len(set(seen)) == 51
    assert set(seen) == set(range(54)) - {0, 17, 53}
    assert strategy.remaining == 0 and strategy.next_batch(4) == []


class _NoWideTileWithA:
    """A constraint of small_space: k = "a" only with the split's inner factor at most 2."""

    def __call__(self, cfg) -> bool:
        return cfg["k"].val != "a" or cfg["s"].size[2] <= 2


@EVERY_STRATEGY
def test_proposes_every_valid_config_once_and_no_invalid_one(make):
    """Each strategy, drained batch by batch, proposes exactly the configs that meet the space's
    constraint (random picks, the model's annealing and its steps from the best alike)."""
    space = small_space(_NoWideTileWithA())
    valid = {i for i in range(space.size) if space.valid(space.get(i))}
    assert len(valid) == 46
    seen = drain(make(space))
    assert len(seen) == len(set(seen)) and set(seen) == valid


def test_grid_enumerates_in_index_order():
    space = small_space()
    grid = GridSearch(space)
    grid.mark_measured([2, 3])
    assert [c.index for c in grid.next_batch(4)] == [0, 1, 4, 5]
    assert [c.index for c in grid.next_batch(3)] == [6, 7, 8]


def test_random_is_reproducible_by_seed():
    space = tiled_space()
    a = [c.index for c in RandomSearch(space, seed=7).next_batch(20)]
    assert a == [c.index for c in RandomSearch(space, seed=7).next_batch(20)]
    assert a != [c.index for c in RandomSearch(space, seed=8).next_batch(20)]


def test_model_guided_finds_the_optimum_in_fewer_trials_than_random():
    space = tiled_space()
    optimum = min(range(space.size), key=lambda i: seconds(space.get(i)))
    budget = 1500
    guided = [trials_to_optimum(ModelGuidedSearch(space, knob_features, seed=s), optimum, budget) for s in range(3)]
    randomly = [trials_to_optimum(RandomSearch(space, seed=s), optimum, budget) for s in range(3)]
    assert max(guided) < 300, guided
    assert np.mean(guided) * 3 < np.mean(randomly), (guided, randomly)


def test_model_guided_learns_to_avoid_failing_configs():
    space = tiled_space()
    search = ModelGuidedSearch(space, knob_features, seed=0, plan_size=16, retrain_every=8)

    def flaky(configs):  # every vec=16 config fails to compile
        return [MeasureResult("compile_error", error="x") if c["vec"].val == 16 else MeasureResult("ok", [seconds(c)])
                for c in configs]

    for _ in range(6):
        configs = search.next_batch(8)
        search.update(configs, flaky(configs))
    assert search.model.trained
    batch = search.next_batch(16)
    assert len({c.index for c in batch}) == 16
    assert sum(c["vec"].val == 16 for c in batch) <= 2  # a quarter of the space, avoided but for ε


def test_warm_up_steps_from_the_best_measured_configs_until_the_model_is_fit():
    """Without a transferred model, the trials after the first ones are one-knob steps from the
    best measured configs (not a nearly flat model's picks): near a good default they are much
    faster than random configs; the model is fit once `warmup` results are in."""
    space = tiled_space()
    rng = np.random.default_rng(0)
    good = min(space.random(rng, 300), key=seconds)  # a good (not the best) config, as a default rule gives
    search = ModelGuidedSearch(space, knob_features, seed=0, warmup=16, epsilon=0)
    search.prefer([good])
    trials = search.next_batch(1)
    search.update(trials, measure(trials))
    while len(trials) < 16:
        batch = search.next_batch(4)
        assert not search.model.trained
        search.update(batch, measure(batch))
        trials.extend(batch)
    assert search.model.trained
    measured = [good]
    for c in trials[1:]:
        assert any(sum(abs(a - b) for a, b in zip(c.digits, p.digits)) == 1 for p in measured), c
        measured.append(c)
    randomly = RandomSearch(space, seed=0).next_batch(15)
    assert np.mean([seconds(c) for c in trials[1:]]) < 0.5 * np.mean([seconds(c) for c in randomly])


def test_a_batch_of_mispredicted_configs_refits_the_model_at_once():
    """After the warm-up, results below half the best (configs the model ranked high) refit the
    model before `retrain_every` new results; results near the best do not."""
    space = tiled_space()
    search = ModelGuidedSearch(space, knob_features, seed=0, warmup=8, retrain_every=100)
    batch = search.next_batch(8)
    search.update(batch, measure(batch))
    assert search.model.version == 1
    best = max(1 / seconds(c) for c in batch)
    near, far = space.get(0), space.get(1)

    def at(throughput):
        return MeasureResult("ok", [1 / throughput])

    search.update([near], [at(0.9 * best)])
    assert search.model.version == 1
    search.update([far], [at(0.1 * best)])
    assert search.model.version == 1  # one surprise may be noise
    search.update([space.get(2)], [MeasureResult("runtime_error", error="x")])
    assert search.model.version == 2


def test_a_surprise_refit_re_ranks_the_last_pool_and_a_periodic_one_anneals():
    """A refit at surprises re-scores the configs the last annealing found (no config is
    featurized anew, each proposal is one of them); the refit every `retrain_every` results
    anneals again, visiting configs never featurized before."""
    space = tiled_space()
    featurized: set[int] = set()

    def counting(configs):
        featurized.update(c.index for c in configs)
        return knob_features(configs)

    search = ModelGuidedSearch(space, counting, seed=0, warmup=8, retrain_every=12, epsilon=0, plan_size=16,
                               sa_points=16, sa_steps=20)
    batch = search.next_batch(8)
    search.update(batch, measure(batch))
    planned = search.next_batch(4)  # the first plan: an annealing
    search.update(planned, measure(planned))
    best = max(1 / seconds(c) for c in batch + planned)
    before, version = set(featurized), search.model.version
    surprising = search.next_batch(2)
    search.update(surprising, [MeasureResult("ok", [1 / (0.1 * best)])] * 2)
    assert search.model.version == version + 1
    reranked = search.next_batch(4)
    assert featurized == before and {c.index for c in reranked} <= before
    more = reranked + search.next_batch(8)
    search.update(more, [MeasureResult("ok", [1 / (0.9 * best)])] * 12)  # 12 results: a periodic refit
    assert search.model.version == version + 2
    before = set(featurized)
    search.next_batch(4)
    assert featurized > before


def test_diversity_spreads_a_batch_over_more_knob_values():
    space = tiled_space()
    configs = space.random(np.random.default_rng(0), 100)
    model = CostModel()
    model.update(knob_features(configs), [1 / seconds(c) for c in configs], ["w"] * 100)

    def batch(diversity):  # same seed and model: the same annealing, only the pick differs
        search = ModelGuidedSearch(space, knob_features, cost_model=model, workload_key="w", seed=0, plan_size=16,
                                   diversity=diversity, epsilon=0)
        return search.next_batch(16)

    def knob_values(configs):
        return len({(k, d) for c in configs for k, d in enumerate(c.digits)})

    greedy, diverse = batch(0.0), batch(1.0)
    assert knob_values(diverse) > knob_values(greedy)
    scores = model.predict(knob_features(greedy))
    assert np.all(np.diff(scores) <= 0)  # without diversity the plan is the pool's top, best first


def test_model_guided_uses_a_transferred_model_from_the_first_batch():
    space = tiled_space()
    pre = ModelGuidedSearch(space, knob_features, seed=0)
    drain_configs = space.random(np.random.default_rng(0), 200)
    model = CostModel()
    model.update(knob_features(drain_configs), [1 / seconds(c) for c in drain_configs], ["other-shape"] * 200)
    search = ModelGuidedSearch(space, knob_features, cost_model=model, workload_key="this-shape", seed=0, epsilon=0)
    first = search.next_batch(8)
    random_first = pre.next_batch(8)
    assert np.mean([seconds(c) for c in first]) < 0.5 * np.mean([seconds(c) for c in random_first])


@pytest.mark.parametrize("warmup, retrain_every", [(16, 16), (8, 100)])
def test_a_model_transferred_from_few_results_per_shape_waits_for_the_warm_up(warmup, retrain_every):
    """A model fit on many other shapes of two results each (what whole-model tuning's first
    round leaves) is trained but has seen no ranking within a shape: the search steps from the
    best measured configs until `warmup` results of its own are in, then refits on them (also
    where that comes before `retrain_every`)."""
    space = tiled_space()
    rng = np.random.default_rng(1)
    model = CostModel()
    for shape in range(12):
        pair = space.random(rng, 2)
        model.add(knob_features(pair), [1 / seconds(c) for c in pair], [f"other-shape-{shape}"] * 2)
    assert model.fit() and model.largest_group() == 2
    good = min(space.random(rng, 300), key=seconds)
    search = ModelGuidedSearch(space, knob_features, cost_model=model, workload_key="this-shape", seed=0,
                               warmup=warmup, retrain_every=retrain_every, epsilon=0)
    search.prefer([good])
    measured = search.next_batch(1)
    search.update(measured, measure(measured))
    while len(measured) < warmup:
        batch = search.next_batch(5)
        for c in batch:
            assert any(sum(abs(a - b) for a, b in zip(c.digits, p.digits)) == 1 for p in measured), c
        search.update(batch, measure(batch))
        measured.extend(batch)
        assert model.version == (2 if len(measured) >= warmup else 1)  # refit once its own are in
    assert model.largest_group() == len(measured) >= warmup


def test_update_checks_lengths_and_epsilon_range():
    space = small_space()
    with pytest.raises(ValueError, match="2 configs but 1 results"):
        RandomSearch(space).update([space.get(0), space.get(1)], small_measure([space.get(0)]))
    with pytest.raises(ValueError, match="epsilon"):
        ModelGuidedSearch(space, knob_features, epsilon=1.5)


def test_early_stopping():
    stop = EarlyStopping(patience=3, min_rel_improvement=0.01)
    ok = lambda s: MeasureResult("ok", [s])  # noqa: E731
    assert not stop.update([MeasureResult("compile_error")] * 5)  # nothing correct yet: nothing to stop on
    assert not stop.update([ok(2.0), ok(1.0)])  # improving
    assert not stop.update([ok(0.995), MeasureResult("timeout")])  # < 1% better, a failure
    assert stop.trials_since_best == 2 and stop.best == 1.0
    assert stop.update([ok(1.5)]) and stop.should_stop
    with pytest.raises(ValueError):
        EarlyStopping(0)


def test_the_cost_model_learns_from_undisturbed_trials_only():
    space = tiled_space()
    search = ModelGuidedSearch(space, knob_features, seed=1, plan_size=8, retrain_every=4)
    configs = search.next_batch(8)
    results = measure(configs)
    busy = {1, 4, 6}  # measured while the host was busy: 100x faster than they are, and marked so
    results = [MeasureResult("ok", [r.costs[0] / 100], disturbance=2.0, disturbed=True) if i in busy else r
               for i, r in enumerate(results)]
    search.update(configs, results)
    assert search.model.n_samples == 5
    assert set(search._measured) == {c.index for i, c in enumerate(configs) if i not in busy}


def test_early_stopping_is_not_fooled_by_a_disturbed_fast_outlier():
    stop = EarlyStopping(patience=2)
    assert not stop.update([MeasureResult("ok", [1.0])])
    assert not stop.update([MeasureResult("ok", [1e-3], disturbance=3.0, disturbed=True)])  # no new best
    assert stop.best == 1.0 and stop.trials_since_best == 1
    assert stop.update([MeasureResult("ok", [2.0])])
