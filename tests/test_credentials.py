"""Tokens never on a command line: `--token-file` (mode 0600 only) or the environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from service_helpers import TUNEFLEET

from tunefleet.credentials import TokenFileError, read_token_file, resolve_token


def token_file(tmp_path: Path, mode: int, text: str = "tf_secret\n") -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_owner_only_file_is_read(tmp_path: Path, mode: int) -> None:
    assert read_token_file(token_file(tmp_path, mode)) == "tf_secret"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    with pytest.raises(TokenFileError, match=f"mode {mode:04o}.*chmod 600"):
        read_token_file(token_file(tmp_path, mode))


def test_empty_missing_and_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="is empty"):
        read_token_file(token_file(tmp_path, 0o600, "  \n"))
    with pytest.raises(TokenFileError, match="No such file"):
        read_token_file(tmp_path / "absent")
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token_file(tmp_path / "dir")


def test_file_wins_over_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_TEST_TOKEN", "from-env")
    assert resolve_token("TF_TEST_TOKEN", None) == "from-env"
    assert resolve_token("TF_TEST_TOKEN", token_file(tmp_path, 0o600)) == "tf_secret"
    monkeypatch.delenv("TF_TEST_TOKEN")
    assert resolve_token("TF_TEST_TOKEN", None) is None


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    return subprocess.run([TUNEFLEET, *args], env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=60)


def test_worker_takes_no_token_argument_and_needs_one(tmp_path: Path) -> None:
    gone = run_cli("worker", "--redis", "redis://127.0.0.1:1/0", "--token", "tf_x")
    assert gone.returncode == 2 and "No such option '--token'" in gone.stderr
    missing = run_cli("worker", "--redis", "redis://127.0.0.1:1/0")
    assert missing.returncode == 2 and "set TUNEFLEET_WORKER_TOKEN, or pass --token-file" in missing.stderr


def test_world_readable_token_file_is_a_usage_error(tmp_path: Path) -> None:
    path = token_file(tmp_path, 0o644)
    for args, env in [(("worker", "--redis", "redis://127.0.0.1:1/0", "--token-file", str(path)), {}),
                      (("worker", "--redis", "redis://127.0.0.1:1/0"), {"TUNEFLEET_WORKER_TOKEN_FILE": str(path)}),
                      (("status", "1", "--token-file", str(path)), {})]:
        done = run_cli(*args, env=env)
        assert done.returncode == 2, done.stderr
        assert "--token-file" in done.stderr and "mode 0644" in done.stderr
