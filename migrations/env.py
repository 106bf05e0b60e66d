"""Alembic environment: runs migrations on the connection or URL that
`tunefleet.server.db.migrate` puts in the config's attributes."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from tunefleet.server.db import models
from tunefleet.server.db.base import UTCDateTime
from tunefleet.server.db.session import make_engine

config = context.config
target_metadata = models.Base.metadata


def _render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    # Migrations spell UTCDateTime as the column type it stores, so they never import models.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata, compare_type=True, render_item=_render_item, **kwargs
    )


def _run_on(connection: Connection) -> None:
    # SQLite cannot ALTER constraints: batch mode rebuilds the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit SQL for `config.attributes["url"]` without connecting."""
    url = config.attributes["url"]
    _configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate the given connection, or connect to `config.attributes["url"]`."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = make_engine(config.attributes["url"])
    try:
        with engine.connect() as conn:
            _run_on(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
