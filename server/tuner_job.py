"""The distributed tuning loop: what a ``tunefleet tuner`` process does with a ``tune`` job.

:func:`run_task` is the job. Holding the task's lease (:class:`~.queue.TaskLease`), it
runs the tuner's search loop (the same strategy, cost model and features as ``tunefleet
tune``: :class:`~tunefleet.tuner.search.ModelGuidedSearch` with ``tune.SEARCH_SETTINGS``)
with measurement dispatched to the workers instead of the local runner:

0. **Target.** A task submitted as a kind alone while no host of its key was live gets the
   best target of the key's live hosts now (services.pools.resolve_pending), or fails.
1. **Resume.** Trials already in SQL are fed to the search (the cost model is refit from
   them; their configs are never proposed again); trials dispatched but not measured are
   adopted: their RQ job (id ``measure-<task id>-<config index>``) is awaited, or enqueued again if Redis
   lost it. Nothing measured is measured again.
2. **Search.** While the budget lasts, it keeps ``PER_WORKER_DEPTH`` trials in flight per
   live worker of the device key (one measuring, one queued, so no worker waits for the
   tuner), each stored as a queued trial *before* its job is enqueued (unique per task and
   config index), and records each result in SQL the moment it returns, then lets the
   search learn from it. Measure jobs carry ``Retry(max=1)``: a job whose worker dies is
   retried once by RQ (on another worker, as the dead one is gone), then recorded
   ``worker_lost``. A trial answered ``unsupported_target`` (the key's hosts changed since
   submission and cannot execute the task's target) fails the task at once. Every
   ``CHECK_S`` it rereads the task: a cancel stops dispatch at once (queued jobs are
   cancelled, unmeasured trials dropped). With no live worker left the
   task goes back to ``waiting_for_worker`` and the job ends; it resumes when a worker
   registers. While the SQL database is away, the loop keeps its jobs in flight and its
   search, and goes on once the database answers again. The search ends on the trial budget, the wall-time budget (counted from the
   task's first start), early stopping, or an exhausted config space.
3. **Export.** The task's finalists (:func:`tunefleet.tuner.validation.finalists`, as
   ``tunefleet tune`` picks them) go to an export job (id
   ``export-<task id>``) on a worker of the device key, which re-measures them side by
   side, builds the fastest into an artifact and uploads it; the task is then done, and
   the best record of its workload + target + device key is replaced if this one is faster.

A warm shutdown of the tuner (SIGTERM, Ctrl-C) or a lost lease stops the loop within one
poll; the task is requeued and another tuner (or this one, restarted) resumes it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import Retry
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from tunefleet.compiler import ops
from tunefleet.compiler.space import ConfigEntity
from tunefleet.compiler.target import Target
from tunefleet.server import queue
from tunefleet.server.db.models import Task, TaskStatus, Trial, TrialStatus
from tunefleet.server.errors import FieldError
from tunefleet.server.services import pools, tuning
from tunefleet.server.services import tasks as task_service
from tunefleet.settings import Settings
from tunefleet.tuner import validation
from tunefleet.tuner.features import Featurizer
from tunefleet.tuner.measure import MeasureProtocol, MeasureResult
from tunefleet.tuner.search import EarlyStopping, SearchStrategy
from tunefleet.tuner.tune import make_strategy
from tunefleet.worker import jobs as worker_jobs
from tunefleet.worker import redisconn

__all__ = ["PER_WORKER_DEPTH", "CHECK_S", "RIDE_OUT_S", "TunerContext", "bind", "current",
           "run_task", "make_search"]

log = logging.getLogger(__name__)

#: Trials kept in flight per live worker: one being measured, one waiting in its queue.
PER_WORKER_DEPTH = 2
#: Seconds between rereads of the task's status and of the live workers.
CHECK_S = 1.0
#: Measure and export jobs are retried once when they fail or their worker dies.
RETRIES = 1
#: Seconds the tuner's Redis commands are retried through an outage before it gives up and
#: exits (for its supervisor to restart it).
RIDE_OUT_S = 900.0
_RESULT_TTL_S = 7 * 86_400  # results outlive any tuner restart
_UNFINISHED = {TrialStatus.QUEUED, TrialStatus.RUNNING}


@dataclasses.dataclass
class TunerContext:
    """What tune jobs use in a tuner process: settings, database sessions, the Redis
    connection, and `stopping`, set on a warm shutdown. `poll_s`: the longest wait for a
    result while proposals may be due (results themselves wake the loop at once).
    `outages`, `sql_outages`: what the Redis connection and the database went through
    (:mod:`tunefleet.worker.redisconn`)."""

    settings: Settings
    sessions: sessionmaker[Session]
    redis: Redis
    stopping: threading.Event
    poll_s: float = 0.05
    outages: redisconn.Outages = dataclasses.field(default_factory=redisconn.Outages)
    sql_outages: redisconn.Outages = dataclasses.field(default_factory=lambda: redisconn.Outages("SQL database"))


_context: TunerContext | None = None


def bind(context: TunerContext | None) -> None:
    """Set (or clear) the context of this process's tune jobs."""
    global _context
    _context = context


