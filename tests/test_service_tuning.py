"""Orchestration pieces against a real database (SQLite and PostgreSQL) and the tests'
Redis: submission and registration hand tasks to the tuners, the default device key,
trial recording, conditional status moves, the best record, the reconcile sweep, task
leases; and the worker's light imports and host facts."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time

import pytest
from rq.job import Job

from tunefleet.server import queue
from tunefleet.server.db.models import Artifact, BestRecord, Task, TaskStatus, Trial, Worker, WorkerState
from tunefleet.server.schemas.tasks import TaskCreate, TrialOut
from tunefleet.server.services import tasks, tuning
from tunefleet.tuner.measure import MeasureResult

MATMUL = {"op": "matmul", "args": {"M": 32, "N": 16, "K": 8}, "target": "cpu"}
HOST = {"cpu_model": "Test CPU", "isa": ["avx2"], "cores": 2, "affinity": [0, 1]}


def register(api, tokens, name: str, device_key: str, **host) -> dict:
    response = api.post("/api/v1/workers/register", json={"name": name, "device_key": device_key,
                                                           "host": {**HOST, **host}}, headers=tokens["worker"])
    assert response.status_code == 200, response.text
    return response.json()


def tune_jobs(redis) -> list[Job]:
    ids = [i.decode() for i in redis.lrange("rq:queue:tune", 0, -1)]
    return [j for j in Job.fetch_many(ids, connection=redis, serializer=queue.SERIALIZER) if j is not None]


def new_task(db, device_key: str = "cpu-test", **args) -> Task:
    request = TaskCreate(**{**MATMUL, "device_key": device_key, "args": {**MATMUL["args"], **args}})
    return tasks.submit(db, request)


def test_error_texts_with_nul_characters_are_stored(db) -> None:
    """A candidate's own output is part of its error text. PostgreSQL's text holds no NUL:
    before, psycopg refused the statement that recorded the trial, and that failed the task."""
    task = new_task(db)
    assert tuning.start(db, task.id)
    (trial,) = tuning.add_trials(db, task.id, [(3, {"index": 3, "knobs": {}})])
    crashed = MeasureResult("runtime_error", error="output of the candidate's process:\nab\x00cd")
    assert tuning.record_result(db, trial.id, crashed, attempts=1, worker_id=None)
    assert tuning.fail(db, task.id, "final validation: \x00")
    db.expire_all()
    assert db.get(Trial, trial.id).error == "output of the candidate's process:\nab\ufffdcd"
    assert db.get(Task, task.id).error == "final validation: \ufffd"
    assert db.get(Task, task.id).trials_done == 1


# --- the API hands tasks to the tuners -----------------------------------------------------


def test_submit_enqueues_one_tune_job(api, tokens, redis) -> None:
    response = api.post("/api/v1/tasks", json={**MATMUL, "device_key": "cpu-test"}, headers=tokens["user"])
    assert response.status_code == 201, response.text
    task = response.json()
    assert [j.args for j in tune_jobs(redis)] == [[task["id"]]]
    assert tune_jobs(redis)[0].func_name == "tunefleet.server.tuner_job.run_task"
    # enqueueing again while the job is pending adds nothing
    assert queue.enqueue_tune(redis, task["id"], lease_s=5) is None and len(tune_jobs(redis)) == 1


def test_registering_a_worker_wakes_the_tasks_waiting_for_its_key(api, tokens, redis, db) -> None:
    waiting, other = new_task(db, "cpu-pool"), new_task(db, "cpu-elsewhere")
    assert tuning.wait_for_worker(db, waiting.id) and tuning.wait_for_worker(db, other.id)
    register(api, tokens, "w1", "cpu-pool")
    assert [j.args for j in tune_jobs(redis)] == [[waiting.id]]


def test_device_key_defaults_to_the_only_live_pool_of_the_target_kind(api, tokens, db, settings) -> None:
    body = dict(MATMUL)

    def submit():
        return api.post("/api/v1/tasks", json=body, headers=tokens["user"])

    none = submit()
    assert none.status_code == 422 and none.json()["detail"][0]["loc"] == ["body", "device_key"]
    assert "no worker has registered yet" in none.json()["detail"][0]["msg"]

    register(api, tokens, "gpu", "cuda-h100", kind="cuda", compute_capability="9.0")  # not a pool for cpu
    register(api, tokens, "w1", "cpu-a")
    assert submit().json()["device_key"] == "cpu-a"

    register(api, tokens, "w2", "cpu-b")
    several = submit()
    assert several.status_code == 422 and "cpu-a, cpu-b" in several.json()["detail"][0]["msg"]

    # a silent pool no longer counts
    for worker in db.query(Worker).filter(Worker.device_key == "cpu-b"):
        worker.last_heartbeat = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=settings.worker_lost_after_s + 1)
    db.commit()
    assert submit().json()["device_key"] == "cpu-a"


# --- recording ---------------------------------------------------------------------------


def test_a_result_is_recorded_once_and_counted_in_the_progress(db) -> None:
    task = new_task(db)
    worker = Worker(name="w", device_key="cpu-test", host={}, state="idle", trials_done=0)
    db.add(worker)
    db.commit()
    assert tuning.start(db, task.id)
    trials = tuning.add_trials(db, task.id, [(7, {"index": 7, "knobs": {}}), (9, {"index": 9, "knobs": {}})])
    assert [t.config_index for t in trials] == [7, 9]
    assert tuning.add_trials(db, task.id, [(7, {"index": 7, "knobs": {}})]) == []  # never twice

    fast = MeasureResult("ok", [2e-6, 1e-6, 3e-6])
    assert tuning.record_result(db, trials[0].id, fast, attempts=1, worker_id=worker.id)
    assert not tuning.record_result(db, trials[0].id, fast, attempts=1, worker_id=worker.id)
    assert tuning.record_result(db, trials[1].id, MeasureResult("worker_lost", error="gone"), attempts=2,
                                worker_id=None)
    db.expire_all()
    stored = db.get(Task, task.id)
    assert stored.trials_done == 2 and stored.best_latency_s == pytest.approx(2e-6)
    assert stored.best_gflops == pytest.approx(tasks.gflops(task.flop, 2e-6))
    assert db.get(Worker, worker.id).trials_done == 1
    lost = db.get(Trial, trials[1].id)
    assert (lost.status, lost.attempts, lost.latency_s, lost.error) == ("worker_lost", 2, None, "gone")


def test_a_disturbed_trial_keeps_its_disturbance_and_never_sets_the_best(db) -> None:
    task = new_task(db)
    assert tuning.start(db, task.id)
    trials = tuning.add_trials(db, task.id, [(i, {"index": i, "knobs": {}}) for i in (1, 2)])
    first = MeasureResult("ok", [4e-6], disturbance=0.03)
    outlier = MeasureResult("ok", [1e-6], disturbance=2.7, disturbed=True)  # fast, but the host was busy
    assert tuning.record_result(db, trials[1].id, first, attempts=1, worker_id=None)
    assert tuning.record_result(db, trials[0].id, outlier, attempts=1, worker_id=None)
    db.expire_all()
    assert (db.get(Task, task.id).best_latency_s, db.get(Task, task.id).best_disturbance) == (4e-6, 0.03)
    stored = [tuning.trial_result(db.get(Trial, t.id)) for t in trials]
    assert [(r.disturbance, r.disturbed) for r in stored] == [(2.7, True), (0.03, False)]
    out = TrialOut.model_validate(db.get(Trial, trials[0].id)).model_dump()
    assert (out["disturbance"], out["disturbed"]) == (2.7, True)
    assert [t.id for t in tuning.best_trials(db, task.id)] == [trials[1].id, trials[0].id]
    # the template's rule-based config index (trial 0's) takes a place whatever its trial read
    assert [t.id for t in tuning.best_trials(db, task.id, n=1)] == [trials[1].id]
    assert [t.id for t in tuning.best_trials(db, task.id, n=1, keep=[1])] == [trials[0].id]


def test_a_cancel_is_never_overwritten_by_the_tuner(db) -> None:
    task = new_task(db)
    assert tuning.start(db, task.id)
    tasks.cancel(db, task.id)
    assert not tuning.start_export(db, task.id)
    assert not tuning.requeue(db, task.id)
    assert not tuning.wait_for_worker(db, task.id)
    assert tuning.status(db, task.id) == TaskStatus.CANCELLED


def _export(db, latency_s: float, sha: str, disturbance: float = 0.0) -> tuple[Task, bool]:
    task = new_task(db)
    assert tuning.start(db, task.id)
    (trial,) = tuning.add_trials(db, task.id, [(1, {"index": 1, "knobs": {}})])
    tuning.record_result(db, trial.id, MeasureResult("ok", [latency_s]), attempts=1, worker_id=None)
    assert tuning.start_export(db, task.id)
    artifact = Artifact(sha256=sha * 64, size=1, path=f"{sha}.tar.gz")
    db.add(artifact)
    db.commit()
    done, updated = tuning.finish_export(db, task.id, trial.id, artifact.id, latency_s, disturbance)
    assert done
    return task, updated


def test_the_best_record_is_replaced_only_by_a_faster_kernel(db) -> None:
    first, created = _export(db, 2e-5, "a")
    slower, replaced_by_slower = _export(db, 3e-5, "b")
    faster, replaced_by_faster = _export(db, 1e-5, "c", disturbance=0.12)
    assert created and not replaced_by_slower and replaced_by_faster
    db.expire_all()
    (best,) = db.query(BestRecord).all()
    assert best.latency_s == 1e-5 and best.trial_id == db.get(Task, faster.id).best_trial_id
    # the validated latency and its measurement's disturbance, on the task and its best record
    assert (best.disturbance, db.get(Task, faster.id).best_disturbance) == (0.12, 0.12)
    for task in (first, slower, faster):  # each task keeps its own artifact
        stored = db.get(Task, task.id)
        assert stored.status == TaskStatus.DONE and stored.artifact_id is not None


# --- the sweep and the leases ----------------------------------------------------------------


def test_reconcile_enqueues_tasks_nobody_tunes(db, redis, settings) -> None:
    queued = new_task(db)
    held = new_task(db)
    assert tuning.start(db, held.id)
    waiting = new_task(db, "cpu-nobody")
    assert tuning.wait_for_worker(db, waiting.id)
    stale = Worker(name="old", device_key="cpu-test", host={}, state="idle", trials_done=0,
                   last_heartbeat=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    db.add(stale)
    db.commit()
    lease = queue.TaskLease(redis, held.id, ttl_s=5)
    assert lease.acquire()

    assert queue.reconcile(db, redis, settings) == [queued.id]
    assert queue.reconcile(db, redis, settings) == []  # its job is pending
    db.refresh(stale)
    assert stale.state == WorkerState.LOST
    lease.lock.release()
    assert queue.reconcile(db, redis, settings) == [held.id]  # its tuner is gone


def test_a_lease_excludes_others_until_it_lapses_and_is_kept_alive(redis) -> None:
    first = queue.TaskLease(redis, 1, ttl_s=0.4)
    assert first.acquire() and not queue.TaskLease(redis, 1, ttl_s=0.4).acquire()
    with first.kept():
        time.sleep(1.0)  # past its TTL: the keeper extended it
        assert queue.lease_held(redis, 1) and not first.lost.is_set()
    assert not queue.lease_held(redis, 1)  # released on leaving
    lapsing = queue.TaskLease(redis, 2, ttl_s=0.3)
    assert lapsing.acquire()
    time.sleep(0.5)
    assert queue.TaskLease(redis, 2, ttl_s=0.3).acquire()


# --- the worker ------------------------------------------------------------------------------


def test_worker_imports_stay_light() -> None:
    code = ("import sys, tunefleet.worker.daemon, tunefleet.worker.jobs, tunefleet.commands.worker; "
            "print(sorted(m for m in ('sqlalchemy', 'xgboost', 'fastapi', 'pydantic_settings', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_worker_host_facts() -> None:
    from tunefleet.tuner.host import worker_name
    from tunefleet.worker import host

    cpuinfo = "processor : 0\nmodel name : AMD EPYC 9B14 96-Core Processor\nflags : fpu sse4_2 avx avx2 fma avx512f\n"
    assert host.cpu_model_name(cpuinfo) == "AMD EPYC 9B14 96-Core Processor"
    assert host.isa(cpuinfo) == ["sse4_2", "avx", "avx2", "fma", "avx512f"]
    facts = host.host_facts([0])
    assert facts["kind"] == "cpu" and facts["affinity"] == [0] and facts["cores"] >= 1
    assert "cc_version" in facts["toolchain"]
    assert worker_name([0, 1, 2, 5]).endswith("/cpu0-2,5")
