"""POST /api/v1/models and the model job's rounds, against a real database (SQLite and
PostgreSQL) and the tests' Redis: the 422s of models that cannot be tuned (each naming its
nodes), what a model's tasks and untuned nodes look like, reuse of stored best records, and
the rounds a model's scheduler runs as its tasks finish (finished here through the same
services a tuner uses)."""

from __future__ import annotations

import hashlib

import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import Builder, resnet_block
from test_service_tuning import register

from tunefleet.compiler import ops
from tunefleet.compiler.ops.conv2d import prepacked_layout
from tunefleet.compiler.target import Target
from tunefleet.server import model_job
from tunefleet.server.db.models import Artifact, BestRecord, Model, ModelRound, Task, TaskStatus
from tunefleet.server.services import tuning
from tunefleet.tuner.measure import MeasureResult
from tunefleet.tuner.model.scheduler import ProportionalScheduler

OCTET = {"Content-Type": "application/octet-stream"}
KEY = "cpu-models"
TARGET = "cpu -isa=avx2"


def post(api, model: onnx.ModelProto | bytes, headers: dict | None = None, **params):
    data = model if isinstance(model, bytes) else model.SerializeToString()
    params = {"name": "m.onnx", "device_key": KEY, "target": TARGET, **params}
    return api.post("/api/v1/models", content=data, params={k: v for k, v in params.items() if v is not None},
                    headers={**OCTET, **(headers or {})})


def two_convs() -> onnx.ModelProto:
    """Conv+bias+Relu (8→8 channels, 3×3) twice and a 1×1 Conv: two tasks, occurrences 2 and 1,
    and a MaxPool left untuned."""
    b = Builder(3)
    h = "x"
    for _ in range(2):
        h = b.node("Relu", [b.node("Conv", [h, b.weight(8, 8, 3, 3), b.weight(8)], pads=[1, 1, 1, 1])])
    h = b.node("Conv", [h, b.weight(4, 8, 1, 1)])
    return b.model([("x", [1, 8, 6, 6])], b.node("MaxPool", [h], kernel_shape=[2, 2]))


def test_bytes_that_are_no_onnx_model_are_a_422_naming_the_model(api) -> None:
    response = post(api, b"\x00not an onnx model\xff")
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "model"] and "not an ONNX model" in error["msg"]


def test_a_dynamic_input_needs_its_shape(api) -> None:
    response = post(api, resnet_block(batch="N"))
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "x"] and "dynamic shape" in error["msg"]
    response = post(api, resnet_block(batch="N"), input_shapes="x=1,8,8,8")
    assert response.status_code == 201, response.text
    assert response.json()["tasks"][0]["workload"]["args"]["N"] == 1
    bad = post(api, resnet_block(batch="N"), input_shapes="x=1,8,oops")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "input_shapes"]


def _float16_convs() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_a"),
             helper.make_node("Conv", ["y", "w"], ["z"], name="conv_b")]
    graph = helper.make_graph(
        nodes, "half", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT16, None)],
        [helper.make_tensor("w", TensorProto.FLOAT16, [4, 4, 1, 1], [0.5] * 16)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_dtypes_are_a_422_listing_the_nodes(api) -> None:
    response = post(api, _float16_convs())
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [e["loc"] for e in detail] == [["body", "conv_a"], ["body", "conv_b"]]
    assert all("float16" in e["msg"] for e in detail)


def test_a_model_without_a_tunable_node_is_a_422_listing_its_nodes(api) -> None:
    b = Builder()
    model = b.model([("x", [1, 4])], b.node("Relu", [b.node("Sigmoid", ["x"])]))
    response = post(api, model)
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "Sigmoid_1"], ["body", "Relu_2"]]


def test_the_protocol_is_bounded_like_a_tasks(api) -> None:
    response = post(api, two_convs(), protocol='{"repeat": 0}')
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "protocol", "repeat"]
    response = post(api, two_convs(), protocol='{"timeout_s": 3000}')
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "protocol", "timeout_s"]
    assert post(api, two_convs(), protocol='{"repeat": 2}').status_code == 201


def test_a_model_lists_its_tasks_and_untuned_nodes(api, tokens) -> None:
    response = post(api, two_convs(), trials=8)
    assert response.status_code == 201, response.text
    model = response.json()
    assert [(t["op"], t["occurrences"]) for t in model["tasks"]] == [("conv2d_nchw", 2), ("conv2d_nchw", 1)]
    assert model["tasks"][0]["nodes"] == [["Conv_1", "Relu_2"], ["Conv_3", "Relu_4"]]
    assert [u["op_type"] for u in model["untuned"]] == ["MaxPool"]
    assert 0 < model["untuned_flop_share"] < 0.05
    assert model["estimated_latency_s"] is None and model["history"] == []
    assert api.get(f"/api/v1/models/{model['id']}").json()["tasks"] == model["tasks"]
    assert [m["id"] for m in api.get("/api/v1/models").json()["items"]] == [model["id"]]
    # each layer's constant weights pre-packed to the layout prepacked_layout gives the model's
    # target (AVX2: the 1×1 GEMM's too, over so few pixels)
    layouts = [t["workload"]["args"].get("weight_layout", "OIHW") for t in model["tasks"]]
    plain_layers = [ops.make_workload("conv2d_nchw", {**t["workload"]["args"], "weight_layout": "OIHW"})
                    for t in model["tasks"]]
    assert layouts == [prepacked_layout(w, Target.parse(TARGET)) or "OIHW" for w in plain_layers]
    assert layouts[0] != "OIHW"
    plain = post(api, two_convs(), trials=8, prepack="false").json()
    assert [t["workload"]["args"].get("weight_layout", "OIHW") for t in plain["tasks"]] == ["OIHW", "OIHW"]