def current() -> TunerContext:
    """The bound context; RuntimeError outside a tuner process."""
    if _context is None:
        raise RuntimeError("tune jobs run only inside `tunefleet tuner`")
    return _context


def run_task(task_id: int) -> str:
    """The ``tune`` job: tune task `task_id` (see the module docstring); returns what became
    of it. A job for a task another tuner holds returns at once."""
    context = current()
    lease = queue.TaskLease(context.redis, task_id, context.settings.lease_s)
    if not lease.acquire():
        return f"task {task_id} is held by another tuner"
    with lease.kept(), context.sessions() as session:
        try:
            outcome = _TaskRun(context, session, task_id, lease).run()
        except (OperationalError, RedisError):
            raise  # the database or Redis is unreachable: the sweep enqueues the task again
        except Exception as exc:  # a bug, or a task the compiler cannot handle: fail it, visibly
            log.exception("task %s failed", task_id)
            session.rollback()
            tuning.fail(session, task_id, f"tuner error: {type(exc).__name__}: {exc}")
            outcome = f"failed: {type(exc).__name__}"
    log.info("task %s: %s", task_id, outcome, extra={"task_id": task_id, "outcome": outcome})
    return outcome


def make_search(workload: ops.Workload, target: Target, seed: int) -> SearchStrategy:
    """The search of ``tunefleet tune``'s default strategy ("xgb") for `workload` on `target`."""
    return make_strategy("xgb", workload, target, Featurizer(), seed)


@dataclasses.dataclass
class _InFlight:
    trial_id: int
    config: ConfigEntity
    running: bool = False


class _Planner(threading.Thread):
    """Runs the search beside the dispatch loop: learns from results as they come and keeps
    proposals ready, so that a cost-model refit or a simulated-annealing replan (seconds on
    a busy host) never holds up dispatch, result recording or the cancel check. Only this
    thread touches the search."""

    def __init__(self, search: SearchStrategy) -> None:
        super().__init__(name="planner", daemon=True)
        self.search = search
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._results: list[tuple[ConfigEntity, MeasureResult]] = []
        self._ready: collections.deque[ConfigEntity] = collections.deque()
        self._want = 0
        self.exhausted = False
        self.error: BaseException | None = None

    @property
    def ready(self) -> int:
        """Proposals waiting to be taken."""
        return len(self._ready)

    def learn(self, results: list[tuple[ConfigEntity, MeasureResult]]) -> None:
        with self._lock:
            self._results.extend(results)
        self._wake.set()

    def keep_ready(self, n: int) -> None:
        """Keep `n` proposals ready."""
        if n != self._want:
            self._want = n
            self._wake.set()

    def take(self, n: int) -> list[ConfigEntity]:
        out = []
        while len(out) < n and self._ready:
            out.append(self._ready.popleft())
        if out:
            self._wake.set()
        return out

    def check(self) -> None:
        """Re-raise in the caller an exception the search raised."""
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        self.join(timeout=1.0)  # a replan still running finishes alone (daemon thread)

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                with self._lock:
                    results, self._results = self._results, []
                if results:
                    configs, measured = zip(*results)
                    self.search.update(list(configs), list(measured))
                    continue
                missing = self._want - len(self._ready)
                if missing > 0 and not self.exhausted:
                    batch = self.search.next_batch(missing)
                    self._ready.extend(batch)
                    self.exhausted = len(batch) < missing
                    continue
                self._wake.wait(0.5)
                self._wake.clear()
        except BaseException as exc:  # noqa: BLE001 - handed to the dispatch loop
            self.error = exc


