"""The one tuning loop: propose, dispatch, record, learn; used by ``tunefleet tune`` and the service.

:class:`TuningLoop` drives a search strategy (with its cost model and featurizer, see
:func:`.tune.make_strategy`), a :class:`~.interfaces.Runner` and a
:class:`~.interfaces.Database`:

1. **Resume.** The database's trials are fed to the search (the cost model is refit from
   them; their configs are never proposed again) and to early stopping; trials dispatched
   but not measured are adopted from the runner. They count toward the trial budget.
2. **Search.** While the budget lasts, it keeps the runner's :meth:`~.interfaces.Runner.capacity`
   of candidates in flight, each kept in the database *before* it is dispatched, and records
   each result the moment the runner reports it, then lets the search learn from it (in its
   own thread when the runner is remote, see :mod:`.planner`). It stops dispatching on the
   trial budget, the wall-time budget, early stopping or an exhausted config space, and
   returns once nothing is in flight.
3. **Validation.** :meth:`TuningLoop.validate` re-measures the finalists
   (:mod:`.validation`) through the same runner and database; the service instead hands
   them to its export job, which applies the same rules on a worker.

What surrounds a run (a service's lease, cancel, waiting for workers, a database outage) is
the caller's :class:`Supervisor`, which the loop calls every round; it is never in here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tunefleet.compiler.space import ConfigEntity

from . import validation
from .interfaces import Candidate, Database, Runner, RunnerFuture, RunnerResult
from .measure import MeasureProtocol, MeasureResult, canonical_json
from .planner import InlinePlanner, Planner
from .search import EarlyStopping, SearchStrategy

__all__ = ["Budget", "Trial", "StopTuning", "Supervisor", "TuningLoop"]


@dataclasses.dataclass(frozen=True)
class Budget:
    """When the search stops: after ``trials`` distinct configs (resumed ones count), after
    ``wall_time_s`` seconds of the tuning's clock, or after ``early_stopping`` trials without a
    better one (None: no such limit)."""

    trials: int
    wall_time_s: float | None = None
    early_stopping: int | None = None


@dataclasses.dataclass(frozen=True)
class Trial:
    """One search trial: its 1-based ``number``, ``config`` JSON, ``result``, and ``elapsed_s`` since
    the run started when it finished (0 for a trial resumed from the database)."""

    number: int
    config: dict
    result: MeasureResult
    elapsed_s: float


class StopTuning(Exception):
    """Raised by a :class:`Supervisor` to end the run at once; the message says why. With
    ``drop``, the loop first cancels what is in flight and drops its unmeasured trials."""

    def __init__(self, reason: str, drop: bool = False) -> None:
        super().__init__(reason)
        self.drop = drop


class Supervisor:
    """What surrounds a run, called by the loop; this base supervises nothing."""

    def check(self) -> None:
        """Called every round; raises :class:`StopTuning` to end the run."""

    def results(self, done: Sequence[tuple[Candidate, RunnerResult]]) -> None:
        """Called with each round's results once they are recorded; may raise :class:`StopTuning`."""

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """Around each round (e.g. to ride out a database outage: the round is tried again)."""
        yield


