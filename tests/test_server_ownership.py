"""Who may do what: every route of the API against every kind of caller (anonymous, a read
token, a worker token, another user, the task's owner, an admin), on the real app over a
real SQLite store. A task belongs to the token that submitted it; only its owner and admins
cancel it, download its artifact and see its sources and error texts; reads need a token."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_helpers import add_worker, record, start
from fastapi.testclient import TestClient
from server_helpers import artifact_files, tarball

from tunefleet.base.settings import Settings
from tunefleet.server.app import create_app
from tunefleet.server.db import make_engine, make_sessionmaker
from tunefleet.server.db.models import Artifact, Task, TokenScope
from tunefleet.server.services import tokens as token_service
from tunefleet.server.services.access import HIDDEN

CALLERS = ("anonymous", "read", "worker", "other", "owner", "admin")
SOURCE = "void gemm_4x16(long K, const float* A, long lda, const float* B, long ldb, float* C, long ldc) {}\n"
TASK = {"op": "matmul", "target": "cpu", "device_key": "cpu-test",
        "args": {"M": 32, "N": 16, "K": 8, "micro_kernel": {"func": "gemm_4x16", "source": SOURCE, "mr": 4, "nr": 16}}}
ARCHIVE = tarball(artifact_files())
SHA = hashlib.sha256(ARCHIVE).hexdigest()

READERS = {"read", "other", "owner", "admin"}
MANAGERS = {"owner", "admin"}
USERS = {"other", "owner", "admin"}
WORKERS = {"worker", "admin"}
EVERYONE = set(CALLERS)

# (method, path, body, callers allowed); {task} is the shared task, {fresh} a new one of the owner's
ROUTES = [
    ("GET", "/api/v1/healthz", None, EVERYONE),
    ("GET", "/api/v1/readyz", None, EVERYONE),
    ("GET", "/api/v1/ops", None, READERS),
    ("GET", "/api/v1/targets", None, READERS),
    ("GET", "/api/v1/metrics", None, READERS),
    ("GET", "/api/v1/workers", None, READERS),
    ("GET", "/api/v1/tasks", None, READERS),
    ("GET", "/api/v1/tasks/{task}", None, READERS),
    ("GET", "/api/v1/tasks/{task}/trials", None, READERS),
    ("GET", "/api/v1/tasks/{task}/best", None, READERS),
    ("GET", "/api/v1/tasks/{task}/progress", None, READERS),
    ("GET", "/api/v1/tasks/{task}/artifact/header", None, READERS),
    ("POST", "/api/v1/tasks", TASK, USERS),
    ("POST", "/api/v1/tasks/{fresh}/cancel", None, MANAGERS),
    ("GET", "/api/v1/tasks/{task}/artifact", None, MANAGERS),
    ("GET", "/api/v1/tasks/{task}/artifact/so", None, MANAGERS),
    ("GET", "/api/v1/tasks/{task}/artifact/multi-target?targets=avx2", None, MANAGERS),
    ("POST", "/api/v1/workers/register", {"name": "w-matrix", "device_key": "cpu-matrix"}, WORKERS),
    ("POST", "/api/v1/workers/{worker}/heartbeat", {"state": "idle"}, WORKERS),
    ("PUT", f"/api/v1/workers/artifacts/{SHA}", ARCHIVE, WORKERS),
]


class Store:
    """The module's app, its tokens' headers by caller, and the ids it arranged."""

    def __init__(self, client: TestClient, headers: dict[str, dict[str, str]], sessions: Any, task: int,
                 worker: int) -> None:
        self.client, self.headers, self.sessions, self.task, self.worker = client, headers, sessions, task, worker

    def fresh_task(self) -> int:
        """A new queued task of the owner's, submitted through the API."""
        response = self.client.post("/api/v1/tasks", json={**TASK, "args": {"M": 8, "N": 8, "K": 8}},
                                    headers=self.headers["owner"])
        assert response.status_code == 201, response.text
        return response.json()["id"]


