"""/healthz, /metrics (Prometheus text), /ops, /targets and the OpenAPI document."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(api) -> dict[tuple[str, tuple], float]:
    text = api.get("/api/v1/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_healthz_reports_the_database(api) -> None:
    body = api.get("/api/v1/healthz").json()
    assert body["status"] == "ok" and body["database"] == "ok"


def test_metrics_count_tasks_and_requests(api, tokens) -> None:
    task = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
    api.post("/api/v1/tasks", json=task, headers=tokens["user"])
    api.post("/api/v1/tasks", json=task, headers=tokens["user"])
    api.get("/api/v1/tasks/1")
    api.get("/api/v1/tasks/2")
    api.get("/api/v1/nowhere")
    response = api.get("/api/v1/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    got = samples(api)
    assert got[("tunefleet_tasks", (("status", "queued"),))] == 2
    assert got[("tunefleet_tasks", (("status", "done"),))] == 0
    assert got[("tunefleet_trials", (("status", "ok"),))] == 0
    assert got[("tunefleet_artifact_store_bytes", ())] == 0
    route = (("method", "GET"), ("route", "/api/v1/tasks/{task_id}"), ("status", "200"))
    assert got[("tunefleet_http_requests_total", route)] == 2
    unmatched = (("method", "GET"), ("route", "unmatched"), ("status", "404"))
    assert got[("tunefleet_http_requests_total", unmatched)] == 1
    created = (("method", "POST"), ("route", "/api/v1/tasks"), ("status", "201"))
    assert got[("tunefleet_http_requests_total", created)] == 2


def test_ops_and_targets_come_from_the_compiler(api) -> None:
    ops = {op["name"]: op for op in api.get("/api/v1/ops").json()}
    assert "matmul" in ops and "cpu" in ops["matmul"]["targets"]
    assert {arg["name"] for arg in ops["matmul"]["args"]} >= {"M", "N", "K"}
    kinds = {t["kind"] for t in api.get("/api/v1/targets").json()}
    assert {"cpu", "cuda"} <= kinds


def test_openapi_documents_the_api(api) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/api/v1/tasks", "/api/v1/tasks/{task_id}/cancel", "/api/v1/tasks/{task_id}/artifact",
                 "/api/v1/workers/register", "/api/v1/workers/artifacts/{sha256}"):
        assert path in paths


def test_readyz_needs_a_live_worker_for_each_device_key_with_unfinished_tasks(api, tokens) -> None:
    assert api.get("/api/v1/readyz").json() == {"status": "ok", "database": "ok", "redis": "ok", "workers": "ok"}
    task = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
    assert api.post("/api/v1/tasks", json=task, headers=tokens["user"]).status_code == 201
    waiting = api.get("/api/v1/readyz")
    assert waiting.status_code == 503 and int(waiting.headers["Retry-After"]) > 0
    assert waiting.json()["workers"] == "no live worker for device keys ['cpu-test']"
    assert waiting.json()["database"] == "ok" and waiting.json()["redis"] == "ok"
    worker = {"name": "w1", "device_key": "cpu-test", "host": {"cpu_model": "Test CPU", "cores": 2}}
    assert api.post("/api/v1/workers/register", json=worker, headers=tokens["worker"]).status_code == 200
    assert api.get("/api/v1/readyz").status_code == 200


def test_metrics_show_queue_depths_restarts_and_reconnects(api, tokens, redis) -> None:
    from tunefleet.base import redisconn
    from tunefleet.server import queue

    task = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
    api.post("/api/v1/tasks", json=task, headers=tokens["user"])
    queue.count_restarts(redis, {"worker": 2, "redis": 1})
    outages = redisconn.Outages()
    redisconn.count_reconnects(lambda: redis, outages, "tuner@host", "redis")
    outages.failed(ConnectionError("refused"))
    outages.answered()
    got = samples(api)
    assert got[("tunefleet_queue_jobs", (("queue", "tune"),))] == 1
    assert got[("tunefleet_process_restarts_total", (("process", "worker"),))] == 2
    assert got[("tunefleet_process_restarts_total", (("process", "redis"),))] == 1
    assert got[("tunefleet_reconnects_total", (("process", "tuner@host"), ("to", "redis")))] == 1
