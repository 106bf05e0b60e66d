"""FastAPI dependencies: settings, a database session per request, and token auth; and
`in_session`, the cheaper way for the endpoints that dashboards poll."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis import Redis
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from tunefleet.base.settings import Settings
from tunefleet.server.artifact_store import ArtifactStore
from tunefleet.server.db.models import TokenScope
from tunefleet.server.services import tokens
from tunefleet.server.services.access import Caller


async def get_settings(request: Request) -> Settings:
    """The settings the app was created with (async: FastAPI runs a sync dependency in
    the thread pool, a trip this attribute read does not need)."""
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """A session for one request; uncommitted changes are rolled back when it closes."""
    with request.app.state.sessionmaker() as session:
        yield session


T = TypeVar("T")


async def in_session(request: Request, work: Callable[[Session], T]) -> T:
    """`work(session)` on a session of its own, closed after it, in one trip to the
    thread pool; for async endpoints that answer a frequent read.

    A sync endpoint on SessionDep takes four trips per request: opening the session, the
    endpoint, validating what it returns, closing the session. Each costs ~0.1 ms of CPU
    and two hand-overs of the GIL; together about what the query itself costs. `work`
    must return a value that no longer needs the session (a response model, not an ORM
    object).
    """

    def call() -> T:
        with request.app.state.sessionmaker() as session:
            return work(session)

    return await run_in_threadpool(call)


async def get_store(request: Request) -> ArtifactStore:
    """The artifact store (async, like get_settings)."""
    return request.app.state.artifact_store


def get_redis(request: Request) -> Redis | None:
    """The Redis connection (None, logged, when Redis cannot be reached)."""
    return request.app.state.redis.get()


SettingsDep = Annotated[Settings, Depends(get_settings)]
RedisDep = Annotated[Redis | None, Depends(get_redis)]
SessionDep = Annotated[Session, Depends(get_session)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]

_bearer = HTTPBearer(auto_error=False, description="a token from `tunefleet token create`")

#: The token scopes each required scope admits (admin admits everything).
ADMITS: dict[TokenScope, frozenset[TokenScope]] = {
    TokenScope.READ: frozenset({TokenScope.READ, TokenScope.USER, TokenScope.ADMIN}),
    TokenScope.USER: frozenset({TokenScope.USER, TokenScope.ADMIN}),
    TokenScope.WORKER: frozenset({TokenScope.WORKER, TokenScope.ADMIN}),
    TokenScope.ADMIN: frozenset({TokenScope.ADMIN}),
}


def _caller(session: Session, secret: str) -> Caller | None:
    token = tokens.authenticate(session, secret)
    return None if token is None else Caller(token.name, TokenScope(token.scope))


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def require_scope(scope: TokenScope) -> Callable[..., Awaitable[Caller]]:
    """A dependency admitting a valid bearer token of a scope that ADMITS `scope`: 401
    without a valid token (for `read`, none is needed where the server's `anonymous_read`
    setting is on), 403 with one of another scope. The token is looked up in one trip to
    the thread pool (in_session)."""

    async def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Caller:
        if credentials is None:
            if scope is TokenScope.READ and request.app.state.settings.anonymous_read:
                return Caller(None, None)
            raise _unauthorized("missing bearer token (Authorization: Bearer <token>)")
        secret = credentials.credentials
        caller = await in_session(request, lambda session: _caller(session, secret))
        if caller is None:
            raise _unauthorized("invalid or revoked token")
        if caller.scope not in ADMITS[scope]:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"a {caller.scope} token cannot do this; it needs a {scope} token",
            )
        return caller

    return check


ReadAuth = Annotated[Caller, Depends(require_scope(TokenScope.READ))]
UserAuth = Annotated[Caller, Depends(require_scope(TokenScope.USER))]
WorkerAuth = Annotated[Caller, Depends(require_scope(TokenScope.WORKER))]
