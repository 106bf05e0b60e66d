"""The dashboard in a real headless Chromium, against a real `tunefleet server` process whose
store the tests arrange directly (tasks, trials, workers, artifacts) as a tuning run would
leave them, so these tests need no tuner. The whole service tuning for real is driven
through the dashboard in test_dashboard_e2e.py. Screenshots: test-artifacts/dashboard/."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from dashboard_browser import TUNEFLEET, Tab, chromium, copy_database, require_browser, stop, tab
from dashboard_helpers import add_worker, finish, record, start, store_archive, submit
from server_helpers import real_artifact
from service_helpers import dies_with_this_test, free_port, wait_healthy
from sqlalchemy import update
from sqlalchemy.orm import Session

from tunefleet.server.db import make_engine, make_sessionmaker
from tunefleet.server.db.models import Base, Task, TokenScope
from tunefleet.server.services import tokens

require_browser()

pytestmark = pytest.mark.timeout(180)


@dataclass
class Service:
    url: str
    token: str
    db: Session
    artifacts: Path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as launched:
        yield launched


@dataclass
class Server:
    url: str
    token: str
    database_url: str
    artifacts: Path


@pytest.fixture(scope="module")
def server(_migrated_sqlite: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`tunefleet server` on a private SQLite store, shared by this module's tests (each
    empties the store first). Its Redis is unreachable on purpose: no tuner may pick these
    tasks up (submission only logs that it could not enqueue). Reads are open to anonymous
    requests (TUNEFLEET_ANONYMOUS_READ), so pages can be checked with and without a token;
    the token is an admin's, as the arranged tasks have no owner. Reading with a token from a
    server that needs one is checked in test_dashboard_e2e."""
    tmp = tmp_path_factory.mktemp("dashboard")
    home = tmp / "home"
    url = copy_database(_migrated_sqlite, home)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        token = tokens.create(session, "dashboard-admin", TokenScope.ADMIN)
    engine.dispose()
    port = free_port()
    env = {**os.environ, "TUNEFLEET_HOME": str(home), "TUNEFLEET_DATABASE_URL": url,
           "TUNEFLEET_PORT": str(port), "TUNEFLEET_REDIS_URL": "redis://127.0.0.1:1/0",
           "TUNEFLEET_ANONYMOUS_READ": "true"}
    log = tmp / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen(dies_with_this_test([TUNEFLEET, "server"]), env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, process, log)
        yield Server(base, token, url, home / "artifacts")
    finally:
        stop(process)


@pytest.fixture
def service(server: Server) -> Iterator[Service]:
    """The module's server with an empty store (but for the user token)."""
    engine = make_engine(server.database_url)
    with engine.begin() as conn:
        conn.execute(update(Task).values(best_trial_id=None))  # tasks <-> trials is a cycle
        for table in reversed(Base.metadata.sorted_tables):
            if table.name != "api_tokens":
                conn.execute(table.delete())
    session = make_sessionmaker(engine)()
    try:
        yield Service(server.url, server.token, session, server.artifacts)
    finally:
        session.close()
        engine.dispose()


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_empty_states(browser, service: Service, size: str) -> None:
    with tab(browser, service.url, size) as t:
        t.goto("/")
        empty = t.page.locator("#tasks-empty")
        empty.wait_for()
        assert "No tasks yet" in empty.inner_text()
        assert t.page.locator("#submit-details").evaluate("d => d.open"), "the form opens when there is nothing else"
        t.page.locator("#op-select option[value='matmul']").wait_for(state="attached")
        t.assert_no_horizontal_scroll()
        t.shot("tasks-empty")

        t.goto("/workers")
        t.page.locator("#workers-empty").wait_for()
        assert "No workers have registered yet" in t.page.inner_text("#workers-empty")
        t.assert_no_horizontal_scroll()
        t.shot("workers-empty")

        t.goto("/tasks/999999")
        assert "Task #999999 does not exist" in t.page.inner_text("#task-missing")
        t.assert_clean()


