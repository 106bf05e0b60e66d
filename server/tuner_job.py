"""The service's tuning job: what a ``tunefleet tuner`` process does with a ``tune`` job.

:func:`run_task` is the job. Holding the task's lease (:class:`~.queue.TaskLease`), it runs
the one tuning loop of ``tunefleet tune`` (:class:`~tunefleet.tuner.loop.TuningLoop`, with
the same strategy, cost model and features: :func:`~tunefleet.tuner.tune.make_strategy`
"xgb") over the service's seams: a :class:`~.measure_runner.DistributedRunner` (measure jobs
on the workers of the task's device key, retried once when a worker dies) and a
:class:`~.trial_database.SqlDatabase` (the task's trial rows). Around the loop, not in it,
this job keeps the service's orchestration:

0. **Target.** A task submitted as a kind alone while no host of its key was live gets the
   best target of the key's live hosts now (services.pools.resolve_pending), or fails.
1. **Resume.** The loop feeds the trials already in SQL to the search and adopts those
   dispatched but not measured: their RQ job is awaited, or enqueued again if Redis lost
   it. Nothing measured is measured again.
2. **Search.** The loop keeps two trials in flight per live worker of the device key (one
   measuring, one queued, so no worker waits for the tuner). Every ``CHECK_S`` this job (the
   loop's :class:`~tunefleet.tuner.loop.Supervisor`) rereads the task: a cancel stops
   dispatch at once (queued jobs are cancelled, unmeasured trials dropped); with no live
   worker left the task goes back to ``waiting_for_worker`` and the job ends (it resumes when
   a worker registers); a trial answered ``unsupported_target`` (the key's hosts changed
   since submission and cannot execute the task's target) fails the task at once. While the
   SQL database is away, the loop keeps its jobs in flight and its search, and goes on once
   the database answers again. The search ends on the trial budget, the wall-time budget
   (counted from the task's first start), early stopping, or an exhausted config space.
3. **Export.** The task's finalists (:func:`tunefleet.tuner.validation.finalists`, as
   ``tunefleet tune`` picks them) go to an export job (id ``export-<task id>``) on a worker
   of the device key, which re-measures them side by side, builds the winner
   (:func:`tunefleet.tuner.validation.best`) into an artifact and uploads it; the task is
   then done, and the best record of its workload + target + device key is replaced if this
   one is faster.

A warm shutdown of the tuner (SIGTERM, Ctrl-C) or a lost lease stops the loop within one
poll; the task is requeued (by the reconcile sweep, once it is back, where the database is
away) and another tuner (or this one, restarted) resumes it. The
tuner process itself (queue consumer, reconcile sweep) is :mod:`.tuner_process`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import Retry
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.server import measure_runner, model_job, queue
from tunefleet.server.db.models import Task, TaskStatus, TrialStatus
from tunefleet.server.errors import FieldError
from tunefleet.server.measure_runner import DistributedRunner
from tunefleet.server.services import liveness, pools, tuning
from tunefleet.server.services import tasks as task_service
from tunefleet.server.trial_database import SqlDatabase
from tunefleet.base.settings import Settings
from tunefleet.tuner import validation
from tunefleet.tuner.features import Featurizer
from tunefleet.tuner.interfaces import Candidate, RunnerResult
from tunefleet.tuner.loop import Budget, StopTuning, Supervisor, TuningLoop
from tunefleet.tuner.measure import MeasureProtocol, MeasureResult
from tunefleet.tuner.search import SearchStrategy
from tunefleet.tuner.tune import make_strategy
from tunefleet.base import redisconn
from tunefleet.base.rqworker import JobContext

__all__ = ["CHECK_S", "TunerContext", "bind", "current", "run_task", "make_search"]

log = logging.getLogger(__name__)

#: Seconds between rereads of the task's status and of the live workers.
CHECK_S = 1.0


@dataclasses.dataclass
class TunerContext:
    """What tune jobs use in a tuner process: settings, database sessions, the Redis
    connection, and `stopping`, set on a warm shutdown. `poll_s`: the longest wait for a
    result while proposals may be due (results themselves wake the loop at once).
    `outages`, `sql_outages`: what the Redis connection and the database went through
    (:mod:`tunefleet.base.redisconn`)."""

    settings: Settings
    sessions: sessionmaker[Session]
    redis: Redis
    stopping: threading.Event
    poll_s: float = 0.05
    outages: redisconn.Outages = dataclasses.field(default_factory=redisconn.Outages)
    sql_outages: redisconn.Outages = dataclasses.field(default_factory=lambda: redisconn.Outages("SQL database"))


_context: JobContext[TunerContext] = JobContext("tune jobs run only inside `tunefleet tuner`")
#: Set (or clear) the context of this process's tune jobs (the tuner process does).
bind = _context.bind
#: The bound context; RuntimeError outside a tuner process.
current = _context.current


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
    if not context.stopping.is_set():
        _advance_model(context, task_id)
    log.info("task %s: %s", task_id, outcome, extra={"task_id": task_id, "outcome": outcome})
    return outcome


def _advance_model(context: TunerContext, task_id: int) -> None:
    """Start the next round of the model task `task_id` belongs to, if any (server.model_job);
    an outage leaves it to the reconcile sweep."""
    try:
        with context.sessions() as session:
            model_job.advance_model_of(session, context.settings, context.redis, task_id)
    except (OperationalError, RedisError) as exc:
        log.warning("task %s: its model's next round is left to the sweep: %s", task_id, exc)


def make_search(workload: ops.Workload, target: Target, seed: int) -> SearchStrategy:
    """The search of ``tunefleet tune``'s default strategy ("xgb") for `workload` on `target`."""
    return make_strategy("xgb", workload, target, Featurizer(), seed)


