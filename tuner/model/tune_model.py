"""Tuning a whole model: every task of an extraction tuned by the local loop (tuner.tune), the
rounds chosen by a task scheduler (tuner.model.scheduler), all records in one record file."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target

from ..tune import TuneResult, tune
from .extract import Extraction, Task
from .scheduler import ProportionalScheduler, TaskScheduler

__all__ = ["TaskResult", "ModelTuneResult", "tune_model"]


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """The kernel chosen for one task: its `config` JSON, where it came from (`source`: "best
    record", or "default config" when no trial was correct), its median `latency_s` (None for a
    default config), and the `trials` the task was given."""

    task: Task
    config: dict
    source: str
    latency_s: float | None
    trials: int

    @property
    def gflops(self) -> float | None:
        return self.task.flop / self.latency_s / 1e9 if self.latency_s else None


@dataclasses.dataclass(frozen=True)
class ModelTuneResult:
    """Every task's result (extraction order), the target, device key and wall seconds."""

    extraction: Extraction
    results: list[TaskResult]
    target: Target
    device_key: str
    elapsed_s: float

    @property
    def estimated_latency_s(self) -> float | None:
        """Σ occurrences × kernel latency over the tasks (None if a task has no latency)."""
        if any(r.latency_s is None for r in self.results):
            return None
        return sum(r.task.occurrences * r.latency_s for r in self.results)


def tune_model(extraction: Extraction, target: Target, *, trials: int, records_path: str | os.PathLike,
               scheduler: TaskScheduler | None = None,
               on_round: Callable[[Task, TuneResult], None] | None = None, **tune_options) -> ModelTuneResult:
    """Tune every task of `extraction` for `target` with `trials` trials in all (at least one per
    task), in the rounds `scheduler` chooses (default ProportionalScheduler over FLOPs ×
    occurrences), each round a `tune(..., resume=True)` of its task into `records_path` (its
    folder created if needed);
    `tune_options` go to every tune call (protocol, cpus, device_key, strategy, ...);
    `on_round(task, result)` after each round.

    Raises ValueError for trials < 1, and what tune raises.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    tasks = extraction.tasks
    records_path = Path(records_path)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    scheduler = scheduler or ProportionalScheduler([t.flop * t.occurrences for t in tasks], trials)
    start = time.perf_counter()
    given = [0] * len(tasks)
    last: dict[int, TuneResult] = {}
    while (chosen := scheduler.next_round()) is not None:
        index, count = chosen
        given[index] += count
        result = tune(tasks[index].workload, target, trials=given[index], records_path=records_path,
                      resume=True, **tune_options)
        last[index] = result
        scheduler.update(index, result.latency_s)
        if on_round:
            on_round(tasks[index], result)
    results = [_task_result(task, last.get(i), target, given[i]) for i, task in enumerate(tasks)]
    device_key = next((r.device_key for r in last.values()), tune_options.get("device_key") or "")
    return ModelTuneResult(extraction, results, target, device_key, time.perf_counter() - start)


def _task_result(task: Task, result: TuneResult | None, target: Target, trials: int) -> TaskResult:
    if result is None or result.best is None:
        return TaskResult(task, ops.default_config(task.workload, target).to_json(), "default config", None, trials)
    return TaskResult(task, result.best.config, "best record", result.latency_s, trials)
