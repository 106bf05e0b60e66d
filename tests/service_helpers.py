"""The whole service as real processes for tests: `tunefleet server`, `tuner` and `worker`
subprocesses on one database and one Redis, with short heartbeats and leases so that deaths
are noticed within seconds."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from tunefleet.tuner import lifeline

if TYPE_CHECKING:
    import pytest

TUNEFLEET = str(Path(sys.executable).with_name("tunefleet"))
#: Fast measurements: two repeats of at least 1 ms; enough to rank and to check numbers.
PROTOCOL = {"repeat": 2, "min_repeat_ms": 1, "cooldown_ms": 0, "timeout_s": 20}
HEARTBEAT_S = 0.5


def dies_with_this_test(argv: list[str]) -> list[str]:
    """`argv` behind the lifeline (:mod:`tunefleet.tuner.lifeline`): the program gets SIGTERM
    when this test process ends, however it ends (a run killed mid-way included), so no
    server, tuner or worker of a test outlives the run to take jobs from the test Redis."""
    return lifeline.command(argv, "TERM", os.getpid())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy (returned); AssertionError naming
    `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(poll_s)


def answers_healthz(url: str) -> bool:
    """Whether the tunefleet server at `url` answers GET /api/v1/healthz with 200 now."""
    try:
        return httpx.get(f"{url}/api/v1/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def wait_healthy(url: str, process: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    """Wait until the server `process` answers /healthz at `url`; AssertionError with its
    output (`log`) when it exits first or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not answers_healthz(url):
        assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"server did not come up:\n{log.read_text()}"
        time.sleep(0.2)


@dataclass
class Service:
    """Processes of one service; `env` is every process's environment."""

    root: Path
    env: dict[str, str]
    url: str
    user_token: str
    worker_token: str
    redis_url: str
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    #: Processes a SIGKILLed process left behind (its fork server, builders), ended at the end.
    orphans: list[int] = field(default_factory=list)

    def _start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = self.root / f"{name}.log"
        self.logs[name] = log
        with log.open("a") as out:
            process = subprocess.Popen(dies_with_this_test([TUNEFLEET, *args]), env={**self.env, **(env or {})},
                                       stdout=out, stderr=subprocess.STDOUT)
        self.processes[name] = process
        return process

    def start_server(self, env: dict[str, str] | None = None) -> None:
        """Start `tunefleet server` (with `env` added to the service's) and wait until it answers."""
        wait_healthy(self.url, self._start("server", "server", env=env), self.logs["server"], 120)

    def start_tuner(self, name: str = "tuner") -> subprocess.Popen:
        return self._start(name, "tuner", "--heartbeat-s", str(HEARTBEAT_S))

    def start_worker(self, name: str, cpus: str, device_key: str = "test-cpu") -> subprocess.Popen:
        return self._start(
            name, "worker", "--redis", self.redis_url, "--server", self.url,
            "--cpus", cpus, "--device-key", device_key, "--name", f"test-{name}",
            "--heartbeat-s", str(HEARTBEAT_S), env={"TUNEFLEET_WORKER_TOKEN": self.worker_token},
        )

    def alive(self, name: str) -> bool:
        process = self.processes.get(name)
        return process is not None and process.poll() is None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to process `name` and wait for it to end; returns its exit status."""
        process = self.processes[name]
        if sig == signal.SIGKILL:
            self.orphans.extend(descendants(process.pid))
        process.send_signal(sig)
        return process.wait(timeout=60)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in self.orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.orphans.clear()

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.user_token}"}
        response = httpx.request(method, f"{self.url}/api/v1{path}", headers=headers, timeout=30, **kwargs)
        assert not response.is_error, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    def workers(self) -> dict[str, dict]:
        return {w["name"]: w for w in self.api("GET", "/workers")["items"]}

    def trials(self, task_id: int) -> list[dict]:
        return self.api("GET", f"/tasks/{task_id}/trials", params={"limit": 500})["items"]

    def measured_events(self, task_id: int) -> list[int]:
        """Trial ids of the task that some worker measured, once per measurement, from the
        workers' JSON logs."""
        ids = []
        for name, log in self.logs.items():
            if not name.startswith("worker"):
                continue
            for line in log.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") == "measured" and entry.get("task_id") == task_id:
                    ids.append(entry["trial_id"])
        return ids


def service_env(root: Path, database_url: str, redis_url: str, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "TUNEFLEET_HOME": str(root / "home"),
        "TUNEFLEET_DATABASE_URL": database_url,
        "TUNEFLEET_REDIS_URL": redis_url,
        "TUNEFLEET_PORT": str(port),
        "TUNEFLEET_LOG_FORMAT": "json",
        "TUNEFLEET_WORKER_LOST_AFTER_S": "4",
        "TUNEFLEET_LEASE_S": "3",
        "TUNEFLEET_RECONCILE_S": "0.5",
    }


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def allowed_cpus(pid: int) -> set[str]:
    """The Cpus_allowed_list of every thread of process `pid` (empty if it is gone)."""
    lists = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    lists.add(line.split(":", 1)[1].strip())
    except OSError:
        pass
    return lists


# --- a service with its fleet, for the service tests ---------------------------------------

CPUS = sorted(os.sched_getaffinity(0))
#: The two test workers' CPUs: different ones whenever the machine allows.
CPU_A, CPU_B = str(CPUS[0]), str(CPUS[1 % len(CPUS)])
MATMUL = {"M": 64, "N": 64, "K": 64}
FINAL_TRIAL = {"ok", "compile_error", "runtime_error", "wrong_answer", "timeout", "worker_lost", "unsupported_target"}