def test_submit_form_shows_the_apis_field_errors(browser, service: Service) -> None:
    with tab(browser, service.url, "wide") as t:
        t.goto("/")
        page = t.page
        page.locator("#tasks-empty").wait_for()
        page.locator("#op-select option[value='conv2d_nchw']").wait_for(state="attached")
        page.select_option("#op-select", "conv2d_nchw")
        page.fill("#device-key-input", "cpu-test")
        # argument fields come from GET /ops: bounds, choices, pairs
        assert page.get_attribute("[name='args.KH']", "max") == "64"
        assert page.locator("[name='args.epilogue'] option").all_inner_texts() == ["none", "relu", "gelu"]
        assert page.locator("[data-field='args.stride'] input").count() == 2
        page.fill("[name='args.H']", "4")
        page.fill("[name='args.W']", "4")
        page.fill("[name='args.KH']", "9")

        page.click("#submit-button")  # no token yet
        page.wait_for_function(
            "() => document.getElementById('form-msg').textContent.includes('token')")
        assert page.locator("#token-box").evaluate("d => d.open")
        page.fill("#token-input", service.token)
        page.click("#token-form button[type=submit]")
        assert page.inner_text("#token-summary") == "Token ✓"

        page.click("#submit-button")  # the server's 422, shown at the field it names
        kh_error = page.locator("[data-field='args.KH'] .err")
        kh_error.wait_for()
        assert "larger than the padded input height" in kh_error.inner_text()
        assert page.get_attribute("[name='args.KH']", "aria-invalid") == "true"
        assert "see the marked fields" in page.inner_text("#form-msg")
        t.shot("submit-422")

        page.fill("[name='args.KH']", "3")
        page.fill("[name='args.CI']", "0")  # refused before sending, with the API's wording
        page.fill("[name='budget.trials']", "100001")
        page.click("#submit-button")
        assert page.inner_text("[data-field='args.CI'] .err") == "must be >= 1"
        assert page.inner_text("[data-field='budget.trials'] .err") == "must be <= 100000"

        page.fill("[name='args.CI']", "8")
        page.fill("[name='budget.trials']", "12")
        page.fill("[name='args.KW']", "3")
        page.click("#submit-button")
        page.locator("#submitted-link").wait_for()
        task_id = int(page.get_attribute("#submitted-link", "href").rsplit("/", 1)[1])
        row = page.locator(f"tr[data-task-id='{task_id}']")
        row.wait_for()
        assert "0 / 12" in row.inner_text() and "conv2d_nchw" in row.inner_text()
        t.assert_clean()

    task = httpx.get(f"{service.url}/api/v1/tasks/{task_id}").json()
    assert task["workload"]["args"]["H"] == 4 and task["workload"]["args"]["CI"] == 8
    assert task["budget"]["trials"] == 12 and task["device_key"] == "cpu-test"


def test_tasks_page_filters_by_status_and_device_key(browser, service: Service) -> None:
    running = submit(service.db, device_key="cpu-a")
    start(service.db, running)
    submit(service.db, device_key="cpu-b")
    with tab(browser, service.url, "wide") as t:
        t.goto("/")
        t.page.locator(f"tr[data-task-id='{running.id}']").wait_for()
        assert t.page.locator("#tasks-table tbody tr").count() == 2
        t.page.select_option("#filter-status", "running")
        t.page.wait_for_function(
            "() => document.querySelectorAll('#tasks-table tbody tr').length === 1")
        assert t.page.get_attribute("#tasks-table tbody tr", "data-task-id") == str(running.id)
        assert "status=running" in t.page.url
        t.page.select_option("#filter-device", "cpu-b")
        t.page.locator("#tasks-empty").wait_for()
        assert "No tasks match these filters" in t.page.inner_text("#tasks-empty")
        t.page.select_option("#filter-status", "")
        t.page.wait_for_function(
            "() => document.querySelectorAll('#tasks-table tbody tr').length === 1")
        assert "cpu-b" in t.page.inner_text("#tasks-table tbody tr")
        t.assert_clean()


