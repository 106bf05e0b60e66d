"""The web dashboard: tasks and models, one task's progress, one model's layers, and
workers, served at `/`.

Pages are small Jinja2 shells; `static/dashboard.js` fills them from the JSON API
and polls while something is running. Every script and style comes from `static/` (no CDN,
no web fonts: tuning hosts are often offline), and the pages' Content-Security-Policy
admits nothing else. The shells are public; the JSON they read needs a token like the rest
of the API (unless the server's `anonymous_read` opens reads), and actions (submit, cancel, download)
send the user's bearer token, kept in the browser's localStorage.

One endpoint is added to the API for the task page: `GET /api/v1/tasks/{id}/progress`,
the task with its trials condensed into what the charts and tables show, so the page
needs one request per poll however many trials the task has.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path as PathParam, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunefleet.base.version import __version__
from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.db import utcnow
from tunefleet.server.db.models import Model, Task, Trial, TrialStatus
from tunefleet.server.deps import ReadAuth, SessionDep, in_session
from tunefleet.server.errors import NotFound
from tunefleet.server.schemas.common import DB_INT_MAX
from tunefleet.server.schemas.errors import errors
from tunefleet.server.schemas.tasks import TaskOut
from tunefleet.server.services import access, tasks
from tunefleet.server.services.access import Caller

HERE = Path(__file__).parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"

PENDING = (TrialStatus.QUEUED, TrialStatus.RUNNING)
TOP_CONFIGS = 10
MAX_POINTS = 4000  # trials drawn per chart; more are thinned (new bests always kept)
LAST_ERRORS = 8
ERROR_CHARS = 4000

# Only this origin: scripts, styles, fetches. Blob URLs carry artifact downloads.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)


# --- the progress endpoint -----------------------------------------------------------------


class TopConfig(BaseModel):
    """One of the task's fastest correct trials."""

    trial_id: int
    config_index: int
    config: dict[str, Any]
    latency_s: float
    gflops: float
    disturbance: float | None = Field(description="the trial's measured disturbance, a fraction (null: not measured)")
    disturbed: bool = Field(description="still above the protocol's max_disturbance after its re-measures")
    worker_id: int | None


class TrialError(BaseModel):
    """A failed trial and what went wrong."""

    trial_id: int
    status: TrialStatus
    error: str
    finished_at: dt.datetime | None
    worker_id: int | None


class ProgressOut(BaseModel):
    """A task and its trials condensed for the dashboard.

    `points` lists the finished trials in the order they finished, each as
    `[n, trial_id, seconds since the task started, status, GFLOP/s or null]`, `n` counting
    from 1 over all `finished` trials. Past MAX_POINTS finished trials it is thinned to an
    even sample that keeps every new best, so a best-so-far curve (its running maximum) is
    still exact. `counts` has every trial status (queued and running included). `now` is
    the server's clock, for elapsed times without clock skew.
    """

    task: TaskOut
    now: dt.datetime
    finished: int
    points: list[tuple[int, int, float | None, TrialStatus, float | None]]
    counts: dict[TrialStatus, int]
    top: list[TopConfig]
    errors: list[TrialError]
    best: TopConfig | None
    best_reused: bool


api_router = APIRouter(prefix=f"{API_PREFIX}/tasks", tags=["dashboard"])


@api_router.get("/{task_id}/progress", response_model=ProgressOut, responses=errors(401, 403, 404, 422))
async def task_progress(
    task_id: Annotated[int, PathParam(ge=1, le=DB_INT_MAX)], request: Request, caller: ReadAuth
) -> ProgressOut:
    """The task, every finished trial's time and GFLOP/s, trial counts by status, the top
    configs, the latest errors and the best config: what the task page draws (another
    user's task without its sources and error texts)."""
    return await in_session(request, lambda session: _progress(session, task_id, caller))


def _progress(session: Session, task_id: int, caller: Caller) -> ProgressOut:
    task = tasks.get(session, task_id)
    finished = session.execute(
        select(Trial.id, Trial.status, Trial.latency_s, Trial.finished_at)
        .where(Trial.task_id == task_id, Trial.status.not_in(PENDING))
        .order_by(Trial.finished_at.asc().nulls_first(), Trial.id)
    ).all()
    origin = task.started_at or min((t.finished_at for t in finished if t.finished_at), default=None)
    points = thin_points([
        (
            n,
            row.id,
            (row.finished_at - origin).total_seconds() if origin and row.finished_at else None,
            TrialStatus(row.status),
            tasks.gflops(task.flop, row.latency_s)
            if row.status == TrialStatus.OK and row.latency_s
            else None,
        )
        for n, row in enumerate(finished, start=1)
    ])
    counts = {s: 0 for s in TrialStatus}
    for status, n in session.execute(
        select(Trial.status, func.count()).where(Trial.task_id == task_id).group_by(Trial.status)
    ):
        counts[TrialStatus(status)] = n
    fastest = session.scalars(
        select(Trial)
        .where(Trial.task_id == task_id, Trial.status == TrialStatus.OK, Trial.latency_s > 0)
        .order_by(Trial.latency_s, Trial.id)
        .limit(TOP_CONFIGS)
    ).all()
    failed = session.scalars(
        select(Trial)
        .where(Trial.task_id == task_id, Trial.error.is_not(None), Trial.status != TrialStatus.OK)
        .order_by(Trial.finished_at.desc().nulls_last(), Trial.id.desc())
        .limit(LAST_ERRORS)
    ).all()
    try:
        _, best_trial = tasks.best_trial(session, task_id)
    except NotFound:
        best_trial = None
    return ProgressOut(
        task=access.task_out(task, caller),
        now=utcnow(),
        finished=len(finished),
        points=points,
        counts=counts,
        top=[_top(t, task.flop) for t in fastest],
        errors=[
            TrialError(
                trial_id=t.id,
                status=TrialStatus(t.status),
                error=_clip(t.error or "") if caller.owns(task.owner) else access.HIDDEN,
                finished_at=t.finished_at,
                worker_id=t.worker_id,
            )
            for t in failed
        ],
        best=_top(best_trial, task.flop) if best_trial is not None else None,
        best_reused=best_trial is not None and best_trial.task_id != task.id,
    )


