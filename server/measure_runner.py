"""The service's :class:`~tunefleet.tuner.interfaces.Runner`: candidates measured by RQ jobs on
the workers of a device key.

Each candidate becomes a ``tunefleet.worker.jobs.measure`` job on ``measure:<device_key>``,
named by what is unique to it and never reused, ``measure-<task id>-<config index>`` (trial
ids are not: SQLite may reuse the ids of a cancelled task's dropped trials). A job carries
``Retry(max=RETRIES)``: when its worker dies RQ retries it once (on another worker, as the
dead one is gone), then it is answered ``worker_lost``. A job Redis lost (restarted without
its data) is enqueued again, and so is one of an earlier run of the task that Redis no
longer has, and one left queued in no queue: a worker's BLPOP that took it as Redis went down
lost its reply, redis-py sent it again once Redis was back, and the job was never run (seen
once in CI: the task waited for that trial forever). Workers push a job's id to the task's
*done key* once its result is stored (``meta["notify"]``, see HeartbeatWorker), which wakes
:meth:`DistributedRunner.wait` at once.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from redis import Redis
from rq import Retry
from rq.job import Job, JobStatus
from rq.queue import Queue

from tunefleet.compiler.build import COMPILE_TIMEOUT_S
from tunefleet.server import queue
from tunefleet.tuner import validation
from tunefleet.tuner.interfaces import Candidate, Runner, RunnerFuture, RunnerResult
from tunefleet.tuner.measure import MeasureProtocol, MeasureResult
from tunefleet.tuner.runner import STARTUP_TIMEOUT_S

__all__ = ["PER_WORKER_DEPTH", "RETRIES", "RESULT_TTL_S", "DistributedRunner", "measure_timeout_s", "export_timeout_s",
           "last_line"]

#: Trials kept in flight per live worker: one being measured, one waiting in its queue.
PER_WORKER_DEPTH = 2
#: Measure and export jobs are retried once when they fail or their worker dies.
RETRIES = 1
#: Seconds RQ keeps a job's result: it outlives any tuner restart.
RESULT_TTL_S = 7 * 86_400
_FINAL = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
#: Seconds a job may stay queued in no queue before it is enqueued again: a worker that pops a
#: job marks it started within milliseconds, so this is a job no worker holds.
LOST_AFTER_S = 10.0


def measure_timeout_s(protocol: MeasureProtocol, candidates: int = 1) -> int:
    """RQ job timeout of measuring `candidates` configs: builds, and per round and attempt
    (the protocol's rounds, each disturbed measurement re-measured up to `remeasure` times) a
    child start-up and the protocol's execution limit, plus slack. RQ counts it from when a
    worker starts the job, never from when it was queued."""
    children = protocol.rounds * (1 + protocol.remeasure)
    return int(candidates * (COMPILE_TIMEOUT_S + children * (STARTUP_TIMEOUT_S + protocol.timeout_s)) + 30)


def export_timeout_s(protocol: MeasureProtocol, candidates: int, repeat: int) -> int:
    """RQ job timeout of an export job: the validation measurements (the winner's re-measures,
    :data:`validation.SETTLE`, and the pauses before them, among them), a build, an upload."""
    measured = validation.validation_protocol(protocol, repeat)
    settling = math.ceil(sum(validation.SETTLE_PAUSES_S))
    return measure_timeout_s(measured, candidates + validation.SETTLE) + settling + COMPILE_TIMEOUT_S + 120


class _JobFuture(RunnerFuture):
    def __init__(self, job_id: str, candidate: Candidate, protocol: MeasureProtocol, running: bool = False) -> None:
        super().__init__(candidate)
        self.job_id = job_id
        self.protocol = protocol
        self.running = running
        #: When the job was first seen queued in no queue (time.monotonic()), else None.
        self.unqueued_since: float | None = None

    def started(self) -> bool:
        return self.running


@dataclasses.dataclass
class DistributedRunner(Runner):
    """Measures the candidates of task ``task_id`` (``workload`` JSON on ``target``) on the
    workers behind ``measure_queue`` (``measure:<device_key>``). ``live_workers``: how many workers
    of the device key are live now (the loop keeps :data:`PER_WORKER_DEPTH` candidates in
    flight per worker); ``protocol``: the task's, for jobs adopted from an earlier run;
    ``poll_s``, ``check_s``: the longest wait for a result while proposals are due, and
    otherwise, in seconds; ``lost_after_s``: how long a job may be queued in no queue before
    it is enqueued again (:data:`LOST_AFTER_S`)."""

    measure_queue: Queue
    task_id: int
    workload: dict
    target: str
    protocol: MeasureProtocol
    live_workers: Callable[[], int]
    poll_s: float
    check_s: float
    lost_after_s: float = LOST_AFTER_S
    remote: ClassVar[bool] = True

    @property
    def redis(self) -> Redis:
        return self.measure_queue.connection

    @property
    def done_key(self) -> str:
        return done_key(self.task_id)

    def capacity(self) -> int:
        return PER_WORKER_DEPTH * self.live_workers()

    def submit(self, candidates: Sequence[Candidate], protocol: MeasureProtocol) -> list[RunnerFuture]:
        futures = [_JobFuture(self._job_id(c), c, protocol) for c in candidates]
        if futures:
            with self.redis.pipeline() as pipe:
                for future in futures:
                    self._enqueue(future, pipe)
                pipe.execute()
        return list(futures)

    def adopt(self, candidate: Candidate, started: bool) -> RunnerFuture:
        """Wait for the job of a trial dispatched by an earlier run; enqueue it again if Redis
        no longer has it."""
        future = _JobFuture(self._job_id(candidate), candidate, self.protocol, started)
        job = self._fetch([future.job_id])[0]
        if job is None or job.get_status(refresh=False) in (JobStatus.CANCELED, JobStatus.STOPPED):
            future.running = False
            self._enqueue(future)
        return future

    def poll(self, futures: Sequence[RunnerFuture]) -> None:
        waiting = [f for f in futures if isinstance(f, _JobFuture) and not f.done()]
        if not waiting:
            return
        queued: set[str] | None = None  # the queue's job ids, read once where a job is queued
        for future, job in zip(waiting, self._fetch([f.job_id for f in waiting])):
            if job is None:  # Redis lost it (restarted without its data): measure it again
                future.running = False
                self._enqueue(future)
                continue
            status = job.get_status(refresh=False)
            if status == JobStatus.QUEUED and queued is None:
                queued = set(self.measure_queue.get_job_ids())
            if status == JobStatus.QUEUED and self._lost(future, queued):
                future.running = False
                self._enqueue(future)
            elif status == JobStatus.STARTED and not future.running:
                future.running = True  # reported now; its result is looked at next time
            elif status in _FINAL:
                attempts = 1 + RETRIES - (job.retries_left or 0) if job.retries_left is not None else 1
                result, worker_id = _job_outcome(job, status)
                future.measured = RunnerResult(result, attempts, worker_id)

    def wait(self, futures: Sequence[RunnerFuture], *, proposals_due: bool) -> None:
        """Block until a worker reports a stored result (or ``poll_s`` when proposals are due,
        else up to ``check_s``): results are recorded within milliseconds, not a poll."""
        if self.redis.blpop([self.done_key], timeout=self.poll_s if proposals_due else self.check_s) is not None:
            self.redis.delete(self.done_key)  # one look at the jobs in flight covers them all

    def cancel(self, futures: Sequence[RunnerFuture]) -> None:
        """Cancel the jobs no worker has started."""
        ids = [f.job_id for f in futures if isinstance(f, _JobFuture)]
        for job in self._fetch(ids) if ids else []:
            if job is not None and job.get_status(refresh=False) in (JobStatus.QUEUED, JobStatus.SCHEDULED):
                job.cancel()

    def _lost(self, future: _JobFuture, queued: set[str]) -> bool:
        """Whether the queued job of `future` has been in no queue for lost_after_s seconds
        (`queued`: the ids its queue holds now)."""
        if future.job_id in queued:
            future.unqueued_since = None
            return False
        now = time.monotonic()
        if future.unqueued_since is None:
            future.unqueued_since = now
        if now - future.unqueued_since < self.lost_after_s:
            return False
        future.unqueued_since = None
        return True

    def _job_id(self, candidate: Candidate) -> str:
        return f"measure-{self.task_id}-{candidate.config.index}"

    def _fetch(self, ids: list[str]) -> list[Job | None]:
        return Job.fetch_many(ids, connection=self.redis, serializer=queue.SERIALIZER)

    def _enqueue(self, future: _JobFuture, pipeline: Any = None) -> None:
        trial_id = future.candidate.ref
        self.measure_queue.enqueue(
            "tunefleet.worker.jobs.measure",
            self.task_id, trial_id, self.workload, self.target, future.candidate.config.to_json(),
            future.protocol.to_json(),
            job_id=future.job_id,
            job_timeout=measure_timeout_s(future.protocol),
            retry=Retry(max=RETRIES),
            result_ttl=RESULT_TTL_S,
            failure_ttl=RESULT_TTL_S,
            description=f"measure trial {trial_id} of task {self.task_id}",
            meta={"notify": self.done_key},
            pipeline=pipeline,
        )


def done_key(task_id: int) -> str:
    """The Redis list workers push a measure job's id to once its result is stored."""
    return f"tunefleet:task:{task_id}:done"


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
        kind, error = "timeout", f"the measure job ran past its timeout: {last_line(text)}"
    else:
        kind, error = "runtime_error", f"the measure job failed: {last_line(text)}"
    return MeasureResult(kind, error=error, host=""), None


def last_line(text: str) -> str:
    """The last non-blank line of an error text (a traceback's exception), stripped."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else text
