"""Submissions per user and minute, counted by the `limits` library in a moving window kept
in the deployment's Redis (so every server process counts together), or in this process's
memory while Redis cannot be reached."""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import MovingWindowRateLimiter, RateLimiter
from redis.exceptions import RedisError

from tunefleet.server.errors import TooManyRequests
from tunefleet.server.queue import LazyConnection

log = logging.getLogger(__name__)


class SubmissionLimiter:
    """At most `per_minute` submissions by one user in any 60 s."""

    def __init__(self, per_minute: int, redis: LazyConnection) -> None:
        self.item = RateLimitItemPerMinute(per_minute)
        self.redis = redis
        self._shared: RateLimiter | None = None
        self._local = MovingWindowRateLimiter(MemoryStorage())

    def _limiter(self) -> RateLimiter:
        if self._shared is None:
            connection = self.redis.get()
            if connection is None:
                return self._local
            self._shared = MovingWindowRateLimiter(
                RedisStorage("redis://", connection_pool=connection.connection_pool, key_prefix="tunefleet:limits")
            )
        return self._shared

    def hit(self, user: str) -> None:
        """Count one submission of `user`; TooManyRequests (with the seconds until the
        oldest one in the window ages out) when it is one too many."""
        limiter = self._limiter()
        try:
            admitted = limiter.hit(self.item, "submit", user)
        except RedisError as exc:
            log.warning("counting submissions in memory, Redis failed: %s", exc)
            limiter = self._local
            admitted = limiter.hit(self.item, "submit", user)
        if not admitted:
            reset = limiter.get_window_stats(self.item, "submit", user).reset_time
            wait = max(1, math.ceil(reset - time.time()))
            raise TooManyRequests(f"{user} submitted {self.item.amount} tasks in the last minute, the most "
                                  f"this server takes (max_submissions_per_minute); try again in {wait} s", wait)
