"""/workers: the list anyone may read, and the endpoints measurement workers call."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Path, Query, Request, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from tunefleet.server import queue
from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.db import utcnow
from tunefleet.server.db.models import Worker
from tunefleet.server.deps import ReadAuth, RedisDep, SessionDep, SettingsDep, StoreDep, WorkerAuth, in_session
from tunefleet.server.schemas.artifacts import ArtifactOut
from tunefleet.server.schemas.common import DB_INT_MAX, Page
from tunefleet.server.schemas.errors import errors
from tunefleet.server.schemas.tasks import DEVICE_KEY_PATTERN
from tunefleet.server.schemas.workers import WorkerHeartbeat, WorkerOut, WorkerRegister
from tunefleet.server.services import artifacts, tuning, workers

router = APIRouter(prefix=f"{API_PREFIX}/workers", tags=["workers"])
#: Where artifacts are uploaded (below the router's prefix); their bodies may be larger
#: than other requests' (Settings.max_artifact_bytes).
ARTIFACT_UPLOADS = "/workers/artifacts"

Sha256 = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="hex sha256 of the body")]


def _out(worker: Worker, lost_after_s: float) -> WorkerOut:
    # Facts a newer server stored that this one does not know are left out, not an error.
    out = WorkerOut.model_validate(worker, extra="ignore")
    out.state = workers.effective_state(worker, lost_after_s, utcnow())
    return out


@router.get("", response_model=Page[WorkerOut], responses=errors(401, 403, 422))
async def list_workers(
    request: Request,
    _caller: ReadAuth,
    settings: SettingsDep,
    device_key: Annotated[str | None, Query(max_length=64, pattern=DEVICE_KEY_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=DB_INT_MAX)] = 0,
) -> Page[WorkerOut]:
    """Every worker with its host facts, state and last heartbeat."""

    def page(session: Session) -> Page[WorkerOut]:
        items, total = workers.list_workers(session, device_key=device_key, limit=limit, offset=offset)
        return Page[WorkerOut](
            items=[_out(w, settings.worker_lost_after_s) for w in items],
            total=total,
            limit=limit,
            offset=offset,
        )

    return await in_session(request, page)


@router.post("/register", response_model=WorkerOut, responses=errors(400, 401, 403, 409, 413, 422))
def register_worker(
    body: WorkerRegister, session: SessionDep, settings: SettingsDep, redis: RedisDep, _auth: WorkerAuth
) -> WorkerOut:
    """Register a worker (or refresh one of the same name); tasks waiting for a worker of
    its device key are handed to the tuners. 409 when the key's live hosts execute another
    best target than this host (the hosts of a device key must agree)."""
    worker = workers.register(session, body, settings.worker_lost_after_s)
    queue.try_enqueue_tune(settings, redis, tuning.waiting_tasks(session, worker.device_key))
    return _out(worker, settings.worker_lost_after_s)


@router.post("/{worker_id}/heartbeat", response_model=WorkerOut, responses=errors(400, 401, 403, 404, 413, 422))
def heartbeat(
    worker_id: Annotated[int, Path(ge=1, le=DB_INT_MAX)],
    body: WorkerHeartbeat,
    session: SessionDep,
    settings: SettingsDep,
    _auth: WorkerAuth,
) -> WorkerOut:
    """A worker's sign of life; 404 for an unregistered worker."""
    return _out(workers.heartbeat(session, worker_id, body), settings.worker_lost_after_s)


@router.put("/artifacts/{sha256}", response_model=ArtifactOut, status_code=status.HTTP_201_CREATED,
             responses=errors(401, 403, 413, 422))
async def upload_artifact(
    sha256: Sha256, request: Request, session: SessionDep, store: StoreDep, _auth: WorkerAuth
) -> ArtifactOut:
    """Upload an artifact tar.gz as the raw request body; 422 if it does not hash to
    `sha256` or is not an artifact. Uploading stored content again is a no-op."""
    staged = store.staging_file()
    try:
        async with await anyio.open_file(staged, "wb") as f:
            async for chunk in request.stream():
                await f.write(chunk)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    artifact = await run_in_threadpool(artifacts.store_upload, session, store, staged, sha256)
    return ArtifactOut.model_validate(artifact)
