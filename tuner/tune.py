"""Tuning on one machine (``tunefleet tune``): the one loop over a local runner and a record file.

:func:`tune` runs the :class:`~.loop.TuningLoop` with a search strategy (:func:`make_strategy`:
``"xgb"``: cost-model-guided, the default; ``"random"``; ``"grid"``) for up to ``trials``
distinct configs of a workload, measuring them in batches with a
:class:`~.runner.LocalRunner` over a :class:`~.runner.LocalMeasurer` (batch size: its number
of builders, so each batch builds in parallel and runs back to back), keeping them in a
:class:`~.records.RecordFile`. Every result is
appended to the record file at once, so an interrupted run loses nothing and
``resume=True`` continues from the file without re-measuring any config
(they count toward ``trials``). The cost model is refit as results arrive and
is seeded, before the first trial, from the file's records of other
workloads of the same operator family on the same device key, and from
``transfer_records`` (transfer learning across shapes).

At the end, the ``validate_top`` finalists are re-measured side by side with
more repeats (:mod:`.validation`); the record file's :func:`~.records.best` then
chooses among those (:func:`.validation.best`: a noise-lucky config cannot win); while the
winner's measurement was disturbed beyond the host's load it is measured again and the file
chooses again (:func:`.validation.settle`). The
result reports the winner's coefficient of variation.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.space import ConfigError
from tunefleet.compiler.target import Target

from . import host, validation
from .cost_model import CostModel
from .features import Featurizer, feature_schema
from .loop import Budget, Trial, TuningLoop
from .measure import MeasureProtocol, canonical_json, workload_key
from .records import Record, RecordError, RecordFile
from .resolve import resolve
from .runner import LocalMeasurer, LocalRunner
from .search import GridSearch, ModelGuidedSearch, RandomSearch, SearchStrategy

__all__ = ["STRATEGIES", "SEARCH_SETTINGS", "TuneError", "Trial", "Progress", "TuneResult", "tune"]

STRATEGIES = ("xgb", "random", "grid")
#: ModelGuidedSearch settings for "xgb". Features cost 1.5-2 ms per new config of a 1024^3
#: matmul on a busy 2-core host (lowering without passes), so annealing 48 chains for at most
#: 50 steps (at most ~2,400 new configs per plan, fewer as the cache fills) keeps a replan to
#: 2-5 s, against 30-60 s to build and measure the 16 trials between refits there (a 64-trial
#: run of matmul 1024^3: 15 s of 133 s proposing and learning). AutoTVM anneals 128 chains for
#: 500 steps and refits every 64 trials.
SEARCH_SETTINGS = {"plan_size": 64, "epsilon": 0.05, "retrain_every": 16, "sa_points": 48, "sa_steps": 50,
                   "sa_patience": 10}
_RATE_WINDOW_S = 60.0


class TuneError(RuntimeError):
    """A tuning run cannot start (e.g. its record file already holds trials and resume is off)."""


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a progress callback gets after every batch (``phase`` "search") and around the
    final validation ("validate", then "done"). ``rate``: trials per second over the last
    minute; ``errors``: failed trials by status."""

    phase: str
    trials_done: int
    trials_budget: int
    best_gflops: float
    rate: float
    elapsed_s: float
    errors: dict[str, int]


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """The outcome of :func:`tune`.

    ``best``: the chosen record (None if no config was correct); ``gflops``,
    ``latency_s`` (median seconds), ``cv`` (coefficient of variation of its
    costs) and ``spread`` (their interquartile range over the median) come from
    it. ``trials``: every search trial, resumed ones first;
    ``measured``: trials measured by this run; ``transferred``: records of
    other workloads that seeded the cost model; ``validation``: the
    re-measurements; ``elapsed_s``: wall seconds of the run, of which
    ``search_s`` went to proposing configs and learning from results (cost
    model fits, features, annealing) and the rest to measuring; ``stopped``:
    "budget", "early_stopping" or "space_exhausted".
    """

    workload: ops.Workload
    target: Target
    device_key: str
    best: Record | None
    trials: list[Trial]
    measured: int
    transferred: int
    validation: list[Record]
    elapsed_s: float
    search_s: float
    stopped: str
    records_path: Path

    @property
    def gflops(self) -> float:
        return self.best.result.gflops(self.workload.flop) if self.best else 0.0

    @property
    def latency_s(self) -> float:
        return self.best.result.median if self.best else float("inf")

    @property
    def cv(self) -> float:
        return self.best.result.cv if self.best else float("inf")

    @property
    def spread(self) -> float:
        return self.best.result.spread if self.best else float("inf")


