"""Run one worker (`python -m ...`) of a sweep in a subprocess with a timeout, and say how it ended.

The sweeps (`where223.study.matrix`, `where223.study.architectures`) run every cell in its own interpreter, so
a hang or a crash costs one cell, not the sweep. A worker writes its record to a file of its own and announces
each stage on stderr (`WHERE223_STAGE <name>`); the driver reads the record, or learns from the stage marker
where a worker that left none died.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from where223.pipeline import records

STAGE_MARKER = "WHERE223_STAGE "


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a text, stripped."""
    return "\n".join(text.strip().splitlines()[-lines:])


def last_stage(stderr: str) -> str:
    """The last `WHERE223_STAGE <name>` marker a worker printed ('start' when none)."""
    stage = "start"
    for line in stderr.splitlines():
        if line.startswith(STAGE_MARKER):
            stage = line.split(maxsplit=1)[1].strip()
    return stage


@dataclass
class WorkerResult:
    """The worker's own record, or (record None) why there is none: an `error` entry for the driver's record."""

    record: dict[str, Any] | None
    error: dict[str, Any] | None
    timed_out: bool
    wall_s: float


def run_worker(
    command: Sequence[str], written: Path, timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> WorkerResult:
    """Run `command`, which writes its record to `written`; a timeout or an exit without a record is described."""
    written.unlink(missing_ok=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(
            list(command), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        error = {"stage": last_stage(stderr), "type": "Timeout", "message": f"did not finish within {timeout_s:.0f} s"}
        return WorkerResult(None, error, True, round(time.monotonic() - start, 1))
    wall_s = round(time.monotonic() - start, 1)
    if written.is_file():
        return WorkerResult(records.read_json(written), None, False, wall_s)
    error = {
        "stage": last_stage(proc.stderr),
        "type": "ProcessExit",
        "message": f"exit status {proc.returncode}; stderr tail:\n{tail(proc.stderr, 20)}",
    }
    return WorkerResult(None, error, False, wall_s)
