"""/healthz (liveness), /readyz (readiness) and /metrics: for load balancers, orchestrators
and Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from redis.exceptions import RedisError
from sqlalchemy import select, text
from sqlalchemy.exc import SQLAlchemyError

from tunefleet.base.version import __version__
from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.db.models import Task, TaskStatus
from tunefleet.server.deps import ReadAuth, SessionDep
from tunefleet.server.errors import RETRY_AFTER_S
from tunefleet.server.schemas.errors import errors

router = APIRouter(prefix=API_PREFIX, tags=["health"])

#: Tasks that need a worker of their device key to go on.
_UNFINISHED = (TaskStatus.QUEUED, TaskStatus.WAITING_FOR_WORKER, TaskStatus.RUNNING, TaskStatus.EXPORTING)


class HealthOut(BaseModel):
    """The server's liveness: `status` "ok" or "error", its version, and the database's
    state ("ok", or the error that reaching it gave)."""

    status: str
    version: str
    database: str


class ReadyOut(BaseModel):
    """The server's readiness: `status` "ok" or "unavailable", and each check's result
    ("ok", or what is wrong)."""

    status: str
    database: str
    redis: str
    workers: str


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "The database does not answer."}},
)
def healthz(session: SessionDep) -> JSONResponse:
    """Liveness: 200 when the database answers, 503 (with the error) when it does not."""
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return JSONResponse(
            {"status": "error", "version": __version__, "database": str(exc.__cause__ or exc)},
            status_code=503,
        )
    return JSONResponse({"status": "ok", "version": __version__, "database": "ok"})


@router.get("/metrics", responses={200: {"content": {"text/plain": {}}}, **errors(401, 403)})
def metrics(request: Request, _caller: ReadAuth) -> PlainTextResponse:
    """Prometheus text exposition of the HTTP and store metrics."""
    return PlainTextResponse(
        generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST
    )


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "A check failed; `Retry-After` says when to ask again."}},
)
def readyz(request: Request, session: SessionDep) -> JSONResponse:
    """Readiness: 200 when the service can make progress, else 503 with ``Retry-After``; the
    body has each check's result: ``database`` (it answers), ``redis`` (it answers) and
    ``workers`` (every device key with an unfinished task has a live worker)."""
    from tunefleet.server.services import liveness

    checks: dict[str, str] = {}
    try:
        session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except SQLAlchemyError as exc:
        checks["database"] = str(exc.__cause__ or exc).strip().splitlines()[0]
    redis = request.app.state.redis.get()
    try:
        checks["redis"] = "ok" if redis is not None and redis.ping() else "no connection"
    except RedisError as exc:
        checks["redis"] = str(exc)
    if checks["database"] == "ok":
        settings = request.app.state.settings
        needed = set(session.scalars(select(Task.device_key).distinct().where(Task.status.in_(_UNFINISHED))))
        missing = sorted(needed - set(liveness.live_device_keys(session, settings.worker_lost_after_s)))
        checks["workers"] = f"no live worker for device keys {missing}" if missing else "ok"
    else:
        checks["workers"] = "unknown: no database"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ok" if ready else "unavailable", **checks}, status_code=200 if ready else 503,
                        headers={} if ready else {"Retry-After": str(RETRY_AFTER_S)})
