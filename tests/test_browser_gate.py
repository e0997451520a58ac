"""The browser suite says why it does not run: skipped with one line without Chromium, failed when CI is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from where223.pipeline.paths import ROOT


def run_suite_without_chromium(ci: bool) -> subprocess.CompletedProcess[str]:
    """The write-up test of the browser suite, with a PATH that holds the venv's tools but no browser."""
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env["PATH"] = str(Path(sys.executable).parent)
    if ci:
        env["CI"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests/browser", "-k", "write_up", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def test_without_chromium_the_suite_is_skipped_with_its_reason():
    done = run_suite_without_chromium(ci=False)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "browser suite skipped: no chromium on PATH (apt-get install chromium)" in done.stdout
    assert "1 skipped" in done.stdout


def test_with_ci_set_a_missing_chromium_fails_the_suite():
    done = run_suite_without_chromium(ci=True)
    assert done.returncode == 1
    assert "browser suite: no chromium on PATH (apt-get install chromium), and CI is set" in done.stdout
