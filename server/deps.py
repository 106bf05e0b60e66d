"""FastAPI dependencies: settings, a database session per request, and token auth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis import Redis
from sqlalchemy.orm import Session

from tunefleet.server.artifact_store import ArtifactStore
from tunefleet.server.db.models import ApiToken, TokenScope
from tunefleet.server.services import tokens
from tunefleet.settings import Settings


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """A session for one request; uncommitted changes are rolled back when it closes."""
    with request.app.state.sessionmaker() as session:
        yield session


def get_store(request: Request) -> ArtifactStore:
    """The artifact store."""
    return request.app.state.artifact_store


def get_redis(request: Request) -> Redis | None:
    """The Redis connection (None, logged, when Redis cannot be reached)."""
    return request.app.state.redis.get()


SettingsDep = Annotated[Settings, Depends(get_settings)]
RedisDep = Annotated[Redis | None, Depends(get_redis)]
SessionDep = Annotated[Session, Depends(get_session)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]

_bearer = HTTPBearer(auto_error=False, description="a token from `tunefleet token create`")


def require_scope(scope: TokenScope) -> Callable[..., ApiToken]:
    """A dependency admitting a valid bearer token of `scope` (or `admin`): 401 without a
    valid token, 403 with one of another scope."""

    def check(
        session: SessionDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> ApiToken:
        if credentials is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing bearer token (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        token = tokens.authenticate(session, credentials.credentials)
        if token is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "invalid or revoked token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if token.scope not in (scope, TokenScope.ADMIN):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"a {token.scope} token cannot do this; it needs a {scope} token",
            )
        return token

    return check


UserAuth = Annotated[ApiToken, Depends(require_scope(TokenScope.USER))]
WorkerAuth = Annotated[ApiToken, Depends(require_scope(TokenScope.WORKER))]
