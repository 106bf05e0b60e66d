"""The dashboard in headless Chromium over the whole service tuning for real, started as a
user starts it: `tunefleet up` (server, tuner and a worker on this machine). Paste the token
it prints, submit a small matmul through the form, watch the worker, the trial count and
the charts move while it tunes, open its page, download the artifact (the API's file, by
sha256) and cancel another task; save a small model's bundle from its page while the worker
builds it (the API answers 202 until it is stored). Screenshots of every page at 1280×800 and 390×844 go to
test-artifacts/dashboard/."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from dashboard_browser import chromium, require_browser, tab
from service_helpers import PROTOCOL, free_port, start_up, wait_for

require_browser()

pytestmark = pytest.mark.timeout(300)

TRIALS = 32  # enough to watch the count move: each trial is a gcc build and a timing
#: Seconds without a new trial shown after which the run counts as hung (the whole run takes
#: 40-130 s, as loaded as the host is).
STALL_S = 120


@dataclass
class Up:
    url: str
    token: str

    def api(self, method: str, path: str, **kwargs) -> dict:
        response = httpx.request(method, f"{self.url}/api/v1{path}", timeout=30,
                                 headers={"Authorization": f"Bearer {self.token}"}, **kwargs)
        assert not response.is_error, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    def wait_ended(self, task_id: int, timeout_s: float = 150) -> dict:
        def ended() -> dict | None:
            task = self.api("GET", f"/tasks/{task_id}")
            return task if task["status"] in ("done", "failed", "cancelled") else None

        return wait_for(ended, timeout_s, f"task {task_id} to end", poll_s=0.3)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """`tunefleet up` on a fresh home (its own SQLite and private Redis); its user token is
    read from what it prints, as a user would."""
    root = tmp_path_factory.mktemp("dashboard-up")
    port = free_port()
    process, token = start_up(root / "home", port, root / "up.log")
    try:
        yield Up(f"http://127.0.0.1:{port}", token)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as launched:
        yield launched


def test_submit_watch_download_and_cancel_through_the_dashboard(up: Up, browser, tmp_path: Path) -> None:
    with tab(browser, up.url, "wide") as t:
        page = t.page
        # without a token the shell loads but its reads are refused: it asks for the token
        # `tunefleet up` printed, which is entered once and kept by the browser
        t.goto("/workers")
        page.wait_for_function("() => document.getElementById('token-box').open")
        assert page.locator("#workers-table tbody tr").count() == 0
        page.fill("#token-input", up.token)
        page.click("#token-form button[type=submit]")
        assert page.evaluate("() => localStorage.getItem('tunefleet.token')") == up.token
        page.locator("#workers-table tbody tr").first.wait_for()
        t.shot("e2e-workers")
        t.assert_no_horizontal_scroll()

        # submit a small matmul through the form
        t.goto("/")
        page.locator("#op-select option[value='matmul']").wait_for(state="attached")
        page.locator("#submit-details").evaluate("d => d.open = true")
        page.select_option("#op-select", "matmul")
        for name in ("M", "N", "K"):
            page.fill(f"[name='args.{name}']", "64")
        # the device key is prefilled with the one live worker's pool
        assert page.input_value("#device-key-input").startswith("cpu-")
        page.fill("[name='budget.trials']", str(TRIALS))
        page.click("details.more > summary")
        for name, value in PROTOCOL.items():
            page.fill(f"[name='protocol.{name}']", str(value))
        page.click("#submit-button")
        page.locator("#submitted-link").wait_for()
        task_id = int(page.get_attribute("#submitted-link", "href").rsplit("/", 1)[1])

        # while it tunes, the list and two more tabs follow it without a reload: its page, the workers
        with tab(browser, up.url, "wide", token=up.token) as detail, \
                tab(browser, up.url, "wide", token=up.token) as workers:
            detail.goto(f"/tasks/{task_id}")
            workers.goto("/workers")
            row = f"document.querySelector(\"tr[data-task-id='{task_id}'] .trials-done\")"
            measuring = workers.page.locator(
                f"#workers-table tr[data-state='measuring']:has(a[href='/tasks/{task_id}'])")
            counts: set[int] = set()
            points: set[int] = set()
            shot: set[str] = set()
            shown, deadline = (0, 0), time.monotonic() + STALL_S
            while detail.page.text_content("#task-status") not in ("done", "failed"):
                assert time.monotonic() < deadline, f"no new trial shown in {STALL_S} s"
                count = t.page.evaluate(f"() => {row} ? parseInt({row}.textContent) : 0")
                drawn = int(detail.page.get_attribute("#chart-trials", "data-points") or 0)
                if (count, drawn) != shown:
                    shown, deadline = (count, drawn), time.monotonic() + STALL_S
                if 0 < count < TRIALS:
                    counts.add(count)
                    if "tasks" not in shot:
                        shot.add("tasks")
                        t.shot("e2e-tasks-running")
                if 0 < drawn < TRIALS:
                    points.add(drawn)
                    if len(points) >= 2 and "task" not in shot:
                        shot.add("task")
                        assert "Live" in detail.page.inner_text("#live-state")
                        detail.shot("e2e-task-running")
                if "workers" not in shot and measuring.count():
                    shot.add("workers")
                    workers.shot("e2e-workers-measuring")
                t.page.wait_for_timeout(100)
            assert len(counts) >= 2, f"the list did not follow the run: {sorted(counts)}"
            assert len(points) >= 2, f"the chart did not follow the run: {sorted(points)}"
            assert "workers" in shot, "the workers page never showed the worker measuring the task"
            detail.assert_clean()
            workers.assert_clean()

        # its page, once the task ended: the charts stop, the artifact is there
        page.click(f"tr[data-task-id='{task_id}'] a.task-link")
        page.wait_for_url(f"**/tasks/{task_id}")
        done = up.wait_ended(task_id)
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
        served = httpx.get(f"{up.url}/api/v1/tasks/{task_id}/artifact",
                           headers={"Authorization": f"Bearer {up.token}"})
        assert served.status_code == 200
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == hashlib.sha256(served.content).hexdigest() \
            == served.headers["x-content-sha256"] == done["artifact"]["sha256"]

        # cancel another task from its page while it runs
        other = up.api("POST", "/tasks", json={"op": "matmul", "args": {"M": 48, "N": 48, "K": 48},
                                               "target": done["target"], "budget": {"trials": 500},
                                               "protocol": PROTOCOL})
        t.goto(f"/tasks/{other['id']}")
        wait_for(lambda: up.api("GET", f"/tasks/{other['id']}")["trials_done"] >= 1, 60, "a first trial")
        page.locator("#cancel-button").click()
        page.locator("#cancel-yes").click()
        page.wait_for_function("() => document.getElementById('task-status').textContent === 'cancelled'")
        assert "updates stopped" in page.inner_text("#live-state")
        assert up.api("GET", f"/tasks/{other['id']}")["status"] == "cancelled"
        t.shot("e2e-task-cancelled")
        t.assert_clean()

    # every page at phone width, with the service's real data
    with tab(browser, up.url, "phone", token=up.token) as phone:
        for path, name, ready in (("/", "e2e-tasks", f"tr[data-task-id='{task_id}']"),
                                  (f"/tasks/{task_id}", "e2e-task-done", "#prototype-text"),
                                  ("/workers", "e2e-workers", "#workers-table")):
            phone.goto(path)
            phone.page.locator(ready).wait_for()
            phone.assert_no_horizontal_scroll()
            phone.shot(name)
        phone.assert_clean()


def test_a_models_bundle_is_saved_from_its_page_while_the_worker_builds_it(up: Up, browser, tmp_path: Path) -> None:
    from onnx_models import Builder

    b = Builder(1)
    onnx_bytes = b.model([("x", [1, 4, 4, 4])], b.node("Conv", ["x", b.weight(4, 4, 1, 1)])).SerializeToString()
    model = httpx.post(f"{up.url}/api/v1/models", content=onnx_bytes, timeout=60,
                       params={"name": "tiny.onnx", "trials": 2, "protocol": json.dumps(PROTOCOL)},
                       headers={"Authorization": f"Bearer {up.token}", "Content-Type": "application/octet-stream"})
    assert model.status_code == 201, model.text
    model_id = model.json()["id"]
    wait_for(lambda: up.api("GET", f"/models/{model_id}")["status"] == "done", 150, "the model to be tuned",
             poll_s=0.5)
    with tab(browser, up.url, "wide", token=up.token) as t:
        t.goto(f"/models/{model_id}")
        t.page.locator("#download-button").wait_for()
        with t.page.expect_download(timeout=120_000) as download_info:
            t.page.click("#download-button")  # 202 while the worker builds it, then the archive
        saved = tmp_path / "bundle.tar.gz"
        download_info.value.save_as(saved)
        served = httpx.get(f"{up.url}/api/v1/models/{model_id}/bundle", headers={"Authorization": f"Bearer {up.token}"})
        assert served.status_code == 200
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == served.headers["x-content-sha256"]
        t.assert_clean()
