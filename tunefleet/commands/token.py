"""`tunefleet token`: API tokens for users and workers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import click
from sqlalchemy.orm import Session

from tunefleet.server.db.models import ApiToken, TokenScope
from tunefleet.server.schemas.common import ONE_LINE_PATTERN


@contextmanager
def _session() -> Iterator[Session]:
    """A session on the configured database; one line, exit 1, when its schema is not current."""
    from tunefleet.base.settings import Settings
    from tunefleet.server.db import make_engine, make_sessionmaker, migrate

    url = Settings().database_url
    if problem := migrate.schema_problem(url):
        raise click.ClickException(problem)
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session:
            yield session
    finally:
        engine.dispose()


@click.group("token")
def token_group() -> None:
    """Create, list and revoke API tokens (written straight to the database)."""


@token_group.command("create")
@click.option("--name", required=True, help="a unique name, e.g. the user or worker host")
@click.option("--scope", type=click.Choice(["read", "user", "worker", "admin"]), default="user",
              show_default=True, help="read: lists, progress, best GFLOP/s; user: that, and submit and manage "
              "one's own tasks; worker: the worker endpoints; admin: everything, every task")
def create_command(name: str, scope: str) -> None:
    """Create a token and print it; it is shown only this once."""
    longest = ApiToken.__table__.c.name.type.length
    if not re.fullmatch(ONE_LINE_PATTERN, name) or len(name) > longest:
        raise click.BadParameter(f"must be one line of 1 to {longest} printable characters, got {name[:40]!r}",
                                 param_hint="--name")
    from tunefleet.server.errors import Conflict
    from tunefleet.server.services import tokens

    with _session() as session:
        try:
            click.echo(tokens.create(session, name, TokenScope(scope)))
        except Conflict as exc:
            raise click.ClickException(str(exc)) from exc


@token_group.command("list")
def list_command() -> None:
    """List tokens by name, scope and state (never the secrets)."""
    from tunefleet.server.services import tokens

    with _session() as session:
        for token in tokens.list_all(session):
            state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "active"
            click.echo(f"{token.name}\t{token.scope}\t{state}")


@token_group.command("revoke")
@click.argument("name")
def revoke_command(name: str) -> None:
    """Revoke the token called NAME."""
    from tunefleet.server.errors import NotFound
    from tunefleet.server.services import tokens

    with _session() as session:
        try:
            tokens.revoke(session, name)
        except NotFound as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"revoked {name}")
