"""Task schedulers on a synthetic model of known layer latencies (no compile): each task's best
latency after t trials is a known curve, g_i(t) = floor_i + (start_i - floor_i) * exp(-t / rate_i),
and the same global budget is spent by each scheduler; the model's estimated latency
Σ occurrences × g_i(t_i) at the end compares them."""

from __future__ import annotations

import math

import pytest

from tunefleet.tuner.model.gradient import GradientScheduler
from tunefleet.tuner.model.rounds import RoundBudget
from tunefleet.tuner.model.scheduler import ProportionalScheduler, RoundRobinScheduler

# occurrences, FLOPs of one occurrence, start and floor latency (s), rate (trials): a large 3x3
# convolution far from its floor, a repeated smaller one, a 1x1 convolution whose default
# config is already its best (many FLOPs, nothing to gain), and a depthwise convolution (few
# FLOPs, a slow default, much to gain).
LAYERS = [(1, 1e8, 20e-3, 2e-3, 30), (3, 2e7, 4e-3, 1e-3, 15), (1, 5e7, 2e-3, 2e-3, 1), (6, 1e6, 1e-3, 0.2e-3, 20)]
FLAT = 2
OCCURRENCES = [layer[0] for layer in LAYERS]
FLOPS = [layer[1] for layer in LAYERS]


def curve(task: int, trials: int) -> float:
    _, _, start, floor, rate = LAYERS[task]
    return floor + (start - floor) * math.exp(-trials / rate)


def simulate(scheduler) -> tuple[float, list[int]]:
    """Spend the scheduler's budget on the synthetic model: (Σ w × g at the end, trials per task)."""
    trials = [0] * len(LAYERS)
    while (chosen := scheduler.next_round()) is not None:
        task, count = chosen
        trials[task] += count
        scheduler.update(task, curve(task, trials[task]))
    return sum(w * curve(i, t) for i, (w, t) in enumerate(zip(OCCURRENCES, trials))), trials


@pytest.mark.parametrize("budget", [64, 160, 320])
def test_gradient_scheduler_beats_round_robin_and_proportional_on_known_curves(budget):
    gradient, spent = simulate(GradientScheduler(OCCURRENCES, FLOPS, budget, groups=["conv"] * 3 + ["depthwise"]))
    round_robin, even = simulate(RoundRobinScheduler(len(LAYERS), budget))
    proportional, _ = simulate(ProportionalScheduler([w * f for w, f in zip(OCCURRENCES, FLOPS)], budget))
    assert sum(spent) == sum(even) == budget
    assert gradient < round_robin and gradient <= proportional
    # the layer that cannot improve gets the fewest trials, fewer than an even share
    assert spent[FLAT] == min(spent) and spent[FLAT] < budget / len(LAYERS)


def test_gradient_estimate_follows_the_ansor_formula():
    scheduler = GradientScheduler([2, 1], [1e6, 4e6], 100, groups=["a", "a"], alpha=0.2, beta=2.0, window=3,
                                  epsilon=0)
    scheduler.history = [[4e-3, 3e-3, 2e-3, 1.5e-3], [1e-3]]
    # backward (1.5 - 4) / 3 ms per round; forward: min(-1.5 / 4, 2 * 1e6 / (4e6 / 1e-3) - 1.5) ms:
    # the sibling runs 4 GFLOP/s, so this task at twice that latency would take 0.5 ms
    backward, forward = (1.5e-3 - 4e-3) / 3, min(-1.5e-3 / 4, 2 * 1e6 / 4e9 - 1.5e-3)
    assert scheduler.gradient(0) == pytest.approx(2 * (0.2 * backward + 0.8 * forward))
    assert forward == pytest.approx(-1e-3)  # the sibling's term is the steeper here
    assert scheduler.gradient(1) == pytest.approx(1 * 0.8 * -1e-3)  # one round: no backward difference


def test_gradient_scheduler_warms_up_every_task_and_leaves_one_without_a_kernel():
    scheduler = GradientScheduler([1, 1, 1], [1e6] * 3, 40, round_trials=4, epsilon=0)
    rounds = []
    while (chosen := scheduler.next_round()) is not None:
        rounds.append(chosen)
        scheduler.update(chosen[0], math.inf if chosen[0] == 1 else 1e-3 / len(rounds))
    assert rounds[:3] == [(0, 4), (1, 4), (2, 4)]
    assert sum(trials for _, trials in rounds) == 40
    assert all(task != 1 for task, _ in rounds[3:])  # no correct kernel: not chosen again


def test_round_budget_gives_every_task_at_least_one_trial():
    budget = RoundBudget(tasks=5, budget=3, round_trials=8)
    assert [budget.take(warm_up=True) for _ in range(5)] == [1] * 5 and budget.take(warm_up=False) == 0
    budget = RoundBudget(tasks=2, budget=21, round_trials=8)
    assert [budget.take(True), budget.take(True), budget.take(False), budget.take(False)] == [8, 8, 5, 0]
    with pytest.raises(ValueError, match="round_trials"):
        RoundBudget(tasks=1, budget=1, round_trials=0)


def test_gradient_scheduler_rejects_bad_parameters():
    with pytest.raises(ValueError, match="one entry per task"):
        GradientScheduler([1, 2], [1e6], 10)
    with pytest.raises(ValueError, match="alpha"):
        GradientScheduler([1], [1e6], 10, alpha=1.5)
