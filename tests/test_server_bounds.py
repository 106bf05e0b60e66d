"""Bounded input, checked at the edge: integers past what the database stores, the server's
limits on what a task may ask for (settings), request body size before parsing, and 422
bodies that name the field without echoing the input back."""

from __future__ import annotations

import hashlib
import uuid

import httpx
import pytest
from fastapi.testclient import TestClient
from test_ops_custom import doubling_chain, nested

from tunefleet.compiler import te
from tunefleet.server.app import create_app
from tunefleet.server.db.models import Task

MATMUL = {"op": "matmul", "args": {"M": 32, "N": 16, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
HUGE = 2**63  # one past SQLite's integers; PostgreSQL's INTEGER ends at 2^31 - 1
MICRO_KERNEL = {"func": "gemm_4x16", "mr": 4, "nr": 16,
                "source": "void gemm_4x16(long K, const float* A, long lda, const float* B, long ldb, "
                          "float* C, long ldc) {}\n"}


def locs(response: httpx.Response) -> list[list]:
    assert response.status_code == 422, response.text
    return [e["loc"] for e in response.json()["detail"]]


# (method, path, json body, the loc of the out-of-range integer) for every integer the API takes
OUT_OF_RANGE = [
    ("GET", f"/api/v1/tasks/{HUGE}", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/trials", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/best", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/progress", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/artifact", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/artifact/so", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/artifact/header", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks/{HUGE}/artifact/multi-target?targets=avx2", None, ["path", "task_id"]),
    ("POST", f"/api/v1/tasks/{HUGE}/cancel", None, ["path", "task_id"]),
    ("GET", "/api/v1/tasks/2147483648", None, ["path", "task_id"]),
    ("GET", f"/api/v1/tasks?offset={HUGE}", None, ["query", "offset"]),
    ("GET", f"/api/v1/tasks?limit={HUGE}", None, ["query", "limit"]),
    ("GET", f"/api/v1/tasks/1/trials?offset={HUGE}", None, ["query", "offset"]),
    ("GET", f"/api/v1/workers?offset={HUGE}", None, ["query", "offset"]),
    ("GET", f"/api/v1/workers?offset={-HUGE}", None, ["query", "offset"]),
    ("POST", f"/api/v1/workers/{HUGE}/heartbeat", {"state": "idle"}, ["path", "worker_id"]),
    ("POST", "/api/v1/workers/1/heartbeat", {"state": "idle", "current_task_id": HUGE},
     ["body", "current_task_id"]),
    ("POST", "/api/v1/tasks", {**MATMUL, "budget": {"trials": HUGE}}, ["body", "budget", "trials"]),
    ("POST", "/api/v1/tasks", {**MATMUL, "budget": {"early_stopping": HUGE}}, ["body", "budget", "early_stopping"]),
    ("POST", "/api/v1/tasks", {**MATMUL, "protocol": {"number": HUGE}}, ["body", "protocol", "number"]),
    ("POST", "/api/v1/tasks", {**MATMUL, "args": {"M": HUGE}}, ["body", "args", "M"]),
    ("POST", "/api/v1/workers/register", {"name": "w", "device_key": "k", "host": {"cores": HUGE}},
     ["body", "host", "cores"]),
    ("POST", "/api/v1/workers/register", {"name": "w", "device_key": "k", "host": {"affinity": [HUGE]}},
     ["body", "host", "affinity", 0]),
]


# (method, path, query, json body, the loc of the field) for every name or filter that is stored
# or compared with what is: PostgreSQL's text holds no NUL, and a name is shown on one line
CONTROL_CHARACTERS = [
    ("GET", "/api/v1/tasks", {"op": "matmul\x00"}, None, ["query", "op"]),
    ("GET", "/api/v1/tasks", {"device_key": "cpu\x00"}, None, ["query", "device_key"]),
    ("GET", "/api/v1/workers", {"device_key": "cpu\x00"}, None, ["query", "device_key"]),
    ("POST", "/api/v1/workers/register", None, {"name": "w\x00", "device_key": "k"}, ["body", "name"]),
    ("POST", "/api/v1/workers/register", None, {"name": "w\nx", "device_key": "k"}, ["body", "name"]),
    ("POST", "/api/v1/models", {"name": "resnet\x00", "device_key": "k"}, None, ["query", "name"]),
]


def test_names_and_filters_with_control_characters_are_422_never_500(api, tokens, snapshot) -> None:
    before = snapshot()
    for method, path, query, body, loc in CONTROL_CHARACTERS:
        response = api.request(method, path, params=query, json=body, headers=tokens["admin"])
        assert locs(response) == [loc], f"{method} {path}: {response.text}"
    assert snapshot() == before


def test_integers_out_of_range_are_422_naming_the_field_never_500(api, tokens, snapshot) -> None:
    before = snapshot()
    for method, path, body, loc in OUT_OF_RANGE:
        response = api.request(method, path, json=body, headers=tokens["admin"])
        assert loc in locs(response), f"{method} {path}: {response.text}"
    assert snapshot() == before


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_422(api, tokens, snapshot, value: str) -> None:
    before = snapshot()
    body = '{"op": "matmul", "target": "cpu", "device_key": "k", "protocol": {"cooldown_ms": %s}}' % value
    response = api.post("/api/v1/tasks", content=body, headers={**tokens["user"], "Content-Type": "application/json"})
    assert locs(response) == [["body", "protocol", "cooldown_ms"]]
    assert snapshot() == before


@pytest.mark.parametrize(("path", "name"), [("/api/v1/tasks?limit=5&limit=7", "limit"),
                                          ("/api/v1/workers?offset=0&offset=1&limit=2", "offset"),
                                          ("/api/v1/tasks/1/trials?limit=1&limit=1", "limit")])
def test_a_query_parameter_given_twice_is_422_naming_it(api, tokens, path: str, name: str) -> None:
    response = api.get(path, headers=tokens["admin"])
    assert locs(response) == [["query", name]]
    assert "give it once" in response.json()["detail"][0]["msg"]


@pytest.fixture
def bounded(settings) -> TestClient:
    """The API under small limits (everything else as `settings`)."""
    small = settings.model_copy(update={
        "max_operand_bytes": 64 * 1024, "max_trials": 100, "max_trial_timeout_s": 10.0, "max_min_repeat_ms": 100.0,
        "max_extern_source_bytes": 200, "max_body_bytes": 4096, "max_artifact_bytes": 8192,
    })
    with TestClient(create_app(small)) as client:
        yield client


@pytest.mark.parametrize(
    ("overrides", "loc", "words"),
    [
        ({"args": {"M": 128, "N": 64, "K": 64}}, ["body", "args"], "max_operand_bytes"),
        ({"budget": {"trials": 101}}, ["body", "budget", "trials"], "max_trials"),
        ({"budget": {"early_stopping": 101}}, ["body", "budget", "early_stopping"], "max_trials"),
        ({"protocol": {"timeout_s": 10.5}}, ["body", "protocol", "timeout_s"], "max_trial_timeout_s"),
        ({"protocol": {"min_repeat_ms": 101}}, ["body", "protocol", "min_repeat_ms"], "max_min_repeat_ms"),
        ({"args": {"M": 8, "N": 16, "K": 8, "micro_kernel": {**MICRO_KERNEL, "source": "/*" + "x" * 200 + "*/"}}},
         ["body", "args", "micro_kernel", "source"], "max_extern_source_bytes"),
    ],
)
def test_the_servers_limits_bound_a_task(bounded, tokens, snapshot, overrides, loc, words) -> None:
    before = snapshot()
    response = bounded.post("/api/v1/tasks", json={**MATMUL, **overrides}, headers=tokens["user"])
    assert locs(response) == [loc]
    assert words in response.json()["detail"][0]["msg"]
    assert snapshot() == before


def test_a_task_at_the_limits_is_accepted(bounded, tokens, db) -> None:
    # 64x64x64 float32: 3 x 16 KiB = 48 KiB of operands, under the 64 KiB limit
    body = {**MATMUL, "args": {"M": 64, "N": 64, "K": 64, "micro_kernel": MICRO_KERNEL},
            "budget": {"trials": 100, "early_stopping": 100}, "protocol": {"timeout_s": 10, "min_repeat_ms": 100}}
    response = bounded.post("/api/v1/tasks", json=body, headers=tokens["user"])
    assert response.status_code == 201, response.text
    assert db.get(Task, response.json()["id"]) is not None


def test_a_body_over_the_limit_is_413_before_it_is_parsed(bounded, tokens, snapshot) -> None:
    before = snapshot()
    not_json = b"{" * 5000  # a parsed body would be a 422
    declared = bounded.post("/api/v1/tasks", content=not_json,
                            headers={**tokens["user"], "Content-Type": "application/json"})
    streamed = bounded.post("/api/v1/tasks", content=iter([not_json[:3000], not_json[3000:]]),
                            headers={**tokens["user"], "Content-Type": "application/json"})
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert "4096 bytes" in response.json()["detail"]
    assert snapshot() == before


def test_artifact_uploads_have_their_own_limit(bounded, tokens, snapshot, settings) -> None:
    before = snapshot()
    data = b"\0" * 6000  # over the API's 4 KiB, under the uploads' 8 KiB: not an artifact, so 422
    sha = hashlib.sha256(data).hexdigest()
    response = bounded.put(f"/api/v1/workers/artifacts/{sha}", content=data, headers=tokens["worker"])
    assert locs(response)
    big = b"\0" * 9000
    response = bounded.put(f"/api/v1/workers/artifacts/{hashlib.sha256(big).hexdigest()}",
                           content=iter([big[:4500], big[4500:]]), headers=tokens["worker"])
    assert response.status_code == 413 and "8192 bytes" in response.json()["detail"]
    assert snapshot() == before  # nothing staged is left behind


def test_a_422_echoes_only_a_short_excerpt(api, tokens) -> None:
    secret = "S" * 50_000
    for body in ({**MATMUL, "op": secret}, {**MATMUL, "args": {"M": secret}}, {**MATMUL, "budget": secret},
                 {**MATMUL, "extra": {"nested": [secret] * 10}}):
        response = api.post("/api/v1/tasks", json=body, headers=tokens["user"])
        assert response.status_code == 422
        assert len(response.content) < 1_000, response.text
        for error in response.json()["detail"]:
            assert error["loc"][0] == "body" and len(error["msg"]) <= 300
            assert len(str(error["input"])) <= 80


@pytest.fixture
def limited(settings, db) -> tuple[TestClient, dict[str, str], dict[str, str]]:
    """The API with 4 submissions per minute and 2 unfinished tasks per user, and two user
    tokens of names no other test uses (submissions are counted in the tests' Redis)."""
    from tunefleet.server.db.models import TokenScope
    from tunefleet.server.services import tokens as token_service

    users = [{"Authorization": f"Bearer {token_service.create(db, f'u-{uuid.uuid4().hex}', TokenScope.USER)}"}
             for _ in range(2)]
    app = create_app(settings.model_copy(update={"max_submissions_per_minute": 4, "max_queued_tasks_per_user": 2}))
    with TestClient(app) as client:
        yield client, *users


def test_unfinished_tasks_per_user_are_bounded(limited, snapshot) -> None:
    client, user, other = limited
    first, _ = (client.post("/api/v1/tasks", json=MATMUL, headers=user).json() for _ in range(2))
    before = snapshot()
    refused = client.post("/api/v1/tasks", json=MATMUL, headers=user)
    assert refused.status_code == 409 and "max_queued_tasks_per_user" in refused.json()["detail"]
    assert snapshot() == before
    assert client.post("/api/v1/tasks", json=MATMUL, headers=other).status_code == 201  # per user
    assert client.post(f"/api/v1/tasks/{first['id']}/cancel", headers=user).status_code == 200
    assert client.post("/api/v1/tasks", json=MATMUL, headers=user).status_code == 201


def test_submissions_per_user_and_minute_are_bounded(limited, snapshot) -> None:
    client, user, other = limited
    for _ in range(4):  # invalid ones count too: each costs the server its validation
        assert client.post("/api/v1/tasks", json={**MATMUL, "op": "nope"}, headers=user).status_code == 422
    before = snapshot()
    refused = client.post("/api/v1/tasks", json=MATMUL, headers=user)
    assert refused.status_code == 429 and "max_submissions_per_minute" in refused.json()["detail"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert snapshot() == before
    assert client.post("/api/v1/tasks", json=MATMUL, headers=other).status_code == 201  # per user


def _doubling_chain() -> dict:
    """30 tensors each reading the one before twice: inlined, 2**30 loads."""
    return te.to_json([doubling_chain(30)])


def _nested(levels: int) -> dict:
    """x[i] + (x[i] + (... + 1.0)), `levels` deep."""
    return te.to_json([nested(levels - 2)])


def _nested_500_deep() -> dict:
    """500 levels: before, RecursionError in the server (HTTP 500)."""
    return _nested(500)


def test_a_custom_computation_at_the_depth_limit_is_accepted_shown_and_listed(api, tokens) -> None:
    """The limit stays below what the responses can carry (pydantic's serializer refused 255 levels)."""
    body = {"op": "custom", "args": {"te": _nested(te.MAX_EXPR_DEPTH)}, "target": "cpu", "device_key": "cpu-test"}
    response = api.post("/api/v1/tasks", json=body, headers=tokens["user"])
    assert response.status_code == 201, response.text
    task_id = response.json()["id"]
    assert api.get(f"/api/v1/tasks/{task_id}", headers=tokens["user"]).json()["workload"] == {
        "op": "custom", "args": body["args"]}
    assert [t["id"] for t in api.get("/api/v1/tasks", headers=tokens["user"]).json()["items"]] == [task_id]


@pytest.mark.parametrize(("make", "words"), [(_doubling_chain, "nodes"), (_nested_500_deep, "levels")])
def test_a_custom_computation_too_large_to_lower_is_422(api, tokens, snapshot, make, words) -> None:
    """A few kilobytes of tensor-expression JSON that a builder would lower for hours, or that
    nests deeper than the compiler's recursion: refused at the edge, naming the field."""
    before = snapshot()
    body = {"op": "custom", "args": {"te": make()}, "target": "cpu", "device_key": "cpu-test"}
    response = api.post("/api/v1/tasks", json=body, headers=tokens["user"])
    assert locs(response) == [["body", "args", "te"]]
    assert words in response.json()["detail"][0]["msg"]
    assert snapshot() == before


def test_a_custom_computation_with_a_value_of_the_wrong_json_type_is_422(api, tokens, snapshot) -> None:
    """Before, a number where a list belongs raised TypeError in the server: HTTP 500
    (test_te has every such place)."""
    before = snapshot()
    data = _nested(4)
    data["tensors"][-1]["reduce_axes"] = 5
    body = {"op": "custom", "args": {"te": data}, "target": "cpu", "device_key": "cpu-test"}
    response = api.post("/api/v1/tasks", json=body, headers=tokens["user"])
    assert locs(response) == [["body", "args", "te"]]
    assert "reduce_axes: must be a list" in response.json()["detail"][0]["msg"]
    assert snapshot() == before
