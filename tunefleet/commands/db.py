"""`tunefleet db`: migrate the SQL schema."""

from __future__ import annotations

import click


@click.group("db")
def db_group() -> None:
    """Manage the SQL schema (TUNEFLEET_DATABASE_URL; default SQLite under TUNEFLEET_HOME)."""


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="migrate up to this revision")
def upgrade_command(revision: str) -> None:
    """Create or migrate the schema."""
    from tunefleet.server.db import migrate
    from tunefleet.base.settings import Settings

    settings = Settings()
    migrate.upgrade(settings.database_url, revision)
    click.echo(f"database at revision {revision}: {_redacted(settings.database_url)}")


@db_group.command("current")
def current_command() -> None:
    """Print the schema revision of the database and the newest one available."""
    from tunefleet.server.db import make_engine, migrate
    from tunefleet.base.settings import Settings

    engine = make_engine(Settings().database_url)
    try:
        click.echo(f"current: {migrate.current_revision(engine)}  head: {migrate.head_revision()}")
    finally:
        engine.dispose()


@db_group.command("revision")
@click.option("-m", "--message", required=True, help="what the migration changes")
@click.option("--autogenerate/--empty", default=True, show_default=True,
              help="diff the models against the (migrated) database")
def revision_command(message: str, autogenerate: bool) -> None:
    """Write a new migration into migrations/versions (for developers changing the models)."""
    from tunefleet.server.db import migrate
    from tunefleet.base.settings import Settings

    migrate.revision(Settings().database_url, message, autogenerate)


def _redacted(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)
