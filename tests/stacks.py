"""Today's sweep stack for the tests that run in it: its interpreter, or a skip (a failure under CI, which builds
it with `make stack-today`) where it is not built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from where223.sweep import stacks


def today_python() -> Path:
    """The interpreter of today's stack (`spaces/stacks.yaml`), skipping the test where it is not built here."""
    environment = stacks.load_stacks().environments["today"]
    if not (stacks.env_root(environment) / stacks.READY).is_file():
        missing = "today's stack is not built here: `make stack-today` builds it (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(missing)  # CI builds it: missing there is a broken setup, not a skip
        pytest.skip(missing)
    return stacks.env_root(environment) / "bin" / "python"
