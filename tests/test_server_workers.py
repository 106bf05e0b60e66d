"""/api/v1/workers: registration, heartbeats, liveness, artifact upload; and downloading
a task's artifact."""

from __future__ import annotations

import datetime as dt
import hashlib

from server_helpers import artifact_files, tarball

from tunefleet.server.db.models import Task, Worker

HOST = {"cpu_model": "Test CPU", "isa": ["avx2"], "cores": 2, "affinity": [0, 1], "toolchain": {"gcc": "12"}}


def register(api, tokens, name: str = "w1", device_key: str = "cpu-test", **host) -> dict:
    response = api.post(
        "/api/v1/workers/register",
        json={"name": name, "device_key": device_key, "host": {**HOST, **host}},
        headers=tokens["worker"],
    )
    assert response.status_code == 200, response.text
    return response.json()


def upload(api, tokens, data: bytes, sha256: str | None = None):
    sha256 = sha256 or hashlib.sha256(data).hexdigest()
    return api.put(f"/api/v1/workers/artifacts/{sha256}", content=data, headers=tokens["worker"])


def test_register_heartbeat_and_list(api, tokens) -> None:
    worker = register(api, tokens)
    assert worker["state"] == "idle" and worker["host"]["cpu_model"] == "Test CPU"
    again = register(api, tokens, cores=4)
    assert again["id"] == worker["id"] and again["host"]["cores"] == 4
    register(api, tokens, name="w2", device_key="cpu-other")

    beat = api.post(f"/api/v1/workers/{worker['id']}/heartbeat", json={"state": "measuring"}, headers=tokens["worker"])
    assert beat.status_code == 200 and beat.json()["state"] == "measuring"

    page = api.get("/api/v1/workers").json()
    assert page["total"] == 2 and [w["name"] for w in page["items"]] == ["w1", "w2"]
    only = api.get("/api/v1/workers", params={"device_key": "cpu-other"}).json()
    assert [w["name"] for w in only["items"]] == ["w2"]


def test_unknown_host_facts_are_refused_naming_them(api, tokens, snapshot) -> None:
    before = snapshot()
    response = api.post("/api/v1/workers/register", headers=tokens["worker"],
                        json={"name": "w1", "device_key": "cpu-test", "host": {**HOST, "numa_nodes": 2}})
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "host", "numa_nodes"]]
    assert snapshot() == before


def test_stored_facts_this_server_does_not_know_are_left_out_of_the_list(api, tokens, db) -> None:
    worker = register(api, tokens)
    stored = db.get(Worker, worker["id"])
    stored.host = {**stored.host, "numa_nodes": 2}  # as a newer server would have stored it
    db.commit()
    listed = api.get("/api/v1/workers").json()["items"][0]
    assert listed["host"]["cpu_model"] == "Test CPU" and "numa_nodes" not in listed["host"]


def test_a_silent_worker_is_reported_lost(api, tokens, db, settings) -> None:
    worker = register(api, tokens)
    stored = db.get(Worker, worker["id"])
    stored.last_heartbeat = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=settings.worker_lost_after_s + 1)
    db.commit()
    assert api.get("/api/v1/workers").json()["items"][0]["state"] == "lost"
    assert 'tunefleet_workers{state="lost"} 1.0' in api.get("/api/v1/metrics").text


def test_heartbeat_with_a_current_task(api, tokens, db) -> None:
    worker = register(api, tokens)
    task = api.post(
        "/api/v1/tasks",
        json={"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"},
        headers=tokens["user"],
    ).json()
    beat = api.post(
        f"/api/v1/workers/{worker['id']}/heartbeat",
        json={"state": "measuring", "current_task_id": task["id"]},
        headers=tokens["worker"],
    )
    assert beat.json()["current_task_id"] == task["id"]


