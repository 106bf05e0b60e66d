"""Prometheus metrics: HTTP traffic, counted as it passes; the store's contents (tasks,
trials, workers, artifacts), read from SQL at each scrape; and from Redis at each scrape, the
queues' depths, the restarts of the service's processes and their reconnections to Redis and
SQL after outages."""

from __future__ import annotations

import enum
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisError
from rq import Queue
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunefleet.server.db import utcnow
from tunefleet.server import queue
from tunefleet.server.db.models import Artifact, Task, TaskStatus, Trial, TrialStatus, Worker, WorkerState
from tunefleet.base import redisconn


class StoreCollector(Collector):
    """Gauges of how many tasks, trials and workers are in each state, and the artifact
    store's size."""

    def __init__(self, sessions: sessionmaker[Session], lost_after_s: float) -> None:
        self.sessions = sessions
        self.lost_after_s = lost_after_s

    def collect(self) -> Iterator[Metric]:
        with self.sessions() as session:
            yield _by_label(
                "tunefleet_tasks", "Tasks by status.", "status", TaskStatus,
                session.execute(select(Task.status, func.count()).group_by(Task.status)),
            )
            yield _by_label(
                "tunefleet_trials", "Trials by status.", "status", TrialStatus,
                session.execute(select(Trial.status, func.count()).group_by(Trial.status)),
            )
            cutoff = utcnow().timestamp() - self.lost_after_s
            states = Tally(
                WorkerState.LOST if beat.timestamp() < cutoff else state
                for state, beat in session.execute(select(Worker.state, Worker.last_heartbeat))
            )
            yield _by_label(
                "tunefleet_workers", "Workers by state (lost: heartbeat stale).", "state",
                WorkerState, states.items(),
            )
            stored = GaugeMetricFamily(
                "tunefleet_artifact_store_bytes", "Bytes of artifacts in the store."
            )
            stored.add_metric([], session.scalar(select(func.coalesce(func.sum(Artifact.size), 0))))
            yield stored


class QueueCollector(Collector):
    """From Redis: jobs waiting in each queue (``tune``, ``measure:<device key>``), restarts
    of each process by its supervisor, and each process's reconnections to Redis and to SQL.
    None of these while Redis is down (the scrape still answers)."""

    def __init__(self, redis: queue.LazyConnection) -> None:
        self.redis = redis

    def collect(self) -> Iterator[Metric]:
        connection = self.redis.get()
        if connection is None:
            return
        try:
            depths = {q.name: q.count for q in Queue.all(connection=connection, serializer=queue.SERIALIZER)}
            restarts = queue.restarts(connection)
            reconnects = redisconn.reconnects(connection)
        except RedisError:
            return
        jobs = GaugeMetricFamily("tunefleet_queue_jobs", "Jobs waiting in each RQ queue.", labels=["queue"])
        for name, n in sorted(depths.items()):
            jobs.add_metric([name], n)
        yield jobs
        restarted = CounterMetricFamily("tunefleet_process_restarts", "Times a process of the service died and "
                                        "was restarted by its supervisor (tunefleet up).", labels=["process"])
        for name, n in sorted(restarts.items()):
            restarted.add_metric([name], n)
        yield restarted
        back = CounterMetricFamily("tunefleet_reconnects", "Times a process got its connection to Redis or SQL "
                                   "back after an outage.", labels=["process", "to"])
        for (process, what), n in sorted(reconnects.items()):
            back.add_metric([process, what], n)
        yield back


def _by_label(
    name: str,
    documentation: str,
    label: str,
    values: type[enum.StrEnum],
    counts: Iterable[Any],
) -> GaugeMetricFamily:
    """A gauge with one sample per member of `values` (0 where `counts` has none)."""
    found = {value: n for value, n in counts}
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value in values:
        family.add_metric([value.value], found.get(value, 0))
    return family


class MetricsMiddleware:
    """Counts requests by method, route template and status, and times them."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "tunefleet_http_requests", "HTTP requests served.", ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "tunefleet_http_request_duration_seconds", "Time to serve an HTTP request.",
            ["method", "route"], registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        start = time.perf_counter()

        async def send_and_note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.latency.labels(scope["method"], template).observe(time.perf_counter() - start)
            self.requests.labels(scope["method"], template, str(status)).inc()
