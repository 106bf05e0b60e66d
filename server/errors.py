"""Errors that services raise and the API turns into 422 / 404 / 409 responses."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


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


def install_error_handlers(app: FastAPI) -> None:
    """Map the service errors to HTTP responses in the same shape as FastAPI's own."""
    app.add_exception_handler(FieldError, _field_error)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(Conflict, _conflict)