def _family(record: Record) -> str | None:
    try:
        return ops.get(record.workload.get("op")).family or record.workload.get("op")
    except ops.WorkloadError:  # an operator this process does not know (a plugin not loaded)
        return None


def _resolves(record: Record) -> bool:
    try:
        resolve(record.workload, record.target, record.config)
    except (ValueError, LookupError):  # WorkloadError, TargetError, ConfigError: written by another version
        return False
    return True


def _transfer_set(candidates: Iterable[Record], workload: ops.Workload, device_key: str) -> list[Record]:
    """Records of other workloads of the same operator family on the same device key that this
    version of the templates can still read."""
    key = workload_key(workload.to_json())
    return [r for r in candidates if r.workload_key != key and r.device_key == device_key
            and _family(r) == workload.family and _resolves(r)]


def make_strategy(name: str, workload: ops.Workload, target: Target, featurizer: Featurizer, seed: int,
                  transfer: Sequence[Record] = ()) -> SearchStrategy:
    """The search strategy `name` (random | grid | xgb) over the workload's config space.

    Random and model-guided search measure the template's rule-based default config first
    (and the other configs its rule names: `ops.preferred_configs`), so the first batch
    already holds a good kernel; xgb's cost model is seeded from
    `transfer` (records of the same operator family and device key).
    """
    space = ops.config_space(workload, target)
    if name == "grid":
        return GridSearch(space, seed=seed)
    if name == "random":
        search: SearchStrategy = RandomSearch(space, seed=seed)
    elif name == "xgb":
        model = CostModel(seed=seed, schema=feature_schema())
        model.seed_from_records(list(transfer), featurizer.records)
        search = ModelGuidedSearch(space, featurizer.for_space(workload, target), cost_model=model,
                                   workload_key=workload.key, seed=seed, **SEARCH_SETTINGS)
    else:
        raise ValueError(f"strategy: {name!r} is not one of {', '.join(STRATEGIES)}")
    search.prefer(ops.preferred_configs(workload, target))
    return search


