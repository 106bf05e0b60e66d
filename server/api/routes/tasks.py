"""/tasks: submit, list, inspect, cancel and download tuning tasks."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, status
from fastapi.responses import FileResponse, Response
from sqlalchemy.orm import Session

from tunefleet.server import artifact_store, build_jobs, queue
from tunefleet.server.api import downloads
from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.db.models import Artifact, TaskStatus, TrialStatus
from tunefleet.server.deps import ReadAuth, RedisDep, SessionDep, SettingsDep, StoreDep, UserAuth, in_session
from tunefleet.server.schemas.artifacts import ArtifactHeaderOut
from tunefleet.server.schemas.common import DB_INT_MAX, ONE_LINE_PATTERN, Page
from tunefleet.server.schemas.errors import errors
from tunefleet.server.schemas.tasks import DEVICE_KEY_PATTERN, BestOut, TaskCreate, TaskOut, TrialOut
from tunefleet.server.services import access, artifacts, tasks

router = APIRouter(prefix=f"{API_PREFIX}/tasks", tags=["tasks"])

TaskId = Annotated[int, Path(ge=1, le=DB_INT_MAX)]
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=DB_INT_MAX)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TaskOut,
             responses=errors(400, 401, 403, 409, 413, 422, 429))
def submit_task(
    request: Request, body: TaskCreate, session: SessionDep, settings: SettingsDep, redis: RedisDep,
    caller: UserAuth,
) -> TaskOut:
    """Submit a tuning task; 422 names the invalid field (operator, argument, target...).
    Without `device_key` it goes to the only pool of live workers of the target's kind.
    Without a target (or with a kind alone, 'cpu') it gets the best target the key's live
    hosts execute; a target they cannot execute is a 422 naming what they support. The task
    belongs to the caller; 429 past their submissions per minute, 409 past their unfinished
    tasks (settings max_submissions_per_minute, max_queued_tasks_per_user)."""
    assert caller.name is not None
    request.app.state.submissions.hit(caller.name)
    access.check_queue(session, caller.name, settings.max_queued_tasks_per_user)
    task = tasks.submit(session, body, settings.worker_lost_after_s, limits=settings, owner=caller.name)
    if task.status == TaskStatus.QUEUED:
        queue.try_enqueue_tune(settings, redis, [task.id])
    return access.task_out(task, caller)


@router.get("", response_model=Page[TaskOut], responses=errors(401, 403, 422))
async def list_tasks(
    request: Request,
    caller: ReadAuth,
    status: TaskStatus | None = None,
    op: Annotated[str | None, Query(max_length=64, pattern=ONE_LINE_PATTERN)] = None,
    device_key: Annotated[str | None, Query(max_length=64, pattern=DEVICE_KEY_PATTERN)] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[TaskOut]:
    """Tasks, newest first, filtered by status, operator and device key; others' without
    their sources and error text."""

    def page(session: Session) -> Page[TaskOut]:
        items, total = tasks.list_tasks(
            session, status=status, op=op, device_key=device_key, limit=limit, offset=offset
        )
        return Page[TaskOut](
            items=[access.task_out(t, caller) for t in items], total=total, limit=limit, offset=offset
        )

    return await in_session(request, page)


@router.get("/{task_id}", response_model=TaskOut, responses=errors(401, 403, 404, 422))
async def get_task(task_id: TaskId, request: Request, caller: ReadAuth) -> TaskOut:
    """One task with its progress (another user's without its sources and error text)."""
    return await in_session(request, lambda session: access.task_out(tasks.get(session, task_id), caller))


@router.get("/{task_id}/trials", response_model=Page[TrialOut], responses=errors(401, 403, 404, 422))
def list_trials(
    task_id: TaskId,
    session: SessionDep,
    caller: ReadAuth,
    status: TrialStatus | None = None,
    order: Literal["id", "latency"] = "id",
    limit: Limit = 100,
    offset: Offset = 0,
) -> Page[TrialOut]:
    """A task's trials in submission order, or fastest first with `order=latency`; their
    error texts only for the task's owner and admins."""
    owner = tasks.get(session, task_id).owner
    items, total = tasks.list_trials(
        session, task_id, status=status, order=order, limit=limit, offset=offset
    )
    return Page[TrialOut](
        items=[access.trial_out(t, caller, owner) for t in items], total=total, limit=limit, offset=offset
    )


@router.get("/{task_id}/best", response_model=BestOut, responses=errors(401, 403, 404, 422))
def get_best(task_id: TaskId, session: SessionDep, caller: ReadAuth) -> BestOut:
    """The task's best trial so far (or the stored best it reused); 404 while it has none."""
    task, trial = tasks.best_trial(session, task_id)
    assert trial.latency_s is not None
    return BestOut(
        task_id=task.id,
        trial=access.trial_out(trial, caller, task.owner),
        latency_s=trial.latency_s,
        gflops=tasks.gflops(task.flop, trial.latency_s),
        reused=trial.task_id != task.id,
        artifact=task.artifact,
    )


@router.post("/{task_id}/cancel", response_model=TaskOut, responses=errors(401, 403, 404, 409, 422))
def cancel_task(task_id: TaskId, session: SessionDep, caller: UserAuth) -> TaskOut:
    """Cancel an unfinished task (its owner or an admin); 409 if it already finished."""
    access.require_owner(caller, tasks.get(session, task_id))
    return access.task_out(tasks.cancel(session, task_id), caller)


def _download(media_type: str, *statuses: int) -> dict:
    """The OpenAPI responses of a download: 200 with a body of `media_type`, and `statuses`."""
    return {200: {"content": {media_type: {}}}, **errors(*statuses)}


def _owned_artifact(task_id: TaskId, session: SessionDep, caller: UserAuth) -> Artifact:
    """The artifact of task `task_id`, for its owner or an admin: 404 without the task or
    its artifact, 403 for anyone else."""
    access.require_owner(caller, tasks.get(session, task_id))
    return artifacts.of_task(session, task_id)


OwnedArtifact = Annotated[Artifact, Depends(_owned_artifact)]


@router.get("/{task_id}/artifact", response_class=FileResponse,
            responses=_download("application/gzip", 401, 403, 404, 422))
def download_artifact(task_id: TaskId, artifact: OwnedArtifact, store: StoreDep) -> FileResponse:
    """The task's artifact: a tar.gz of the .so, .h, manifest.json and source. The
    `X-Content-SHA256` header carries the archive's digest."""
    return FileResponse(
        store.path(artifact.path),
        media_type="application/gzip",
        filename=f"tunefleet-task-{task_id}.tar.gz",
        headers={"X-Content-SHA256": artifact.sha256},
    )


@router.get("/{task_id}/artifact/so", response_class=Response,
            responses=_download("application/octet-stream", 401, 403, 404, 422))
def download_shared_library(artifact: OwnedArtifact, store: StoreDep) -> Response:
    """Just the artifact's shared library."""
    name, data = artifact_store.shared_library(store.path(artifact.path))
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/{task_id}/artifact/multi-target", response_class=Response, responses=downloads.RESPONSES)
def download_multi_target_artifact(
    task_id: TaskId, session: SessionDep, caller: UserAuth, settings: SettingsDep, store: StoreDep, redis: RedisDep,
    targets: Annotated[str, Query(max_length=256, description="CPU ISAs, comma-separated, e.g. avx2,avx512")],
) -> Response:
    """ONE library of the task's workload for several CPU ISAs, choosing the best the CPU
    supports when it is loaded (TUNEFLEET_ISA forces one), as a tar.gz like /artifact: each
    ISA's fastest stored best record, else the default config. A worker of the task's device
    key builds it once per set of configs, at the first request (202 with `Retry-After` while
    it builds); later ones get the stored archive. 422 naming `targets` for an ISA that cannot
    be dispatched to; 409 without a live worker or with the error of a build that failed."""
    access.require_owner(caller, tasks.get(session, task_id))
    isas = [isa.strip() for isa in targets.split(",") if isa.strip()]
    job = artifacts.multi_target_job(session, task_id, isas)
    return downloads.archive(build_jobs.fetch(session, redis, settings, job), job, store)


@router.get("/{task_id}/artifact/header", response_model=ArtifactHeaderOut, responses=errors(401, 403, 404, 422))
def get_artifact_header(task_id: TaskId, session: SessionDep, store: StoreDep, _caller: ReadAuth) -> ArtifactHeaderOut:
    """The C header of the task's artifact and its prototypes, so a caller sees how to call
    the kernel; 404 until the task has an artifact. Readable like the task itself: the header
    holds the kernel's interface (workload, target, argument shapes, build flags), no code;
    the library and source stay behind a user token."""
    artifact = artifacts.of_task(session, task_id)
    file_name, text = artifact_store.header(store.path(artifact.path))
    kernel = file_name.removesuffix(".h")
    return ArtifactHeaderOut(
        task_id=task_id,
        kernel=kernel,
        file_name=file_name,
        text=text,
        prototype=artifact_store.header_prototype(text, kernel),
    )
