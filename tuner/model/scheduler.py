"""Task schedulers: which task of a model gets the next round of trials, and how many.

Every scheduler answers two calls, the `TaskScheduler` protocol: `next_round` (the task and
the trials of its next round, None when the budget is spent) and `update` (a task's best
latency after its round). A budget counts the trials allotted to the tasks, at least one per
task: `tune_model` asks the local loop for each task's allotment in all, so trials already in
the record file count toward it (a task tuned before costs nothing).

* `ProportionalScheduler`: one round per task, trials in proportion to FLOPs × occurrences.
* `RoundRobinScheduler`: rounds of `round_trials` trials to each task in turn (the baseline).
* `GradientScheduler` (gradient.py): Ansor's scheduler, the next round to the task whose
  improvement lowers Σ occurrences × latency most; the default (`make_scheduler`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from .gradient import GradientScheduler
from .rounds import ROUND_TRIALS, RoundBudget

__all__ = ["SCHEDULERS", "TaskScheduler", "ProportionalScheduler", "RoundRobinScheduler", "GradientScheduler",
           "proportional_split", "make_scheduler"]

#: The schedulers `make_scheduler` makes, the default first.
SCHEDULERS = ("gradient", "proportional", "round-robin")

class TaskScheduler(Protocol):
    """Chooses the rounds of a model's tuning."""

    def next_round(self) -> tuple[int, int] | None:
        """(task index, trials) of the next round; None when the budget is spent."""

    def update(self, task: int, latency_s: float) -> None:
        """The best latency (median seconds; inf: no correct config) of `task` after its round."""


def proportional_split(weights: Sequence[float], budget: int) -> list[int]:
    """`budget` trials split in proportion to `weights` (largest remainders), at least one per
    task: the result sums to max(budget, len(weights))."""
    n = len(weights)
    if n == 0:
        return []
    extra = max(budget, n) - n
    weights = list(weights) if sum(weights) > 0 else [1.0] * n
    ideal = [extra * w / sum(weights) for w in weights]
    shares = [math.floor(x) for x in ideal]
    by_remainder = sorted(range(n), key=lambda i: (shares[i] - ideal[i], -weights[i], i))
    for i in by_remainder[:extra - sum(shares)]:
        shares[i] += 1
    return [1 + s for s in shares]


class ProportionalScheduler:
    """One round per task, the largest weight first, of `proportional_split(weights, budget)`
    trials. `weights`: each task's FLOPs × occurrences."""

    def __init__(self, weights: Sequence[float], budget: int):
        self.trials = proportional_split(weights, budget)
        self._order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
        self.latency_s: dict[int, float] = {}

    def next_round(self) -> tuple[int, int] | None:
        if not self._order:
            return None
        task = self._order.pop(0)
        return task, self.trials[task]

    def update(self, task: int, latency_s: float) -> None:
        self.latency_s[task] = latency_s


class RoundRobinScheduler:
    """Every task in turn (index order), a warm-up round each and then rounds of
    `round_trials` (see RoundBudget) until `budget` is spent: the baseline that knows nothing
    of the tasks."""

    def __init__(self, tasks: int, budget: int, round_trials: int = ROUND_TRIALS):
        self.budget = RoundBudget(tasks, budget, round_trials)
        self.tasks = tasks
        self.rounds = 0
        self.latency_s: dict[int, float] = {}

    def next_round(self) -> tuple[int, int] | None:
        trials = self.budget.take(warm_up=self.rounds < self.tasks)
        if not trials:
            return None
        task = self.rounds % self.tasks
        self.rounds += 1
        return task, trials

    def update(self, task: int, latency_s: float) -> None:
        self.latency_s[task] = latency_s


def make_scheduler(name: str, tasks: Sequence, budget: int, round_trials: int = ROUND_TRIALS) -> TaskScheduler:
    """The scheduler `name` (one of SCHEDULERS) of `budget` trials over `tasks` (extract.Task:
    their occurrences, FLOPs and operator; tasks of one operator are similar for the gradient
    scheduler). Raises ValueError for another name, no task, or round_trials < 1."""
    if name == "gradient":
        return GradientScheduler([t.occurrences for t in tasks], [t.flop for t in tasks], budget,
                                 groups=[t.workload.op for t in tasks], round_trials=round_trials)
    if name == "proportional":
        return ProportionalScheduler([t.flop * t.occurrences for t in tasks], budget)
    if name == "round-robin":
        return RoundRobinScheduler(len(tasks), budget, round_trials)
    raise ValueError(f"scheduler: {name!r} is not one of {', '.join(SCHEDULERS)}")
