"""Package discovery: every folder with an ``__init__.py`` under the top-level folders that
``[tool.setuptools.package-dir]`` in pyproject.toml maps into the ``tunefleet`` namespace is a
package (setuptools' ``find_packages``), so a new subpackage cannot be left out of the wheel.
Everything else about the distribution is in pyproject.toml."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent


def discover_packages() -> list[str]:
    """The import names of the packages under every folder of the package-dir mapping."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return sorted(
        name
        for top, folder in package_dir.items()
        for name in [top, *(f"{top}.{sub}" for sub in find_packages(str(ROOT / folder)))]
    )


setup(packages=discover_packages())