class TuningLoop:
    """One tuning run of ``search`` over ``runner`` and ``database``; see the module docstring.

    ``protocol``: how candidates are timed; ``supervisor``: the caller's orchestration;
    ``on_round``: called with the loop before the first round and after each round that
    brought results; ``clock``: seconds the tuning has run, for ``budget.wall_time_s``
    (default: since :meth:`run` began). ``history``: the search trials, resumed ones first.
    """

    def __init__(self, search: SearchStrategy, runner: Runner, database: Database, protocol: MeasureProtocol,
                 budget: Budget, *, supervisor: Supervisor | None = None,
                 on_round: Callable[[TuningLoop], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.search = search
        self.runner = runner
        self.database = database
        self.protocol = protocol
        self.budget = budget
        self.supervisor = supervisor or Supervisor()
        self.on_round = on_round
        self.stopper = EarlyStopping(budget.early_stopping) if budget.early_stopping else None
        self.history: list[Trial] = []
        self.resumed = 0
        self.in_flight: list[RunnerFuture] = []
        self.dispatched = 0
        self.started = time.perf_counter()
        self.clock = clock or (lambda: time.perf_counter() - self.started)
        self.planner: InlinePlanner | Planner = Planner(search) if runner.remote else InlinePlanner(search)
        self._running: set[RunnerFuture] = set()  # started, reported to the database
        self._recorded: list[tuple[Candidate, RunnerResult]] = []  # recorded, not yet reported (a database outage)
        self._unstored: list[ConfigEntity] = []  # taken from the search, their add failed (a database outage)

    @property
    def search_s(self) -> float:
        """Seconds the loop waited for the search (proposing and learning)."""
        return self.planner.search_s

    def run(self) -> str:
        """Resume, then search until the budget is spent; returns why it stopped: "budget",
        "wall_time", "early_stopping" or "space_exhausted". Raises :class:`StopTuning` from the
        supervisor, an exception of the search, and KeyboardInterrupt as they come."""
        self.started = time.perf_counter()
        self._resume()
        self.planner.start()
        reason = ""
        try:
            self._observe()
            while True:
                with self.supervisor.round():
                    reason = self._round(reason)
                    if reason and not self.in_flight:
                        return reason
        finally:
            self.planner.stop()

    def validate(self, top: int = validation.FINALISTS, repeat: int | None = None) -> list[Any]:
        """Re-measure the ``top`` finalists of the history (the search's preferred configs among
        them: :func:`.validation.finalists`) with ``repeat`` repeats in interleaved
        rounds (:func:`.validation.validation_protocol`; the runner's measurer interleaves them,
        :func:`.validation.interleaved`), and record them; returns what the database stored, in
        ranking order."""
        chosen = validation.finalists(((canonical_json(t.config["knobs"]), t, t.result) for t in self.history), top,
                                      keep=[canonical_json(c.to_json()["knobs"]) for c in self.search.preferred])
        return self.remeasure([t.config for t in chosen], repeat) if chosen else []

    def remeasure(self, configs: Sequence[dict], repeat: int | None = None) -> list[Any]:
        """Measure ``configs`` (config JSON each) as :meth:`validate` does (interleaved rounds of
        :func:`.validation.validation_protocol` with ``repeat`` repeats) and record them; returns
        what the database stored, in order."""
        candidates = [Candidate(self.search.space.from_json(c)) for c in configs]
        futures = self.runner.submit(candidates, validation.validation_protocol(self.protocol, repeat))
        while True:
            self.runner.poll(futures)
            if all(f.done() for f in futures):
                return [self.database.record(f.candidate, f.result()) for f in futures]
            self.runner.wait(futures, proposals_due=False)

    # --- the rounds ----------------------------------------------------------------------

    def _resume(self) -> None:
        space = self.search.space
        stored = [(space.from_json(t.config), t) for t in self.database.trials()]
        measured = [(config, t.result) for config, t in stored if t.result is not None]
        if measured:
            configs, results = zip(*measured)
            self.search.update(list(configs), list(results))
            if self.stopper:
                self.stopper.update(results)
        self.history = [Trial(n + 1, config.to_json(), result, 0.0) for n, (config, result) in enumerate(measured)]
        self.resumed = len(self.history)
        for config, t in stored:
            if t.result is None:
                self.in_flight.append(self.runner.adopt(Candidate(config, t.ref), t.started))
        self.search.mark_measured(config.index for config, _ in stored)
        self.dispatched = len(stored)

    def _round(self, reason: str) -> str:
        self._supervised(self.supervisor.check)
        self.planner.check()
        wall = self.budget.wall_time_s
        if not reason and wall and self.clock() >= wall:
            reason = "wall_time"
        done = self._collect()
        if done:
            self.planner.learn([(c.config, m.result) for c, m in done])
            self._observe()
            if self.stopper and self.stopper.update(m.result for _, m in done) and not reason:
                reason = "early_stopping"
        dispatched = 0
        capacity = self.runner.capacity()
        if not reason:
            left = self.budget.trials - self.dispatched
            self.planner.keep_ready(min(capacity, left))
            room = min(capacity - len(self.in_flight), left)
            dispatched = self._dispatch(room)
            if self.dispatched >= self.budget.trials:
                reason = "budget"
            elif self.planner.exhausted and not self.planner.ready:
                reason = "space_exhausted"
        if self.in_flight and not done and not dispatched:
            self.runner.wait(self.in_flight, proposals_due=not reason and len(self.in_flight) < capacity)
        return reason

    def _dispatch(self, room: int) -> int:
        """Take up to `room` configs from the search, keep them in the database, then hand them
        to the runner; how many there were.

        When the database fails meanwhile (an outage), the same configs are dispatched next
        round instead of new ones. Its answer may have been lost after it kept them (a commit
        cut off): a retried config the database already holds unmeasured is dispatched as
        stored, so the budget's trials are stored once each and none stays unmeasured."""
        retried = bool(self._unstored)
        configs = self._unstored or (self.planner.take(room) if room > 0 else [])
        if not configs:
            return 0
        self._unstored = configs
        stored: dict[int, Any] = {}
        if retried:
            space = self.search.space
            stored = {space.from_json(t.config).index: t.ref for t in self.database.trials() if t.result is None}
        candidates = [Candidate(c, stored[c.index]) for c in configs if c.index in stored]
        candidates += self.database.add([c for c in configs if c.index not in stored])
        self._unstored = []
        self.in_flight.extend(self.runner.submit(candidates, self.protocol))
        self.dispatched += len(configs)
        return len(configs)

    def _collect(self) -> list[tuple[Candidate, RunnerResult]]:
        """Record every result the runner has (each in the database at once), in dispatch order.
        A future leaves the flight only once its result is recorded: when the database fails
        (an outage: the supervisor's round is tried again), the rest are recorded next round,
        and what was recorded is reported then."""
        if self.in_flight:
            self.runner.poll(self.in_flight)
            started = [f for f in self.in_flight if f.started() and not f.done() and f not in self._running]
            if started:
                self._running.update(started)
                self.database.mark_running([f.candidate for f in started])
            now = self.clock()
            for future in [f for f in self.in_flight if f.done()]:
                measured = future.result()
                self.database.record(future.candidate, measured)
                self.in_flight.remove(future)
                self._running.discard(future)
                trial = Trial(len(self.history) + 1, future.candidate.config.to_json(), measured.result, now)
                self.history.append(trial)
                self._recorded.append((future.candidate, measured))
        done, self._recorded = self._recorded, []
        if done:
            self._supervised(lambda: self.supervisor.results(done))
        return done

    def _supervised(self, call: Callable[[], None]) -> None:
        try:
            call()
        except StopTuning as stop:
            if stop.drop:
                self.runner.cancel(self.in_flight)
                self.in_flight = []
                self.database.drop_unmeasured()
            raise

    def _observe(self) -> None:
        if self.on_round is not None:
            self.on_round(self)

