"""Run one sweep cell in a subprocess of its stack's interpreter, with a time limit, and return its one record.

Standard library only (and the stdlib-only outcome vocabulary): a Dask worker runs it on any host with the
project's checkout, whatever stack the cell needs. The cell (`python -m where223.sweep.cell`) writes its record
to a file of its own and announces each stage on stderr (`WHERE223_STAGE <name>`); this module reads the record,
or, when there is none, writes one that says how the cell ended: `timeout` (its process group is killed at the
limit) or `crashed` (it exited without a record), with the last stage it announced. Every thread pool of the
cell is pinned (`THREAD_VARIABLES`, and `torch.set_num_threads` in the cell).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from where223.outcomes import Outcome

STAGE_MARKER = "WHERE223_STAGE "
ENTRY = "where223.sweep.cell"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "WHERE223_CELL_THREADS")
OFFLINE = {"TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# Set to the Dask worker's pid for its cells: the engine's kill-the-worker control checks it before it kills.
WORKER_PID = "WHERE223_SWEEP_WORKER_PID"


def now() -> str:
    """The current UTC time as records write it."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a text, stripped."""
    return "\n".join(text.strip().splitlines()[-lines:])


def last_stage(stderr: str) -> str:
    """The last `WHERE223_STAGE <name>` marker a cell printed ('start' when none)."""
    stage = "start"
    for line in stderr.splitlines():
        if line.startswith(STAGE_MARKER):
            stage = line.split(maxsplit=1)[1].strip() if len(line.split()) > 1 else stage
    return stage


def cell_environment(source: Path, path: Sequence[str | os.PathLike[str]], threads: int) -> dict[str, str]:
    """The cell's process environment: offline, threads pinned, `path` (side folders) then `source` on PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(OFFLINE)
    env.update({name: str(threads) for name in THREAD_VARIABLES})
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(source)])
    env["WHERE223_ROOT"] = str(Path(source).parent)
    env[WORKER_PID] = str(os.getpid())
    return env


def ended_record(key: Mapping[str, Any], outcome: Outcome, error: dict[str, Any]) -> dict[str, Any]:
    """The record of a cell that left none: how it ended, written by this worker."""
    return {"key": dict(key), "outcome": outcome, "error": error, "recorded_by": "worker", "recorded_at": now()}


def run_cell(
    key: Mapping[str, Any],
    python: str | os.PathLike[str],
    source: Path,
    work: Path,
    timeout_s: float,
    *,
    path: Sequence[str | os.PathLike[str]] = (),
    stack: Mapping[str, Any] | None = None,
    threads: int = 1,
    runner: str | None = None,
) -> dict[str, Any]:
    """Run the cell `key` with `python` (cwd `work`, which it may fill) and return its record, with `wall_s`."""
    work.mkdir(parents=True, exist_ok=True)
    written = work / "record.json"
    written.unlink(missing_ok=True)
    command = [
        str(python), "-m", ENTRY, "--cell", json.dumps(dict(key), sort_keys=True),
        "--stack", json.dumps(dict(stack or {}), sort_keys=True), "--onnx", str(work / "model.onnx"),
        "--out", str(written), *(["--runner", runner] if runner else []),
    ]  # fmt: skip
    start = time.monotonic()
    process = subprocess.Popen(
        command, cwd=work, env=cell_environment(source, path, threads), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
    )  # fmt: skip
    try:
        _, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the cell and whatever it started (ONNX Runtime's child, say)
        _, stderr = process.communicate()
        error = {"stage": last_stage(stderr), "type": "Timeout", "message": f"did not finish within {timeout_s:g} s"}
        record = ended_record(key, Outcome.TIMEOUT, error)
    else:
        if written.is_file():
            record = json.loads(written.read_text())
        else:
            error = {
                "stage": last_stage(stderr),
                "type": "ProcessExit",
                "message": f"exit status {process.returncode}; stderr tail:\n{tail(stderr, 20)}",
            }
            record = ended_record(key, Outcome.CRASHED, error)
    record["wall_s"] = round(time.monotonic() - start, 1)
    return record
