"""A cap on request body size, enforced before a body is parsed: a pure ASGI middleware.

A request whose `Content-Length` exceeds its limit is answered 413 before the app sees it;
a body sent without one (chunked) is counted as it streams, and the read that crosses the
limit raises a 413 HTTPException in the endpoint reading it, so nothing past the limit is
ever buffered. Both answers are JSON `{"detail": ...}` like every other error.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large(limit: int) -> str:
    """The 413 message for a body over `limit` bytes."""
    return f"request body larger than {limit} bytes, the most this server takes here"


class BodyLimit:
    """Limits the body of every HTTP request to `limit_for(path)` bytes."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await JSONResponse({"detail": too_large(limit)}, status_code=413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, too_large(limit))
            return message

        await self.app(scope, counted, send)
