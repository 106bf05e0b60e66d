"""`tunefleet up` heals itself: each of its processes (worker, tuner, server, the embedded
Redis) killed with SIGKILL mid-task in turn is restarted by its supervisor, and the task
finishes with every trial stored once; no process of the service outlives its parent. A
process that keeps dying as it starts ends the service with one clear message instead of a
restart loop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from service_helpers import (FINAL_TRIAL, PROTOCOL, TUNEFLEET, UP_CHILDREN, cmdline, descendants, free_port, running,
                             start_up, up_child, wait_for)

from tunefleet.client import Client, ServerUnreachable

pytestmark = pytest.mark.timeout(600)

TRIALS = 16

def test_each_child_killed_mid_task_is_restarted_and_the_task_finishes(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    up, token = start_up(home, port, log := tmp_path / "up.log")
    seen: set[int] = set()
    try:
        with Client(f"http://127.0.0.1:{port}", token) as client:
            slow = {**PROTOCOL, "repeat": 3, "min_repeat_ms": 50}  # each trial measures for >= 0.15 s
            task = client.submit("matmul", {"M": 64, "N": 64, "K": 48}, trials=TRIALS, protocol=slow)
            done = 0
            for name in UP_CHILDREN:
                done = wait_for(lambda: _done_beyond(client, task["id"], done), 180,
                                f"a trial more before killing the {name}", poll_s=0.2)
                victim = wait_for(lambda: up_child(up.pid, name), 30, f"the {name}")
                below = descendants(victim)
                seen.update(descendants(up.pid))
                os.kill(victim, signal.SIGKILL)
                back = wait_for(lambda: (pid := up_child(up.pid, name)) and pid != victim and pid, 60,
                                f"the {name} to be restarted")
                assert back != victim
                # what the killed process had started died with it
                wait_for(lambda: not [p for p in below if running(p)], 30,
                         f"the killed {name}'s helpers to end: {[cmdline(p) for p in below if running(p)]}")
            finished = client.wait(task["id"], progress=False, poll_s=0.5, timeout_s=300)
            assert finished["status"] == "done", finished["error"]
            trials = client.trials(task["id"], limit=500)["items"]
        assert len(trials) == TRIALS and len({t["config_index"] for t in trials}) == TRIALS
        assert all(t["status"] in FINAL_TRIAL for t in trials)
        text = log.read_text()
        for name in UP_CHILDREN:  # the reason of each death is in the output
            assert f"the {name} exited (terminated by SIGKILL" in text, text[-3000:]
        seen.update(descendants(up.pid))
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=240) == 0, log.read_text()[-3000:]
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    left = [f"{p}: {cmdline(p)}" for p in seen if running(p)]
    assert not left, f"processes of the service outlived it: {left}"


def _done_beyond(client: Client, task_id: int, done: int) -> int | None:
    """The task's trials done, once more than `done` (None while the server is restarting)."""
    try:
        now = client.get(task_id)["trials_done"]
    except ServerUnreachable:
        return None
    return now if now > done else None


def test_a_process_that_keeps_dying_at_start_stops_the_service_with_one_message(tmp_path: Path) -> None:
    with socket.socket() as taken:  # the server cannot bind its port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
        env.update(TUNEFLEET_HOME=str(tmp_path / "home"))
        up = subprocess.run([TUNEFLEET, "up", "--port", str(port)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "the server died within 30 s of starting 4 times in a row; gave up" in up.stderr, up.stderr
    assert "Traceback" not in up.stdout + up.stderr
    assert (tmp_path / "home" / "logs" / "server.log").read_text().count("address already in use") == 4
