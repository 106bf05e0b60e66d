"""The Alembic migrations create exactly the schema the models describe, on SQLite and
PostgreSQL, and `tunefleet db upgrade` finds them from the installed package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from tunefleet.server.db import make_engine
from tunefleet.server.db.migrate import current_revision, downgrade, head_revision, upgrade
from tunefleet.server.db.models import Base


def _diff(url: str) -> list:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()


def test_upgrade_from_empty_matches_the_models(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    assert _diff(empty_database_url) == []
    engine = make_engine(empty_database_url)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_downgrade_to_base_removes_every_table_and_upgrade_restores_them(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    downgrade(empty_database_url, "base")
    engine = make_engine(empty_database_url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    upgrade(empty_database_url)
    assert _diff(empty_database_url) == []


def test_cli_upgrade_runs_from_any_directory(empty_database_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "TUNEFLEET_HOME": str(tmp_path / "home"), "TUNEFLEET_DATABASE_URL": empty_database_url}
    tunefleet = Path(sys.executable).with_name("tunefleet")
    done = subprocess.run(
        [str(tunefleet), "db", "upgrade"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert _diff(empty_database_url) == []
    current = subprocess.run(
        [str(tunefleet), "db", "current"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert f"current: {head_revision()}" in current.stdout


def test_default_database_is_sqlite_under_home(tmp_path: Path, monkeypatch) -> None:
    from tunefleet.base.settings import Settings

    for name in ("TUNEFLEET_DATABASE_URL", "TUNEFLEET_ARTIFACT_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(home=tmp_path / "h")
    assert settings.database_url == f"sqlite:///{tmp_path / 'h' / 'tunefleet.db'}"
    assert settings.artifacts == tmp_path / "h" / "artifacts"
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()
