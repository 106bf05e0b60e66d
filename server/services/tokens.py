"""API tokens: created once and shown once; only their sha256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunefleet.server.db import utcnow
from tunefleet.server.db.models import ApiToken, TokenScope
from tunefleet.server.errors import Conflict, NotFound

TOKEN_PREFIX = "tf_"


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def create(session: Session, name: str, scope: TokenScope) -> str:
    """Store a new token named `name` (committed) and return its secret, which exists
    nowhere else; Conflict if the name is taken."""
    if session.scalars(select(ApiToken).where(ApiToken.name == name)).first() is not None:
        raise Conflict(f"a token named {name!r} already exists")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiToken(name=name, token_hash=hash_token(secret), scope=scope))
    session.commit()
    return secret


def authenticate(session: Session, secret: str) -> ApiToken | None:
    """The unrevoked token whose secret is `secret`, if any."""
    return session.scalars(
        select(ApiToken).where(
            ApiToken.token_hash == hash_token(secret), ApiToken.revoked_at.is_(None)
        )
    ).first()


def list_all(session: Session) -> Sequence[ApiToken]:
    """Every token, revoked ones included, oldest first."""
    return session.scalars(select(ApiToken).order_by(ApiToken.id)).all()


def revoke(session: Session, name: str) -> ApiToken:
    """Revoke the token named `name` (committed); NotFound if there is none."""
    token = session.scalars(select(ApiToken).where(ApiToken.name == name)).first()
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.commit()
    return token
