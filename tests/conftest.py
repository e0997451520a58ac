"""Shared fixtures: run a notebook with papermill into a temporary outputs folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from where223.pipeline.run import PlannedRun, execute


def run_notebook(notebook: str, output_root: Path, **parameters: Any) -> Path:
    """Execute a source notebook with `parameters` into `output_root` and return the executed copy.

    ipykernel stops forwarding file descriptors (so `sys.stdout.fileno()` is None, which ORTModule's
    log redirection cannot take) when PYTEST_CURRENT_TEST is set: the kernel starts without it.
    """
    current = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        return execute(PlannedRun(notebook, parameters), output_root=output_root)
    finally:
        if current is not None:
            os.environ["PYTEST_CURRENT_TEST"] = current


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="session")
def session_outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One temporary outputs folder shared by the notebook tests of a session."""
    return tmp_path_factory.mktemp("outputs")


TINY = {"batch_size": 1, "seq_len": 8}


def run_name(path: str, **parameters: Any) -> str:
    """The run folder notebook 01 writes for `path` and `parameters`, named as the notebooks name it."""
    from where223.gpt2 import runs
    from where223.gpt2.reproduce import ReproduceSettings

    return ReproduceSettings.from_parameters({**runs.DEFAULTS, "path": path, **parameters}).run_name()


@pytest.fixture(scope="session")
def reproduced(session_outputs: Path):
    """Run notebook 01 with tiny parameters once per path and session; returns path -> (executed, record)."""
    done: dict[str, tuple[Path, dict[str, Any]]] = {}

    def get(path: str) -> tuple[Path, dict[str, Any]]:
        if path not in done:
            executed = run_notebook("01_reproduce", session_outputs, path=path, **TINY)
            done[path] = executed, load_json(session_outputs / run_name(path, **TINY) / "reproduce.json")
        return done[path]

    return get
