"""The dashboard in headless Chromium over the whole service tuning for real: `tunefleet
server`, a tuner and two workers (tests/service_helpers.py). Submit a small matmul through
the form, watch its trial count and charts move while it tunes, open its page, download the
artifact (the API's file, by sha256) and cancel another task. Screenshots of every page at
1280×800 and 390×844 go to test-artifacts/dashboard/."""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dashboard_browser import Tab, chromium, require_browser, tab
from service_helpers import PROTOCOL, Service, ensure_fleet, start_service, submit, wait_for, wait_status

require_browser()

pytestmark = pytest.mark.timeout(240)

TRIALS = 24  # enough to watch the count move: each trial is a gcc build and a timing


@pytest.fixture(scope="module")
def fleet(_migrated_sqlite: Path, tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("dashboard-e2e")
    shutil.copyfile(_migrated_sqlite, root / "tunefleet.db")
    service = start_service(root, f"sqlite:///{root / 'tunefleet.db'}", redis_url)
    try:
        yield ensure_fleet(service)
    finally:
        service.stop_all()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as launched:
        yield launched


def watch(t: Tab, expression: str, until: str, timeout_s: float) -> list[str]:
    """The distinct values of the JS `expression` seen, polling the page every 100 ms,
    until the JS condition `until` holds."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        value, done = t.page.evaluate(f"() => [String({expression}), Boolean({until})]")
        if not seen or seen[-1] != value:
            seen.append(value)
        if done:
            return seen
        assert time.monotonic() < deadline, f"timed out; saw {seen}"
        t.page.wait_for_timeout(100)


def test_submit_watch_download_and_cancel_through_the_dashboard(fleet: Service, browser, tmp_path: Path) -> None:
    with tab(browser, fleet.url, "wide", token=fleet.user_token) as t:
        page = t.page
        t.goto("/workers")
        page.locator("#workers-table tbody tr").nth(1).wait_for()
        t.shot("e2e-workers")
        t.assert_no_horizontal_scroll()

        # submit a small matmul through the form
        t.goto("/")
        page.locator("#op-select option[value='matmul']").wait_for(state="attached")
        page.locator("#submit-details").evaluate("d => d.open = true")
        page.select_option("#op-select", "matmul")
        for name in ("M", "N", "K"):
            page.fill(f"[name='args.{name}']", "64")
        page.fill("#device-key-input", "test-cpu")
        page.fill("[name='budget.trials']", str(TRIALS))
        page.click("details.more > summary")
        for name, value in PROTOCOL.items():
            page.fill(f"[name='protocol.{name}']", str(value))
        page.click("#submit-button")
        page.locator("#submitted-link").wait_for()
        task_id = int(page.get_attribute("#submitted-link", "href").rsplit("/", 1)[1])

        # the workers page shows who measures what
        with tab(browser, fleet.url, "wide") as workers:
            workers.goto("/workers")
            measuring = workers.page.locator("#workers-table tr[data-state='measuring']").first
            measuring.wait_for(timeout=30_000)
            assert f"#{task_id}" in measuring.inner_text()
            workers.shot("e2e-workers-measuring")
            workers.assert_clean()

        # the list follows the run without a reload
        cell = f"document.querySelector(\"tr[data-task-id='{task_id}'] .trials-done\")"
        counts = watch(t, f"{cell} && {cell}.textContent", f"{cell} && parseInt({cell}.textContent) >= 4", 90)
        assert len({c for c in counts if c not in ("null", f"0 / {TRIALS}")}) >= 1, counts
        t.shot("e2e-tasks-running")

        # its page: the count and the charts move while it tunes, then stop with the task
        page.click(f"tr[data-task-id='{task_id}'] a.task-link")
        page.wait_for_url(f"**/tasks/{task_id}")
        points = watch(t, "document.getElementById('chart-trials').dataset.points",
                       "['done', 'failed'].includes(document.getElementById('task-status').textContent)"
                       " || document.getElementById('chart-trials').dataset.points >= 12", 90)
        moving = [p for p in points if p not in ("undefined", "0")]
        assert len(moving) >= 2, f"the chart did not update while the task ran: {points}"
        assert "Live" in page.inner_text("#live-state")
        t.shot("e2e-task-running")
        done = wait_status(fleet, task_id, {"done", "failed", "cancelled"}, timeout_s=150)
        assert done["status"] == "done", done["error"]
        page.wait_for_function("() => document.getElementById('task-status').textContent === 'done'")
        page.wait_for_function(f"() => document.getElementById('chart-trials').dataset.points === '{TRIALS}'")
        assert page.inner_text("#stat-trials") == f"{TRIALS} / {TRIALS}"
        assert "updates stopped" in page.inner_text("#live-state")
        assert page.locator("#top-table tbody tr").count() >= 1
        page.locator("#prototype-text").wait_for()
        assert "(const float* A, const float* B, float* C);" in page.inner_text("#prototype-text")
        t.shot("e2e-task-done")
        t.assert_no_horizontal_scroll()

        # the download is the file the API serves
        with page.expect_download() as download_info:
            page.click("#download-button")
        saved = tmp_path / "artifact.tar.gz"
        download_info.value.save_as(saved)
        served = httpx.get(f"{fleet.url}/api/v1/tasks/{task_id}/artifact",
                           headers={"Authorization": f"Bearer {fleet.user_token}"})
        assert served.status_code == 200
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == hashlib.sha256(served.content).hexdigest() \
            == served.headers["x-content-sha256"] == done["artifact"]["sha256"]

        # cancel another task from its page while it runs
        other = submit(fleet, 500, args={"M": 48, "N": 48, "K": 48})
        t.goto(f"/tasks/{other['id']}")
        wait_for(lambda: fleet.api("GET", f"/tasks/{other['id']}")["trials_done"] >= 1, 60, "a first trial")
        page.locator("#cancel-button").click()
        page.locator("#cancel-yes").click()
        page.wait_for_function("() => document.getElementById('task-status').textContent === 'cancelled'")
        assert "updates stopped" in page.inner_text("#live-state")
        assert fleet.api("GET", f"/tasks/{other['id']}")["status"] == "cancelled"
        t.shot("e2e-task-cancelled")
        t.assert_clean()

    # every page at phone width, with the service's real data
    with tab(browser, fleet.url, "phone", token=fleet.user_token) as phone:
        for path, name, ready in (("/", "e2e-tasks", f"tr[data-task-id='{task_id}']"),
                                  (f"/tasks/{task_id}", "e2e-task-done", "#prototype-text"),
                                  ("/workers", "e2e-workers", "#workers-table")):
            phone.goto(path)
            phone.page.locator(ready).wait_for()
            phone.assert_no_horizontal_scroll()
            phone.shot(name)
        phone.assert_clean()
