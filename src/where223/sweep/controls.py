"""The engine's controls: models that end a cell the ways a real one can, so every path of the engine is tested.

`control-sleep` outlives any time limit (`timeout`), `control-exit` exits without a record (`crashed`), and
`control-kill-worker` kills the Dask worker running it (only when that worker set WHERE223_SWEEP_WORKER_PID to
the cell's parent, or to its parent's parent: a warm cell's parent is its stack's warm server), so the engine
retries it once and then records `crashed`. Standard library only.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from where223.outcomes import Outcome

PREFIX = "control-"
CONTROLS = ("control-sleep", "control-exit", "control-kill-worker")


def run(model: str) -> dict[str, Any]:
    """Run control `model`; only a control that should leave a record returns."""
    if model == "control-sleep":
        time.sleep(3600)
    elif model == "control-exit":
        os._exit(3)
    elif model == "control-kill-worker":
        worker = os.environ.get("WHERE223_SWEEP_WORKER_PID")
        if worker and worker in (str(os.getppid()), _parent_of(os.getppid())):
            os.kill(int(worker), signal.SIGKILL)
            os._exit(9)
        return {"outcome": Outcome.NOT_APPLICABLE, "reason": "not run by a sweep worker: nothing to kill"}
    raise KeyError(f"no control {model!r} (controls: {', '.join(CONTROLS)})")


def _parent_of(pid: int) -> str | None:
    """The parent of process `pid` (from /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return None