def tune(
    workload: ops.Workload,
    target: Target | str,
    *,
    trials: int,
    records_path: str | os.PathLike,
    strategy: str = "xgb",
    protocol: MeasureProtocol | None = None,
    cpus: Sequence[int] | None = None,
    device_key: str | None = None,
    resume: bool = False,
    early_stopping: int | None = None,
    transfer_records: Iterable[Record] = (),
    validate_top: int = validation.FINALISTS,
    validation_repeat: int | None = None,
    measurer: LocalMeasurer | None = None,
    featurizer: Featurizer | None = None,
    batch_size: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    seed: int = 0,
) -> TuneResult:
    """Tune ``workload`` for ``target`` with up to ``trials`` distinct configs; see the module docstring.

    ``protocol``: how candidates are timed (default ``MeasureProtocol()``);
    ``cpus``: the CPUs to measure on (default: the affinity mask);
    ``device_key``: default ``host.device_key(cpus)``; ``early_stopping``:
    stop after that many trials without a better one; ``validate_top``: finalists to validate
    (0: none, nor the template's rule-based configs: whole-model tuning validates each task
    once, after its last round); ``validation_repeat``:
    repeats of the final re-measurement (default ``max(15, 3 * protocol.repeat)``);
    ``measurer``: a LocalMeasurer to use (default: one made and closed here);
    ``featurizer``: the Featurizer of the xgb search (default: one made and closed here, with a
    pool of a process per CPU of ``cpus``: the search runs only between measurements);
    ``batch_size``: configs per batch (default: the measurer's builders);
    ``progress``: called with a :class:`Progress` after each batch.

    Raises TuneError when the record file already holds trials of this
    workload, target and device key and ``resume`` is false, or when ``target``
    is a CPU target this host cannot execute (its candidates would die of SIGILL),
    :class:`~.records.RecordError` naming the record file when a line of it is damaged or a record
    of this workload has a config its config space does not hold, ValueError for a bad argument
    (named), :class:`~.processes.StartError` at the first build when called while a main script
    is imported (every builder process imports it again: start the
    work under ``if __name__ == "__main__":``). KeyboardInterrupt propagates after the measurer is
    closed; every finished trial is already in the record file.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    target = Target.parse(target) if isinstance(target, str) else target
    if target.kind == "cpu" and not target.runs_on(here := Target.local("cpu")):
        raise TuneError(f"this host ({here}) cannot execute target {target}; it runs "
                        f"{', '.join(map(str, here.executable()))}")
    protocol = protocol or MeasureProtocol()
    cpus = sorted(cpus) if cpus else host.affinity()
    if device_key is None and target.kind == "cuda":  # the pool of this host's GPU
        from .gpu_runner import gpu_device_key

        device_key = gpu_device_key(target)
    device_key = device_key or host.device_key(cpus)
    database = RecordFile(records_path, workload.to_json(), str(target), device_key)
    existing = database.load()
    mine = database.mine(existing)
    space = ops.config_space(workload, target)
    for n, record in enumerate(mine, 1):
        try:  # a damaged record, or one of another version's config space
            space.from_json(record.config)
        except ConfigError as exc:
            raise RecordError(f"{database.path}: record {n} of this workload has config "
                              f"{canonical_json(record.config)[:200]}, which is not in this version's config "
                              f"space: {exc}") from None
    if mine and not resume:
        configs = len({canonical_json(r.config["knobs"]) for r in mine})
        raise TuneError(f"{database.path} already holds {configs} measured configs of this workload on "
                        f"{device_key}; resume to continue from them, or use another record file")
    own_featurizer = featurizer is None
    featurizer = featurizer or Featurizer(workers=len(cpus), cpus=cpus)
    transfer = _transfer_set([*existing, *transfer_records], workload, device_key) if strategy == "xgb" else []
    search = make_strategy(strategy, workload, target, featurizer, seed, transfer)

    start = time.perf_counter()
    own = measurer is None
    if measurer is None and target.kind == "cuda":  # CUDA candidates: the GPU measurement child
        from .gpu_runner import GpuMeasurer

        measurer = GpuMeasurer(cpus=cpus)
    measurer = measurer or LocalMeasurer(cpus=cpus)
    runner = LocalRunner(measurer, workload.to_json(), str(target), batch_size)

    def report(phase: str, loop: TuningLoop) -> None:
        if progress is None:
            return
        now = time.perf_counter() - start
        window = min(now, _RATE_WINDOW_S)
        recent = sum(1 for t in loop.history[loop.resumed:] if t.elapsed_s >= now - _RATE_WINDOW_S)
        errors = collections.Counter(t.result.status for t in loop.history if not t.result.ok)
        best_gflops = max((t.result.gflops(workload.flop) for t in loop.history if not t.result.disturbed),
                          default=0.0)
        progress(Progress(phase, len(loop.history), trials, best_gflops, recent / window if window else 0.0,
                          now, dict(errors)))

    loop = TuningLoop(search, runner, database, protocol, Budget(trials, early_stopping=early_stopping),
                      on_round=lambda loop: report("search", loop), clock=lambda: time.perf_counter() - start)
    try:
        stopped = loop.run()
        report("validate", loop)
        if validate_top:
            load = measurer.baseline  # the search's: the validation's own measurements join it
            validated = loop.validate(validate_top, validation_repeat)

            def again(record: Record) -> None:
                validated.extend(loop.remeasure([record.config], validation_repeat))

            found = validation.settle(database.best, lambda record: record.result, again, load)
        else:
            validated, found = [], database.best()
    finally:
        if own_featurizer:
            featurizer.close()
        if own:
            measurer.close()
    report("done", loop)
    return TuneResult(workload=workload, target=target, device_key=device_key, best=found, trials=loop.history,
                      measured=len(loop.history) - loop.resumed, transferred=len(transfer), validation=validated,
                      elapsed_s=time.perf_counter() - start, search_s=loop.search_s, stopped=stopped,
                      records_path=database.path)
