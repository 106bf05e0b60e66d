"""`tunefleet server` as a real uvicorn process, driven by tunefleet.Client and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import numpy as np
from server_helpers import artifact_files, real_artifact, run_worker_jobs_over, tarball
from service_helpers import dies_with_this_test, free_port, wait_healthy
from test_server_workers import HOST

from tunefleet.client import Client, IntegrityError, ServerUnreachable, ServiceError
from tunefleet.server.db.models import Task, TokenScope
from tunefleet.server.services import tokens, tuning
from tunefleet.tuner.measure import MeasureResult

TUNEFLEET = str(Path(sys.executable).with_name("tunefleet"))
MATMUL = {"M": 32, "N": 16, "K": 8}


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    user_token: str
    worker_token: str
    log: Path

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "TUNEFLEET_URL": self.url, "TUNEFLEET_TOKEN": self.user_token}
        return subprocess.run([TUNEFLEET, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def live(database_url: str, tmp_path: Path, db, redis_url: str) -> Iterator[LiveServer]:
    port = free_port()
    env = {
        **os.environ,
        "TUNEFLEET_HOME": str(tmp_path / "home"),
        "TUNEFLEET_DATABASE_URL": database_url,
        "TUNEFLEET_REDIS_URL": redis_url,  # submissions enqueue tune jobs there
        "TUNEFLEET_PORT": str(port),
        "TUNEFLEET_LOG_FORMAT": "json",
    }
    server = LiveServer(f"http://127.0.0.1:{port}", env, tokens.create(db, "u", TokenScope.USER),
                        tokens.create(db, "w", TokenScope.WORKER), tmp_path / "server.log")
    with server.log.open("w") as log:
        process = subprocess.Popen(dies_with_this_test([TUNEFLEET, "server"]), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(server.url, process, server.log)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_client_submit_get_list_cancel_and_errors(live: LiveServer) -> None:
    with Client(live.url, live.user_token) as client:
        task = client.submit("matmul", MATMUL, device_key="cpu-test", trials=8)
        assert task["status"] == "queued" and task["budget"]["trials"] == 8
        assert client.get(task["id"]) == task
        assert client.tasks(device_key="cpu-test")["total"] == 1
        assert client.trials(task["id"])["items"] == []
        with pytest.raises(ServiceError) as bad:
            client.submit("matmul", {"M": -1}, device_key="cpu-test")
        assert bad.value.status_code == 422 and "args.M" in str(bad.value)
        with pytest.raises(ServiceError) as missing:
            client.best(task["id"])
        assert missing.value.status_code == 404
        assert client.cancel(task["id"])["status"] == "cancelled"
        with pytest.raises(ServiceError) as conflict:
            client.cancel(task["id"])
        assert conflict.value.status_code == 409
    with Client(live.url) as anonymous, pytest.raises(ServiceError) as unauthorized:
        anonymous.submit("matmul", MATMUL, device_key="cpu-test")
    assert unauthorized.value.status_code == 401


def test_wait_returns_when_the_task_ends(live: LiveServer) -> None:
    with Client(live.url, live.user_token) as client:
        task = client.submit("matmul", MATMUL, device_key="cpu-test")
        with pytest.raises(TimeoutError):
            client.wait(task["id"], progress=False, poll_s=0.05, timeout_s=0.3)

        def cancel_later() -> None:
            with Client(live.url, live.user_token) as other:
                other.cancel(task["id"])

        threading.Timer(0.5, cancel_later).start()
        assert client.wait(task["id"], progress=True, poll_s=0.1, timeout_s=30)["status"] == "cancelled"


def _publish(live: LiveServer, db, data: bytes) -> int:
    """Upload an artifact tarball as a worker would and make it a new task's result."""
    response = httpx.put(f"{live.url}/api/v1/workers/artifacts/{hashlib.sha256(data).hexdigest()}",
                         content=data, headers={"Authorization": f"Bearer {live.worker_token}"})
    assert response.status_code == 201, response.text
    with Client(live.url, live.user_token) as client:
        task_id = client.submit("matmul", MATMUL, device_key="cpu-test")["id"]
    db.get(Task, task_id).artifact_id = response.json()["id"]
    db.commit()
    return task_id


