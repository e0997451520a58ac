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


# where223's modules run in processes of their own, started with `python -m` (a cell that starts one runs its file,
# though never imports it): ONNX Runtime's calls (`where223.graph.ort`), a historic release's export
# (`where223.gpt2.releases`); every such module where223 starts is listed, whether or not a cell starts it today
CHILD_MODULES = ("where223.graph.ort_child", "where223.gpt2.releases")


def code_read() -> list[str]:
    """The repository paths (`src/where223/...`) of where223's Python files this process has imported (its
    `__main__` among them: this module, run with `python -m`), and of CHILD_MODULES' files, sorted: what decides
    whether a later commit changed the code this cell ran (`where223.pipeline.git.cell_code_changed`). A warm cell
    also lists what its server preloaded: more, never less, than it ran."""
    package = Path(__file__).resolve().parent.parent  # src/where223
    found = set()
    names = [name for name in list(sys.modules) if name in ("where223", "__main__") or name.startswith("where223.")]
    for name in [*names, *CHILD_MODULES]:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None) if module is not None else _module_file(name, package)
        if isinstance(file, str):
            path = Path(file).resolve()
            if path.suffix == ".py" and path.is_relative_to(package):
                found.add(f"src/where223/{path.relative_to(package).as_posix()}")
    return sorted(found)


def _module_file(name: str, package: Path) -> str | None:
    """The file of a where223 module not imported here, found by its name (a module or a package's __init__)."""
    base = package.joinpath(*name.split(".")[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return str(candidate)
    return None


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
    record["code"] = {"read": code_read()}
    records.write_json(args.out, record)
    print(f"{key['model']}: {record['outcome']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