class _TaskRun(Supervisor):
    """One tuning run of one task, by the tuner holding its lease; the loop's supervisor."""

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
        self.started = task.started_at
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
        except StopTuning as stop:
            if stop.drop:  # (the loop dropped its own; this covers a stop outside it)
                tuning.delete_unfinished(self.session, self.task_id)
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
            try:
                tuning.requeue(self.session, self.task_id)
            except OperationalError:  # the round would retry the write until the database is back
                self.session.rollback()
                raise StopTuning("tuner stopping with the database away: the sweep requeues the task") from None
            raise StopTuning("tuner stopping: task requeued")
        if self.lease.lost.is_set():
            raise StopTuning("lease lost: another tuner may hold the task")
        if not force and now < self.next_check:
            return
        self.next_check = now + CHECK_S
        status = tuning.status(self.session, self.task_id)
        if status in (TaskStatus.CANCELLED, TaskStatus.FAILED, TaskStatus.DONE):
            raise StopTuning(f"task {status}: dispatch stopped", drop=True)
        if not self.context.outages.recovering(self.settings.worker_lost_after_s + redisconn.BACKOFF_CAP_S):
            StartedJobRegistry(self.queue.name, connection=self.redis, serializer=queue.SERIALIZER).cleanup()
        live = len(liveness.live_workers(self.session, self.device_key, self.settings.worker_lost_after_s))
        if live or not self.context.sql_outages.recovering(self.settings.worker_lost_after_s):
            self.live = live  # (the workers' heartbeats are stale just after a database outage)
        if self.live == 0:
            if status is TaskStatus.EXPORTING:
                raise StopTuning("no live worker to export on: task stays exporting until one registers")
            tuning.wait_for_worker(self.session, self.task_id)
            raise StopTuning(f"no live worker of {self.device_key}: task waits for one")

    # --- supervising the loop -----------------------------------------------------------

    def check(self) -> None:
        self._check(force=False)

    def results(self, done: Sequence[tuple[Candidate, RunnerResult]]) -> None:
        """A trial answered ``unsupported_target`` fails the task now: every trial would
        answer the same, so waiting for the budget would only waste it."""
        unsupported = next((m.result for _, m in done if m.result.status == TrialStatus.UNSUPPORTED_TARGET), None)
        if unsupported is not None:
            tuning.fail(self.session, self.task_id, f"unsupported_target: {unsupported.error}")
            raise StopTuning("failed: unsupported target", drop=True)

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """While the database is away (the engine's outage log says so once), the jobs in
        flight and the search stay as they are; the next round tries again."""
        try:
            yield
        except OperationalError:
            self.session.rollback()
            time.sleep(CHECK_S)

    def _search(self) -> str:
        search = make_search(self.workload, Target.parse(self.target), seed=self.task_id)
        runner = DistributedRunner(self.queue, self.task_id, self.workload_json, self.target, self.protocol,
                                   lambda: self.live, poll_s=self.context.poll_s, check_s=CHECK_S)
        budget = Budget(int(self.budget["trials"]), self.budget.get("wall_time_s"), self.budget.get("early_stopping"))
        clock = (lambda: _elapsed_s(self.started)) if self.started else (lambda: 0.0)
        loop = TuningLoop(search, runner, SqlDatabase(self.session, self.task_id), self.protocol, budget,
                          supervisor=self, clock=clock)
        return loop.run()

    # --- export ----------------------------------------------------------------------

    def _export(self) -> str:
        job_id = f"export-{self.task_id}-{self.budget['trials']}"  # a model's next round exports anew
        job = Job.fetch_many([job_id], connection=self.redis, serializer=queue.SERIALIZER)[0]
        if job is None or job.get_status(refresh=False) in (JobStatus.CANCELED, JobStatus.STOPPED):
            rule = [c.index for c in ops.preferred_configs(self.workload, Target.parse(self.target))]
            best = tuning.best_trials(self.session, self.task_id, keep=rule)
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
                job_timeout=measure_runner.export_timeout_s(self.protocol, len(candidates), repeat),
                retry=Retry(max=measure_runner.RETRIES),
                result_ttl=measure_runner.RESULT_TTL_S,
                failure_ttl=measure_runner.RESULT_TTL_S,
                description=f"export task {self.task_id}",
            )
        while True:
            self._check(force=False)
            job = Job.fetch_many([job_id], connection=self.redis, serializer=queue.SERIALIZER)[0]
            if job is None:
                raise StopTuning("the export job vanished from Redis: the next run enqueues it again")
            status = job.get_status(refresh=False)
            if status == JobStatus.FINISHED:
                break
            if status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
                latest = job.latest_result()
                error = measure_runner.last_line(latest.exc_string if latest and latest.exc_string else str(status))
                tuning.fail(self.session, self.task_id, f"export failed: {error}")
                return "failed: export"
            time.sleep(max(self.context.poll_s, 0.2))
        value = job.return_value()
        result = MeasureResult.from_json(value["result"])
        done, best_updated = tuning.finish_export(
            self.session, self.task_id, value["trial_id"], value["artifact"]["id"], result.median, result.disturbance
        )
        if not done:
            return f"not finished: task is {tuning.status(self.session, self.task_id)}"
        return f"done ({'new' if best_updated else 'not a new'} best record)"


def _elapsed_s(started: Any) -> float:
    from tunefleet.server.db import utcnow

    return (utcnow() - started).total_seconds()
