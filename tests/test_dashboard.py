"""The dashboard as the server serves it (no browser): pages, static files, the progress
and header endpoints the pages read. The browser tests are in test_dashboard_browser.py."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from dashboard_helpers import add_worker, finish, record, start, store_archive, submit
from server_helpers import artifact_files, real_artifact, tarball

STATIC = Path(__file__).parents[1] / "server" / "static"
TEMPLATES = Path(__file__).parents[1] / "server" / "templates"


@pytest.mark.parametrize("path", ["/", "/workers"])
def test_pages_are_served_with_a_policy_that_admits_only_this_origin(api, path: str) -> None:
    response = api.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    version = api.app.state.dashboard_assets
    assert f'src="/static/dashboard.js?v={version}"' in response.text
    assert f'href="/static/dashboard.css?v={version}"' in response.text


def test_no_asset_comes_from_another_origin() -> None:
    """Every URL in the templates is this server's; the only absolute URL in the static
    files is the SVG namespace, which is a name, never fetched."""
    for path in [*TEMPLATES.glob("*.html"), *STATIC.rglob("*.*")]:
        text = path.read_text()
        for url in re.findall(r"https?://[^\s\"'<>)]+", text):
            assert url == "http://www.w3.org/2000/svg", f"{path.name} refers to {url}"
        assert "@import" not in text and "@font-face" not in text, path.name


def test_static_files_are_served(api) -> None:
    js = api.get("/static/dashboard.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    css = api.get("/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert api.get("/favicon.ico").headers["content-type"] == "image/svg+xml"
    assert api.get("/static/nothing.js").status_code == 404


def test_task_page_exists_for_known_tasks_only(api, db) -> None:
    task = submit(db)
    page = api.get(f"/tasks/{task.id}")
    assert page.status_code == 200 and f'data-task-id="{task.id}"' in page.text
    missing = api.get(f"/tasks/{task.id + 1}")
    assert missing.status_code == 404 and "does not exist" in missing.text


def test_model_page_exists_for_known_models_only(api, db) -> None:
    from test_server_models import post, two_convs

    model = post(api, two_convs()).json()
    page = api.get(f"/models/{model['id']}")
    assert page.status_code == 200 and f'data-model-id="{model["id"]}"' in page.text
    missing = api.get(f"/models/{model['id'] + 1}")
    assert missing.status_code == 404 and "does not exist" in missing.text


def test_progress_condenses_the_trials(api, db) -> None:
    task = submit(db, trials=10)
    worker = add_worker(db, task=task)
    start(db, task, started_s_ago=30)
    record(db, task, [
        ("ok", 4e-3, None),
        ("compile_error", None, "error: 'x' undeclared"),
        ("ok", 1e-3, None),
        ("wrong_answer", None, "max abs error 0.5 at [3, 4]"),
        ("ok", 2e-3, None),
        ("timeout", None, "killed after 10 s"),
    ], worker=worker, spacing_s=2)

    body = api.get(f"/api/v1/tasks/{task.id}/progress").json()
    assert body["task"]["id"] == task.id and body["task"]["trials_done"] == 6
    flop = task.flop
    points = body["points"]
    assert body["finished"] == 6 and [p[0] for p in points] == [1, 2, 3, 4, 5, 6]
    assert [p[3] for p in points] == ["ok", "compile_error", "ok", "wrong_answer", "ok", "timeout"]
    assert [p[2] for p in points] == pytest.approx([2, 4, 6, 8, 10, 12])
    assert points[0][4] == pytest.approx(flop / 4e-3 / 1e9) and points[1][4] is None
    assert body["counts"]["ok"] == 3 and body["counts"]["compile_error"] == 1
    assert body["counts"]["queued"] == 0
    assert [t["latency_s"] for t in body["top"]] == [1e-3, 2e-3, 4e-3]
    assert [(t["disturbance"], t["disturbed"]) for t in body["top"]] == [(0.05, False)] * 3  # each with its own
    assert body["best"]["latency_s"] == 1e-3 and body["best"]["gflops"] == pytest.approx(flop / 1e-3 / 1e9)
    assert body["best"]["config"] == body["top"][0]["config"] and not body["best_reused"]
    assert [e["status"] for e in body["errors"]] == ["timeout", "wrong_answer", "compile_error"]
    assert body["errors"][-1]["error"] == "error: 'x' undeclared"


def test_progress_of_a_task_without_trials_and_of_none(api, db) -> None:
    task = submit(db)
    body = api.get(f"/api/v1/tasks/{task.id}/progress").json()
    assert body["points"] == [] and body["top"] == [] and body["best"] is None
    assert set(body["counts"].values()) == {0}
    assert api.get("/api/v1/tasks/999/progress").status_code == 404


def test_progress_clips_long_error_texts_to_their_end(api, db) -> None:
    task = submit(db)
    start(db, task)
    record(db, task, [("compile_error", None, "x" * 10_000 + " the actual error")])
    error = api.get(f"/api/v1/tasks/{task.id}/progress").json()["errors"][0]["error"]
    assert len(error) <= 4001 and error.endswith("the actual error")


def test_header_endpoint_gives_the_prototype_of_a_real_artifact(api, db, settings, tmp_path: Path) -> None:
    archive, name = real_artifact({"M": 32, "N": 16, "K": 8}, tmp_path / "built")
    store_archive(settings.artifacts, archive)
    task = submit(db)
    start(db, task)
    record(db, task, [("ok", 1e-5, None)])
    finish(db, task, archive)

    body = api.get(f"/api/v1/tasks/{task.id}/artifact/header").json()  # readable like the task
    assert body["kernel"] == name and body["file_name"] == f"{name}.h"
    assert body["text"].startswith("/*") and f"#ifndef TUNEFLEET_KERNEL_{name.upper()}_H_" in body["text"]
    prototype = body["prototype"]
    assert f"int {name}(const float* A, const float* B, float* C);" in prototype
    assert f"int {name}_checked(DLTensor** args, int num_args);" in prototype
    assert re.search(r"A\s+input\s+float32\s+\[32, 8\]", prototype)
    assert "tunefleet_timer" not in prototype


def test_header_endpoint_before_an_artifact_and_without_a_header(api, db, settings) -> None:
    task = submit(db)
    assert api.get(f"/api/v1/tasks/{task.id}/artifact/header").status_code == 404
    files = {k: v for k, v in artifact_files().items() if not k.endswith(".h")}
    archive = tarball(files)
    store_archive(settings.artifacts, archive)
    start(db, task)
    finish(db, task, archive)
    response = api.get(f"/api/v1/tasks/{task.id}/artifact/header")
    assert response.status_code == 422 and "no C header" in response.text


def test_many_points_are_thinned_keeping_every_new_best() -> None:
    from tunefleet.server.dashboard import thin_points

    rng = random.Random(0)
    points = [(n, n, float(n), "ok" if n % 7 else "timeout", rng.random() * n if n % 7 else None)
              for n in range(1, 20_001)]

    def steps(ps):
        best, out = 0.0, []
        for p in ps:
            if p[4] is not None and p[4] > best:
                best = p[4]
                out.append(p)
        return out

    kept = thin_points(points, limit=1000)
    assert 1000 <= len(kept) <= 1001 + len(steps(points)) and kept[-1] == points[-1]
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)
    assert steps(kept) == steps(points)  # the best-so-far curve is the same
    assert thin_points(points[:50], limit=1000) == points[:50]
