"""Errors that services raise and the API turns into 422 / 404 / 409 responses; the 422
body of a request that fails validation, which names the field and echoes at most a short
excerpt of what was sent; and 503 with ``Retry-After`` while the SQL database or Redis
cannot be reached (an outage, a restart), instead of a 500: clients and load balancers
retry later."""

from __future__ import annotations

import logging
import math
import reprlib
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

log = logging.getLogger(__name__)

#: Seconds a client is asked to wait before it tries again during an outage.
RETRY_AFTER_S = 5

#: The longest `msg` and `input` excerpt a 422 carries (characters).
MAX_MESSAGE = 300
MAX_EXCERPT = 80

_excerpt_repr = reprlib.Repr()  # keyword arguments need Python 3.12
_excerpt_repr.maxlevel = 2
_excerpt_repr.maxdict = _excerpt_repr.maxlist = _excerpt_repr.maxtuple = _excerpt_repr.maxset = 4
_excerpt_repr.maxstring = _excerpt_repr.maxother = MAX_EXCERPT
_excerpt_repr.maxlong = 40


class FieldError(ValueError):
    """Invalid input in one field; `loc` is its path as in FastAPI's 422 bodies,
    e.g. ("body", "args", "M")."""

    def __init__(self, loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = tuple(loc)
        self.message = message


class FieldErrors(ValueError):
    """Several invalid fields at once (e.g. every node of an ONNX model that cannot be
    tuned); `errors` holds (loc, message, input excerpt) per field."""

    def __init__(self, errors: Sequence[tuple[Sequence[str | int], str, Any]]) -> None:
        super().__init__("; ".join(message for _, message, _ in errors))
        self.errors = [(tuple(loc), message, value) for loc, message, value in errors]


class NotFound(LookupError):
    """The addressed resource does not exist (404)."""


class Conflict(RuntimeError):
    """The request is valid but the resource's state forbids it (409)."""


class Forbidden(PermissionError):
    """The caller may not act on this resource (403): not its owner, not an admin."""


class TooManyRequests(RuntimeError):
    """The caller sent too many requests of this kind (429); try again in `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(value: Any) -> Any:
    """What a 422 may echo of an input `value`: finite numbers, booleans, null and short
    strings as they are, anything else (long strings, big integers, NaN and infinities,
    objects, lists) as the start of its text, at most MAX_EXCERPT characters."""
    if value is None or isinstance(value, bool) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, str):
        return clip(value, MAX_EXCERPT)
    if isinstance(value, int) and abs(value) < 2**53:  # exact in every JSON reader
        return value
    return clip(_excerpt_repr.repr(value), MAX_EXCERPT)


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
