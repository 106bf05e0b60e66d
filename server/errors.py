"""Errors that services raise (invalid field, not found, conflict, forbidden, too many
requests) and the bounds of what an error may echo of the input. Free of FastAPI, so the
tuner and the measurement processes import it cheaply; `server.api.error_handlers` turns
them into HTTP responses."""

from __future__ import annotations

import math
import reprlib
from collections.abc import Sequence
from typing import Any

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