Point = tuple[int, int, float | None, TrialStatus, float | None]


def thin_points(points: list[Point], limit: int | None = None) -> list[Point]:
    """At most about `limit` (MAX_POINTS) of `points`: an even sample plus every point that
    set a new best and the last one, so the best-so-far curve drawn from them is exact."""
    limit = limit or MAX_POINTS
    if len(points) <= limit:
        return points
    step = -(-len(points) // limit)
    best = 0.0
    kept = []
    for i, point in enumerate(points):
        gflops = point[4]
        record = gflops is not None and gflops > best
        if record:
            best = gflops
        if record or i % step == 0 or i == len(points) - 1:
            kept.append(point)
    return kept


def _top(trial: Trial, flop: int) -> TopConfig:
    assert trial.latency_s is not None
    return TopConfig(
        trial_id=trial.id,
        config_index=trial.config_index,
        config=trial.config,
        latency_s=trial.latency_s,
        gflops=tasks.gflops(flop, trial.latency_s),
        disturbance=trial.disturbance,
        disturbed=trial.disturbed,
        worker_id=trial.worker_id,
    )


def _clip(text: str) -> str:
    """An error text cut to its last ERROR_CHARS characters (the end says what failed)."""
    return text if len(text) <= ERROR_CHARS else "…" + text[-ERROR_CHARS:]


# --- the pages -----------------------------------------------------------------------------


def _asset_version() -> str:
    """A digest of the static files, appended to their URLs so browsers refetch them
    after an upgrade."""
    digest = hashlib.sha256()
    for path in sorted(STATIC.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


templates = Jinja2Templates(directory=str(TEMPLATES))
pages = APIRouter(include_in_schema=False)


def _page(request: Request, template: str, **context: Any) -> HTMLResponse:
    response = templates.TemplateResponse(
        request,
        template,
        {"version": __version__, "asset_version": request.app.state.dashboard_assets, **context},
    )
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-cache"
    return response


def _page_of(request: Request, template: str, exists: bool, **context: Any) -> HTMLResponse:
    """The page of one stored row; 404 (the page saying so, with a way back) where it does not exist."""
    response = _page(request, template, missing=not exists, **context)
    if not exists:
        response.status_code = 404
    return response


@pages.get("/", response_class=HTMLResponse)
def tasks_page(request: Request) -> HTMLResponse:
    """Every task with its progress, filters, and the submission form."""
    return _page(request, "tasks.html", page="tasks")


@pages.get("/tasks/{task_id}", response_class=HTMLResponse)
def task_page(
    request: Request, task_id: Annotated[int, PathParam(ge=1, le=DB_INT_MAX)], session: SessionDep
) -> HTMLResponse:
    """One task: charts, top configs, errors, best config, prototype, actions (404 with a
    way back when there is no such task)."""
    return _page_of(request, "task.html", session.get(Task, task_id) is not None, page="task", task_id=task_id)


@pages.get("/models/{model_id}", response_class=HTMLResponse)
def model_page(
    request: Request, model_id: Annotated[int, PathParam(ge=1, le=DB_INT_MAX)], session: SessionDep
) -> HTMLResponse:
    """One model: its layers' progress and best, the estimated model latency over time, the
    untuned nodes, the bundle download (404 with a way back when there is no such model)."""
    return _page_of(request, "model.html", session.get(Model, model_id) is not None, page="model", model_id=model_id)


@pages.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request) -> HTMLResponse:
    """Every measurement worker with its host, state and current task."""
    return _page(request, "workers.html", page="workers")


@pages.get("/favicon.ico")
def favicon() -> Response:
    """The icon, so browsers asking for /favicon.ico find one."""
    return Response((STATIC / "favicon.svg").read_bytes(), media_type="image/svg+xml")


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard pages, their static files and the progress endpoint on `app`."""
    app.state.dashboard_assets = _asset_version()
    app.include_router(api_router)
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