@pytest.fixture(scope="module")
def store(_migrated_sqlite: Path, tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Store]:
    """The owner's task (extern micro-kernel source, a failed trial with its error text, an
    artifact) and a worker, with one token per caller; reads are not open to anonymous
    requests (the default)."""
    home = tmp_path_factory.mktemp("ownership") / "home"
    home.mkdir()
    shutil.copyfile(_migrated_sqlite, home / "tunefleet.db")
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'tunefleet.db'}", redis_url=redis_url,
                        max_submissions_per_minute=1000)
    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    scopes = {"read": TokenScope.READ, "worker": TokenScope.WORKER, "other": TokenScope.USER,
              "owner": TokenScope.USER, "admin": TokenScope.ADMIN}
    with sessions() as session:
        headers = {name: {"Authorization": f"Bearer {token_service.create(session, name, scope)}"}
                   for name, scope in scopes.items()}
    headers["anonymous"] = {}
    with TestClient(create_app(settings)) as client:
        response = client.post("/api/v1/tasks", json=TASK, headers=headers["owner"])
        assert response.status_code == 201, response.text
        with sessions() as session:
            task = session.get(Task, response.json()["id"])
            worker = add_worker(session, task=task)
            start(session, task)
            record(session, task, [("ok", 1e-5, None), ("compile_error", None, "k.c:3: error: secret detail")],
                   worker=worker)
            path = settings.artifacts / SHA[:2] / f"{SHA}.tar.gz"
            path.parent.mkdir(parents=True)
            path.write_bytes(ARCHIVE)
            artifact = Artifact(sha256=SHA, size=len(ARCHIVE), path=f"{SHA[:2]}/{SHA}.tar.gz")
            session.add(artifact)
            session.flush()
            task.artifact_id = artifact.id
            session.commit()
            ids = task.id, worker.id
        yield Store(client, headers, sessions, *ids)
    engine.dispose()


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("method", "path", "body", "allowed"), ROUTES, ids=[f"{m} {p}" for m, p, _, _ in ROUTES])
def test_who_may_call_each_route(store: Store, caller: str, method: str, path: str, body: Any,
                                 allowed: set[str]) -> None:
    url = path.format(task=store.task, worker=store.worker,
                      fresh=store.fresh_task() if "{fresh}" in path else "")
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = store.client.request(method, url, headers=store.headers[caller], **kwargs)
    if caller not in allowed:
        assert response.status_code == (401 if caller == "anonymous" else 403), response.text
        return
    assert response.status_code < 500 and response.status_code not in (401, 403), response.text
    if "/readyz" not in path and "multi-target" not in path:  # not ready / a micro-kernel: 503 / 422
        assert response.is_success, response.text


@pytest.mark.parametrize("caller", ["read", "other", "owner", "admin"])
def test_sources_and_error_texts_are_for_the_owner_and_admins(store: Store, caller: str) -> None:
    headers = store.headers[caller]
    sees = caller in MANAGERS
    task = store.client.get(f"/api/v1/tasks/{store.task}", headers=headers).json()
    listed = next(t for t in store.client.get("/api/v1/tasks", headers=headers).json()["items"]
                  if t["id"] == store.task)
    trials = store.client.get(f"/api/v1/tasks/{store.task}/trials", headers=headers).json()["items"]
    progress = store.client.get(f"/api/v1/tasks/{store.task}/progress", headers=headers).json()
    for shown in (task, listed, progress["task"]):
        assert shown["owner"] == "owner" and shown["sources_hidden"] is not sees
        kernel = shown["workload"]["args"]["micro_kernel"]
        assert kernel == (TASK["args"]["micro_kernel"] if sees else HIDDEN)
    errors = [t["error"] for t in trials if t["status"] == "compile_error"]
    assert errors == (["k.c:3: error: secret detail"] if sees else [HIDDEN])
    assert [e["error"] for e in progress["errors"]] == errors
    # what is shared: progress, the best latency and GFLOP/s, the best config
    best = store.client.get(f"/api/v1/tasks/{store.task}/best", headers=headers).json()
    assert best["latency_s"] == 1e-5 and best["gflops"] == task["best_gflops"] and best["trial"]["config"]
    assert SOURCE not in str(store.client.get("/api/v1/tasks", headers=headers).json()) or sees


def test_a_task_of_no_one_is_managed_by_admins_alone(store: Store) -> None:
    with store.sessions() as session:
        session.get(Task, store.task).owner = None  # stored before tasks had owners
        session.commit()
    try:
        for caller, status in (("owner", 403), ("admin", 200)):
            response = store.client.get(f"/api/v1/tasks/{store.task}/artifact", headers=store.headers[caller])
            assert response.status_code == status, response.text
    finally:
        with store.sessions() as session:
            session.get(Task, store.task).owner = "owner"
            session.commit()
