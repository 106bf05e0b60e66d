"""Bearer-token auth: every request but the health checks needs a token of the right scope
(reads: read, user or admin; anonymous reads only where the server opens them); tokens are
stored hashed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from tunefleet.cli import main
from tunefleet.server.db import migrate
from tunefleet.server.db.models import ApiToken
from tunefleet.server.services import tokens as token_service

TASK = {"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "target": "cpu", "device_key": "cpu-test"}
WORKER = {"name": "w1", "device_key": "cpu-test"}

# (method, path, json body) of every endpoint that needs a user token / a worker token.
USER_ENDPOINTS = [
    ("POST", "/api/v1/tasks", TASK),
    ("POST", "/api/v1/tasks/1/cancel", None),
    ("GET", "/api/v1/tasks/1/artifact", None),
    ("GET", "/api/v1/tasks/1/artifact/so", None),
]
WORKER_ENDPOINTS = [
    ("POST", "/api/v1/workers/register", WORKER),
    ("POST", "/api/v1/workers/1/heartbeat", {"state": "idle"}),
    ("PUT", f"/api/v1/workers/artifacts/{'0' * 64}", None),
]


def call(client, method, path, body, headers=None):
    return client.request(method, path, json=body, headers=headers or {})


@pytest.mark.parametrize(("method", "path", "body"), USER_ENDPOINTS + WORKER_ENDPOINTS)
def test_no_or_bad_token_is_401_and_changes_nothing(anonymous, tokens, snapshot, method, path, body) -> None:
    before = snapshot()
    for headers in ({}, {"Authorization": "Bearer tf_not_a_token"}, {"Authorization": "Basic dTpw"}):
        response = call(anonymous, method, path, body, headers)
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == "Bearer"
    assert snapshot() == before


@pytest.mark.parametrize(("method", "path", "body"), USER_ENDPOINTS)
def test_worker_token_cannot_do_user_things(anonymous, tokens, snapshot, method, path, body) -> None:
    before = snapshot()
    response = call(anonymous, method, path, body, tokens["worker"])
    assert response.status_code == 403 and "user token" in response.json()["detail"]
    assert snapshot() == before


@pytest.mark.parametrize(("method", "path", "body"), WORKER_ENDPOINTS)
def test_user_token_cannot_do_worker_things(anonymous, tokens, snapshot, method, path, body) -> None:
    before = snapshot()
    assert call(anonymous, method, path, body, tokens["user"]).status_code == 403
    assert snapshot() == before


def test_admin_token_may_do_both(anonymous, tokens) -> None:
    assert call(anonymous, "POST", "/api/v1/tasks", TASK, tokens["admin"]).status_code == 201
    assert call(anonymous, "POST", "/api/v1/workers/register", WORKER, tokens["admin"]).status_code == 200


def test_auth_comes_before_validation(anonymous) -> None:
    assert call(anonymous, "POST", "/api/v1/tasks", {"op": 1}).status_code == 401


def test_reads_need_a_read_token_unless_the_server_opens_them(anonymous, tokens, settings) -> None:
    reads = ("/api/v1/tasks", "/api/v1/workers", "/api/v1/ops", "/api/v1/targets", "/api/v1/metrics")
    for path in reads:
        assert anonymous.get(path).status_code == 401, path
        for scope in ("read", "user", "admin"):
            assert anonymous.get(path, headers=tokens[scope]).status_code == 200, (path, scope)
        assert anonymous.get(path, headers=tokens["worker"]).status_code == 403, path
    for path in ("/api/v1/healthz", "/openapi.json", "/docs", "/"):  # the checks, the docs, the dashboard's shell
        assert anonymous.get(path).status_code == 200, path
    from fastapi.testclient import TestClient

    from tunefleet.server.app import create_app

    with TestClient(create_app(settings.model_copy(update={"anonymous_read": True}))) as opened:
        for path in reads:
            assert opened.get(path).status_code == 200, path
        assert opened.post("/api/v1/tasks", json=TASK).status_code == 401


def test_revoked_token_is_401(anonymous, tokens, db) -> None:
    token_service.revoke(db, "user")
    assert call(anonymous, "POST", "/api/v1/tasks", TASK, tokens["user"]).status_code == 401


def test_cli_token_is_printed_once_and_stored_only_hashed(database_url, tmp_path: Path, db) -> None:
    env = {**os.environ, "TUNEFLEET_HOME": str(tmp_path / "home"), "TUNEFLEET_DATABASE_URL": database_url}
    tunefleet = str(Path(sys.executable).with_name("tunefleet"))
    created = subprocess.run([tunefleet, "token", "create", "--name", "ci", "--scope", "worker"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    stored = db.scalars(select(ApiToken).where(ApiToken.name == "ci")).one()
    assert stored.scope == "worker" and stored.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in repr(db.execute(select(ApiToken.__table__)).all())
    listed = subprocess.run([tunefleet, "token", "list"], env=env, capture_output=True, text=True, timeout=120)
    assert "ci\tworker\tactive" in listed.stdout and secret not in listed.stdout
    duplicate = subprocess.run([tunefleet, "token", "create", "--name", "ci"],
                               env=env, capture_output=True, text=True, timeout=120)
    assert duplicate.returncode != 0 and "already exists" in duplicate.stderr


def test_cli_token_commands_on_a_database_without_the_schema_say_what_to_run(empty_database_url, tmp_path) -> None:
    """Before, a traceback of 70 lines (no such table: api_tokens): `tunefleet token create` on a
    fresh machine, before `tunefleet up` or `tunefleet db upgrade` made the schema."""
    env = {**os.environ, "TUNEFLEET_HOME": str(tmp_path / "home"), "TUNEFLEET_DATABASE_URL": empty_database_url}
    tunefleet = str(Path(sys.executable).with_name("tunefleet"))
    for args in (["create", "--name", "ci"], ["list"], ["revoke", "ci"]):
        run = subprocess.run([tunefleet, "token", *args], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and run.stderr.strip().splitlines() == [
            f"Error: database schema is at None, not {migrate.head_revision()}: run `tunefleet db upgrade` first"]


def test_cli_token_names_are_one_line_of_printable_text(tmp_path) -> None:
    runner = CliRunner()
    for name in ("", "a\nb", "a\x00b", "a" * 129):
        run = runner.invoke(main, ["token", "create", "--name", name], env={"TUNEFLEET_HOME": str(tmp_path)})
        assert run.exit_code == 2 and "--name: must be one line of 1 to 128 printable characters" in run.stderr
    assert not (tmp_path / "tunefleet.db").exists()
