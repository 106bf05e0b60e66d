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
