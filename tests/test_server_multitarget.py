"""GET /api/v1/tasks/{id}/artifact/multi-target: one library of a task's workload for several
CPU ISAs, each from its stored best record (else the default config), built once by a worker's
job (run here in process, uploading to the app) and then served from the artifact store,
checked against numpy on the path this host picks."""

from __future__ import annotations

import hashlib

import numpy as np
from fastapi.testclient import TestClient

import tunefleet
from tunefleet.client import Client
from tunefleet.compiler import ops
from tunefleet.compiler.target import DISPATCH_ISAS, Target
from tunefleet.server.db.models import Artifact, BestRecord, Build, Trial
from server_helpers import run_worker_jobs

from test_server_tasks import field_error, submit
from test_server_workers import register

ARGS = {"M": 32, "N": 16, "K": 8}


def _store_best(db, task: dict, target: Target, config: dict, latency_s: float) -> None:
    trial = Trial(task_id=task["id"], config_index=0, config=config, status="ok", costs=[latency_s] * 3,
                  latency_s=latency_s, attempts=1)
    artifact = Artifact(sha256=hashlib.sha256(str(target).encode()).hexdigest(), size=1, path="x/y.tar.gz")
    db.add_all([trial, artifact])
    db.flush()
    db.add(BestRecord(workload_key=task["workload_key"], target=str(target), device_key="cpu-fast",
                      trial_id=trial.id, artifact_id=artifact.id, latency_s=latency_s,
                      gflops=task["flop"] / latency_s / 1e9))
    db.commit()


def test_a_tasks_multi_target_artifact_holds_each_isas_best_record(api, tokens, db, redis, redis_url,
                                                                    tmp_path) -> None:
    task = submit(api, tokens)
    register(api, tokens, "w1", task["device_key"])
    workload = ops.make_workload("matmul", ARGS)
    avx2 = Target("cpu", "avx2")
    config = ops.config_space(workload, avx2).random(np.random.default_rng(4), 1)[0].to_json()
    _store_best(db, task, avx2, config, 2e-6)
    url, params = f"/api/v1/tasks/{task['id']}/artifact/multi-target", {"targets": ",".join(DISPATCH_ISAS)}
    for _ in range(2):  # one job, however often it is asked for while it is queued
        building = api.get(url, params=params, headers=tokens["user"])
        assert building.status_code == 202 and building.headers["Retry-After"] == "2", building.text
        assert building.json()["status"] == "building" and building.json()["state"] == "queued"
    assert redis.llen(f"rq:queue:measure:{task['device_key']}") == 1
    assert run_worker_jobs(api, tokens["worker"], redis_url, task["device_key"])

    client = Client(token="unused")  # the Python client, talking to the app in this process
    client._http.close()
    client._http = TestClient(api.app, base_url="http://testserver/api/v1", headers=tokens["user"])
    folder = client.download(task["id"], tmp_path / "download", targets=DISPATCH_ISAS)  # checks both sha256
    kernel = tunefleet.load(folder)
    by_target = {t["target"]: t for t in kernel.manifest["targets"]}
    assert list(by_target) == [f"cpu -isa={isa}" for isa in DISPATCH_ISAS]
    assert by_target[str(avx2)]["source"] == "best record" and by_target[str(avx2)]["config"] == config
    assert by_target[str(avx2)]["device_key"] == "cpu-fast"
    assert by_target["cpu -isa=generic"]["source"] == "default config"
    assert kernel.isa == Target.host().isa
    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng(1))
    np.testing.assert_allclose(kernel(*inputs), workload.reference(*inputs)[0], rtol=1e-4, atol=1e-4)

    # asked again: the stored archive, no new job
    first, again = (api.get(url, params=params, headers=tokens["user"]) for _ in range(2))
    assert first.status_code == again.status_code == 200
    assert first.headers["X-Content-SHA256"] == again.headers["X-Content-SHA256"]
    assert hashlib.sha256(again.content).hexdigest() == again.headers["X-Content-SHA256"]
    assert not run_worker_jobs(api, tokens["worker"], redis_url, task["device_key"])
    assert db.query(Build).count() == 1