def migrated_database(request: pytest.FixtureRequest, kind: str, root: Path) -> str:
    """The URL of a migrated, empty database of its own: for `kind` "sqlite" a copy of the
    migrated template in `root`, for "postgresql" a new schema of the tests' PostgreSQL."""
    from tunefleet.server.db.migrate import upgrade

    if kind == "sqlite":
        shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), root / "tunefleet.db")
        return f"sqlite:///{root / 'tunefleet.db'}"
    database_url = request.getfixturevalue("postgres_schemas").new_url()
    upgrade(database_url)
    return database_url


def service_on(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, redis_url: str,
               kind: str) -> Iterator[Service]:
    """For a module's `service` fixture: a server (:func:`start_service`) on a migrated
    database of `kind` ("sqlite" or "postgresql"), stopped with all it started afterwards."""
    root = tmp_path_factory.mktemp(f"service-{kind}")
    service = start_service(root, migrated_database(request, kind, root), redis_url)
    yield service
    service.stop_all()


def start_service(root: Path, database_url: str, redis_url: str) -> Service:
    """A running server on a migrated, empty `database_url` (Redis emptied), with a user
    and a worker token; no tuner or worker yet."""
    from redis import Redis

    from tunefleet.server.db import make_engine, make_sessionmaker
    from tunefleet.server.db.models import TokenScope
    from tunefleet.server.services import tokens

    Redis.from_url(redis_url).flushdb()
    engine = make_engine(database_url)
    with make_sessionmaker(engine)() as session:
        user = tokens.create(session, "u", TokenScope.USER)
        worker = tokens.create(session, "w", TokenScope.WORKER)
    engine.dispose()
    port = free_port()
    service = Service(root, service_env(root, database_url, redis_url, port), f"http://127.0.0.1:{port}",
                      user, worker, redis_url)
    try:
        service.start_server()
    except BaseException:
        service.stop_all()
        raise
    return service


def ensure_fleet(service: Service) -> Service:
    """Start the tuner and the workers `worker0` (CPU A) and `worker1` (CPU B) of device key
    test-cpu where they are not running, and wait until both workers are registered."""
    if not service.alive("tuner"):
        service.start_tuner()
    for name, cpus in (("worker0", CPU_A), ("worker1", CPU_B)):
        if not service.alive(name):
            service.start_worker(name, cpus)

    def registered() -> bool:
        workers = service.workers()
        return all(workers.get(f"test-{n}", {}).get("state") in ("idle", "measuring")
                   for n in ("worker0", "worker1"))

    wait_for(registered, 60, "both workers to register")
    return service


def submit(service: Service, trials: int, *, device_key: str = "test-cpu", protocol: dict | None = None,
           reuse: bool = False, args: dict | None = None) -> dict:
    """Submit a matmul task (64³ unless `args`) for the host's CPU target."""
    from tunefleet.compiler.target import Target

    body = {"op": "matmul", "args": args or MATMUL, "target": str(Target.host()), "device_key": device_key,
            "budget": {"trials": trials}, "protocol": protocol or PROTOCOL, "reuse": reuse}
    return service.api("POST", "/tasks", json=body)


def wait_status(service: Service, task_id: int, statuses: set[str], timeout_s: float = 180) -> dict:
    """The task once its status is one of `statuses`."""

    def reached() -> dict | None:
        task = service.api("GET", f"/tasks/{task_id}")
        return task if task["status"] in statuses else None

    return wait_for(reached, timeout_s, f"task {task_id} to become one of {sorted(statuses)}", poll_s=0.2)


def running(pid: int) -> bool:
    """Whether process `pid` exists and has not ended (a zombie that nobody reaped has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def start_up(home: Path, port: int, log: Path, *args: str, env: dict[str, str] | None = None
             ) -> tuple[subprocess.Popen, str]:
    """`tunefleet up --port PORT *args` on `home` (embedded Redis and SQLite unless `env`, the
    TUNEFLEET_ variables to set, says otherwise), its output in `log`; returns the process and
    the user token it printed once it is up."""
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_") or k == "TUNEFLEET_NO_SANDBOX"}
    env.update(TUNEFLEET_HOME=str(home), TUNEFLEET_LOG_FORMAT="json", **extra)
    with log.open("w") as out:
        process = subprocess.Popen(dies_with_this_test([TUNEFLEET, "up", "--port", str(port), *args]), env=env,
                                   stdout=out, stderr=subprocess.STDOUT)

    def token() -> str | None:
        assert process.poll() is None, log.read_text()
        found = re.findall(r"user token: (\S+)", log.read_text())
        return found[-1] if found else None

    try:
        return process, wait_for(token, 120, "tunefleet up to print its token", poll_s=0.2)
    except BaseException:
        process.terminate()  # it stops what it started
        process.wait(timeout=120)
        raise


#: How each process that `tunefleet up` supervises shows in its command line.
UP_CHILDREN = {"worker": "tunefleet worker", "tuner": "tunefleet tuner", "server": "tunefleet server",
               "redis": "redis-server"}


def cmdline(pid: int) -> str:
    """The command line of process `pid` ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def parent(pid: int) -> int:
    """The parent of process `pid` (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def up_child(up_pid: int, name: str) -> int | None:
    """The pid of the process `name` (a key of UP_CHILDREN) that `tunefleet up` (`up_pid`) runs,
    if it runs (not its helpers, whose command line is their parent's)."""
    found = [p for p in descendants(up_pid) if UP_CHILDREN[name] in cmdline(p) and running(p)
             and UP_CHILDREN[name] not in cmdline(parent(p))]
    return found[0] if found else None