def test_task_page_follows_a_run_live_and_stops_when_it_ends(browser, service: Service, tmp_path: Path) -> None:
    db = service.db
    task = submit(db, trials=12)
    worker = add_worker(db, task=task)
    start(db, task, started_s_ago=20)
    record(db, task, [("ok", 4e-5, None), ("compile_error", None, "k.c:3: error: bad"), ("ok", 2e-5, None)],
           worker=worker)
    archive, kernel = real_artifact({"M": 32, "N": 16, "K": 8}, tmp_path / "built")
    store_archive(service.artifacts, archive)

    # error texts are for the task's owner and admins (the token here is an admin's)
    with tab(browser, service.url, "wide", token=service.token) as t, tab(browser, service.url, "phone") as listing:
        page = t.page
        t.goto(f"/tasks/{task.id}")
        chart = page.locator("#chart-trials")
        page.wait_for_function(
            "() => document.getElementById('chart-trials').dataset.points === '3'")
        assert page.inner_text("#stat-trials") == "3 / 12"
        assert chart.locator("circle.pt").count() == 2 and chart.locator("path.fail").count() == 1
        assert chart.locator("path.best").count() == 1
        assert page.locator("#chart-time").get_attribute("data-points") == "3"
        assert "compile error 1" in page.inner_text("#status-counts")
        assert "k.c:3: error: bad" in page.inner_text("#last-errors")
        assert page.locator("#top-table tbody tr").count() == 2
        assert page.locator("#top-table td[data-label='Latency']").first.inner_text().endswith(" · disturbance 0.05")
        assert "Live" in page.inner_text("#live-state")
        listing.goto("/")
        listing.page.locator(f"tr[data-task-id='{task.id}'] .trials-done").wait_for()
        assert listing.page.inner_text(f"tr[data-task-id='{task.id}'] .trials-done") == "3 / 12"

        # the tuner records more trials: both pages follow without a reload
        record(db, task, [("ok", 1e-5, None), ("timeout", None, "killed after 10 s"), ("ok", 3e-5, None)],
               worker=worker)
        page.wait_for_function(
            "() => document.getElementById('chart-trials').dataset.points === '6'")
        assert page.inner_text("#stat-trials") == "6 / 12"
        best = float(chart.get_attribute("data-best"))
        assert best == pytest.approx(task.flop / 1e-5 / 1e9, rel=1e-3)
        assert page.inner_text("#best-gflops") == f"{best:.3g} GFLOP/s"
        assert page.inner_text("#stat-latency").endswith(" · disturbance 0.05")  # the best's measurement's
        listing.page.wait_for_function(
            f"() => document.querySelector(\"tr[data-task-id='{task.id}'] .trials-done\").textContent === '6 / 12'")
        t.shot("task-running")
        listing.shot("tasks-running")
        listing.assert_no_horizontal_scroll()

        finish(db, task, archive)
        page.locator("#download-button").wait_for()
        page.wait_for_function(
            "() => document.getElementById('task-status').textContent === 'done'")
        assert "updates stopped" in page.inner_text("#live-state")
        assert page.locator("#cancel-button").is_hidden()
        prototype = page.locator("#prototype-text")
        prototype.wait_for()
        assert f"int {kernel}(const float* A, const float* B, float* C);" in prototype.inner_text()
        polls = t.count(f"/api/v1/tasks/{task.id}/progress")
        page.wait_for_timeout(3500)
        assert t.count(f"/api/v1/tasks/{task.id}/progress") == polls, "polling goes on after the task ended"
        t.assert_no_horizontal_scroll()
        t.assert_clean()
        listing.assert_clean()


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_download_gives_the_apis_file_and_cancel_stops_a_task(browser, service: Service, tmp_path: Path, size: str) -> None:
    db = service.db
    done = submit(db, trials=4)
    start(db, done)
    record(db, done, [("ok", 2e-5, None), ("wrong_answer", None, "max abs error 0.5 at [3, 4]"), ("ok", 1e-5, None)])
    archive, _ = real_artifact({"M": 32, "N": 16, "K": 8}, tmp_path / "built")
    store_archive(service.artifacts, archive)
    finish(db, done, archive)
    running = submit(db, trials=64)
    start(db, running)
    record(db, running, [("ok", 5e-5, None)])

    with tab(browser, service.url, size, token=service.token) as t:
        page = t.page
        t.goto(f"/tasks/{done.id}")
        page.locator("#prototype-text").wait_for()
        t.assert_no_horizontal_scroll()
        t.shot("task-done")
        with page.expect_download() as download_info:
            page.click("#download-button")
        saved = tmp_path / "download.tar.gz"
        download_info.value.save_as(saved)
        assert download_info.value.suggested_filename == f"tunefleet-task-{done.id}.tar.gz"
        served = httpx.get(f"{service.url}/api/v1/tasks/{done.id}/artifact",
                           headers={"Authorization": f"Bearer {service.token}"})
        digest = hashlib.sha256(saved.read_bytes()).hexdigest()
        assert digest == hashlib.sha256(served.content).hexdigest() == served.headers["x-content-sha256"]
        page.wait_for_function(
            "() => document.getElementById('action-msg').textContent.includes('verified')")

        t.goto(f"/tasks/{running.id}")
        page.locator("#cancel-button").click()
        page.locator("#cancel-yes").click()
        page.wait_for_function(
            "() => document.getElementById('task-status').textContent === 'cancelled'")
        assert page.locator("#cancel-button").is_hidden()
        assert "updates stopped" in page.inner_text("#live-state")
        t.shot("task-cancelled")
        t.assert_clean()
    assert httpx.get(f"{service.url}/api/v1/tasks/{running.id}").json()["status"] == "cancelled"


