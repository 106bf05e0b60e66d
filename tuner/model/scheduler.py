"""Task schedulers: which task of a model gets the next round of trials, and how many.

`ProportionalScheduler` splits one global budget in proportion to each task's FLOPs ×
occurrences (its share of the model's work), one round per task, the largest first. It is the
first step: the gradient-based scheduler of Ansor (Zheng et al., OSDI 2020, §6), which gives
the next round to the task whose improvement lowers Σ occurrences × latency most, goes behind
the same two methods, `next_round` (choose) and `update` (learn a task's latency after a round).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

__all__ = ["TaskScheduler", "ProportionalScheduler", "proportional_split"]


class TaskScheduler(Protocol):
    """Chooses the rounds of a model's tuning."""

    def next_round(self) -> tuple[int, int] | None:
        """(task index, trials) of the next round; None when the budget is spent."""

    def update(self, task: int, latency_s: float) -> None:
        """The best latency (median seconds) of `task` after its round."""


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
