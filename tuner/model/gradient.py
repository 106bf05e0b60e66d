"""Ansor's gradient-based task scheduler (Zheng et al., "Ansor: Generating High-Performance
Tensor Programs for Deep Learning", OSDI 2020, §6 "Task scheduler").

The model's estimated latency is f = Σ_i w_i × g_i(t_i): w_i the occurrences of task i, g_i
its best latency (seconds) after t_i rounds. After a warm-up round per task, each round goes
to the task with the steepest estimated descent ∂f/∂t_i, estimated as

    ∂f/∂t_i ≈ w_i × ( α × (g_i(t_i) − g_i(t_i − Δt)) / Δt
                      + (1 − α) × min( −g_i(t_i) / t_i,  β × C_i / max_{k ∈ N(i)} V_k − g_i(t_i) ) )

with t_i counted in rounds, Δt the backward window (rounds; the backward difference is 0
until the task has had more than Δt rounds), C_i the FLOPs of one occurrence of task i,
N(i) the tasks similar to i (the same operator: `groups`) with a correct kernel, and
V_k = C_k / g_k(t_k) their throughput (FLOP/s). The first term is the recent improvement,
the second an optimistic guess of the next one: the task's latency falling as 1/t, or it
reaching β times the latency its best sibling's throughput would give. Each round is a random
task with probability ε (ε-greedy, seeded) instead. Defaults α = 0.2, β = 2, Δt = 3 and
ε = 0.05 are Ansor's (TVM's auto_scheduler task scheduler).

A task with no correct kernel after its round (latency inf) is not chosen again while any
task has one: its latency is unknown, its gradient undefined.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

from .rounds import ROUND_TRIALS, RoundBudget

__all__ = ["GradientScheduler"]


class GradientScheduler:
    """The `TaskScheduler` of Ansor (see the module docstring).

    `occurrences`: w_i per task; `flops`: C_i, FLOPs of one occurrence; `budget`: trials in
    all (RoundBudget: warm-up rounds, then rounds of `round_trials`); `groups`: a label per
    task, tasks of one label being similar (default: none similar); `alpha`, `beta`, `window`
    (Δt, rounds), `epsilon` and `seed` as in the module docstring.

    Raises ValueError for lists of different lengths, no task, or a parameter out of range.
    """

    def __init__(self, occurrences: Sequence[float], flops: Sequence[float], budget: int, *,
                 groups: Sequence[Hashable] | None = None, round_trials: int = ROUND_TRIALS, alpha: float = 0.2,
                 beta: float = 2.0, window: int = 3, epsilon: float = 0.05, seed: int = 0):
        n = len(occurrences)
        groups = list(groups) if groups is not None else list(range(n))
        if len(flops) != n or len(groups) != n:
            raise ValueError(f"occurrences, flops and groups must have one entry per task: "
                             f"got {n}, {len(flops)} and {len(groups)}")
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0 <= epsilon < 1:
            raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")
        self.budget = RoundBudget(n, budget, round_trials)
        self.weights = list(occurrences)
        self.flops = list(flops)
        self.similar = [[k for k in range(n) if groups[k] == groups[i]] for i in range(n)]
        self.alpha, self.beta, self.window, self.epsilon = alpha, beta, window, epsilon
        self.rng = random.Random(seed)
        #: best latency (seconds) of each task after each of its rounds
        self.history: list[list[float]] = [[] for _ in range(n)]
        self.rounds = [0] * n
        self._warm_up = list(range(n))

    def next_round(self) -> tuple[int, int] | None:
        warm_up = bool(self._warm_up)
        if not self.budget.left:
            return None
        task = self._warm_up.pop(0) if warm_up else self._choose()
        self.rounds[task] += 1
        return task, self.budget.take(warm_up)

    def update(self, task: int, latency_s: float) -> None:
        self.history[task].append(latency_s)

    def gradient(self, task: int) -> float:
        """The estimate of ∂f/∂t_i (seconds per round, ≤ 0) of a task with a finite latency."""
        h = self.history[task]
        g, t = h[-1], len(h)
        backward = (h[-1] - h[-1 - self.window]) / self.window if t > self.window else 0.0
        speeds = [self.flops[k] / self.history[k][-1] for k in self.similar[task]
                  if self.history[k] and math.isfinite(self.history[k][-1]) and self.history[k][-1] > 0]
        sibling = self.beta * self.flops[task] / max(speeds) - g if speeds and max(speeds) > 0 else math.inf
        forward = min(-g / t, sibling)
        return self.weights[task] * (self.alpha * backward + (1 - self.alpha) * forward)

    def _choose(self) -> int:
        known = [i for i, h in enumerate(self.history) if h and math.isfinite(h[-1])]
        if not known:  # no latency yet (rounds in flight, or no correct kernel): the least served
            return min(range(len(self.rounds)), key=lambda i: (self.rounds[i], i))
        if self.epsilon and self.rng.random() < self.epsilon:
            return self.rng.choice(known)
        return min(known, key=lambda i: (self.gradient(i), i))