class _Stop(Exception):
    """The run ends early; the message says why."""


class _TaskRun:
    """One tuning run of one task, by the tuner holding its lease."""

    def __init__(self, context: TunerContext, session: Session, task_id: int, lease: queue.TaskLease) -> None:
        self.context = context
        self.session = session
        self.task_id = task_id
        self.lease = lease
        self.settings = context.settings
        self.redis = context.redis
        task = task_service.get(session, task_id)
        self.device_key = task.device_key
        self.workload = ops.Workload.from_json(task.workload)
        self.workload_json = task.workload
        self.target = str(task.target)
        self.protocol = MeasureProtocol.from_json(task.protocol)
        self.budget = dict(task.budget)
        self.queue = queue.measure_queue(self.redis, self.device_key)
        #: Workers push a measure job's id here once its result is stored (HeartbeatWorker).
        self.done_key = f"tunefleet:task:{task_id}:done"
        self.started = task.started_at
        self.in_flight: dict[str, _InFlight] = {}
        self.live = 0
        self.next_check = 0.0

    # --- the run ---------------------------------------------------------------------

    def run(self) -> str:
        status = tuning.status(self.session, self.task_id)
        try:
            if status in task_service.FINAL:
                return f"already {status}"
            if status is not TaskStatus.EXPORTING:
                self._check()
                if not self._resolve_target():
                    return "failed: no target"
                if not tuning.start(self.session, self.task_id):
                    return f"cannot start: task is {tuning.status(self.session, self.task_id)}"
                self.started = self.session.get(Task, self.task_id, populate_existing=True).started_at
                reason = self._search()
                log.info("task %s: search ended (%s)", self.task_id, reason)
                if not tuning.start_export(self.session, self.task_id):
                    return f"not exported: task is {tuning.status(self.session, self.task_id)}"
            return self._export()
        except _Stop as stop:
            return str(stop)

    def _resolve_target(self) -> bool:
        """Resolve a target submitted as a kind alone while no host of the key was live (the
        best target of its live hosts now, stored); False, with the task failed, when they
        cannot give one."""
        try:
            self.target = pools.resolve_pending(self.session, self.session.get(Task, self.task_id),
                                                self.settings.worker_lost_after_s)
        except FieldError as exc:
            tuning.fail(self.session, self.task_id, f"target: {exc.message}")
            return False
        return True

    def _check(self, force: bool = True) -> None:
        """Every CHECK_S (or now, with `force`): stop when the tuner shuts down, the lease is
        lost, the task was cancelled, or no live worker is left; let RQ find jobs of dead
        workers, except during and shortly after a Redis outage, when every job's heartbeat
        in Redis is stale until its worker has reconnected: a job that is still being measured
        is not retried (measured twice); likewise workers are not taken for dead just after a
        database outage, when their heartbeats could not be stored."""
        now = time.monotonic()
        if self.context.stopping.is_set():
            tuning.requeue(self.session, self.task_id)
            raise _Stop("tuner stopping: task requeued")
        if self.lease.lost.is_set():
            raise _Stop("lease lost: another tuner may hold the task")
        if not force and now < self.next_check:
            return
        self.next_check = now + CHECK_S
        status = tuning.status(self.session, self.task_id)
        if status in (TaskStatus.CANCELLED, TaskStatus.FAILED, TaskStatus.DONE):
            self._drop_in_flight()
            raise _Stop(f"task {status}: dispatch stopped")
        if not self.context.outages.recovering(self.settings.worker_lost_after_s + redisconn.BACKOFF_CAP_S):
            StartedJobRegistry(self.queue.name, connection=self.redis, serializer=queue.SERIALIZER).cleanup()
        live = len(tuning.live_workers(self.session, self.device_key, self.settings.worker_lost_after_s))
        if live or not self.context.sql_outages.recovering(self.settings.worker_lost_after_s):
            self.live = live  # (the workers' heartbeats are stale just after a database outage)
        if self.live == 0:
            if status is TaskStatus.EXPORTING:
                raise _Stop("no live worker to export on: task stays exporting until one registers")
            tuning.wait_for_worker(self.session, self.task_id)
            raise _Stop(f"no live worker of {self.device_key}: task waits for one")

    # --- search ----------------------------------------------------------------------

    def _search(self) -> str:
        search = make_search(self.workload, Target.parse(self.target), seed=self.task_id)
        space = search.space
        patience = self.budget.get("early_stopping")
        stopper = EarlyStopping(patience) if patience else None
        trials = tuning.trials_of(self.session, self.task_id)
        measured = [t for t in trials if t.status not in _UNFINISHED]
        if measured:  # resume: the cost model learns from every trial already measured
            results = [tuning.trial_result(t) for t in measured]
            search.update([space.get(t.config_index) for t in measured], results)
            if stopper:
                stopper.update(results)
        for trial in trials:
            if trial.status in _UNFINISHED:
                self._adopt(trial, space.get(trial.config_index))
        search.mark_measured(t.config_index for t in trials)
        total = len(trials)
        budget = int(self.budget["trials"])
        wall = self.budget.get("wall_time_s")
        reason = ""
        planner = _Planner(search)
        planner.start()
        try:
            while True:
                try:
                    self._check(force=False)
                    planner.check()
                    if not reason and wall and self.started and _elapsed_s(self.started) >= wall:
                        reason = "wall_time"
                    done = self._collect()
                    if done:
                        planner.learn(done)
                        if stopper and stopper.update(r for _, r in done) and not reason:
                            reason = "early_stopping"
                    dispatched = 0
                    if not reason:
                        capacity = PER_WORKER_DEPTH * self.live
                        planner.keep_ready(min(capacity, budget - total))
                        room = min(capacity - len(self.in_flight), budget - total)
                        batch = planner.take(room) if room > 0 else []
                        self._dispatch(batch)
                        dispatched = len(batch)
                        total += dispatched
                        if total >= budget:
                            reason = "budget"
                        elif planner.exhausted and not planner.ready:
                            reason = "space_exhausted"
                    if reason and not self.in_flight:
                        return reason
                    if not done and not dispatched:
                        self._wait_for_results(short=not reason and len(self.in_flight) < PER_WORKER_DEPTH * self.live)
                except OperationalError:
                    # the database is away (the engine's outage log says so once): the jobs
                    # in flight and the search stay as they are; the next round tries again
                    self.session.rollback()
                    time.sleep(CHECK_S)
        finally:
            planner.stop()

    def _wait_for_results(self, short: bool) -> None:
        """Block until a worker reports a stored result (or `poll_s` when proposals may be
        due, else up to CHECK_S): results are recorded within milliseconds, not a poll."""
        timeout = self.context.poll_s if short else CHECK_S
        if self.redis.blpop([self.done_key], timeout=timeout) is not None:
            self.redis.delete(self.done_key)  # one look at the jobs in flight covers them all

    def _dispatch(self, configs: list[ConfigEntity]) -> None:
        """Store `configs` as queued trials, then enqueue one measure job each."""
        if not configs:
            return
        by_index = {c.index: c for c in configs}
        trials = tuning.add_trials(self.session, self.task_id, [(c.index, c.to_json()) for c in configs])
        with self.redis.pipeline() as pipe:
            for trial in trials:
                self._enqueue_measure(trial.id, by_index[trial.config_index], pipe)
            pipe.execute()

    def _enqueue_measure(self, trial_id: int, config: ConfigEntity, pipeline: Any = None) -> None:
        job_id = _measure_job_id(self.task_id, config.index)
        self.queue.enqueue(
            "tunefleet.worker.jobs.measure",
            self.task_id, trial_id, self.workload_json, self.target, config.to_json(), self.protocol.to_json(),
            job_id=job_id,
            job_timeout=worker_jobs.measure_timeout_s(self.protocol),
            retry=Retry(max=RETRIES),
            result_ttl=_RESULT_TTL_S,
            failure_ttl=_RESULT_TTL_S,
            description=f"measure trial {trial_id} of task {self.task_id}",
            meta={"notify": self.done_key},
            pipeline=pipeline,
        )
        self.in_flight[job_id] = _InFlight(trial_id, config)

    def _adopt(self, trial: Trial, config: ConfigEntity) -> None:
        """Wait for the job of a trial dispatched by an earlier run; enqueue it again if
        Redis no longer has it."""
        job_id = _measure_job_id(self.task_id, trial.config_index)
        job = Job.fetch_many([job_id], connection=self.redis, serializer=queue.SERIALIZER)[0]
        if job is None or job.get_status(refresh=False) in (JobStatus.CANCELED, JobStatus.STOPPED):
            self._enqueue_measure(trial.id, config)
        else:
            self.in_flight[job_id] = _InFlight(trial.id, config, trial.status == TrialStatus.RUNNING)

    def _collect(self) -> list[tuple[ConfigEntity, MeasureResult]]:
        """Record every result that came back since the last look (each in SQL at once)."""
        if not self.in_flight:
            return []
        ids = list(self.in_flight)
        found = Job.fetch_many(ids, connection=self.redis, serializer=queue.SERIALIZER)
        done: list[tuple[ConfigEntity, MeasureResult]] = []
        started: list[int] = []
        for job_id, job in zip(ids, found):
            flight = self.in_flight[job_id]
            if job is None:  # Redis lost it (restarted without its data): measure it again
                del self.in_flight[job_id]
                self._enqueue_measure(flight.trial_id, flight.config)
                continue
            status = job.get_status(refresh=False)
            if status == JobStatus.STARTED and not flight.running:
                flight.running = True
                started.append(flight.trial_id)
                continue
            if status not in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
                continue
            result, worker_id = _job_outcome(job, status)
            attempts = 1 + RETRIES - (job.retries_left or 0) if job.retries_left is not None else 1
            tuning.record_result(self.session, flight.trial_id, result, attempts=attempts, worker_id=worker_id)
            del self.in_flight[job_id]
            done.append((flight.config, result))
        tuning.mark_running(self.session, started)
        unsupported = next((r for _, r in done if r.status == TrialStatus.UNSUPPORTED_TARGET), None)
        if unsupported is not None:  # every trial would answer the same: fail now, not after the budget
            tuning.fail(self.session, self.task_id, f"unsupported_target: {unsupported.error}")
            self._drop_in_flight()
            raise _Stop("failed: unsupported target")
        return done

    def _drop_in_flight(self) -> None:
        """Cancel the jobs not yet started and forget the unmeasured trials (after a cancel)."""
        if self.in_flight:
            for job in Job.fetch_many(list(self.in_flight), connection=self.redis, serializer=queue.SERIALIZER):
                if job is not None and job.get_status(refresh=False) in (JobStatus.QUEUED, JobStatus.SCHEDULED):
                    job.cancel()
            self.in_flight.clear()
        tuning.delete_unfinished(self.session, self.task_id)

    # --- export ----------------------------------------------------------------------

    def _export(self) -> str:
        job_id = f"export-{self.task_id}"
        job = Job.fetch_many([job_id], connection=self.redis, serializer=queue.SERIALIZER)[0]
        if job is None or job.get_status(refresh=False) in (JobStatus.CANCELED, JobStatus.STOPPED):
            best = tuning.best_trials(self.session, self.task_id)
            if not best:
                errors = collections.Counter(t.status for t in tuning.trials_of(self.session, self.task_id))
                summary = ", ".join(f"{n} {s}" for s, n in errors.most_common()) or "no trials"
                tuning.fail(self.session, self.task_id, f"no config built and ran correctly ({summary})")
                return "failed: no correct config"
            candidates = [{"trial_id": t.id, "config": t.config} for t in best]
            repeat = validation.validation_repeat(self.protocol)
            job = self.queue.enqueue(
                "tunefleet.worker.jobs.export",
                self.task_id, self.workload_json, self.target, self.device_key, candidates,
                self.protocol.to_json(), repeat,
                job_id=job_id,
                job_timeout=worker_jobs.export_timeout_s(self.protocol, len(candidates), repeat),
                retry=Retry(max=RETRIES),
                result_ttl=_RESULT_TTL_S,
                failure_ttl=_RESULT_TTL_S,
                description=f"export task {self.task_id}",
            )
        while True:
            self._check(force=False)
            job = Job.fetch_many([job_id], connection=self.redis, serializer=queue.SERIALIZER)[0]
            if job is None:
                raise _Stop("the export job vanished from Redis: the next run enqueues it again")
            status = job.get_status(refresh=False)
            if status == JobStatus.FINISHED:
                break
            if status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
                latest = job.latest_result()
                error = _last_line(latest.exc_string if latest and latest.exc_string else str(status))
                tuning.fail(self.session, self.task_id, f"export failed: {error}")
                return "failed: export"
            time.sleep(max(self.context.poll_s, 0.2))
        value = job.return_value()
        result = MeasureResult.from_json(value["result"])
        done, best_updated = tuning.finish_export(
            self.session, self.task_id, value["trial_id"], value["artifact"]["id"], result.median
        )
        if not done:
            return f"not finished: task is {tuning.status(self.session, self.task_id)}"
        return f"done ({'new' if best_updated else 'not a new'} best record)"


