"""The service survives killed processes (real `tunefleet` processes, SIGKILL): a tuner
killed mid-task is replaced and the task finishes with nothing measured twice; a worker
killed mid-job has the trial retried on the other worker, and when that one dies during
the retry too the trial is recorded `worker_lost`, the task waits for workers and
finishes once they are back.

Runs once, on PostgreSQL when TUNEFLEET_TEST_DATABASE_URL is set (the production shape),
else on SQLite."""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator

import pytest
from redis import Redis
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from service_helpers import CPU_A, CPU_B, FINAL_TRIAL, PROTOCOL, Service, service_on, submit, wait_for, wait_status

from tunefleet.server.queue import SERIALIZER

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            redis_url: str) -> Iterator[Service]:
    kind = "postgresql" if os.environ.get("TUNEFLEET_TEST_DATABASE_URL") else "sqlite"
    yield from service_on(request, tmp_path_factory, redis_url, kind)


def test_tuner_killed_mid_task_another_finishes_without_remeasuring(fleet: Service) -> None:
    task = submit(fleet, 10, args={"M": 64, "N": 32, "K": 64})
    wait_for(lambda: fleet.api("GET", f"/tasks/{task['id']}")["trials_done"] >= 4, 60, "four trials")
    fleet.kill("tuner")  # SIGKILL: no clean-up of any kind
    fleet.start_tuner()
    done = wait_status(fleet, task["id"], {"done", "failed", "cancelled"})
    assert done["status"] == "done", done["error"]

    trials = fleet.trials(task["id"])
    assert len(trials) == 10 and len({t["config_index"] for t in trials}) == 10
    assert all(t["attempts"] == 1 for t in trials)
    measured = fleet.measured_events(task["id"])
    assert sorted(measured) == sorted(t["id"] for t in trials), "a trial was measured twice (or never)"


def test_worker_killed_mid_job_retried_then_worker_lost(fleet: Service) -> None:
    slow = {**PROTOCOL, "repeat": 3, "min_repeat_ms": 100}  # each job measures for >= 0.3 s
    task = submit(fleet, 8, protocol=slow, args={"M": 32, "N": 64, "K": 64})
    redis = Redis.from_url(fleet.redis_url)
    registry = StartedJobRegistry("measure:test-cpu", connection=redis, serializer=SERIALIZER)

    def running_on(prefix: str, retried: bool) -> Job | None:
        for job in Job.fetch_many(registry.get_job_ids(), connection=redis, serializer=SERIALIZER):
            if (job is not None and job.args[0] == task["id"] and (job.worker_name or "").startswith(prefix)
                    and job.get_status(refresh=False) == JobStatus.STARTED
                    and (job.retries_left == 0) == retried):
                return job
        return None

    victim = wait_for(lambda: running_on("test-worker0.", retried=False), 60, "a job on worker0", poll_s=0.02)
    fleet.kill("worker0")
    # RQ finds the job abandoned and retries it, on the only worker left
    wait_for(lambda: running_on("test-worker1.", retried=True), 60, "the retry on worker1", poll_s=0.02)
    fleet.kill("worker1")
    wait_status(fleet, task["id"], {"waiting_for_worker"}, timeout_s=30)

    fleet.start_worker("worker0", CPU_A)
    fleet.start_worker("worker1", CPU_B)
    done = wait_status(fleet, task["id"], {"done", "failed", "cancelled"})
    assert done["status"] == "done", done["error"]
    trials = {t["id"]: t for t in fleet.trials(task["id"])}
    assert len(trials) == 8 and all(t["status"] in FINAL_TRIAL for t in trials.values())
    lost = trials[victim.args[1]]
    assert (lost["status"], lost["attempts"]) == ("worker_lost", 2), lost
    assert collections.Counter(t["status"] for t in trials.values())["worker_lost"] == 1
