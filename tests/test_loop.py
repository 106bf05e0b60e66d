"""The one tuning loop over in-memory Runner and Database implementations (no builds): resume
and adoption, budget, early stopping, a supervisor's stop, validation through the runner."""

import contextlib

import helpers_ops  # noqa: F401  (registers the test operator "faulty")
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.tuner.interfaces import Candidate, Database, Runner, RunnerFuture, RunnerResult, StoredTrial
from tunefleet.tuner.loop import Budget, StopTuning, Supervisor, TuningLoop
from tunefleet.tuner.measure import MeasureProtocol, MeasureResult
from tunefleet.tuner.search import GridSearch

TARGET = Target.parse("cpu -isa=generic")
WORKLOAD = ops.make_workload("faulty", {"n": 64})


def measure(config) -> MeasureResult:
    """"ok" configs run in 1/vec µs, every other mode answers wrong."""
    knobs = config.to_json()["knobs"]
    if knobs["mode"] != "ok":
        return MeasureResult("wrong_answer", error="wrong")
    return MeasureResult("ok", [1e-6 / knobs["vec"]] * 2)


class FakeRunner(Runner):
    """Measures `per_poll` candidates per poll, in submission order; `remote`: the loop plans in
    a thread of its own."""

    def __init__(self, capacity: int = 2, per_poll: int = 1, remote: bool = True):
        self._capacity, self.per_poll, self.remote = capacity, per_poll, remote
        self.submitted: list[RunnerFuture] = []
        self.adopted: list[Candidate] = []
        self.cancelled: list[RunnerFuture] = []

    def capacity(self) -> int:
        return self._capacity

    def submit(self, candidates, protocol):
        futures = [RunnerFuture(c) for c in candidates]
        self.submitted.extend(futures)
        return futures

    def adopt(self, candidate, started):
        self.adopted.append(candidate)
        return self.submit([candidate], MeasureProtocol())[0]

    def poll(self, futures):
        for future in [f for f in futures if not f.done()][:self.per_poll]:
            future.measured = RunnerResult(measure(future.candidate.config))

    def wait(self, futures, *, proposals_due):
        pass

    def cancel(self, futures):
        self.cancelled.extend(futures)


class MemoryDatabase(Database):
    def __init__(self, stored=()):
        self.stored = list(stored)
        self.recorded: list[tuple[Candidate, RunnerResult]] = []
        self.dropped = False

    def trials(self):
        return list(self.stored)

    def add(self, configs):
        return [Candidate(c, ref=c.index) for c in configs]

    def record(self, candidate, measured):
        self.recorded.append((candidate, measured))
        return candidate.config.index

    def drop_unmeasured(self):
        self.dropped = True


def loop(runner, database, budget, **options) -> TuningLoop:
    search = GridSearch(ops.config_space(WORKLOAD, TARGET))
    return TuningLoop(search, runner, database, MeasureProtocol(), budget, **options)


def test_resume_adopts_the_unmeasured_and_measures_no_config_twice():
    space = ops.config_space(WORKLOAD, TARGET)
    measured = [space.get(i) for i in (0, 1)]
    pending = space.get(2)
    database = MemoryDatabase([*(StoredTrial(c.to_json(), measure(c), ref=c.index) for c in measured),
                               StoredTrial(pending.to_json(), None, ref=pending.index, started=True)])
    runner = FakeRunner()
    run = loop(runner, database, Budget(trials=8))
    assert run.run() == "budget"
    assert [c.config.index for c in runner.adopted] == [2]
    indices = [c.config.index for c, _ in database.recorded]
    assert len(indices) == 6 and len(set(indices) | {0, 1}) == 8
    assert run.resumed == 2 and len(run.history) == 8 and not run.in_flight


def test_early_stopping_and_an_exhausted_space_end_the_search():
    assert loop(FakeRunner(), MemoryDatabase(), Budget(trials=15, early_stopping=2)).run() == "early_stopping"
    exhausted = loop(FakeRunner(capacity=4, per_poll=4), MemoryDatabase(), Budget(trials=100))
    assert exhausted.run() == "space_exhausted" and len(exhausted.history) == 15


def test_a_stop_with_drop_cancels_what_is_in_flight_and_drops_its_trials():
    class CancelAfterFirstResult(Supervisor):
        def results(self, done):
            raise StopTuning("task cancelled", drop=True)

    runner, database = FakeRunner(capacity=3, remote=False), MemoryDatabase()  # one batch of 3
    run = loop(runner, database, Budget(trials=10), supervisor=CancelAfterFirstResult())
    with pytest.raises(StopTuning, match="task cancelled"):
        run.run()
    assert len(database.recorded) == 1 and database.dropped
    assert len(runner.cancelled) == 2 and not run.in_flight


class OutageDatabase(MemoryDatabase):
    """Keeps what it adds; its second add fails, after keeping the configs (`kept`: a commit
    whose answer was lost) or before (a refused one)."""

    def __init__(self, kept: bool):
        super().__init__()
        self.kept = kept
        self.adds: list[list[int]] = []  # the config indices of each add

    def add(self, configs):
        self.adds.append([c.index for c in configs])
        failing = len(self.adds) == 2
        if failing and not self.kept:
            raise ConnectionError("database cut off")
        self.stored += [StoredTrial(c.to_json(), None, ref=c.index) for c in configs]
        if failing:
            raise ConnectionError("database cut off")
        return super().add(configs)


class RideOutOutages(Supervisor):
    @contextlib.contextmanager
    def round(self):
        try:
            yield
        except ConnectionError:
            pass


@pytest.mark.parametrize("kept", [True, False], ids=["answer-lost", "refused"])
def test_a_failed_add_dispatches_the_same_configs_again_each_stored_once(kept):
    runner, database = FakeRunner(capacity=2, per_poll=1), OutageDatabase(kept)
    run = loop(runner, database, Budget(trials=8), supervisor=RideOutOutages())
    assert run.run() == "budget" and len(database.adds) >= 3
    stored = [t.config["index"] for t in database.stored]
    assert len(stored) == len(set(stored)) == 8  # the budget, each config once
    assert set(database.adds[1]) <= set(stored)  # the failed add's configs were not lost
    assert sorted(c.config.index for c, _ in database.recorded) == sorted(stored)  # every stored one measured


def test_validate_remeasures_the_searchs_preferred_config_among_the_finalists():
    """The search's preferred config (a template's default) is re-measured whatever its search
    trial read: here the slowest correct config, among the top 2 with the fastest."""
    runner, database = FakeRunner(capacity=5, per_poll=5, remote=False), MemoryDatabase()
    run = loop(runner, database, Budget(trials=15))
    space = run.search.space
    slowest = min((space.get(i) for i in range(space.size)),
                  key=lambda c: (c.to_json()["knobs"]["mode"] != "ok", c.to_json()["knobs"]["vec"]))
    run.search.prefer([slowest])
    run.run()
    stored = run.validate(top=2)
    vec_of = {c.config.index: c.config.to_json()["knobs"]["vec"] for c, _ in database.recorded}
    assert stored[-1] == slowest.index and vec_of[stored[0]] == 8


def test_validate_remeasures_the_finalists_through_the_runner_and_records_them():
    runner, database = FakeRunner(capacity=5, per_poll=5, remote=False), MemoryDatabase()
    run = loop(runner, database, Budget(trials=15))
    run.run()
    stored = run.validate(top=2)
    vec_of = {c.config.index: c.config.to_json()["knobs"]["vec"] for c, _ in database.recorded}
    assert [vec_of[i] for i in stored] == [8, 4]  # the fastest two "ok" configs, fastest first