def _measure_job_id(task_id: int, config_index: int) -> str:
    """The measure job of a trial, named by what is unique and never reused: (task, config)
    (trial ids are not: SQLite may reuse the ids of a cancelled task's dropped trials)."""
    return f"measure-{task_id}-{config_index}"


def _elapsed_s(started: Any) -> float:
    from tunefleet.server.db import utcnow

    return (utcnow() - started).total_seconds()


def _job_outcome(job: Job, status: JobStatus) -> tuple[MeasureResult, int | None]:
    """The measure result of a finished job and the worker that measured it; a failed job
    is ``worker_lost`` when its worker died (RQ's AbandonedJobError), ``timeout`` when it
    ran past its RQ timeout, else ``runtime_error`` with the error's last line."""
    if status == JobStatus.FINISHED:
        value = job.return_value()
        return MeasureResult.from_json(value["result"]), value.get("worker_id")
    latest = job.latest_result()
    text = latest.exc_string if latest and latest.exc_string else f"job {status}"
    if "AbandonedJobError" in text:
        kind, error = "worker_lost", f"the worker measuring it stopped responding, {1 + RETRIES} times"
    elif "JobTimeoutException" in text:
        kind, error = "timeout", f"the measure job ran past its timeout: {_last_line(text)}"
    else:
        kind, error = "runtime_error", f"the measure job failed: {_last_line(text)}"
    return MeasureResult(kind, error=error, host=""), None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else text


