"""Running the Alembic migrations shipped in the `tunefleet.server.migrations` package."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine


def alembic_config(url: str) -> Config:
    """An Alembic config for the database at `url`, with no alembic.ini needed.

    The URL travels in `attributes` rather than the ini options, so '%' in it (as in
    URL-encoded connection options) needs no escaping.
    """
    config = Config()
    config.set_main_option("script_location", str(files("tunefleet.server.migrations")))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision`."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` down to `revision` ("base" empties it)."""
    command.downgrade(alembic_config(url), revision)


def revision(url: str, message: str, autogenerate: bool) -> None:
    """Write a new migration script, diffed against the database at `url` if `autogenerate`."""
    command.revision(alembic_config(url), message=message, autogenerate=autogenerate)


def head_revision() -> str | None:
    """The newest revision the shipped migrations define."""
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None when it has never been migrated)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def schema_problem(url: str) -> str | None:
    """Why the database at `url` cannot be served as it is (not at the shipped head), else None."""
    from . import make_engine

    engine = make_engine(url)
    try:
        current, head = current_revision(engine), head_revision()
    finally:
        engine.dispose()
    if current != head:
        return f"database schema is at {current}, not {head}: run `tunefleet db upgrade` first"
    return None