def test_a_failed_build_is_answered_with_its_error_and_not_retried(api, tokens, db, redis, redis_url) -> None:
    task = submit(api, tokens)
    register(api, tokens, "w1", task["device_key"])
    _store_best(db, task, Target("cpu", "avx2"), {"not": "a config"}, 2e-6)
    url, params = f"/api/v1/tasks/{task['id']}/artifact/multi-target", {"targets": "avx2"}
    assert api.get(url, params=params, headers=tokens["user"]).status_code == 202
    run_worker_jobs(api, tokens["worker"], redis_url, task["device_key"])  # fails, and once more (RQ's retry)
    for _ in range(2):
        failed = api.get(url, params=params, headers=tokens["user"])
        assert failed.status_code == 409, failed.text
        assert "does not build" in failed.json()["detail"] and "'knobs'" in failed.json()["detail"]
    assert not run_worker_jobs(api, tokens["worker"], redis_url, task["device_key"])


def test_a_build_the_worker_could_not_finish_is_answered_once_and_built_again(api, tokens, db, redis,
                                                                             redis_url) -> None:
    """The upload refused (a worker token the server does not know): the inputs build, so the
    error is not stored and the next request queues the build again."""
    task = submit(api, tokens)
    register(api, tokens, "w1", task["device_key"])
    url, params = f"/api/v1/tasks/{task['id']}/artifact/multi-target", {"targets": "avx2,generic"}
    assert api.get(url, params=params, headers=tokens["user"]).status_code == 202
    run_worker_jobs(api, {"Authorization": "Bearer not-a-token"}, redis_url, task["device_key"])
    unfinished = api.get(url, params=params, headers=tokens["user"])
    assert unfinished.status_code == 409, unfinished.text
    detail = unfinished.json()["detail"]
    assert "could not finish" in detail and "upload" in detail and "not stored" in detail
    assert db.query(Build).count() == 0

    assert api.get(url, params=params, headers=tokens["user"]).status_code == 202
    assert run_worker_jobs(api, tokens["worker"], redis_url, task["device_key"])
    built = api.get(url, params=params, headers=tokens["user"])
    assert built.status_code == 200 and hashlib.sha256(built.content).hexdigest() == built.headers["X-Content-SHA256"]
    assert db.query(Build).count() == 1


def test_without_a_live_worker_nothing_is_built_and_the_answer_says_so(api, tokens, redis) -> None:
    task = submit(api, tokens, device_key="cpu-nobody")
    response = api.get(f"/api/v1/tasks/{task['id']}/artifact/multi-target", params={"targets": "avx2"},
                       headers=tokens["user"])
    assert response.status_code == 409 and "no live worker of device key 'cpu-nobody'" in response.json()["detail"]
    assert redis.llen("rq:queue:measure:cpu-nobody") == 0


def test_bad_targets_are_422_naming_the_field(api, anonymous, tokens) -> None:
    task = submit(api, tokens)
    url = f"/api/v1/tasks/{task['id']}/artifact/multi-target"
    for targets in ("avx2,neon", ",", "avx9"):
        response = api.get(url, params={"targets": targets}, headers=tokens["user"])
        assert field_error(response) == [["query", "targets"]], targets
    micro = submit(api, tokens, args={**ARGS, "micro_kernel": {
        "func": "mk", "source": "void mk(void) {}", "mr": 2, "nr": 8}})
    response = api.get(f"/api/v1/tasks/{micro['id']}/artifact/multi-target", params={"targets": "avx2"},
                       headers=tokens["user"])
    assert field_error(response) == [["query", "targets"]] and "micro-kernel" in response.text
    assert api.get("/api/v1/tasks/999999/artifact/multi-target", params={"targets": "avx2"},
                   headers=tokens["user"]).status_code == 404
    assert anonymous.get(url, params={"targets": "avx2"}).status_code == 401