def test_download_checks_and_extracts_the_artifact(live: LiveServer, db, tmp_path: Path) -> None:
    files = artifact_files()
    task_id = _publish(live, db, tarball(files))
    with Client(live.url, live.user_token) as client:
        folder = client.download(task_id, tmp_path / "out")
    assert folder == tmp_path / "out" / "matmul_32x16x8"
    for name, data in files.items():
        assert (tmp_path / "out" / name).read_bytes() == data


def test_download_rejects_a_library_that_does_not_match_its_manifest(live: LiveServer, db, tmp_path: Path) -> None:
    files = artifact_files()
    files["matmul_32x16x8/matmul_32x16x8.so"] = b"tampered"
    task_id = _publish(live, db, tarball(files))
    with Client(live.url, live.user_token) as client, pytest.raises(IntegrityError):
        client.download(task_id, tmp_path / "out")


def test_load_calls_the_downloaded_kernel(live: LiveServer, db, tmp_path: Path) -> None:
    data, name = real_artifact(MATMUL, tmp_path / "built")
    task_id = _publish(live, db, data)
    with Client(live.url, live.user_token) as client:
        kernel = client.load(task_id, cache_dir=tmp_path / "cache")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 8), dtype=np.float32)
    b = rng.standard_normal((8, 16), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert (tmp_path / "cache" / name / f"{name}.so").is_file()


def test_cli_submit_status_wait_download(live: LiveServer, db, tmp_path: Path) -> None:
    submitted = live.cli("submit", "matmul", "-a", "M=32", "-a", "N=16", "-a", "K=8", "-a", "epilogue=relu",
                         "--device-key", "cpu-test", "--trials", "4", "--json")
    assert submitted.returncode == 0, submitted.stderr
    task = json.loads(submitted.stdout)
    assert task["workload"]["args"]["epilogue"] == "relu" and task["budget"]["trials"] == 4
    assert task["target"] == "cpu"  # no target and no live host of cpu-test: chosen when the task starts

    status = live.cli("status", str(task["id"]))
    assert f"task {task['id']}: queued" in status.stdout and "trials 0/4" in status.stdout
    listing = live.cli("status", "--device-key", "cpu-test")
    assert "1 of 1 tasks" in listing.stdout

    pending = live.cli("submit", "matmul", "-a", "M=8", "-a", "N=8", "-a", "K=8", "--device-key", "cpu-test")
    assert "the best cpu target of cpu-test's hosts" in pending.stdout, pending.stdout
    bad = live.cli("submit", "matmul", "-a", "M=0", "--device-key", "cpu-test")
    assert bad.returncode != 0 and "args.M" in bad.stderr

    with Client(live.url, live.user_token) as client:
        client.cancel(task["id"])
    waited = live.cli("wait", str(task["id"]))
    assert waited.returncode == 1 and "cancelled" in waited.stdout

    task_id = _publish(live, db, tarball(artifact_files()))
    published = db.get(Task, task_id)
    published.best_latency_s, published.best_gflops, published.best_disturbance = 2.5e-6, 1.6, 0.07
    db.commit()
    status = live.cli("status", str(task_id))
    assert "best 1.60 GFLOP/s, 2.5 us, disturbance 0.07" in status.stdout, status.stdout
    downloaded = live.cli("download", str(task_id), "-o", str(tmp_path / "dl"))
    assert downloaded.returncode == 0, downloaded.stderr
    assert Path(downloaded.stdout.strip(), "manifest.json").is_file()

    # a multi-target library is built by a live worker of the task's device key
    refused = live.cli("download", str(task["id"]), "--targets", "generic,avx2", "-o", str(tmp_path / "multi"))
    assert refused.returncode == 1 and "no live worker of device key 'cpu-test'" in refused.stderr
    multi = _download_built_by_a_worker(live, task["id"], "generic,avx2", tmp_path / "multi")
    manifest = json.loads(Path(multi.stdout.strip(), "manifest.json").read_text())
    assert manifest["build_targets"] == ["cpu -isa=avx2", "cpu -isa=generic"] and manifest["task_id"] == task["id"]


def _download_built_by_a_worker(live: LiveServer, task_id: int, targets: str,
                                out: Path) -> subprocess.CompletedProcess[str]:
    """`tunefleet download --targets` while a registered worker of cpu-test runs the build job
    that the download queued (the CLI waits through the server's 202 answers)."""
    with httpx.Client(base_url=f"{live.url}/api/v1",
                      headers={"Authorization": f"Bearer {live.worker_token}"}) as http:
        registered = http.post("/workers/register", json={"name": "w1", "device_key": "cpu-test", "host": HOST})
        assert registered.status_code == 200, registered.text
        env = {**live.env, "TUNEFLEET_URL": live.url, "TUNEFLEET_TOKEN": live.user_token}
        download = subprocess.Popen([TUNEFLEET, "download", str(task_id), "--targets", targets, "-o", str(out)],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while download.poll() is None and time.monotonic() < deadline:
            run_worker_jobs_over(http, live.env["TUNEFLEET_REDIS_URL"], "cpu-test")
            time.sleep(0.2)
        download.kill()
        stdout, stderr = download.communicate()
    return subprocess.CompletedProcess(download.args, download.returncode, stdout, stderr)


def test_submit_wait_prints_progress_lines_when_not_on_a_terminal(live: LiveServer, db) -> None:
    """stdout is a pipe: a plain line per change of status or best (no progress bar, no
    terminal escapes), then the task's summary."""
    env = {**live.env, "TUNEFLEET_URL": live.url, "TUNEFLEET_TOKEN": live.user_token}
    waiting = subprocess.Popen([TUNEFLEET, "submit", "matmul", "-a", "M=32", "-a", "N=16", "-a", "K=8",
                                "--device-key", "cpu-test", "--trials", "4", "--wait"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = waiting.stdout.readline()
        if first.startswith("target: "):  # no host of cpu-test is live: its target is chosen later
            first = waiting.stdout.readline()
        task_id = int(re.fullmatch(r"task (\d+) queued: trials 0/4, best -\n", first)[1])
        # the tuner's side, through its service functions: start, one measured trial
        tuning.start(db, task_id)
        (trial,) = tuning.add_trials(db, task_id, [(0, {"index": 0, "knobs": {}})])
        tuning.record_result(db, trial.id, MeasureResult("ok", [2e-6]), attempts=1, worker_id=None)
        lines = [waiting.stdout.readline()]  # a poll may have seen the task running before its trial
        if "trials 0/4" in lines[-1]:
            lines.append(waiting.stdout.readline())
        assert lines[-1] == f"task {task_id} running: trials 1/4, best 4.1 GFLOP/s\n"
        assert lines[:-1] in ([], [f"task {task_id} running: trials 0/4, best -\n"])
        with Client(live.url, live.user_token) as client:
            client.cancel(task_id)
        rest, errors = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, errors
    progress, summary = rest.splitlines()
    assert progress == f"task {task_id} cancelled: trials 1/4, best 4.1 GFLOP/s"
    assert summary.startswith(f"task {task_id}: cancelled  matmul on cpu-test")
    assert not {"\x1b", "\r"} & set(first + "".join(lines) + rest)


def test_client_commands_without_a_server_say_so_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for args in (["submit", "matmul", "-a", "M=8", "-a", "N=8", "-a", "K=8"], ["wait", "1"]):
        done = subprocess.run([TUNEFLEET, *args, "--url", url], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TUNEFLEET_HOME": str(tmp_path)})
        assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"Error: cannot reach the tunefleet server at {url}: ") and "TUNEFLEET_URL" in line
    with Client(url) as client, pytest.raises(ServerUnreachable, match=f"cannot reach the tunefleet server at {url}"):
        client.get(1)


def test_logs_are_json_lines(live: LiveServer) -> None:
    httpx.get(f"{live.url}/api/v1/tasks")
    time.sleep(0.2)
    entries = [json.loads(line) for line in live.log.read_text().splitlines() if line.strip()]
    assert any("GET /api/v1/tasks" in e["message"] and e["logger"] == "uvicorn.access" for e in entries)
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)


def test_server_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    env = {**os.environ, "TUNEFLEET_HOME": str(tmp_path / "home"), "TUNEFLEET_DATABASE_URL": ""}
    done = subprocess.run([TUNEFLEET, "server", "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "tunefleet db upgrade" in done.stderr
