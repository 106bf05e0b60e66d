"""The import contracts of pyproject.toml's [tool.importlinter] hold: the layers (CLI > server |
worker > tuner > shared base > compiler), a worker that needs only the worker extra, a tuner
process that starts without the web framework, and no import cycles between sibling modules.
import-linter's `lint-imports` checks them, imports inside functions included;
docs/architecture.md explains them.

import-linter reads a package from one folder, while pyproject maps the subpackages from
folders of their own (compiler/ -> tunefleet.compiler, ...) and an editable install keeps
that split. So the test lays the package out as it is installed, in a folder of symlinks
to the sources, and runs `lint-imports` from there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def installed_layout(into: Path) -> Path:
    """`into`/tunefleet/... laid out as installed: a folder per package of pyproject's
    package-dir mapping, holding symlinks to its folder's files and subfolders."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name, folder in sorted(package_dir.items(), key=lambda item: item[0].count(".")):
        package = into.joinpath(*name.split("."))
        package.mkdir(parents=True, exist_ok=True)
        for entry in (ROOT / folder).iterdir():
            if entry.name != "__pycache__" and f"{name}.{entry.name}" not in package_dir:
                (package / entry.name).symlink_to(entry)
    return into


def test_import_contracts_hold(tmp_path: Path) -> None:
    layout = installed_layout(tmp_path)
    # lint-imports puts its working directory first on sys.path: the layout's, not the checkout's
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=layout, env={**os.environ, "PYTHONPATH": str(layout)}, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
