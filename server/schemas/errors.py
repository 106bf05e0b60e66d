"""Error bodies of the API, and the `responses` each route declares with them, so that the
OpenAPI document lists every status code a route returns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorOut(BaseModel):
    """The body of every error response but 422: what went wrong, in words."""

    detail: str


class FieldErrorOut(BaseModel):
    """One invalid field: where (`loc`, e.g. ["body", "args", "M"]), what is wrong (`msg`,
    at most 300 characters), pydantic's error `type`, and at most a short excerpt of the
    value sent (`input`: the value itself when short, else the start of its text)."""

    type: str
    loc: list[str | int]
    msg: str
    input: Any = Field(default=None, description="a short excerpt of the value sent")


class ValidationErrorOut(BaseModel):
    """The body of a 422: every invalid field of the request."""

    detail: list[FieldErrorOut]


_WHY = {
    400: "The body is not JSON text (e.g. not UTF-8).",
    401: "No bearer token, or an invalid or revoked one (`WWW-Authenticate: Bearer`).",
    403: "The token's scope does not allow this.",
    404: "No such resource.",
    409: "The resource's state forbids this.",
    413: "The request body is larger than the server allows.",
    422: "Invalid input; each error names its field.",
    429: "Too many requests; `Retry-After` says how many seconds to wait.",
    503: "The database or Redis cannot be reached; `Retry-After` says when to try again.",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses` entries of a route for error status `codes` (each of _WHY) and 503
    (any route may meet an outage of the database or Redis), with their body models."""
    return {
        code: {"model": ValidationErrorOut if code == 422 else ErrorOut, "description": _WHY[code]}
        for code in (*codes, 503)
    }