def test_only_its_owner_or_an_admin_downloads_a_models_bundle(api, tokens, settings) -> None:
    from tunefleet.server.db import make_engine, make_sessionmaker
    from tunefleet.server.db.models import TokenScope
    from tunefleet.server.services import tokens as token_service

    model = post(api, two_convs(), headers=tokens["user"]).json()
    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine)() as session:
        other = {"Authorization": f"Bearer {token_service.create(session, 'other', TokenScope.USER)}"}
    engine.dispose()
    assert model["owner"] == "user"
    assert api.get(f"/api/v1/models/{model['id']}/bundle", headers=other).status_code == 403
    assert api.get(f"/api/v1/models/{model['id']}/bundle", headers=tokens["read"]).status_code == 403
    not_done = api.get(f"/api/v1/models/{model['id']}/bundle", headers=tokens["user"])
    assert not_done.status_code == 409 and "once it is done" in not_done.json()["detail"]


def test_a_cancelled_model_cancels_its_unfinished_tasks(api, tokens, db, settings, redis) -> None:
    register(api, tokens, "w1", KEY)
    model = post(api, two_convs(), trials=6, target=None, headers=tokens["user"]).json()
    started = [t["task_id"] for t in model["tasks"] if t["task_id"]]
    assert started
    assert api.post(f"/api/v1/models/{model['id']}/cancel", headers=tokens["read"]).status_code == 403
    cancelled = api.post(f"/api/v1/models/{model['id']}/cancel", headers=tokens["user"])
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert all(db.get(Task, i, populate_existing=True).status == TaskStatus.CANCELLED for i in started)
    model_job.advance(db, settings, redis, model["id"])  # a cancelled model starts nothing more
    assert db.query(ModelRound).filter_by(model_id=model["id"]).count() == len(started)
    assert api.post(f"/api/v1/models/{model['id']}/cancel").status_code == 409


def test_the_model_body_limit_is_its_own(settings, tokens) -> None:
    from fastapi.testclient import TestClient

    from tunefleet.server.app import create_app

    small = settings.model_copy(update={"max_model_bytes": 64})
    with TestClient(create_app(small), headers=tokens["admin"]) as client:
        assert post(client, two_convs()).status_code == 413


