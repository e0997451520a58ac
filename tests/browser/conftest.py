"""The browser suite: the system's Chromium (Debian's `chromium` package) driven by Playwright's Python API.

Without Chromium the suite is skipped with one line saying why; with CI set in the environment it fails instead.
Playwright never downloads a browser here: it is pointed at the system one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT

ARTIFACTS = ROOT / "test-artifacts" / "browser"  # git-ignored
BROWSER_NAMES = ("chromium", "chromium-browser")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives the system's Chromium (tests/browser)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.fspath).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.browser)


def system_chromium() -> str | None:
    """The system's Chromium, or None."""
    return next((found for name in BROWSER_NAMES if (found := shutil.which(name))), None)


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """A headless system Chromium (a Playwright Browser), for one test file: Playwright's sync API keeps its event
    loop running in this thread while it is open, and a notebook test run after it on the same worker would find
    that loop running (nbclient: "This event loop is already running")."""
    executable = system_chromium()
    missing = None if executable else "no chromium on PATH (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "playwright is not installed (make setup)"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"browser suite: {missing}, and CI is set")
        pytest.skip(f"browser suite skipped: {missing}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
