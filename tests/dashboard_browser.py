"""Driving the dashboard in the OS's headless Chromium with Playwright, for the browser tests.

Playwright cannot download its own browser here, so it launches the system's
(`/usr/bin/chromium`, or `TUNEFLEET_TEST_CHROMIUM`); the tests skip, saying why, only
when that browser or Playwright is missing. Screenshots go to `test-artifacts/dashboard/`
(git-ignored) for review.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).parents[1]
SHOTS = ROOT / "test-artifacts" / "dashboard"
TUNEFLEET = str(Path(sys.executable).with_name("tunefleet"))
CHROMIUM = os.environ.get("TUNEFLEET_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SIZES = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def require_browser() -> None:
    """Skip the calling module unless Playwright and the system Chromium are installed."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
                    allow_module_level=True)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install -e '.[dev]')",
                    allow_module_level=True)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless system Chromium driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    """A page at one viewport size that records what it fetched and what went wrong."""

    page: Any
    base_url: str
    size: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def goto(self, path: str) -> None:
        self.page.goto(self.base_url + path)

    def shot(self, name: str) -> Path:
        """A full-page screenshot `test-artifacts/dashboard/<name>-<size>.png`."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}-{self.size}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_no_horizontal_scroll(self) -> None:
        width, inner = self.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width <= inner, f"{self.page.url} scrolls sideways at {self.size}: {width} > {inner}"

    def assert_clean(self) -> None:
        """Nothing came from another origin and no script failed."""
        origin = urlsplit(self.base_url).netloc
        foreign = [u for u in self.requests if urlsplit(u).scheme in ("http", "https", "ws", "wss")
                   and urlsplit(u).netloc != origin]
        assert not foreign, f"requests to other origins: {foreign}"
        assert not self.errors, f"script errors: {self.errors}"

    def count(self, fragment: str) -> int:
        """How many requests so far had `fragment` in their URL."""
        return sum(fragment in u for u in self.requests)


@contextmanager
def tab(browser: Any, base_url: str, size: str, token: str | None = None) -> Iterator[Tab]:
    """A fresh browser context (own localStorage) at viewport `size`, with `token` stored
    as the dashboard keeps it."""
    context = browser.new_context(viewport=SIZES[size], accept_downloads=True)
    if token:
        context.add_init_script(f"localStorage.setItem('tunefleet.token', {token!r});")
    page = context.new_page()
    page.set_default_timeout(15_000)
    opened = Tab(page, base_url, size)
    page.on("request", lambda request: opened.requests.append(request.url))
    page.on("pageerror", lambda error: opened.errors.append(str(error)))
    page.on("console", lambda message: opened.errors.append(message.text) if message.type == "error"
            and "Failed to load resource" not in message.text else None)
    try:
        yield opened
    finally:
        context.close()


def stop(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGTERM, then SIGKILL if it does not exit in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def copy_database(template: Path, home: Path) -> str:
    """A private copy of a migrated SQLite database under `home`."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "tunefleet.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"