def _doubling_shapes(doublings: int) -> onnx.ModelProto:
    """Shape(x) concatenated with itself `doublings` times: shape inference's data propagation
    computes a tensor of 2 * 2**doublings elements (and ~5 GB of memory for 24, AMD Zen 4)."""
    nodes = [helper.make_node("Shape", ["x"], ["s0"])] + [
        helper.make_node("Concat", [f"s{i}", f"s{i}"], [f"s{i + 1}"], axis=0) for i in range(doublings)]
    graph = helper.make_graph(nodes, "doubling", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(f"s{doublings}", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_whose_shape_inference_wants_too_much_memory_is_a_422(settings, tokens, snapshot) -> None:
    """Shape inference ran in the server's process: a 2 kB model of 30 doublings would ask for
    terabytes, and the kernel kill the server. It runs in a child process now, its memory bounded
    by the model's (2 × max_model_bytes + 2 GiB)."""
    from fastapi.testclient import TestClient

    from tunefleet.server.app import create_app

    small = settings.model_copy(update={"max_model_bytes": 1 << 20})
    with TestClient(create_app(small), headers=tokens["admin"]) as client:
        before = snapshot()
        response = post(client, _doubling_shapes(24))
        assert response.status_code == 422
        (error,) = response.json()["detail"]
        assert error["loc"] == ["body", "model"] and "needs more than 2050 MiB of memory" in error["msg"]
        assert snapshot() == before
        assert post(client, two_convs()).status_code == 201  # the same bounds read a real model


# --- the rounds ----------------------------------------------------------------------------


def finish_round(db, task_id: int, latency_s: float, sha: str) -> None:
    """What a tuner and the export job do with a round of task `task_id`: measure one more
    config, export it as the task's best."""
    task = db.get(Task, task_id, populate_existing=True)
    assert task.status == TaskStatus.QUEUED
    assert tuning.start(db, task_id)
    index = task.trials_done + 1
    (trial,) = tuning.add_trials(db, task_id, [(index, {"index": index, "knobs": {}})])
    tuning.record_result(db, trial.id, MeasureResult("ok", [latency_s]), attempts=1, worker_id=None)
    assert tuning.start_export(db, task_id)
    artifact = Artifact(sha256=hashlib.sha256(sha.encode()).hexdigest(), size=1, path=f"{sha}.tar.gz")
    db.add(artifact)
    db.commit()
    assert tuning.finish_export(db, task_id, trial.id, artifact.id, latency_s, 0.0)[0]


def rounds(db, model_id: int) -> list[tuple[int, str]]:
    return [(r.model_task_id, r.status) for r in
            db.query(ModelRound).filter_by(model_id=model_id).order_by(ModelRound.id).populate_existing()]


def test_rounds_run_as_many_tasks_as_live_workers_and_end_with_the_budget(api, tokens, db, settings, redis,
                                                                         monkeypatch) -> None:
    monkeypatch.setattr(model_job, "make_scheduler", lambda tuned, budget: ProportionalScheduler(
        [t.flop * t.occurrences for t in tuned], budget))  # one round per task, in proportion to its FLOPs
    register(api, tokens, "w1", KEY)
    register(api, tokens, "w2", KEY)
    response = post(api, two_convs(), trials=10, target=None)
    assert response.status_code == 201, response.text
    model = response.json()
    assert model["status"] == "running"
    first, second = (t["task_id"] for t in model["tasks"])
    assert first and second, "two live workers: both tasks start at once"
    given = {t["index"]: t["trials_given"] for t in model["tasks"]}
    assert sum(given.values()) == 10 and given[0] > given[1] >= 1  # FLOPs × occurrences: 2:1
    finish_round(db, first, 2e-5, "a")
    model_job.advance(db, settings, redis, model["id"])
    finish_round(db, second, 1e-5, "b")
    model_job.advance(db, settings, redis, model["id"])
    out = api.get(f"/api/v1/models/{model['id']}").json()
    assert out["status"] == "done"
    assert out["estimated_latency_s"] == pytest.approx(2 * 2e-5 + 1e-5)
    assert [p["estimate_s"] for p in out["history"]] == [pytest.approx(5e-5)]
    # a second model sharing the 3x3 layer reuses its best record: no trials for it
    again = post(api, two_convs(), trials=4, target=None).json()
    reused = again["tasks"][0]
    assert reused["reused"] and reused["status"] == "done" and reused["trials_given"] == 0
    assert reused["best_latency_s"] == pytest.approx(2e-5)
    assert again["tasks"][1]["reused"] and again["status"] == "done"


def test_a_task_scheduled_again_is_reopened_with_a_raised_budget(api, tokens, db, settings, redis,
                                                                   monkeypatch) -> None:
    class TwoRounds:
        """Task 0, then task 0 again: a scheduler that returns to a task."""

        def __init__(self, tuned, budget):
            self.plan = [(0, 3), (0, 2)]

        def next_round(self):
            return self.plan.pop(0) if self.plan else None

        def update(self, task, latency_s):
            pass

    monkeypatch.setattr(model_job, "make_scheduler", TwoRounds)
    register(api, tokens, "w1", KEY)
    b = Builder(4)
    single = b.model([("x", [1, 8, 6, 6])], b.node("Conv", ["x", b.weight(8, 8, 3, 3)], pads=[1, 1, 1, 1]))
    model = post(api, single, trials=5, target=None).json()
    task_id = model["tasks"][0]["task_id"]
    assert db.get(Task, task_id).budget["trials"] == 3
    finish_round(db, task_id, 3e-5, "c")
    model_job.advance(db, settings, redis, model["id"])
    task = db.get(Task, task_id, populate_existing=True)
    assert (task.status, task.budget["trials"]) == (TaskStatus.QUEUED, 5)
    finish_round(db, task_id, 2e-5, "d")
    model_job.advance(db, settings, redis, model["id"])
    out = api.get(f"/api/v1/models/{model['id']}").json()
    assert out["status"] == "done" and out["tasks"][0]["trials_given"] == 5
    assert [p["estimate_s"] for p in out["history"]] == [pytest.approx(3e-5), pytest.approx(2e-5)]
    assert db.get(Model, model["id"]).events == 5  # pull, update, pull, update, the pull that ended it


def test_the_default_scheduler_survives_a_restart_by_replay(api, tokens, db, settings, redis) -> None:
    """Ansor's gradient scheduler, rebuilt from SQL at every advance: warm-up rounds for both
    tasks, then rounds of the task it prefers, until the budget is spent."""
    register(api, tokens, "w1", KEY)
    register(api, tokens, "w2", KEY)
    model = post(api, two_convs(), trials=20, target=None).json()
    latencies = {0: [4e-5, 3e-5, 2.9e-5], 1: [1e-5, 0.9e-5]}
    for step in range(10):
        out = api.get(f"/api/v1/models/{model['id']}").json()
        if out["status"] == "done":
            break
        for t in out["tasks"]:
            if t["status"] == "queued":
                finish_round(db, t["task_id"], latencies[t["index"]].pop(0) if latencies[t["index"]] else 2e-5,
                             f"{step}{t['index']}")
        model_job.advance(db, settings, redis, model["id"])
    assert out["status"] == "done"
    assert sum(t["trials_given"] for t in out["tasks"]) == 20
    assert [p["estimate_s"] for p in out["history"]][-1] == pytest.approx(out["estimated_latency_s"])