def test_actions_without_a_token_point_to_the_token_box(browser, service: Service, tmp_path: Path) -> None:
    db = service.db
    running = submit(db)
    start(db, running)
    with tab(browser, service.url, "wide") as t:
        t.goto(f"/tasks/{running.id}")
        t.page.locator("#cancel-button").click()
        t.page.locator("#cancel-yes").click()
        t.page.wait_for_function(
            "() => document.getElementById('action-msg').textContent.includes('user token')")
        assert t.page.locator("#token-box").evaluate("d => d.open")
        assert t.page.locator("#cancel-button").is_visible()
    assert httpx.get(f"{service.url}/api/v1/tasks/{running.id}").json()["status"] == "running"


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_workers_page(browser, service: Service, size: str) -> None:
    db = service.db
    task = submit(db)
    start(db, task)
    add_worker(db, name="bench-01/cpu0-1", task=task, trials_done=17)
    add_worker(db, name="bench-02/cpu0-1", state="idle", device_key="cpu-epyc-zen5-2c", heartbeat_age_s=3600,
               sandbox="none")
    with tab(browser, service.url, size) as t:
        t.goto("/workers")
        rows = t.page.locator("#workers-table tbody tr")
        rows.first.wait_for()
        assert rows.count() == 2
        first, second = rows.nth(0).inner_text(), rows.nth(1).inner_text()
        assert "bench-01/cpu0-1" in first and "measuring" in first and "17" in first
        assert "AMD EPYC 9654" in first and "pinned to 2 CPUs (0-1)" in first and f"#{task.id}" in first
        assert "lost" in second and "cpu-epyc-zen5-2c" in second and re.search(r"(59 min 5\d s|1 h 00 min) ago", second)
        assert "sandbox: bubblewrap 0.11.0" in first and "UNSANDBOXED" not in first
        assert "UNSANDBOXED" in second  # a --no-sandbox worker stands out
        t.assert_no_horizontal_scroll()
        t.shot("workers")
        t.assert_clean()


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_tasks_page_with_tasks_in_every_state(browser, service: Service, size: str) -> None:
    db = service.db
    submit(db, op="conv2d_nchw", args={"CI": 64, "CO": 64, "H": 56, "W": 56, "bias": True, "epilogue": "relu"},
           device_key="cpu-epyc-zen5-2c", trials=200)
    running = submit(db, trials=64)
    start(db, running, started_s_ago=90)
    record(db, running, [("ok", 2e-5, None)] * 3 + [("compile_error", None, "x")], spacing_s=10)
    cancelled = submit(db, op="dense", args={"M": 128, "N": 256, "K": 512, "epilogue": "gelu"})
    db.refresh(cancelled)
    from tunefleet.server.services import tasks as task_service

    task_service.cancel(db, cancelled.id)
    with tab(browser, service.url, size) as t:
        t.goto("/")
        row = t.page.locator(f"tr[data-task-id='{running.id}']")
        row.wait_for()
        text = row.inner_text()
        assert "4 / 64" in text and "M=32 N=16 K=8" in text and "running" in text
        assert re.search(r"1 min (29|3\d) s", text), text  # elapsed since it started, 90 s ago
        assert re.search(r"~\d+ min", text), text  # remaining: 60 trials at 22.5 s each
        assert "gelu" in t.page.inner_text(f"tr[data-task-id='{cancelled.id}']")
        t.assert_no_horizontal_scroll()
        t.shot("tasks")
        t.assert_clean()


