"""Papermill orchestration: execute the planned notebooks into outputs/, never in place.

A plan (notebooks/plan.yaml by default) lists executed copies: a notebook and the parameters it runs with.
Each copy is named by its parameters, written atomically, and exported to HTML with inputs hidden; a failed
copy, traceback included, is kept under outputs/failed/ and the previous outputs stay as they were.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from where223.pipeline.paths import KERNEL_NAME, NOTEBOOKS, OUTPUTS, slug
from where223.pipeline.records import write_atomic

DEFAULT_PLAN = NOTEBOOKS / "plan.yaml"


@dataclass(frozen=True)
class PlannedRun:
    """One executed copy: which notebook, with which parameters."""

    notebook: str
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The executed copy's name, built from the notebook and its parameter values."""
        parts = [self.notebook, *(f"{slug(k)}={slug(v)}" for k, v in sorted(self.parameters.items()))]
        return "__".join(parts)


def load_plan(path: str | os.PathLike[str] = DEFAULT_PLAN) -> list[PlannedRun]:
    """Read a plan file: `runs:` a list of `{notebook: 01_reproduce, parameters: {...}}`."""
    plan_path = Path(path)
    if not plan_path.is_file():
        raise FileNotFoundError(f"plan file {plan_path} does not exist")
    data = yaml.safe_load(plan_path.read_text()) or {}
    runs = [PlannedRun(entry["notebook"], dict(entry.get("parameters") or {})) for entry in data.get("runs", [])]
    for run in runs:
        if not (NOTEBOOKS / f"{run.notebook}.ipynb").is_file():
            known = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
            raise ValueError(f"{plan_path}: notebook {run.notebook!r} does not exist; known: {known}")
    return runs


def select(runs: list[PlannedRun], only: list[str] | None) -> list[PlannedRun]:
    """Keep the runs whose notebook starts with one of `only` (e.g. ['01', '03'])."""
    if not only:
        return runs
    chosen = [run for run in runs if any(run.notebook.startswith(prefix) for prefix in only)]
    if not chosen:
        raise ValueError(f"--only {','.join(only)} matches no notebook in the plan")
    return chosen


def check_kernel(kernel: str) -> None:
    """Fail fast, saying what to do, when the Jupyter kernel is not installed."""
    from jupyter_client.kernelspec import KernelSpecManager

    known = KernelSpecManager().find_kernel_specs()
    if kernel not in known:
        raise RuntimeError(
            f"Jupyter kernel {kernel!r} is not installed (known: {sorted(known)}); run `make setup` "
            "or pass --kernel NAME"
        )


def execute(run: PlannedRun, output_root: Path = OUTPUTS, kernel: str = KERNEL_NAME) -> Path:
    """Execute one copy with papermill; on success replace the previous copy, on failure keep it aside."""
    import papermill

    check_kernel(kernel)
    executed_dir = output_root / "notebooks"
    failed_dir = output_root / "failed"
    executed_dir.mkdir(parents=True, exist_ok=True)
    parameters = {**run.parameters}
    if output_root != OUTPUTS:
        parameters.setdefault("output_root", str(output_root))
    fd, scratch = tempfile.mkstemp(dir=executed_dir, prefix=f".{run.name}.", suffix=".ipynb")
    os.close(fd)
    try:
        papermill.execute_notebook(
            str(NOTEBOOKS / f"{run.notebook}.ipynb"),
            scratch,
            parameters=parameters,
            kernel_name=kernel,
            cwd=str(NOTEBOOKS),
            progress_bar=sys.stderr.isatty(),
        )
    except BaseException:
        failed_dir.mkdir(parents=True, exist_ok=True)
        kept = failed_dir / f"{run.name}.ipynb"
        os.replace(scratch, kept)
        print(f"where223 run: {run.notebook} failed; executed copy with traceback: {kept}", file=sys.stderr)
        raise
    target = executed_dir / f"{run.name}.ipynb"
    os.replace(scratch, target)
    (failed_dir / f"{run.name}.ipynb").unlink(missing_ok=True)
    export_html(target)
    return target


def export_html(notebook: Path) -> Path:
    """Write `<notebook>.html` beside an executed notebook, inputs hidden, for reviewers."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))
    return write_atomic(notebook.with_suffix(".html"), body)


def run_plan(plan: list[PlannedRun], output_root: Path = OUTPUTS, kernel: str = KERNEL_NAME) -> list[Path]:
    """Execute every planned copy in order, printing one progress line per copy."""
    done = []
    for index, run in enumerate(plan, start=1):
        print(f"[{index}/{len(plan)}] {run.name}", flush=True)
        done.append(execute(run, output_root, kernel))
    return done


def cli_main(args: argparse.Namespace) -> int:
    """`where223 run`: execute the plan (or part of it) into outputs/."""
    only = [part.strip() for part in args.only.split(",")] if args.only else None
    plan = select(load_plan(args.params or DEFAULT_PLAN), only)
    output_root = Path(args.output_root).resolve() if args.output_root else OUTPUTS
    run_plan(plan, output_root, args.kernel)
    return 0
