"""The pipeline's commands: `run` (the notebooks, as `make run` runs them), `compare` (did a rerun reproduce the
committed records?), `strip` (source notebooks without outputs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from where223.cli import _options as options
from where223.cli._base import Command, say, wrote
from where223.errors import UsageError


class Run(Command):
    """Execute the planned notebooks with papermill into outputs/ (what `make run` does).

    Independent notebooks run two at a time (`--jobs`), as the plan's `after:` and `alone:` allow; each is
    published whole as it completes, one at a time. Exit 0 when every notebook ran, 1 when one failed (its executed
    copy, traceback included, is kept under outputs/failed/; the notebooks running beside it finish, no other
    starts), 2 for a plan file or an option the runner cannot use. Ctrl-C (130) or SIGTERM (143) stops the running
    notebooks' kernels at once and prints one line: the copies published before and the interrupted ones' executed
    copies so far, kept under outputs/failed/ (nothing of them is published).
    """

    name = "run"
    explained_by = "where223.pipeline.run"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--params", metavar="FILE.yaml", help="a plan file in the format of notebooks/plan.yaml")
        parser.add_argument("--only", metavar="01,03", help="run only notebooks whose names start with these prefixes")
        options.output_root(parser, "write")
        parser.add_argument("--kernel", default="where223", help="Jupyter kernel name (default: where223)")
        parser.add_argument("--jobs", type=_jobs, default=2, metavar="N",
                            help="notebooks executed at a time where the plan allows (default: 2; 1: one by one)")
        options.wait(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import run as pipeline

        only = [prefix.strip() for prefix in args.only.split(",")] if args.only is not None else None
        plan = pipeline.select(pipeline.load_plan(args.params or pipeline.DEFAULT_PLAN), only)
        output_root = options.resolved_output_root(args, pipeline.OUTPUTS, must_exist=False)
        pipeline.run_plan(plan, output_root, args.kernel, progress=say, wait=args.wait, written=wrote, jobs=args.jobs)
        return 0


def _jobs(text: str) -> int:
    """`--jobs N`: a whole number from 1 to 16."""
    if not text.isdigit() or not 1 <= int(text) <= 16:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of notebooks from 1 to 16")
    return int(text)


class Compare(Command):
    """Say whether the outputs reproduce a reference's records (default: the committed ones, HEAD).

    REF is a folder of outputs or a git revision (its outputs/). A folder (REF or --output-root) is read as a
    folder, never through git, and walked without following links. Prints what differs, the deciding differences
    first (names escaped), then one summary line. Exit 0 reproduced, 1 not reproduced, 2 a bad REF or a tree
    without records, or one compare refuses (see where223.pipeline.compare's limits).
    """

    name = "compare"
    explained_by = "where223.pipeline.compare"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("ref", nargs="?", default="HEAD", help="a git revision or a folder of outputs (HEAD)")
        options.output_root(parser, "judge")
        parser.add_argument("--summary", action="store_true", help="print only the one-line summary")
        parser.add_argument("--all", action="store_true", help="list the differences not judged too")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import compare

        outputs = Path(args.output_root) if args.output_root else compare.OUTPUTS  # compare says when it is missing
        result = compare.compare(args.ref, outputs)
        if not args.summary:
            kinds = compare.KINDS if args.all else ("differs",)
            if result.of("differs") or args.all:
                say(compare.table(result, kinds))
        say(result.summary())
        return 0 if result.reproduced else 1


class Strip(Command):
    """Strip outputs and per-run metadata from source notebooks (all of notebooks/ unless named).

    Run it before committing a notebook saved from JupyterLab: a test keeps source notebooks clean.
    """

    name = "strip"
    explained_by = "where223.pipeline.notebooks:strip"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "notebooks", nargs="*", metavar="NOTEBOOK", help="notebooks to strip (default: notebooks/*.ipynb)"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import notebooks
        from where223.pipeline.paths import NOTEBOOKS

        files = [Path(name) for name in args.notebooks] or sorted(NOTEBOOKS.glob("*.ipynb"))
        for path in files:
            if not path.is_file():
                raise UsageError(f"{path}: no such notebook")
        for path in files:
            try:
                changed = notebooks.strip(path)
            except ValueError as error:  # nbformat: not JSON, or not a notebook
                raise UsageError(f"{path}: not a readable notebook ({error})") from error
            if changed:
                say(f"stripped {path}")
        return 0