# --- the tuner process -------------------------------------------------------------------


def serve(settings: Settings, *, burst: bool = False, heartbeat_s: float = 5.0) -> None:
    """Run a tuner process (``tunefleet tuner``): consume the ``tune`` queue one task at a
    time, and sweep the store every ``settings.reconcile_s`` (:func:`queue.reconcile`) so
    that tasks whose tuner died, or that no job announced, are enqueued again. With `burst`,
    return once the queue is empty. SIGTERM / Ctrl-C stop the running task within a poll
    (it is requeued) and then the process."""
    import os
    import socket

    from tunefleet.server.db import follow_outages, make_engine, make_sessionmaker
    from tunefleet.worker.rqworker import HeartbeatWorker

    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    outages, sql_outages = redisconn.Outages(), redisconn.Outages("SQL database")
    follow_outages(engine, sql_outages)
    connection = queue.connect(settings, ride_out_s=RIDE_OUT_S, outages=outages)
    process = f"tuner@{socket.gethostname()}"
    redisconn.count_reconnects(lambda: connection, outages, process, "redis")
    redisconn.count_reconnects(lambda: connection, sql_outages, process, "sql")
    worker = HeartbeatWorker(
        [queue.tune_queue(connection)],
        connection=connection,
        name=f"tuner-{socket.gethostname()}.{os.getpid()}",
        serializer=queue.SERIALIZER,
        heartbeat_s=heartbeat_s,
    )
    bind(TunerContext(settings, sessions, connection, worker.stopping, outages=outages, sql_outages=sql_outages))
    sweeping = threading.Event()

    def sweep() -> None:
        while True:
            try:
                with sessions() as session:
                    enqueued = queue.reconcile(session, connection, settings,
                                               mark_lost=not sql_outages.recovering(settings.worker_lost_after_s))
                if enqueued:
                    log.info("reconcile: enqueued tasks %s", enqueued)
            except OperationalError:  # the database is away: logged once by sql_outages
                pass
            except Exception:  # a sweep must never take the tuner down; the next one retries
                log.exception("reconcile sweep failed")
            if sweeping.wait(settings.reconcile_s):
                return

    sweeper = threading.Thread(target=sweep, name="reconcile", daemon=True)
    sweeper.start()
    try:
        if burst:
            time.sleep(0.5)  # let the first sweep enqueue what needs a tuner
        worker.work(burst=burst, logging_level=logging.getLevelName(logging.getLogger().level))
    finally:
        sweeping.set()
        sweeper.join(timeout=10)
        bind(None)
        engine.dispose()
        queue.disconnect(connection)
