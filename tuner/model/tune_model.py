"""Tuning a whole model: every task of an extraction tuned by the local loop (tuner.tune), the
rounds chosen by a task scheduler (tuner.model.scheduler, default Ansor's gradient scheduler),
all records in one record file.

A task's allotment is the trials the scheduler gave it in all; the record file's trials of its
workload (same target and device key) count toward it, as `tune(..., resume=True)` counts
them. A round whose allotment the file already holds measures nothing and is not tuned again,
so a second run of the same model, or of another model sharing layers, with the same record
file costs no trial for the layers tuned before. The latency the scheduler learns after a
round is the best median among the task's first `allotment` search trials in the file (the
ones that round would have measured), so that a run repeated on the same file makes the same
choices. Search rounds skip the final re-measurement; each task measured by the run is
validated once at the end (tuner.validation), and its kernel is the record file's best.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target

from .. import host, validation
from ..features import Featurizer
from ..records import Record, RecordFile
from ..runner import LocalMeasurer
from ..tune import tune
from .extract import Extraction, Task
from .scheduler import TaskScheduler, make_scheduler

__all__ = ["Round", "TaskResult", "ModelTuneResult", "tune_model"]


@dataclasses.dataclass(frozen=True)
class Round:
    """One round of a task: its `allotted` trials in all so far, the trials `measured` by this
    round (0 when the record file held them), the task's `latency_s` after it (best median
    seconds among its first `allotted` search trials; inf when none was correct) and the
    round's wall `elapsed_s`."""

    allotted: int
    measured: int
    latency_s: float
    elapsed_s: float

    def gflops(self, flop: int) -> float:
        """Throughput of the task's best kernel so far, for `flop` FLOPs per call."""
        return flop / self.latency_s / 1e9 if 0 < self.latency_s < math.inf else 0.0


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """The kernel chosen for one task: its `config` JSON, where it came from (`source`: "best
    record", or "default config" when no trial was correct), its median `latency_s` (None for a
    default config), the `trials` the task was allotted and those `measured` by this run."""

    task: Task
    config: dict
    source: str
    latency_s: float | None
    trials: int
    measured: int = 0

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

    @property
    def measured(self) -> int:
        """Trials measured by this run (the others came from the record file)."""
        return sum(r.measured for r in self.results)


def tune_model(extraction: Extraction, target: Target, *, trials: int, records_path: str | os.PathLike,
               scheduler: TaskScheduler | None = None, on_round: Callable[[Task, Round], None] | None = None,
               validate_top: int = validation.FINALISTS, **tune_options) -> ModelTuneResult:
    """Tune every task of `extraction` for `target` with `trials` trials in all (at least one per
    task; the record file's count, see the module docstring), in the rounds `scheduler` chooses
    (default `make_scheduler("gradient", ...)`), each measuring round a `tune(..., resume=True)`
    of its task into `records_path` (its folder created if needed), then the `validate_top`
    finalists of each task measured re-measured; `tune_options` go to every tune call
    (protocol, cpus, device_key, strategy, ...; one LocalMeasurer and one Featurizer serve them
    all unless `measurer` / `featurizer` is given: the features of a task's configs are kept
    from one round to the next); `on_round(task, round)` after each round.

    Raises ValueError for trials < 1, and what tune raises.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    tasks = extraction.tasks
    records_path = Path(records_path)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    scheduler = scheduler or make_scheduler("gradient", tasks, trials)
    tune_options.setdefault("device_key", host.device_key(tune_options.get("cpus")))
    files = [RecordFile(records_path, t.workload.to_json(), str(target), tune_options["device_key"]) for t in tasks]
    start = time.perf_counter()
    given, measured = [0] * len(tasks), [0] * len(tasks)
    own = "measurer" not in tune_options
    measurer = tune_options.pop("measurer", None) or LocalMeasurer(cpus=tune_options.get("cpus"))
    own_featurizer = "featurizer" not in tune_options
    cpus = sorted(tune_options.get("cpus") or host.affinity())
    featurizer = tune_options.pop("featurizer", None) or Featurizer(workers=len(cpus), cpus=cpus)
    shared = {**tune_options, "measurer": measurer, "featurizer": featurizer}
    try:
        while (chosen := scheduler.next_round()) is not None:
            index, count = chosen
            given[index] += count
            began = time.perf_counter()
            new = _fill(tasks[index], target, files[index], given[index], records_path, shared)
            measured[index] += new
            done = Round(given[index], new, _latency(files[index], given[index]), time.perf_counter() - began)
            scheduler.update(index, done.latency_s)
            if on_round:
                on_round(tasks[index], done)
        for index in (i for i in range(len(tasks)) if measured[i] and validate_top):
            tune(tasks[index].workload, target, trials=given[index], records_path=records_path, resume=True,
                 validate_top=validate_top, **shared)
    finally:
        if own_featurizer:
            featurizer.close()
        if own:
            measurer.close()
    results = [_task_result(task, files[i].best(), target, given[i], measured[i]) for i, task in enumerate(tasks)]
    return ModelTuneResult(extraction, results, target, tune_options["device_key"], time.perf_counter() - start)


def _fill(task: Task, target: Target, file: RecordFile, allotted: int, records_path: Path, tune_options: dict) -> int:
    """Measure what the record file lacks of the task's `allotted` trials (no more than its
    config space holds); returns the trials measured."""
    wanted = min(allotted, len(ops.config_space(task.workload, target)))
    if len(file.trials()) >= wanted:
        return 0
    result = tune(task.workload, target, trials=allotted, records_path=records_path, resume=True,
                  validate_top=0, **tune_options)
    return result.measured


def _latency(file: RecordFile, allotted: int) -> float:
    """The best median (seconds) among the first `allotted` search trials of the file; inf if
    none was correct."""
    results = [t.result for t in file.trials()[:allotted] if t.result is not None and t.result.ok]
    return min((r.median for r in results), default=math.inf)


def _task_result(task: Task, best: Record | None, target: Target, allotted: int, measured: int) -> TaskResult:
    if best is None:
        config = ops.default_config(task.workload, target).to_json()
        return TaskResult(task, config, "default config", None, allotted, measured)
    return TaskResult(task, best.config, "best record", best.result.median, allotted, measured)
