"""/api/v1/tasks over a real database: submission and its validation, listing with
filters and pagination, trials, best, cancel, reuse."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator

import pytest
from sqlalchemy import event

from tunefleet.server.db.models import Artifact, BestRecord, Task, TaskStatus, Trial

MATMUL = {"op": "matmul", "args": {"M": 32, "N": 16, "K": 8}, "target": "cpu", "device_key": "cpu-test"}


def submit(api, tokens, **overrides):
    response = api.post("/api/v1/tasks", json={**MATMUL, **overrides}, headers=tokens["user"])
    assert response.status_code == 201, response.text
    return response.json()


def field_error(response) -> list:
    """The `loc` of each error in a 422 body."""
    assert response.status_code == 422, response.text
    return [error["loc"] for error in response.json()["detail"]]


def test_submit_stores_a_queued_task(api, tokens, db) -> None:
    task = submit(api, tokens, budget={"trials": 10, "early_stopping": 5})
    assert task["status"] == "queued"
    assert task["op"] == "matmul"
    assert task["target"].startswith("cpu")
    assert task["budget"] == {"trials": 10, "wall_time_s": None, "early_stopping": 5}
    assert task["protocol"]["repeat"] >= 1 and task["trials_done"] == 0
    assert task["flop"] == 2 * 32 * 16 * 8
    stored = db.get(Task, task["id"])
    assert stored is not None and stored.workload_key == task["workload_key"]
    assert api.get(f"/api/v1/tasks/{task['id']}").json() == task


@pytest.mark.parametrize(
    ("overrides", "loc"),
    [
        ({"op": "no_such_op"}, ["body", "op"]),
        ({"args": {"M": 0, "N": 16, "K": 8}}, ["body", "args", "M"]),
        ({"args": {"M": 8, "Q": 1}}, ["body", "args", "Q"]),
        ({"args": {"epilogue": "sigmoid-ish"}}, ["body", "args", "epilogue"]),
        ({"args": []}, ["body", "args"]),
        ({"target": "tpu"}, ["body", "target"]),
        ({"target": "cpu -isa=sse9"}, ["body", "target"]),
        ({"device_key": "has space"}, ["body", "device_key"]),
        ({"device_key": ""}, ["body", "device_key"]),
        ({"budget": {"trials": 0}}, ["body", "budget", "trials"]),
        ({"budget": {"wall_time_s": -1}}, ["body", "budget", "wall_time_s"]),
        ({"protocol": {"repeat": 0}}, ["body", "protocol", "repeat"]),
        ({"protocol": {"bogus": 1}}, ["body", "protocol", "bogus"]),
        ({"reuse": "maybe"}, ["body", "reuse"]),
        ({"extra": 1}, ["body", "extra"]),
    ],
)
def test_invalid_submission_is_422_naming_the_field_and_stores_nothing(
    api, tokens, snapshot, overrides, loc
) -> None:
    before = snapshot()
    response = api.post("/api/v1/tasks", json={**MATMUL, **overrides}, headers=tokens["user"])
    assert loc in field_error(response)
    assert snapshot() == before


def test_a_target_kind_without_a_template_for_the_operator_is_422(api, tokens, snapshot) -> None:
    ops_listed = api.get("/api/v1/ops").json()
    kinds = {t["kind"]: t for t in api.get("/api/v1/targets").json()}
    op, kind = next((o, k) for o in ops_listed for k in kinds if k not in o["targets"])  # e.g. dense has no cuda
    t = kinds[kind]
    before = snapshot()
    response = api.post("/api/v1/tasks", json={**MATMUL, "op": op["name"], "args": {},
                                               "target": f"{kind} -{t['option']}={t['values'][-1]}"},
                        headers=tokens["user"])
    assert field_error(response) == [["body", "target"]]
    assert "no template" in response.json()["detail"][0]["msg"]
    assert snapshot() == before


def test_unknown_operator_message_lists_the_known_ones(api, tokens) -> None:
    response = api.post("/api/v1/tasks", json={**MATMUL, "op": "no_such_op"}, headers=tokens["user"])
    assert "matmul" in response.json()["detail"][0]["msg"]


def test_missing_fields_and_non_json_bodies_are_422(api, tokens, snapshot) -> None:
    before = snapshot()
    assert ["body", "device_key"] in field_error(
        api.post("/api/v1/tasks", json={"op": "matmul", "target": "cpu"}, headers=tokens["user"])
    )
    response = api.post(
        "/api/v1/tasks", content=b"{not json", headers={**tokens["user"], "Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert snapshot() == before


def test_unknown_task_is_404(api, tokens, snapshot) -> None:
    before = snapshot()
    for path in ("/api/v1/tasks/999", "/api/v1/tasks/999/trials", "/api/v1/tasks/999/best"):
        response = api.get(path)
        assert response.status_code == 404 and "999" in response.json()["detail"]
    assert api.post("/api/v1/tasks/999/cancel", headers=tokens["user"]).status_code == 404
    assert api.get("/api/v1/tasks/999/artifact", headers=tokens["user"]).status_code == 404
    assert api.get("/api/v1/tasks/abc").status_code == 422
    assert snapshot() == before


def test_list_paginates_newest_first_with_total(api, tokens) -> None:
    ids = [submit(api, tokens)["id"] for _ in range(5)]
    page = api.get("/api/v1/tasks", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 5 and page["limit"] == 2 and page["offset"] == 1
    assert [t["id"] for t in page["items"]] == ids[::-1][1:3]
    assert api.get("/api/v1/tasks", params={"offset": 10}).json()["items"] == []
    for bad in ({"limit": 0}, {"limit": 501}, {"offset": -1}):
        assert api.get("/api/v1/tasks", params=bad).status_code == 422


def test_list_filters_by_status_operator_and_device_key(api, tokens) -> None:
    a = submit(api, tokens, device_key="cpu-a")
    b = submit(api, tokens, device_key="cpu-b")
    api.post(f"/api/v1/tasks/{b['id']}/cancel", headers=tokens["user"])

    def ids(**params) -> list[int]:
        page = api.get("/api/v1/tasks", params=params).json()
        assert page["total"] == len(page["items"])
        return [t["id"] for t in page["items"]]

    assert ids(device_key="cpu-a") == [a["id"]]
    assert ids(status="cancelled") == [b["id"]]
    assert ids(status="queued", device_key="cpu-a") == [a["id"]]
    assert ids(status="queued", device_key="cpu-b") == []
    assert ids(op="matmul") == [b["id"], a["id"]]
    assert ids(op="conv2d_nchw") == []
    assert ["query", "status"] in field_error(api.get("/api/v1/tasks", params={"status": "sleeping"}))


@contextlib.contextmanager
def sql_statements(api) -> Iterator[list[str]]:
    """The SQL statements the app sends while the block runs."""
    engine = api.app.state.sessionmaker.kw["bind"]
    sent: list[str] = []

    def note(_conn, _cursor, statement, *_args) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", note)


def test_tasks_are_read_with_their_artifacts_in_the_same_queries(api, tokens, db) -> None:
    ids = [submit(api, tokens)["id"] for _ in range(4)]
    with sql_statements(api) as without_artifacts:
        api.get("/api/v1/tasks")
        api.get(f"/api/v1/tasks/{ids[0]}")
    for i, task_id in enumerate(ids):
        db.get(Task, task_id).artifact = Artifact(sha256=f"{i:064x}", size=10, path=f"{i}.tar.gz")
    db.commit()

    with sql_statements(api) as with_artifacts:
        listed = api.get("/api/v1/tasks").json()["items"]
        one = api.get(f"/api/v1/tasks/{ids[0]}").json()
    assert len(with_artifacts) == len(without_artifacts)  # not one more query per artifact
    assert [t["artifact"]["sha256"] for t in listed] == [f"{i:064x}" for i in (3, 2, 1, 0)]
    assert one["artifact"]["sha256"] == f"{0:064x}"


def test_cancel_then_cancel_again_is_409_and_changes_nothing(api, tokens, snapshot) -> None:
    task = submit(api, tokens)
    cancelled = api.post(f"/api/v1/tasks/{task['id']}/cancel", headers=tokens["user"])
    assert cancelled.status_code == 200
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["finished_at"] is not None
    before = snapshot()
    again = api.post(f"/api/v1/tasks/{task['id']}/cancel", headers=tokens["user"])
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    assert snapshot() == before


def _add_trials(db, task_id: int, latencies: list[float | None]) -> list[int]:
    now = dt.datetime.now(dt.UTC)
    trials = [
        Trial(
            task_id=task_id, config_index=i, config={"index": i}, status="ok" if lat else "compile_error",
            costs=[lat] * 3 if lat else None, latency_s=lat, error=None if lat else "boom", attempts=1,
            dispatched_at=now, finished_at=now,
        )
        for i, lat in enumerate(latencies)
    ]
    db.add_all(trials)
    db.commit()
    return [t.id for t in trials]


def test_trials_paginate_filter_and_sort_by_latency(api, tokens, db) -> None:
    task = submit(api, tokens)
    ids = _add_trials(db, task["id"], [3e-3, None, 1e-3, 2e-3, None])
    page = api.get(f"/api/v1/tasks/{task['id']}/trials", params={"limit": 2, "offset": 2}).json()
    assert page["total"] == 5 and [t["id"] for t in page["items"]] == ids[2:4]
    fastest = api.get(f"/api/v1/tasks/{task['id']}/trials", params={"order": "latency"}).json()["items"]
    assert [t["latency_s"] for t in fastest] == [1e-3, 2e-3, 3e-3, None, None]
    failed = api.get(f"/api/v1/tasks/{task['id']}/trials", params={"status": "compile_error"}).json()
    assert failed["total"] == 2 and all(t["error"] == "boom" for t in failed["items"])
    assert api.get(f"/api/v1/tasks/{task['id']}/trials", params={"order": "random"}).status_code == 422


def test_best_is_404_until_a_correct_trial_then_the_fastest(api, tokens, db) -> None:
    task = submit(api, tokens)
    assert api.get(f"/api/v1/tasks/{task['id']}/best").status_code == 404
    ids = _add_trials(db, task["id"], [None, 4e-6, 2e-6])
    best = api.get(f"/api/v1/tasks/{task['id']}/best").json()
    assert best["trial"]["id"] == ids[2] and best["latency_s"] == 2e-6
    assert best["gflops"] == pytest.approx(task["flop"] / 2e-6 / 1e9)
    assert best["reused"] is False and best["artifact"] is None


def test_reuse_answers_at_once_with_the_stored_best(api, tokens, db) -> None:
    first = submit(api, tokens)
    (trial_id,) = _add_trials(db, first["id"], [5e-6])
    artifact = Artifact(sha256="ab" * 32, size=10, path="ab/x.tar.gz")
    db.add(artifact)
    db.flush()
    db.add(BestRecord(
        workload_key=first["workload_key"], target=first["target"], device_key=first["device_key"],
        trial_id=trial_id, artifact_id=artifact.id, latency_s=5e-6, gflops=first["flop"] / 5e-6 / 1e9,
        disturbance=0.04,
    ))
    db.commit()

    reused = submit(api, tokens, reuse=True)
    assert reused["status"] == "done" and reused["artifact"]["sha256"] == "ab" * 32
    assert (reused["best_latency_s"], reused["best_disturbance"]) == (5e-6, 0.04) and reused["finished_at"] is not None
    best = api.get(f"/api/v1/tasks/{reused['id']}/best").json()
    assert best["reused"] is True and best["trial"]["id"] == trial_id

    assert submit(api, tokens, reuse=False)["status"] == "queued"
    assert submit(api, tokens, reuse=True, device_key="cpu-other")["status"] == "queued"


def test_state_machine_stamps_times_and_refuses_illegal_moves() -> None:
    from tunefleet.server.errors import Conflict
    from tunefleet.server.services.tasks import transition

    task = Task(id=1, status="queued")
    transition(task, TaskStatus.WAITING_FOR_WORKER)
    assert task.started_at is None
    transition(task, TaskStatus.RUNNING)
    started = task.started_at
    assert started is not None and task.finished_at is None
    transition(task, TaskStatus.QUEUED)  # its tuner died: requeued, resumed later
    transition(task, TaskStatus.RUNNING)
    assert task.started_at == started
    transition(task, TaskStatus.EXPORTING)
    transition(task, TaskStatus.DONE)
    assert task.finished_at is not None
    with pytest.raises(Conflict, match="task 1 is done"):
        transition(task, TaskStatus.RUNNING)
    failed = Task(id=2, status="running")
    transition(failed, TaskStatus.FAILED, error="no candidate compiled")
    assert failed.error == "no candidate compiled"
    with pytest.raises(Conflict):
        transition(Task(id=3, status="queued"), TaskStatus.DONE)


def test_a_config_is_stored_once_per_task(api, tokens, db) -> None:
    from sqlalchemy.exc import IntegrityError

    task = submit(api, tokens)
    _add_trials(db, task["id"], [1e-3])
    db.add(Trial(task_id=task["id"], config_index=0, config={"index": 0}, status="queued", attempts=0))
    with pytest.raises(IntegrityError):
        db.commit()
