"""Archives built on request by a worker (a model's bundle, a multi-target library): the API
server compiles nothing. The first request for an archive enqueues one build job on
``measure:<device_key>`` under the build's key (its RQ job id, so a request while it builds
enqueues nothing more); the worker uploads the archive to the artifact store and returns it;
the next request records it (services.builds) and every later one serves it from the store. A
build whose inputs do not build (a compile or config error) is recorded with its error and
answered with it, never retried. A build the worker could not finish — the upload refused or
cut, the worker lost, the job timed out or stopped (:data:`UNFINISHED`), after RQ's one retry —
is answered with its error once and not recorded: the next request builds it again.
"""

from __future__ import annotations

import dataclasses

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from rq import Retry
from rq.job import Job, JobStatus
from sqlalchemy.orm import Session

from tunefleet.base.settings import Settings
from tunefleet.server import queue
from tunefleet.server.db.models import Artifact
from tunefleet.server.errors import Conflict
from tunefleet.server.measure_runner import RESULT_TTL_S, RETRIES, last_line
from tunefleet.server.services import builds, liveness
from tunefleet.server.services.builds import BuildJob

__all__ = ["RETRY_AFTER_S", "Building", "fetch"]

#: Seconds a client is asked to wait before it asks again for an archive being built.
RETRY_AFTER_S = 2
_FAILED = (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
#: Exceptions of a build job that say nothing of its inputs: the worker could not finish it
#: (worker.jobs.ExportError: the upload; RQ's for a lost worker and a timeout).
UNFINISHED = ("ExportError", "AbandonedJobError", "JobTimeoutException", "SandboxUnavailable")


@dataclasses.dataclass(frozen=True)
class Building:
    """A build in progress: its `key` and the RQ job's `state` ("queued", "started", ...)."""

    key: str
    state: str


def fetch(session: Session, redis: Redis | None, settings: Settings, job: BuildJob) -> Artifact | Building:
    """The stored archive of `job.key`, else the build in progress (enqueued here when there is
    none, or when its job finished but its upload is not in this store). Raises Conflict with
    the build's error when it failed (recorded: every later request gets it too) and when no
    worker of the device key is live to build it; Redis's ConnectionError (503) when Redis
    cannot be reached."""
    build = builds.stored(session, job.key)
    if build is None:
        if redis is None:
            raise RedisConnectionError(f"no Redis connection: {job.what} is built by a worker through Redis")
        found = Job.fetch_many([job.key], connection=redis, serializer=queue.SERIALIZER)[0]
        status = None if found is None else found.get_status(refresh=False)
        artifact = None
        if status == JobStatus.FINISHED:
            artifact = builds.uploaded(session, found.return_value()["artifact"]["sha256"])
        if status is None or (status == JobStatus.FINISHED and artifact is None):
            return _enqueue(session, redis, settings, job)
        if artifact is not None:
            build = builds.record(session, job.key, artifact)
        elif status in _FAILED:
            latest = found.latest_result()
            error = last_line(latest.exc_string if latest and latest.exc_string else str(status))
            if status != JobStatus.FAILED or _exception_name(error) in UNFINISHED:
                found.delete()
                raise Conflict(f"the worker could not finish building {job.what}: {error} (not stored: "
                               "ask again to build it again)")
            build = builds.record(session, job.key, None, f"the worker's build failed: {error}")
        else:
            return Building(job.key, getattr(status, "value", str(status)))
    if build.artifact is None:
        raise Conflict(f"{job.what} does not build: {build.error}")
    return build.artifact


def _exception_name(line: str) -> str:
    """The exception's class name in a traceback's last line ("pkg.mod.Name: message")."""
    return line.split(":", 1)[0].rsplit(".", 1)[-1]


def _enqueue(session: Session, redis: Redis, settings: Settings, job: BuildJob) -> Building:
    if not liveness.live_workers(session, job.device_key, settings.worker_lost_after_s):
        raise Conflict(f"no live worker of device key {job.device_key!r} to build {job.what} on: start "
                       f"`tunefleet worker --device-key {job.device_key}` and ask again")
    queue.measure_queue(redis, job.device_key).enqueue(
        job.function, *job.args, job_id=job.key, job_timeout=job.timeout_s, retry=Retry(max=RETRIES),
        result_ttl=RESULT_TTL_S, failure_ttl=RESULT_TTL_S, description=f"build {job.what}")
    return Building(job.key, JobStatus.QUEUED.value)