def test_bad_worker_requests_change_nothing(api, tokens, snapshot) -> None:
    worker = register(api, tokens)
    before = snapshot()
    cases = [
        ("/api/v1/workers/register", {"name": "", "device_key": "k"}, ["body", "name"]),
        ("/api/v1/workers/register", {"name": "x", "device_key": "a/b"}, ["body", "device_key"]),
        ("/api/v1/workers/register", {"name": "x", "device_key": "k", "host": {"cores": 0}}, ["body", "host", "cores"]),
        ("/api/v1/workers/register", {"name": "x", "device_key": "k", "host": {"compute_capability": "sm90"}},
         ["body", "host", "compute_capability"]),
        (f"/api/v1/workers/{worker['id']}/heartbeat", {"state": "sleeping"}, ["body", "state"]),
        (f"/api/v1/workers/{worker['id']}/heartbeat", {"state": "idle", "current_task_id": 12345},
         ["body", "current_task_id"]),
    ]
    for path, body, loc in cases:
        response = api.post(path, json=body, headers=tokens["worker"])
        assert response.status_code == 422, (path, body, response.text)
        assert loc in [e["loc"] for e in response.json()["detail"]], response.text
    missing = api.post("/api/v1/workers/999/heartbeat", json={"state": "idle"}, headers=tokens["worker"])
    assert missing.status_code == 404 and "999" in missing.json()["detail"]
    assert snapshot() == before


def test_artifact_upload_is_content_addressed_and_idempotent(api, tokens, settings) -> None:
    data = tarball(artifact_files())
    first = upload(api, tokens, data)
    assert first.status_code == 201, first.text
    sha = hashlib.sha256(data).hexdigest()
    assert first.json()["sha256"] == sha and first.json()["size"] == len(data)
    second = upload(api, tokens, data)
    assert second.json()["id"] == first.json()["id"]
    stored = [p for p in settings.artifacts.rglob("*") if p.is_file()]
    assert [p.name for p in stored] == [f"{sha}.tar.gz"] and stored[0].read_bytes() == data


def test_bad_uploads_are_422_and_leave_no_trace(api, tokens, snapshot) -> None:
    good = tarball(artifact_files())
    files = artifact_files()
    no_manifest = tarball({k: v for k, v in files.items() if not k.endswith("manifest.json")})
    two_libraries = tarball({**files, "other.so": b"x"})
    escaping = tarball({**files, "../evil": b"x"})
    bomb = tarball({**files, "zeros": bytes(16 << 20)})  # 16 MiB in 16 kB: before, stored and served
    crowded = tarball({**files, **{f"f{i}": b"" for i in range(1000)}})
    before = snapshot()
    cases = [
        (good, "0" * 64, ["path", "sha256"]),
        (b"not a tarball", None, ["body"]),
        (no_manifest, None, ["body"]),
        (two_libraries, None, ["body"]),
        (escaping, None, ["body"]),
        (bomb, None, ["body"]),
        (crowded, None, ["body"]),
    ]
    for data, sha, loc in cases:
        response = upload(api, tokens, data, sha)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == loc
    assert "unpacks to more than" in upload(api, tokens, bomb).json()["detail"][0]["msg"]
    assert "more than 1000 members" in upload(api, tokens, crowded).json()["detail"][0]["msg"]
    bad_digest = api.put("/api/v1/workers/artifacts/xyz", content=good, headers=tokens["worker"])
    assert bad_digest.status_code == 422 and bad_digest.json()["detail"][0]["loc"] == ["path", "sha256"]
    assert snapshot() == before


def test_task_artifact_downloads(api, tokens, db) -> None:
    files = artifact_files()
    data = tarball(files)
    artifact = upload(api, tokens, data).json()
    task = api.post(
        "/api/v1/tasks",
        json={"op": "matmul", "args": {"M": 32, "N": 16, "K": 8}, "target": "cpu", "device_key": "cpu-test"},
        headers=tokens["user"],
    ).json()
    path = f"/api/v1/tasks/{task['id']}/artifact"
    absent = api.get(path, headers=tokens["user"])
    assert absent.status_code == 404 and "no artifact" in absent.json()["detail"]

    db.get(Task, task["id"]).artifact_id = artifact["id"]
    db.commit()
    archive = api.get(path, headers=tokens["user"])
    assert archive.status_code == 200 and archive.content == data
    assert archive.headers["content-type"] == "application/gzip"
    assert archive.headers["x-content-sha256"] == artifact["sha256"]
    library = api.get(path + "/so", headers=tokens["user"])
    assert library.content == files["matmul_32x16x8/matmul_32x16x8.so"] == b"\x7fELF stand-in"
    assert 'filename="matmul_32x16x8.so"' in library.headers["content-disposition"]
    assert api.get(f"/api/v1/tasks/{task['id']}").json()["artifact"]["sha256"] == artifact["sha256"]
