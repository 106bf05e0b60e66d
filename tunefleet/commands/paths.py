"""Option types for the files and folders that commands write.

Each is checked as the options are parsed, so that a path the command could not write is a
usage error naming the option (exit 2) before any work, not a traceback after it; nothing is
created until the command writes.
"""

from __future__ import annotations

import os
from pathlib import Path

import click


def _unwritable(folder: Path) -> str | None:
    """Why `folder` could not be created (with its parents) or written into, else None."""
    existing = folder
    while not existing.exists():  # False under a file, too: that file is then found
        existing = existing.parent
    if not existing.is_dir():
        return f"{os.fsdecode(existing)!r} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{os.fsdecode(existing)!r} is not writable"
    return None


class OutputPath(click.Path):
    """A folder (``folder=True``) that the command creates if need be and writes into, or a file
    that it writes or appends to, in a folder it creates if need be."""

    def __init__(self, *, folder: bool) -> None:
        super().__init__(file_okay=not folder, dir_okay=folder, path_type=Path)
        self.folder = folder

    def convert(self, value, param, ctx) -> Path:
        path = super().convert(value, param, ctx)
        problem = _unwritable(path if self.folder else path.parent)
        if problem is None and not self.folder and path.exists() and not os.access(path, os.W_OK):
            problem = f"{os.fsdecode(path)!r} is not writable"
        if problem:
            self.fail(problem, param, ctx)
        return path
