"""/healthz and /metrics: for load balancers and Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from tunefleet import __version__
from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.deps import SessionDep

router = APIRouter(prefix=API_PREFIX, tags=["health"])


@router.get("/healthz")
def healthz(session: SessionDep) -> JSONResponse:
    """200 when the database answers, 503 (with the error) when it does not."""
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return JSONResponse(
            {"status": "error", "version": __version__, "database": str(exc.__cause__ or exc)},
            status_code=503,
        )
    return JSONResponse({"status": "ok", "version": __version__, "database": "ok"})


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text exposition of the HTTP and store metrics."""
    return PlainTextResponse(
        generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST
    )
