"""Search strategies over a config space.

Every strategy proposes configs with ``next_batch(n)`` and learns from
``update(configs, results)``; none proposes a config twice, counting configs
proposed earlier and those declared with ``mark_measured`` (e.g. loaded from a
record file on resume). When the space is exhausted ``next_batch`` returns
fewer configs (possibly none).

* :class:`RandomSearch`: uniform without replacement.
* :class:`GridSearch`: index order.
* :class:`ModelGuidedSearch` (the default): simulated annealing over the space
  guided by the XGBoost cost model, with ε-greedy exploration and a diverse
  pick in each batch, as AutoTVM's ``ModelBasedTuner`` with its
  ``SimulatedAnnealingOptimizer`` and ``submodular_pick`` (Chen et al.,
  "Learning to Optimize Tensor Programs", NeurIPS 2018).

:class:`EarlyStopping` tells a tuning loop when the best has stopped improving.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tunefleet.compiler.space import ConfigEntity, ConfigSpace

from .cost_model import CostModel
from .measure import MeasureResult

__all__ = ["SearchStrategy", "RandomSearch", "GridSearch", "ModelGuidedSearch", "EarlyStopping"]

_RANDOM_ROUNDS = 8  # rejection-sampling rounds before enumerating what is left
_PARENTS = 3  # the best measured configs that warm-up steps start from
_SURPRISE = 0.5  # a trained model's pick measured below this fraction of the best was a misprediction
_STEP_TRIES = 8  # steps drawn per config wanted before random ones fill the batch


class SearchStrategy:
    """Base of the strategies: bookkeeping of visited configs and random picks.

    ``space``: the config space; ``seed``: seeds the strategy's numpy Generator.
    """

    def __init__(self, space: ConfigSpace, *, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self._visited: set[int] = set()
        self._first: list[ConfigEntity] = []
        #: The configs :meth:`prefer` was given, in order (the validation keeps them among the finalists).
        self.preferred: list[ConfigEntity] = []

    @property
    def remaining(self) -> int:
        """Configs never proposed nor marked measured."""
        return self.space.size - len(self._visited)

    def mark_measured(self, indices: Iterable[int]) -> None:
        """Never propose these config indices (already measured, e.g. in a resumed record file)."""
        self._visited.update(int(i) for i in indices)

    def prefer(self, configs: Iterable[ConfigEntity]) -> None:
        """Propose these configs before any of the strategy's own picks (e.g. the template's
        rule-based default config, so a good kernel is known after the first batch)."""
        configs = list(configs)
        self._first.extend(configs)
        self.preferred.extend(configs)

    def next_batch(self, n: int) -> list[ConfigEntity]:
        """Up to ``n`` distinct configs never proposed before (fewer only when the space runs out)."""
        first: list[ConfigEntity] = []
        while self._first and len(first) < n:
            c = self._first.pop(0)
            if c.index not in self._visited:
                first.append(c)
                self._visited.add(c.index)
        batch = first + self._propose(min(n - len(first), self.remaining))
        self._visited.update(c.index for c in batch)
        return batch

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        """Learn from measured ``configs`` (one result each); also marks them measured."""
        if len(configs) != len(results):
            raise ValueError(f"{len(configs)} configs but {len(results)} results")
        self.mark_measured(c.index for c in configs)

    def _propose(self, n: int) -> list[ConfigEntity]:
        raise NotImplementedError

    def _random_unvisited(self, n: int, exclude: set[int] = frozenset()) -> list[ConfigEntity]:
        """Up to ``n`` distinct random configs, not visited and not in ``exclude``."""
        taken = set(exclude)
        out: list[ConfigEntity] = []
        n = min(n, self.remaining - len(taken - self._visited))
        for _ in range(_RANDOM_ROUNDS):
            if len(out) >= n:
                return out
            for c in self.space.random(self.rng, 2 * (n - len(out))):
                if len(out) < n and c.index not in self._visited and c.index not in taken:
                    taken.add(c.index)
                    out.append(c)
        if len(out) < n:  # a crowded space: few configs are left, enumerate the valid ones
            unseen = (i for i in range(self.space.size) if i not in self._visited and i not in taken)
            left = [c for c in map(self.space.get, unseen) if self.space.valid(c)]
            picks = self.rng.choice(len(left), size=min(n - len(out), len(left)), replace=False)
            out.extend(left[int(p)] for p in picks)
        return out


class RandomSearch(SearchStrategy):
    """Uniformly random configs, without replacement."""

    def _propose(self, n: int) -> list[ConfigEntity]:
        return self._random_unvisited(n)


class GridSearch(SearchStrategy):
    """Configs in index order (0, 1, 2, ...), skipping visited and invalid ones."""

    def __init__(self, space: ConfigSpace, *, seed: int = 0):
        super().__init__(space, seed=seed)
        self._cursor = 0

    def _propose(self, n: int) -> list[ConfigEntity]:
        out = []
        while len(out) < n and self._cursor < self.space.size:
            if self._cursor not in self._visited and self.space.valid(config := self.space.get(self._cursor)):
                out.append(config)
            self._cursor += 1
        return out


class ModelGuidedSearch(SearchStrategy):
    """Cost-model-guided search: simulated annealing on predicted scores, ε-greedy, diverse batches.

    Until the cost model has learned from ``warmup`` undisturbed results of one
    workload (this search's own, or those of another shape transferred by
    :meth:`CostModel.seed_from_records`: :meth:`CostModel.largest_group`),
    configs are *steps* from the best measured ones: one knob
    moved to an adjacent choice (:meth:`ConfigSpace.step`) from one of the
    ``_PARENTS`` best measured configs (random ones while none is measured;
    each a random config with probability ``epsilon``). A model fit on the few
    first results (the template's default configs) is nearly flat, and its
    plan's diverse pick then measures extreme configs; steps from the defaults
    keep the first trials near a good kernel and give the model contrasts where
    it matters, as the evolutionary searches of Ansor and MetaSchedule start
    from the best measured records (Zheng et al., "Ansor", OSDI 2020). A model
    transferred from many shapes of a few results each ranks no better. In
    whole-model tuning of ResNet-50 (64 trials, 2 a layer; AMD Zen 4), a model
    fit on the other 27 layers' 2 records each annealed picks that measured
    0.75x their layer's default config (geometric mean; faster in 3 of 28), a
    random step from the default 0.96-1.03x (faster in 7-11), and the 27
    annealings took 89 s of the run's 139. Stepping instead, the run tuned in
    79 s instead of 145 (empty build caches), its model 1.03x as fast. Nor
    does such a model rank the steps themselves (AMD Zen 3, fit on the other
    layers' records of such a run): of up to 12 one-knob steps from each
    layer's default, the one it ranked first measured 0.88x the default
    (geometric mean over 27 layers), a random one 0.96x, the best 1.08x;
    Spearman's rho of its ranking against the measured one, median over the
    layers, +0.08. Then each *plan* runs ``sa_points`` parallel annealing chains for up to
    ``sa_steps`` steps (a step mutates one knob of every chain; a worse point
    is accepted with probability ``exp(Δscore / (T · spread))``, T falling
    linearly from 1 to 0, spread = the initial scores' standard deviation),
    stopping early once the best ``pool_ratio · plan_size`` unvisited points
    seen have not changed for ``sa_patience`` steps. The chains start from the
    best measured configs and random ones. From that pool a greedy
    submodular pick takes ``plan_size`` configs, trading normalized score
    against knob values not yet in the plan (weight ``diversity``). Batches
    are drawn from the plan; each slot is a random config instead with
    probability ``epsilon``.

    The model is refit after every ``retrain_every`` new results (and once the
    warm-up's results are in), which anneals a new plan, and at once when
    ``retrain_surprises`` results of the guiding model's picks measured below
    half the best since the last fit, which re-scores the last annealing's
    pool with the refit model and picks the plan from it again, without a new
    annealing (most of a search's time goes to the features of the thousands
    of configs an annealing visits: conv2d 512@7², 64 trials, 61 s of 107 on
    an AMD Zen 4, 11 s with re-scoring). It learns
    from undisturbed results only: a ``disturbed`` measurement (see
    :class:`~.measure.MeasureProtocol`) timed the host more than the config,
    and is neither a label nor a starting point of the annealing. (On a host
    where every trial is disturbed, the search stays random.)

    ``featurize(configs) -> (n, n_features) float32`` computes the cost
    model's features of configs of this space (cached by the model per
    ``(workload_key, index)``).
    """

    def __init__(
        self,
        space: ConfigSpace,
        featurize: Callable[[list[ConfigEntity]], np.ndarray],
        *,
        cost_model: CostModel | None = None,
        workload_key: str = "workload",
        plan_size: int = 64,
        epsilon: float = 0.05,
        retrain_every: int = 16,
        warmup: int = 16,
        retrain_surprises: int = 2,
        sa_points: int = 128,
        sa_steps: int = 100,
        sa_patience: int = 20,
        pool_ratio: float = 2.0,
        diversity: float = 0.5,
        seed: int = 0,
    ):
        super().__init__(space, seed=seed)
        if not 0 <= epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        self.featurize = featurize
        self.model = cost_model if cost_model is not None else CostModel(seed=seed)
        self.workload_key = workload_key
        self.plan_size = plan_size
        self.epsilon = epsilon
        self.retrain_every = retrain_every
        self.warmup = warmup
        self.retrain_surprises = retrain_surprises
        self.sa_points = sa_points
        self.sa_steps = sa_steps
        self.sa_patience = sa_patience
        self.pool_size = max(plan_size, int(pool_ratio * plan_size))
        self.diversity = diversity
        self._plan: list[int] = []
        self._plan_version = -1
        self._pool: list[int] = []  # the last annealing's pool: where a surprise's refit re-ranks
        self._rerank = False  # the last refit came from surprises: re-rank the pool, do not anneal
        self._pending = 0
        self._surprises = 0  # results below _SURPRISE x the best since the last fit
        self._measured: dict[int, float] = {}  # index -> throughput

    # ---------------------------------------------------------------- learning
    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        super().update(configs, results)
        learned = [(c.index, r.own_throughput()) for c, r in zip(configs, results) if not r.disturbed]
        if not learned:
            return
        indices, throughputs = (list(x) for x in zip(*learned))
        best = max(self._measured.values(), default=0.0)
        guided = self._guided()
        self._surprises += sum(t < _SURPRISE * best for t in throughputs) if guided else 0
        self._measured.update(zip(indices, throughputs))
        self.model.add(self._features(indices), throughputs, [self.workload_key] * len(indices))
        self._pending += len(indices)
        if self.model.largest_group() < self.warmup:
            return  # still warming up: no model guides, so none is fit
        # a model that starts guiding now (untrained, or transferred) is fit on these results first
        periodic = not guided or self._pending >= self.retrain_every
        if periodic or self._surprises >= self.retrain_surprises:
            self.model.fit()
            self._rerank = not periodic
            self._pending = self._surprises = 0

    def _guided(self) -> bool:
        """Whether the cost model picks the configs: trained, on at least ``warmup`` results of
        one workload."""
        return self.model.trained and self.model.largest_group() >= self.warmup

    def _features(self, indices: Sequence[int]) -> np.ndarray:
        return self.model.features(self.workload_key, indices, self._featurize_indices)

    def _scores(self, indices: Sequence[int]) -> np.ndarray:
        return self.model.predict_configs(self.workload_key, indices, self._featurize_indices)

    def _featurize_indices(self, indices: list[int]) -> np.ndarray:
        return self.featurize([self.space.get(i) for i in indices])

    # ---------------------------------------------------------------- proposing
    def _propose(self, n: int) -> list[ConfigEntity]:
        if not self._guided():
            return self._steps_from_best(n)
        if self._plan_version != self.model.version:
            self._replan(anneal=not self._rerank)
        batch: list[ConfigEntity] = []
        chosen: set[int] = set()
        while len(batch) < n:
            index = None
            if self.rng.random() >= self.epsilon:
                index = self._next_planned(chosen)
            if index is None:
                pick = self._random_unvisited(1, exclude=chosen)
                if not pick:
                    break
                index = pick[0].index
            chosen.add(index)
            batch.append(self.space.get(index))
        return batch

    def _steps_from_best(self, n: int) -> list[ConfigEntity]:
        """``n`` unvisited configs (fewer only when the space runs out): steps from the best
        measured configs, each slot random with probability ``epsilon`` or where no new step is found."""
        parents = [self.space.get(i) for i in heapq.nlargest(_PARENTS, self._measured, key=self._measured.get)]
        batch: list[ConfigEntity] = []
        chosen: set[int] = set()
        steps = int(self.rng.binomial(n, 1 - self.epsilon)) if parents else 0
        for _ in range(_STEP_TRIES * steps):
            if len(batch) == steps:
                break
            c = self.space.step(parents[int(self.rng.integers(len(parents)))], self.rng)
            if c.index not in self._visited and c.index not in chosen:
                chosen.add(c.index)
                batch.append(c)
        return batch + self._random_unvisited(n - len(batch), exclude=chosen)

    def _next_planned(self, chosen: set[int]) -> int | None:
        """Pop the plan's next unvisited config; replan once if the plan runs dry."""
        for attempt in range(2):
            while self._plan:
                index = self._plan.pop(0)
                if index not in self._visited and index not in chosen:
                    return index
            if attempt == 0:
                self._replan(exclude=chosen)
        return None

    def _replan(self, exclude: set[int] = frozenset(), anneal: bool = True) -> None:
        """A new plan from a new annealing pool or, with ``anneal=False``, from the last pool
        re-scored by the refit model (annealing again where none of it is left unvisited)."""
        left = [] if anneal else [i for i in self._pool if i not in self._visited and i not in exclude]
        pool = dict(zip(left, self._scores(left).tolist())) if left else self._anneal(exclude)
        self._pool = list(pool)
        self._plan = self._diverse_pick(pool)
        self._plan_version = self.model.version

    def _anneal(self, exclude: set[int]) -> dict[int, float]:
        """Simulated annealing on predicted scores; returns the best unvisited points seen (index -> score)."""
        best_measured = heapq.nlargest(self.sa_points // 2, self._measured, key=self._measured.get)
        points = [self.space.get(i) for i in best_measured]
        points += self.space.random(self.rng, self.sa_points - len(points))
        scores = self._scores([p.index for p in points])
        spread = float(np.std(scores)) or 1.0
        pool: dict[int, float] = {}

        def offer(candidates: list[ConfigEntity], values: np.ndarray) -> None:
            for c, v in zip(candidates, values.tolist()):
                if c.index not in self._visited and c.index not in exclude:
                    pool[c.index] = v
            if len(pool) > self.pool_size:
                kept = {i: pool[i] for i in heapq.nlargest(self.pool_size, pool, key=pool.get)}
                pool.clear()
                pool.update(kept)

        offer(points, scores)
        unchanged, top = 0, frozenset(pool)
        for step in range(self.sa_steps):
            temperature = 1.0 - step / self.sa_steps
            moved = [self.space.mutate(p, self.rng) for p in points]
            moved_scores = self._scores([p.index for p in moved])
            with np.errstate(over="ignore"):
                accept_p = np.exp(np.minimum(0.0, moved_scores - scores) / (spread * temperature))
            accept = self.rng.random(len(points)) < accept_p
            points = [m if a else p for p, m, a in zip(points, moved, accept)]
            scores = np.where(accept, moved_scores, scores)
            offer(moved, moved_scores)
            unchanged = unchanged + 1 if frozenset(pool) == top else 0
            top = frozenset(pool)
            if unchanged >= self.sa_patience:
                break
        return pool

    def _diverse_pick(self, pool: dict[int, float]) -> list[int]:
        """Greedy submodular pick of ``plan_size`` from the pool: normalized score + diversity bonus.

        The bonus is ``diversity`` times the fraction of knobs whose value in
        the candidate is not yet in the plan (AutoTVM's ``submodular_pick``).
        """
        if not pool:
            return []
        indices = list(pool)
        values = np.array([pool[i] for i in indices])
        lo, hi = values.min(), values.max()
        norm = (values - lo) / (hi - lo) if hi > lo else np.ones_like(values)
        digits = np.array([self.space.get(i).digits for i in indices])
        n_knobs = max(1, digits.shape[1])
        seen = [set() for _ in range(digits.shape[1])]
        remaining = list(range(len(indices)))
        plan = []
        while remaining and len(plan) < self.plan_size:
            gains = [
                norm[r] + self.diversity * sum(d not in s for d, s in zip(digits[r], seen)) / n_knobs
                for r in remaining
            ]
            best = remaining.pop(int(np.argmax(gains)))
            plan.append(indices[best])
            for d, s in zip(digits[best], seen):
                s.add(d)
        return plan


class EarlyStopping:
    """Stop when the best throughput has not improved for ``patience`` trials.

    An improvement must beat the best by more than ``min_rel_improvement``
    (a fraction; 0 counts any gain). Failed trials count as trials, but only
    once a correct one was found: there is no best to stop on before that.
    A disturbed trial counts as a trial that did not improve: its timing
    cannot set the best.
    """

    def __init__(self, patience: int, min_rel_improvement: float = 0.0):
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience!r}")
        self.patience = patience
        self.min_rel_improvement = min_rel_improvement
        self.best = 0.0
        self.trials_since_best = 0

    def update(self, results: Iterable[MeasureResult]) -> bool:
        """Account for ``results`` in order; True when the search should stop."""
        for r in results:
            t = 0.0 if r.disturbed else r.own_throughput()
            if t > self.best * (1 + self.min_rel_improvement) and t > 0:
                self.best = t
                self.trials_since_best = 0
            elif self.best > 0:
                self.trials_since_best += 1
        return self.should_stop

    @property
    def should_stop(self) -> bool:
        return self.trials_since_best >= self.patience
