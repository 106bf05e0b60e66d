"""The HTTP answers to errors: the services' errors (`server.errors`) as 422 / 404 / 409 /
403 / 429 responses; the 422 body of a request that fails validation, which names the field
and echoes at most a short excerpt of what was sent; and 503 with ``Retry-After`` while the
SQL database or Redis cannot be reached (an outage, a restart), instead of a 500: clients
and load balancers retry later."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException
from starlette.routing import Match

from tunefleet.server.errors import (
    RETRY_AFTER_S, Conflict, FieldError, FieldErrors, Forbidden, NotFound, TooManyRequests, clip, excerpt,
)

log = logging.getLogger(__name__)


def _error(loc: Sequence[str | int], msg: str, type_: str, value: Any = None) -> dict[str, Any]:
    return {"type": type_, "loc": list(loc), "msg": clip(msg), "input": excerpt(value)}


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    detail = [
        _error(e.get("loc", ()), str(e.get("msg", "")), str(e.get("type", "value_error")), e.get("input"))
        for e in exc.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)


async def _field_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FieldError)
    return JSONResponse({"detail": [_error(exc.loc, exc.message, "value_error")]}, status_code=422)


async def _field_errors(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FieldErrors)
    return JSONResponse({"detail": [_error(loc, message, "value_error", value) for loc, message, value in exc.errors]},
                        status_code=422)


async def _not_found(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _conflict(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def _forbidden(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=403)


async def _too_many(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TooManyRequests)
    return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": str(exc.retry_after_s)})


def unavailable(what: str, exc: BaseException) -> JSONResponse:
    """503 naming what is unreachable, with ``Retry-After``."""
    return JSONResponse({"detail": f"{what} unavailable, try again shortly: {_first_line(exc)}"},
                        status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", _first_line(exc))
    return unavailable("database", exc)


async def _redis_down(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("Redis unavailable: %s", _first_line(exc))
    return unavailable("Redis", exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's answer to an HTTPException; a 405's `Allow` lists the methods of every
    route of the path (Starlette names only those of the first route it tried)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = sorted({
            method
            for route in request.app.router.routes
            if route.matches(request.scope)[0] is not Match.NONE
            for method in getattr(route, "methods", None) or ()
        })
        exc = HTTPException(405, exc.detail, headers={**(exc.headers or {}), "Allow": ", ".join(allowed)})
    return await http_exception_handler(request, exc)


def one_value_per_query_parameter(request: Request) -> None:
    """Refuses (422, naming each) a query parameter given more than once: every parameter the
    API takes is a single value, and FastAPI would silently keep the last one."""
    counts: dict[str, int] = {}
    for name, _value in request.query_params.multi_items():
        counts[name] = counts.get(name, 0) + 1
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        raise RequestValidationError([
            {"loc": ("query", name), "type": "repeated_parameter", "input": request.query_params.getlist(name),
             "msg": f"query parameter {name!r} given {counts[name]} times; give it once"}
            for name in repeated
        ])


def install_error_handlers(app: FastAPI) -> None:
    """Map the service errors, and requests that fail validation, to HTTP responses in
    the shape of FastAPI's own (schemas.errors), and an unreachable database or Redis to
    503 with Retry-After."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(FieldError, _field_error)
    app.add_exception_handler(FieldErrors, _field_errors)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(Forbidden, _forbidden)
    app.add_exception_handler(TooManyRequests, _too_many)
    app.add_exception_handler(OperationalError, _database_down)  # psycopg: the server went away
    app.add_exception_handler(RedisConnectionError, _redis_down)
    app.add_exception_handler(RedisTimeoutError, _redis_down)
