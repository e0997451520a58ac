"""`python -m where223.sweep.cell --cell KEY --stack FACTS --onnx F --out F.json`: run one cell in its stack.

A worker entry point, not a `where223` command: the cell runs in its stack's own interpreter, which need not
hold the project's environment (started by `where223.sweep.worker`, or forked by that stack's warm server,
`where223.sweep.warm`, which calls `main` in a process of the cell's own). It runs the cell's
model with its recipe, exporter, opset and mode, and writes one record: the cell's `key`, its stack's facts and
what the model's runner found. A `control-*` model is one of the engine's controls (`where223.sweep.controls`);
any other model is run by the module the space names as its `runner` (`--runner`: `where223.study.matrix.run`
for the version matrix's tiny GPT-2, `where223.study.architectures.run` for a transformers model type), through
its `run_cell(key, stack, onnx_path)`. Imports only the standard library at module level, so it starts in every
stack, Python 3.10's among them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import records
from where223.sweep import controls
from where223.sweep.worker import WORKER_PID, now


def _pin_threads() -> None:
    threads = int(os.environ.get("WHERE223_CELL_THREADS", "0") or 0)
    if threads:
        import torch

        torch.set_num_threads(threads)


def run(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path, runner: str | None = None) -> dict[str, Any]:
    """The record of cell `key` run in this interpreter (`stack`: its facts, torch and transformers versions): an
    engine control's, or what `runner.run_cell(key, stack, onnx_path)` returns (the space names the runner, so the
    engine itself names no study)."""
    model = key["model"]
    if model.startswith(controls.PREFIX):
        return controls.run(model)
    if runner is None:
        raise ValueError(f"cell {model}: its space names no runner")
    import importlib

    _pin_threads()
    return importlib.import_module(runner).run_cell(key, stack, onnx_path)


def _exit_with_parent(parent: int | None = None, interval_s: float = 1.0) -> None:
    """End this process when its parent (the worker that enforces its time limit, or the warm server that forked
    it) dies: an orphaned cell would otherwise run unbounded. The parent is `parent` (the warm server names
    itself), else the process the worker named (either may be gone before this looks)."""
    parent = parent or int(os.environ.get(WORKER_PID) or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(70)

    threading.Thread(target=watch, name="where223-parent-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None, parent: int | None = None) -> int:
    """Run one cell and write its record (`parent`: the process whose death ends this one, when not the worker
    that WHERE223_SWEEP_WORKER_PID names)."""
    parser = argparse.ArgumentParser(prog="python -m where223.sweep.cell", description=main.__doc__)
    parser.add_argument("--cell", required=True, help="the cell's key as JSON")
    parser.add_argument("--stack", default="{}", help="the stack's facts as JSON (torch and transformers versions)")
    parser.add_argument("--onnx", required=True, type=Path, help="where to write the exported model")
    parser.add_argument("--out", required=True, type=Path, help="where to write the record")
    parser.add_argument("--runner", help="the module whose run_cell runs the cell (the space's `runner`)")
    args = parser.parse_args(argv)
    _exit_with_parent(parent)
    from where223.sweep import stages

    stages.ANNOUNCE["stages"] = True
    key, stack = json.loads(args.cell), json.loads(args.stack)
    args.onnx.parent.mkdir(parents=True, exist_ok=True)
    record = run(key, stack, args.onnx, args.runner)
    torch = sys.modules.get("torch")
    record.update({"key": key, "stack": stack, "recorded_by": "cell", "recorded_at": now()})
    if torch is not None:
        record["threads"] = {"torch": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS")}
    records.write_json(args.out, record)
    print(f"{key['model']}: {record['outcome']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
