"""The RQ worker class of tunefleet's processes (measurement workers and tuners).

:class:`HeartbeatWorker` is RQ's ``SimpleWorker`` (a job runs in the worker's own process,
so it can use what that process keeps between jobs: the measurer with its builder pool
and fork server, the tuner's database engine) plus what RQ's forking worker has and
``SimpleWorker`` lacks (the first two) and what tunefleet's processes need of it:

- it heartbeats the running job every ``heartbeat_s`` with a TTL of ``3 * heartbeat_s``,
  so that when the worker dies (kill -9, a lost host), RQ's abandoned-job handling
  (``StartedJobRegistry.cleanup``) finds the job within seconds and retries it if its
  ``Retry`` allows, or fails it with ``AbandonedJobError``;
- a warm shutdown (SIGTERM, or the first Ctrl-C) also sets :attr:`stopping`, which a long
  job (a tuning run) watches to stop early; RQ itself exits after the current job;
- a warm shutdown also ends the connection's ride-out of Redis outages
  (:meth:`~tunefleet.base.redisconn.Outages.stop_riding_out`): RQ's teardown writes the worker's
  death to Redis, and with Redis down that write waited out the whole ride-out (15 minutes),
  so a worker asked to stop during an outage did not. Its Redis commands now fail at once; the
  signal handler's write of the stop request and a teardown that cannot reach Redis are logged
  (neither raises into the running job), and the worker's record expires by its TTL (a job it
  could not finish is found abandoned by its missing heartbeat, as after a kill);
- a job whose ``meta["notify"]`` names a Redis list gets its id pushed there once its
  outcome is stored (RQ's own callbacks run before that), so whoever waits for it can block
  on the list instead of polling;
- one enqueue of a job runs once. redis-py re-sends a command whose reply a dropped
  connection lost (our clients ride out Redis outages that way), and an enqueue is not
  idempotent: a re-sent ``MULTI … RPUSH … EXEC`` that Redis had already executed puts the
  job's id in its queue twice, and two workers measured one trial at once (seen when Redis
  was stopped mid-task). Before running a job, the worker claims its enqueue — the job id
  with its ``enqueued_at`` and ``retries_left``, which every real enqueue (a new one, or
  RQ's retry of a job whose worker died) changes and a re-sent one does not — with
  ``SET NX``; a second queue entry of a claimed enqueue is dropped;
- its shutdown does not wait on its pub/sub thread. RQ's ``unsubscribe`` sends UNSUBSCRIBE,
  then stops the thread that reads the worker's command channel; since redis-py 8.2 that stop
  joins the thread, which — woken by UNSUBSCRIBE's reply before the stop — sits in its next
  read of up to RQ's 60 s: a worker sent SIGTERM took a minute to exit. Stopping the thread
  first lets that reply end its last read.

RQ calls a job by its function's name with JSON arguments, so what a job needs from its
process (a measurer, a database engine) is bound once per process in a :class:`JobContext`.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from typing import Any, Generic, TypeVar

from redis import Redis
from redis.exceptions import RedisError
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker, WorkerStatus

from tunefleet.base.redisconn import RideOutRetry

log = logging.getLogger(__name__)

#: Every tunefleet queue carries JSON (job arguments and results are plain data).
SERIALIZER = JSONSerializer
#: Seconds a job's claim is kept: longer than any job waits in a queue and runs.
CLAIM_TTL_S = 7 * 86_400


T = TypeVar("T")


class JobContext(Generic[T]):
    """The context the jobs of this process run with, bound by the process that runs them;
    `outside`: the RuntimeError's message for a job run anywhere else."""

    def __init__(self, outside: str) -> None:
        self._value: T | None = None
        self._outside = outside

    def bind(self, value: T | None) -> None:
        """Set (or clear) the context."""
        self._value = value

    def current(self) -> T:
        """The bound context; RuntimeError when none is."""
        if self._value is None:
            raise RuntimeError(self._outside)
        return self._value


def measure_queue_name(device_key: str) -> str:
    """The queue the workers of `device_key` consume: ``measure:<device_key>``."""
    return f"measure:{device_key}"