def test_task_page_of_a_task_that_never_ran(browser, service: Service) -> None:
    from tunefleet.server.services import tasks as task_service

    task = submit(service.db)
    task_service.cancel(service.db, task.id)
    with tab(browser, service.url, "phone") as t:
        t.goto(f"/tasks/{task.id}")
        t.page.locator("#chart-trials text.empty-msg").wait_for()
        assert t.page.text_content("#chart-trials") == "No trial was measured"
        assert "found no correct config" in t.page.inner_text("#best-config")
        assert "No failed trials" in t.page.inner_text("#last-errors")
        assert "ended (cancelled) without one" in t.page.inner_text("#prototype")
        assert t.page.inner_text("#stat-remaining") == "finished"
        assert "updates stopped" in t.page.inner_text("#live-state")
        t.assert_no_horizontal_scroll()
        t.shot("task-never-ran")
        t.assert_clean()


def _submitted_model(db: Session):
    """A model of two convolution layers and a MaxPool, as submitted (queued)."""
    from onnx_models import Builder

    from tunefleet.base.settings import Settings
    from tunefleet.server.services import models

    b = Builder(3)
    h = b.node("Relu", [b.node("Conv", ["x", b.weight(8, 8, 3, 3), b.weight(8)], pads=[1, 1, 1, 1])])
    h = b.node("MaxPool", [b.node("Conv", [h, b.weight(4, 8, 1, 1)])], kernel_shape=[2, 2])
    extraction = models.parse(b.model([("x", [1, 8, 6, 6])], h).SerializeToString(), [], Settings())
    return models.submit(db, extraction, name="convs.onnx", target="cpu -isa=avx2", device_key="cpu-test",
                         trials=6, protocol=models.Protocol(), input_shapes=[], settings=Settings(), owner=None)


def _tuned_model(db: Session) -> int:
    """A done model of two layers (tasks done with their best latency), a MaxPool left
    untuned, and two rounds whose estimates fell, as the model job leaves them."""
    import datetime as dt

    from tunefleet.server.db.models import ModelRound, ModelStatus, RoundStatus, TaskStatus

    model = _submitted_model(db)
    for t, latency in zip(model.tasks, (4e-5, 1e-5)):
        t.task = Task(op=t.workload["op"], workload=t.workload, workload_key=t.workload_key, flop=t.flop,
                      target=model.target, device_key=model.device_key, budget={"trials": 3}, protocol={},
                      reuse=False, status=TaskStatus.DONE, trials_done=3, best_latency_s=latency,
                      best_gflops=t.flop / latency / 1e9)
        t.trials_given = 3
    db.flush()
    for i, estimate in enumerate((8e-5, 5e-5)):
        db.add(ModelRound(model_id=model.id, model_task_id=model.tasks[i].id, trials=3, status=RoundStatus.DONE,
                          pulled_at=i, updated_at=2 + i, estimate_s=estimate,
                          finished_at=model.created_at + dt.timedelta(seconds=10 * (i + 1))))
    model.status = ModelStatus.DONE
    db.commit()
    return model.id


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_model_page_shows_layers_estimate_and_untuned_share(browser, service: Service, size: str) -> None:
    model_id = _tuned_model(service.db)
    with tab(browser, service.url, size, token=service.token) as t:
        t.goto("/")
        link = t.page.locator(f"#models-table tr[data-model-id='{model_id}'] a")
        link.wait_for()
        link.click()
        t.page.locator("#layers-table").wait_for()
        assert t.page.locator("#layers-table tbody tr").count() == 2
        assert "50" in t.page.inner_text("#stat-estimate")  # Σ occurrences × latency: 50 µs
        assert t.page.get_attribute("#chart-estimate", "data-points") == "2"
        assert "MaxPool" in t.page.inner_text("#untuned-table")
        assert t.page.is_visible("#download-button")
        t.assert_no_horizontal_scroll()
        t.shot("model")
        t.goto("/models/999999")
        assert "Model #999999 does not exist" in t.page.inner_text("#model-missing")
        t.assert_clean()


def test_cancel_stops_a_model(browser, service: Service) -> None:
    model = _submitted_model(service.db)
    service.db.commit()
    with tab(browser, service.url, "wide", token=service.token) as t:
        t.goto(f"/models/{model.id}")
        t.page.locator("#cancel-button").click()
        t.page.locator("#cancel-yes").click()
        t.page.wait_for_function("() => document.getElementById('model-status').textContent === 'cancelled'")
        assert t.page.locator("#cancel-button").is_hidden()
        assert "Model cancelled." in t.page.inner_text("#action-msg")
        t.assert_clean()
    answer = httpx.get(f"{service.url}/api/v1/models/{model.id}", headers={"Authorization": f"Bearer {service.token}"})
    assert answer.json()["status"] == "cancelled"
