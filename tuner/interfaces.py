"""The seams of the tuning loop (:mod:`.loop`): where candidates are measured, where trials are kept.

In the manner of TVM MetaSchedule, each concept is one small abstract class with pluggable
implementations, and one loop drives them:

* :class:`Runner` measures candidates and returns a :class:`RunnerFuture` per candidate.
  Implementations: :class:`~.runner.LocalRunner` (this machine: a pool of builders ahead of
  isolated, pinned measurement children) and ``tunefleet.server.measure_runner.DistributedRunner``
  (RQ jobs on ``measure:<device_key>``, taken by the workers of a device key, retried once).
* :class:`Database` keeps the trials of one tuning (workload + target + device key) and gives
  them back on resume. Implementations: :class:`~.records.RecordFile` (a JSON-lines record
  file) and ``tunefleet.server.trial_database.SqlDatabase`` (a service task's trial rows).

A :class:`Candidate` is one config on its way through both: the database hands it out when
the loop dispatches a config (``ref``: its handle there, e.g. a trial row's id) and is given
it back with the measurement.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any

from tunefleet.compiler.space import ConfigEntity

from .measure import MeasureProtocol, MeasureResult

__all__ = ["Candidate", "RunnerResult", "RunnerFuture", "Runner", "StoredTrial", "Database"]


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A config dispatched for measurement; ``ref``: the database's handle of its trial (None
    where the database needs none)."""

    config: ConfigEntity
    ref: Any = None


@dataclasses.dataclass(frozen=True)
class RunnerResult:
    """A candidate's measurement: the ``result``, the ``attempts`` it took (a remote job is
    retried when its worker dies) and the id of the ``worker_id`` that measured it (None: this
    machine, or unknown)."""

    result: MeasureResult
    attempts: int = 1
    worker_id: int | None = None


class RunnerFuture:
    """The measurement of one candidate, under way. Its runner sets ``measured`` in
    :meth:`Runner.poll` (and only there), so reading its state costs nothing."""

    def __init__(self, candidate: Candidate) -> None:
        self.candidate = candidate
        self.measured: RunnerResult | None = None

    def done(self) -> bool:
        """The result is in."""
        return self.measured is not None

    def result(self) -> RunnerResult:
        """The measurement; RuntimeError before :meth:`done`."""
        if self.measured is None:
            raise RuntimeError(f"{self.candidate.config} is not measured yet: poll its runner first")
        return self.measured

    def started(self) -> bool:
        """The measurement began (a worker took the job); always False where it is not known."""
        return False


class Runner(abc.ABC):
    """Measures candidates of one workload on one target (and device key)."""

    #: True when candidates are measured on other hosts, so the search may plan (fit the cost
    #: model, anneal) while they are measured; on this machine it must not, or it would
    #: disturb the timings.
    remote: bool = False

    @abc.abstractmethod
    def capacity(self) -> int:
        """Candidates to keep in flight now (0: none can be measured now)."""

    @abc.abstractmethod
    def submit(self, candidates: Sequence[Candidate], protocol: MeasureProtocol) -> list[RunnerFuture]:
        """Start measuring ``candidates`` with ``protocol``; one future each, in order."""

    @abc.abstractmethod
    def poll(self, futures: Sequence[RunnerFuture]) -> None:
        """Bring the futures' state up to date (a runner that measures in the caller's thread
        measures here). Raises KeyboardInterrupt as it comes, after stopping what it ran."""

    @abc.abstractmethod
    def wait(self, futures: Sequence[RunnerFuture], *, proposals_due: bool) -> None:
        """Block until a result may have come in, or a while; briefly when ``proposals_due``
        (the loop would dispatch as soon as the search has proposals ready)."""

    def adopt(self, candidate: Candidate, started: bool) -> RunnerFuture:
        """The future of a candidate an earlier run dispatched and did not see measured
        (``started``: it was known to be under way). Only a runner whose measurements
        outlive the run can adopt; NotImplementedError otherwise."""
        raise NotImplementedError(f"{type(self).__name__} cannot adopt a measurement of an earlier run")

    def cancel(self, futures: Sequence[RunnerFuture]) -> None:  # noqa: B027 - optional
        """Stop the measurements not yet started, where the runner can (a cancelled task)."""


@dataclasses.dataclass(frozen=True)
class StoredTrial:
    """A search trial kept by a :class:`Database`: its ``config`` JSON, its ``result`` (None:
    dispatched, not measured yet), ``ref`` (the database's handle) and ``started`` (its
    measurement was known to be under way)."""

    config: dict
    result: MeasureResult | None
    ref: Any = None
    started: bool = False


class Database(abc.ABC):
    """The trials of one tuning: one workload on one target and device key."""

    @abc.abstractmethod
    def trials(self) -> list[StoredTrial]:
        """The search trials already kept, in dispatch order, each config once (its first
        measurement; later ones are validations)."""

    @abc.abstractmethod
    def add(self, configs: Sequence[ConfigEntity]) -> list[Candidate]:
        """Keep ``configs`` as dispatched, before they are measured; their candidates, leaving
        out any config this tuning already has."""

    @abc.abstractmethod
    def record(self, candidate: Candidate, measured: RunnerResult) -> Any:
        """Keep a candidate's measurement at once; returns what was stored."""

    def mark_running(self, candidates: Sequence[Candidate]) -> None:  # noqa: B027 - optional
        """Candidates whose measurement began."""

    def drop_unmeasured(self) -> None:  # noqa: B027 - optional
        """Forget the dispatched candidates never measured (the tuning was cancelled)."""
