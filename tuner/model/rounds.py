"""The round sizes of a trial budget, shared by the round-based task schedulers."""

from __future__ import annotations

__all__ = ["ROUND_TRIALS", "RoundBudget"]

#: Trials per round of the round-based schedulers: each round is one `tune(..., resume=True)`
#: (a cost-model refit from the records), so a round is a few measurement batches.
ROUND_TRIALS = 8


class RoundBudget:
    """The round sizes of a budget of `budget` trials (at least one per task, so max(budget,
    tasks) in all) over `tasks` tasks: a warm-up round per task of min(round_trials,
    budget // tasks) trials (at least 1), then rounds of `round_trials` until it is spent, the
    last one smaller. Raises ValueError for tasks < 1 or round_trials < 1."""

    def __init__(self, tasks: int, budget: int, round_trials: int = ROUND_TRIALS):
        if tasks < 1:
            raise ValueError(f"tasks must be >= 1, got {tasks}")
        if round_trials < 1:
            raise ValueError(f"round_trials must be >= 1, got {round_trials}")
        self.left = max(budget, tasks)
        self.warm_up = max(1, min(round_trials, self.left // tasks))
        self.round_trials = round_trials

    def take(self, warm_up: bool) -> int:
        """The trials of the next round (0 once spent), taken from the budget."""
        size = min(self.warm_up if warm_up else self.round_trials, self.left)
        self.left -= size
        return size
