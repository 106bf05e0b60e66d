"""API tokens for the command line, never on it: from an environment variable or a file that
only its owner can read.

A token passed as an argument shows in ``ps`` and in ``/proc/<pid>/cmdline`` to every user of
the host; the environment (``/proc/<pid>/environ``) and a ``0600`` file do not. Commands
therefore take ``--token-file PATH`` (or ``<VAR>_FILE``) or the variable ``<VAR>`` itself.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = ["TokenFileError", "read_token_file", "resolve_token", "token_file_option"]


class TokenFileError(ValueError):
    """A token file that cannot be used: missing, empty, not a regular file, or readable by
    anyone but its owner (its message says which, and how to fix it)."""


def read_token_file(path: str | os.PathLike) -> str:
    """The token in the file `path` (its text, stripped of surrounding whitespace).

    Raises TokenFileError when the file is missing or unreadable, not a regular file, empty,
    or grants any permission to its group or others (mode & 0o077 != 0: the file must be
    0600 or 0400, as ssh requires of its keys).
    """
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise TokenFileError(f"token file {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError(f"token file {path} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise TokenFileError(f"token file {path} has mode {mode:04o}: other users may read it; "
                             f"`chmod 600 {path}` (only its owner may read a token file)")
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise TokenFileError(f"token file {path}: {exc.strerror}") from exc
    if not token:
        raise TokenFileError(f"token file {path} is empty")
    return token


def resolve_token(env_var: str, token_file: str | os.PathLike | None) -> str | None:
    """The token from `token_file` when given (see read_token_file), else the environment
    variable `env_var`, else None."""
    if token_file is not None:
        return read_token_file(token_file)
    return os.environ.get(env_var) or None


def token_file_option(env_var: str, what: str, *, required: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click decorator adding ``--token-file`` (also ``$<env_var>_FILE``) that passes the
    command a ``token`` argument: the file's token, else ``$<env_var>``, else None. `what`
    describes the token in the help. With `required`, no token at all is a usage error (exit
    status 2); a bad file is one always, naming the option."""

    def callback(ctx: click.Context, param: click.Parameter, value: Path | None) -> str | None:
        try:
            token = resolve_token(env_var, value)
        except TokenFileError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
        if token is None and required:
            raise click.UsageError(f"no token: set {env_var}, or pass --token-file PATH "
                                   f"(a file only you can read, mode 0600)", ctx=ctx)
        return token

    return click.option(
        "--token-file", "token", type=click.Path(dir_okay=False, path_type=Path), envvar=f"{env_var}_FILE",
        callback=callback, expose_value=True,
        help=f"file holding {what}, mode 0600 [env {env_var}_FILE; or the token itself in ${env_var}]",
    )
