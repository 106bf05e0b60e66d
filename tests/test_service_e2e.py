"""The service end to end, as real processes: `tunefleet server`, `tuner` and two `worker`s
(pinned to different CPUs) on SQLite and on PostgreSQL, over the tests' Redis: waiting for
a worker; tuning a small matmul, downloading and calling the kernel; reuse; cancel.
(Killed processes: test_service_faults.py.)"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from redis import Redis
from rq.job import Job
from service_helpers import (CPU_A, CPU_B, FINAL_TRIAL, Service, allowed_cpus, descendants, service_on, submit,
                             wait_for, wait_status)

from tunefleet.client import Client
from tunefleet.server.queue import SERIALIZER

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            redis_url: str) -> Iterator[Service]:
    """A server on SQLite / PostgreSQL, shared by the tests of this module (`fleet`: with
    its tuner and workers)."""
    yield from service_on(request, tmp_path_factory, redis_url, request.param)


def test_task_waits_for_a_worker_of_its_device_key(fleet: Service) -> None:
    task = submit(fleet, 4, device_key="other-pool")
    wait_status(fleet, task["id"], {"waiting_for_worker"}, timeout_s=60)  # the tuner's start, on a busy host
    fleet.start_worker("worker-other", CPU_A, device_key="other-pool")
    done = wait_status(fleet, task["id"], {"done", "failed"})
    assert done["status"] == "done", done["error"]
    assert {t["worker_id"] for t in fleet.trials(task["id"])} == {fleet.workers()["test-worker-other"]["id"]}
    # SIGTERM: the worker finishes what it does and exits cleanly
    assert fleet.kill("worker-other", signal.SIGTERM) == 0
    assert "stopped" in fleet.logs["worker-other"].read_text()


def test_tune_download_and_call_with_two_pinned_workers(fleet: Service, tmp_path: Path) -> None:
    task = submit(fleet, 10)
    done = wait_status(fleet, task["id"], {"done", "failed", "cancelled"})
    assert done["status"] == "done", done["error"]
    assert done["trials_done"] == 10 and done["artifact"] is not None

    trials = fleet.trials(task["id"])
    assert len(trials) == 10 and len({t["config_index"] for t in trials}) == 10
    assert all(t["status"] in FINAL_TRIAL and t["attempts"] == 1 for t in trials)
    workers = fleet.workers()
    ids = {workers["test-worker0"]["id"], workers["test-worker1"]["id"]}
    assert {t["worker_id"] for t in trials} == ids  # both workers measured
    assert sorted(fleet.measured_events(task["id"])) == sorted(t["id"] for t in trials)

    best = fleet.api("GET", f"/tasks/{task['id']}/best")
    assert not best["reused"] and best["artifact"]["sha256"] == done["artifact"]["sha256"]
    assert best["trial"]["status"] == "ok" and best["gflops"] > 0

    with Client(fleet.url, fleet.user_token) as client:
        kernel = client.load(task["id"], cache_dir=tmp_path / "kernel")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    manifest = (tmp_path / "kernel").rglob("manifest.json").__next__().read_text()
    assert '"device_key": "test-cpu"' in manifest

    # each worker, and everything it started, runs only on its own CPU
    if CPU_A != CPU_B:
        for name, cpu in (("worker0", CPU_A), ("worker1", CPU_B)):
            pid = fleet.processes[name].pid
            assert workers[f"test-{name}"]["host"]["affinity"] == [int(cpu)]
            for process in [pid, *descendants(pid)]:
                assert allowed_cpus(process) <= {cpu}, (name, process, allowed_cpus(process))

    # reuse: the stored best answers at once
    again = submit(fleet, 10, reuse=True)
    assert again["status"] == "done" and again["artifact"]["sha256"] == done["artifact"]["sha256"]
    assert fleet.api("GET", f"/tasks/{again['id']}/best")["reused"] is True


def test_cancel_stops_dispatch_within_seconds(fleet: Service) -> None:
    task = submit(fleet, 500, args={"M": 48, "N": 48, "K": 48})
    wait_for(lambda: fleet.api("GET", f"/tasks/{task['id']}")["trials_done"] >= 3, 60, "three trials")
    fleet.api("POST", f"/tasks/{task['id']}/cancel")

    def settled() -> bool:
        return all(t["status"] in FINAL_TRIAL for t in fleet.trials(task["id"]))

    wait_for(settled, 5, "the unmeasured trials to be dropped")
    count = len(fleet.trials(task["id"]))
    time.sleep(2)
    assert len(fleet.trials(task["id"])) == count < 500
    assert fleet.api("GET", f"/tasks/{task['id']}")["status"] == "cancelled"
    redis = Redis.from_url(fleet.redis_url)
    queued = [i.decode() for i in redis.lrange("rq:queue:measure:test-cpu", 0, -1)]
    jobs = Job.fetch_many(queued, connection=redis, serializer=SERIALIZER)
    assert not [j for j in jobs if j is not None and j.args[0] == task["id"]]
