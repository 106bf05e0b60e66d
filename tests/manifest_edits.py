"""Test helper: what `tunefleet.load` says of a copy of an artifact whose manifest.json lists
edited arguments (a damaged or tampered manifest: the calls size their buffers from it).

    error = load_error(artifact_dir, tmp_path, edit_args(lambda args: args.pop(1)))
    assert "expected 3 arguments" in error
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import tunefleet
from tunefleet.compiler.artifact import read_manifest
from tunefleet.compiler.dltensor import MANIFEST_MISMATCH


def edit_args(edit: Callable[[list[dict]], None]) -> Callable[[list[dict]], list[dict]]:
    """A function from a manifest's "args" to a copy of them that `edit` changed in place."""
    def apply(args: list[dict]) -> list[dict]:
        args = [dict(a) for a in args]
        edit(args)
        return args
    return apply


def load_error(artifact: Path, tmp_path: Path, edit: Callable[[list[dict]], list[dict]]) -> str:
    """The text of the ValueError (MANIFEST_MISMATCH, then why) that `tunefleet.load` raises for a copy of
    the artifact directory `artifact` (made under `tmp_path`) whose manifest's "args" are
    ``edit(args)``; the test fails if it loads."""
    edited = tmp_path / "edited"
    shutil.copytree(artifact, edited)
    manifest = read_manifest(edited)
    (edited / "manifest.json").write_text(json.dumps({**manifest, "args": edit(manifest["args"])}))
    with pytest.raises(ValueError, match=MANIFEST_MISMATCH) as info:
        tunefleet.load(edited)
    return str(info.value)
