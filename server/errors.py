"""Errors that services raise and the API turns into 422 / 404 / 409 responses; and 503 with
``Retry-After`` while the SQL database or Redis cannot be reached (an outage, a restart),
instead of a 500: clients and load balancers retry later."""

from __future__ import annotations

from collections.abc import Sequence

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)

#: Seconds a client is asked to wait before it tries again during an outage.
RETRY_AFTER_S = 5


class FieldError(ValueError):
    """Invalid input in one field; `loc` is its path as in FastAPI's 422 bodies,
    e.g. ("body", "args", "M")."""

    def __init__(self, loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = tuple(loc)
        self.message = message


class NotFound(LookupError):
    """The addressed resource does not exist (404)."""


class Conflict(RuntimeError):
    """The request is valid but the resource's state forbids it (409)."""


async def _field_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FieldError)
    detail = [{"type": "value_error", "loc": list(exc.loc), "msg": exc.message}]
    return JSONResponse({"detail": detail}, status_code=422)


async def _not_found(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _conflict(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


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


def install_error_handlers(app: FastAPI) -> None:
    """Map the service errors to HTTP responses in the same shape as FastAPI's own, and an
    unreachable database or Redis to 503 with Retry-After."""
    app.add_exception_handler(FieldError, _field_error)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(OperationalError, _database_down)  # psycopg: the server went away
    app.add_exception_handler(RedisConnectionError, _redis_down)
    app.add_exception_handler(RedisTimeoutError, _redis_down)
