"""The measurement worker daemon (`tunefleet worker`).

On start it pins itself to its CPUs (``--cpus``, default the affinity mask), so that its
builders, its measurement children and everything else it starts stay there: two workers
on one host with disjoint CPU sets never run on each other's CPUs. It then detects its host
(:mod:`.host`), registers with the server under a name unique per host and CPU set, and
consumes ``measure:<device_key>`` with a :class:`~tunefleet.base.rqworker.HeartbeatWorker`,
running each job with the tuner's isolated runner (:class:`~tunefleet.tuner.runner.LocalMeasurer`) on its
CPUs. A thread heartbeats the server every ``heartbeat_s`` with what it is doing (and
registers again if the server forgot it).

Before registering it waits for its Redis: one line at once when Redis does not answer
(naming the URL, and that it retries), one every ``PROGRESS_S`` while it waits, and
:class:`RedisUnavailable` after `ride_out_s`; then for the server, with one line at once too
(both retried with tenacity). A refused or failed heartbeat (the server's
database away: 503) is logged once per outage, and once more when heartbeats go through again.

SIGTERM (or Ctrl-C) stops it after the current job; a second one stops it at once. During a
Redis outage a stop does not wait for Redis (:mod:`tunefleet.base.rqworker`).

Imports stay light: the compiler, the tuner's measurement modules, redis, rq, httpx and
tenacity; no SQL, XGBoost or web framework.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import httpx
import tenacity

from tunefleet.base import redisconn
from tunefleet.base.rqworker import SERIALIZER, HeartbeatWorker, measure_queue
from tunefleet.compiler.target import Target
from tunefleet.tuner import host
from tunefleet.tuner.runner import LocalMeasurer

from . import jobs
from .host import host_facts

__all__ = ["WorkerDaemon", "RegistrationError", "RedisUnavailable", "pin_process", "RIDE_OUT_S", "PROGRESS_S"]

log = logging.getLogger(__name__)

#: Seconds the worker's Redis commands are retried through an outage before it gives up and
#: exits (for its supervisor to restart it).
RIDE_OUT_S = 900.0
#: Seconds between two "still waiting for Redis" lines at start.
PROGRESS_S = 10.0


def pin_process(cpus: Sequence[int]) -> None:
    """Pin every thread of this process to `cpus` (``sched_setaffinity`` sets one thread's
    mask; threads started earlier, e.g. numpy's BLAS pool, keep theirs otherwise). Threads
    and processes started later inherit it."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    os.sched_setaffinity(0, cpus)


class RegistrationError(RuntimeError):
    """The server refused the worker's registration, or could not be reached in time."""


class RedisUnavailable(RuntimeError):
    """The worker's Redis did not answer for `ride_out_s` seconds at start."""


class WorkerDaemon:
    """One measurement worker: `redis_url` and `server_url` locate the service, `token` is
    a worker-scope token; `device_key` (default derived from the host and `cpus`, or from
    the GPU), `cpus` (default the affinity mask), `name` (default ``<host>/cpu<cpus>``, plus
    ``/gpu<N>``), `heartbeat_s` (how often it reports to the server and to RQ; RQ deems a job
    abandoned after three missed beats), `register_timeout_s` (how long to wait for the
    server at start), `ride_out_s` (how long its Redis may be unreachable, at start or
    later, before it gives up), `gpu` (measure CUDA candidates on GPU `gpu`, via
    :class:`~.gpu.GpuMode`; GpuNotFound without one), `sandbox` (how its candidates are
    isolated, as the registration reports it: ``Sandbox.describe()``, or "none"; the caller
    turns the sandbox on or off, see ``tunefleet.compiler.sandbox.enable``)."""

    def __init__(
        self,
        redis_url: str,
        server_url: str,
        token: str,
        *,
        device_key: str | None = None,
        cpus: Sequence[int] | None = None,
        name: str | None = None,
        heartbeat_s: float = 5.0,
        register_timeout_s: float = 60.0,
        ride_out_s: float = RIDE_OUT_S,
        gpu: int | None = None,
        sandbox: str = "none",
    ) -> None:
        self.cpus = sorted(set(cpus)) if cpus else host.affinity()
        self.gpu = None
        if gpu is not None:  # select the GPU before anything touches CUDA
            from .gpu import GpuMode

            self.gpu = GpuMode(gpu)
        default_key = self.gpu.device_key if self.gpu else host.device_key(self.cpus)
        self.device_key = device_key or default_key
        self.name = name or host.worker_name(self.cpus) + (f"/gpu{gpu}" if gpu is not None else "")
        self.redis_url = redis_url
        self.heartbeat_s = heartbeat_s
        self.register_timeout_s = register_timeout_s
        self.ride_out_s = ride_out_s
        self.http = httpx.Client(
            base_url=server_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60.0,
        )
        self.sandbox = sandbox
        self.facts: dict = {}
        self.worker_id: int | None = None
        self.context: jobs.WorkerContext | None = None
        self.rq: HeartbeatWorker | None = None
        self._stop_heartbeats = threading.Event()
        self.outages = redisconn.Outages()
        self.server_outages = redisconn.Outages(f"server {self.http.base_url}")

    # --- server ----------------------------------------------------------------------

    def register(self) -> int:
        """Register with the server (waiting up to `register_timeout_s` for it to answer, with
        one warning at once while it does not); returns the worker id. RegistrationError when
        refused or unreachable."""
        body = {"name": self.name, "device_key": self.device_key, "host": self.facts}

        def warn_once(state: tenacity.RetryCallState) -> None:
            if state.attempt_number == 1:
                log.warning("server %s does not answer (%s): retrying for up to %.0f s", self.http.base_url,
                            state.outcome.exception(), self.register_timeout_s)

        try:
            response = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(httpx.TransportError),
                stop=tenacity.stop_after_delay(self.register_timeout_s), wait=tenacity.wait_fixed(0.5),
                before_sleep=warn_once, reraise=True,
            )(self.http.post, "/workers/register", json=body)
        except httpx.TransportError as exc:
            raise RegistrationError(f"server {self.http.base_url} unreachable: {exc}") from exc
        if response.is_error:
            try:
                detail = response.json()["detail"]
            except (ValueError, KeyError, TypeError):
                detail = response.text
            raise RegistrationError(f"registration refused (HTTP {response.status_code}): {detail}")
        self.worker_id = int(response.json()["id"])
        if self.context is not None:
            self.context.worker_id = self.worker_id
        log.info("registered as worker %s (%s) on %s", self.worker_id, self.name, self.device_key,
                 extra={"worker_id": self.worker_id, "device_key": self.device_key, "cpus": self.cpus})
        return self.worker_id

    def heartbeat(self) -> None:
        """Tell the server what the worker is doing; register again if it answers 404."""
        task_id = self.context.current_task_id if self.context else None
        body = {"state": "measuring" if task_id else "idle", "current_task_id": task_id}
        try:
            response = self.http.post(f"/workers/{self.worker_id}/heartbeat", json=body)
            if response.status_code == 404:
                self.register()
            elif response.status_code == 422 and task_id is not None:  # task gone: report idle
                self.http.post(f"/workers/{self.worker_id}/heartbeat", json={"state": "idle"})
            elif response.is_error:
                self.server_outages.failed(RuntimeError(f"heartbeat refused: HTTP {response.status_code}: "
                                                        f"{response.text}"))
                return
        except (httpx.TransportError, RegistrationError) as exc:
            self.server_outages.failed(RuntimeError(f"heartbeat failed: {exc}"))
            return
        self.server_outages.answered()

    def _heartbeats(self) -> None:
        while not self._stop_heartbeats.wait(self.heartbeat_s):
            self.heartbeat()

    # --- Redis -----------------------------------------------------------------------

    def wait_for_redis(self) -> None:
        """Return once the worker's Redis answers a PING. While it does not: one warning at
        once naming its URL (password hidden) and that the worker retries, then one every
        PROGRESS_S; RedisUnavailable once `ride_out_s` seconds have passed."""
        url = redisconn.shown(self.redis_url)
        noted: list[float] = []  # when the last line was printed, seconds into the wait

        def note(state: tenacity.RetryCallState) -> None:
            waited = state.seconds_since_start or 0.0
            if not noted:
                log.warning("Redis at %s does not answer (%s): retrying for up to %.0f s", url, state.outcome.result(),
                            self.ride_out_s)
            elif waited - noted[-1] >= PROGRESS_S:
                log.warning("still waiting for Redis at %s (%.0f s of %.0f s)", url, waited, self.ride_out_s)
            else:
                return
            noted.append(waited)

        def give_up(state: tenacity.RetryCallState) -> None:
            raise RedisUnavailable(f"Redis at {url} did not answer for {state.seconds_since_start:.0f} s "
                                   f"({state.outcome.result()}); giving up")

        tenacity.Retrying(retry=tenacity.retry_if_not_result(lambda error: error is None),
                          stop=tenacity.stop_after_delay(self.ride_out_s),
                          wait=tenacity.wait_fixed(redisconn.BACKOFF_CAP_S), before_sleep=note,
                          retry_error_callback=give_up)(redisconn.ping_error, self.redis_url)
        if noted:
            log.info("Redis at %s answers", url)

    # --- main ------------------------------------------------------------------------

    def run(self) -> None:
        """Pin, wait for Redis, register, and work until stopped (SIGTERM / SIGINT)."""
        pin_process(self.cpus)
        self.facts = self.gpu.host_facts(self.cpus) if self.gpu else host_facts(self.cpus)
        self.facts["sandbox"] = self.sandbox
        self.wait_for_redis()
        self.register()
        connection = redisconn.connect(self.redis_url, ride_out_s=self.ride_out_s, outages=self.outages)
        redisconn.count_reconnects(lambda: connection, self.outages, self.name, "redis")
        if self.gpu:
            measurer = self.gpu.measurer(cpus=self.cpus, host=self.name)
        else:
            measurer = LocalMeasurer(cpus=self.cpus, host=self.name)
        assert self.worker_id is not None
        self.context = jobs.WorkerContext(self.worker_id, self.name, self.device_key, measurer, self.http,
                                          host_target=self.gpu.target if self.gpu else Target.host())
        jobs.bind(self.context)
        beats = threading.Thread(target=self._heartbeats, name="server-heartbeat", daemon=True)
        beats.start()
        self.rq = HeartbeatWorker(
            [measure_queue(connection, self.device_key)],
            connection=connection,
            name=f"{self.name}.{os.getpid()}",
            serializer=SERIALIZER,
            heartbeat_s=self.heartbeat_s,
        )
        log.info("worker %s measuring on CPUs %s, queue %s", self.name, host.format_cpus(self.cpus),
                 self.rq.queue_names()[0])
        try:
            self.rq.work(logging_level=logging.getLevelName(logging.getLogger().level))
        finally:
            self._stop_heartbeats.set()
            beats.join()
            jobs.bind(None)
            measurer.close()
            self.heartbeat()
            self.http.close()
            connection.close()
            log.info("worker %s stopped", self.name)