def measure_queue(connection: Redis, device_key: str) -> Queue:
    """The ``measure:<device_key>`` queue."""
    return Queue(measure_queue_name(device_key), connection=connection, serializer=SERIALIZER)


class HeartbeatWorker(SimpleWorker):
    """A ``SimpleWorker`` that heartbeats running jobs every `heartbeat_s` seconds."""

    def __init__(self, *args: Any, heartbeat_s: float = 5.0, **kwargs: Any) -> None:
        kwargs.setdefault("job_monitoring_interval", max(1, math.ceil(heartbeat_s)))
        super().__init__(*args, **kwargs)
        self.heartbeat_s = heartbeat_s
        self.stopping = threading.Event()

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """Seconds a job may go without a heartbeat before RQ deems it abandoned."""
        return max(2, math.ceil(3 * self.heartbeat_s))

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Run `job` in this process, heartbeating it from a thread meanwhile; drop it instead
        when its enqueue already ran (a duplicate queue entry, see the module docstring)."""
        if not self.claim(job):
            log.warning("job %s: dropped a second queue entry of one enqueue (it runs or ran already)", job.id)
            self.connection.lrem(queue.intermediate_queue_key, 1, job.id)
            return
        execution = self.prepare_execution(job)
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.heartbeat_s):
                try:
                    self.maintain_heartbeats(job, execution)
                except RedisError as exc:
                    log.warning("heartbeat of job %s failed: %s", job.id, exc)

        thread = threading.Thread(target=beat, name=f"rq-heartbeat-{job.id}", daemon=True)
        thread.start()
        try:
            self.perform_job(job, queue, execution)
        finally:
            done.set()
            thread.join()
        notify = (job.meta or {}).get("notify")
        if notify:
            try:
                with self.connection.pipeline() as pipe:
                    pipe.lpush(notify, job.id).expire(notify, 86_400).execute()
            except RedisError as exc:  # the waiter falls back to its periodic look
                log.warning("could not notify %s of job %s: %s", notify, job.id, exc)
        self.set_state(WorkerStatus.IDLE)

    def claim(self, job: Job) -> bool:
        """Claim this enqueue of `job` (its id, ``enqueued_at`` and ``retries_left``) for this
        worker; False when another execution claimed it first. Kept CLAIM_TTL_S seconds. A
        re-sent ``SET`` that finds this worker's own token counts as claimed."""
        enqueued = job.enqueued_at.isoformat() if job.enqueued_at else ""
        key = f"tunefleet:claim:{job.id}:{enqueued}:{job.retries_left}"
        token = f"{self.name}:{uuid.uuid4().hex}"
        if self.connection.set(key, token, nx=True, ex=CLAIM_TTL_S):
            return True
        return self.connection.get(key) == token.encode()

    def unsubscribe(self) -> None:
        """RQ's, with the pub/sub thread told to stop (without waiting) before UNSUBSCRIBE is
        sent, so that its reply ends the thread's read (see the module docstring)."""
        if self.pubsub_thread is not None:
            self.pubsub_thread.stop(timeout=0)
        super().unsubscribe()

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()
        self.stopping.set()
        retry = self.connection.get_retry()
        if isinstance(retry, RideOutRetry):
            retry.outages.stop_riding_out()

    def set_shutdown_requested_date(self) -> None:
        """RQ's, which runs in the signal handler, amid the running job: a failed write is
        logged, not raised into the job."""
        try:
            super().set_shutdown_requested_date()
        except RedisError as exc:
            log.warning("worker %s: could not record the stop request in Redis (%s)", self.name, exc)

    def teardown(self) -> None:
        """RQ's (its death and unsubscribe written to Redis), logged instead of raised when Redis
        cannot be reached: the worker's record then expires by its TTL."""
        try:
            super().teardown()
        except RedisError as exc:
            log.warning("worker %s: could not record its stop in Redis (%s); its record expires by itself",
                        self.name, exc)
            if self.pubsub_thread is not None:
                self.pubsub_thread.stop(timeout=0)
