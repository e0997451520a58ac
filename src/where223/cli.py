"""`where223` command line: one table of commands, each handler beside its parser.

A command is a class: the first line of its docstring is its help in `where223 --help`; `where223 CMD --help`
adds the rest, then the docstring of the library module or function it runs (read from the source, so asking
for help imports nothing). Each handler imports its library module when it runs, so `where223 lint` never
loads torch. Library modules return data and raise; only this module prints.

Exit status: 0 done, 1 the tool worked and found something (violations, no recorded source, a model it cannot
repair, a notebook that failed), 2 a usage or file error, told in one line on stderr (`where223 CMD: ...`);
`lint` adds 3, incomplete: nothing found, but not every node could be checked. Ctrl-C: one line, exit 130;
SIGTERM: one line, exit 143; either way temporary files are removed and nothing is published.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import importlib.util
import inspect
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from where223.errors import UsageError, printable

if TYPE_CHECKING:
    from where223.study.variants.run import StudySettings

ERROR_LIMIT = 2000  # characters of one error line


def library_doc(target: str) -> str:
    """The docstring of `module` or `module:function`, read from the module's source without importing it."""
    module, _, name = target.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"no module {module}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    if not name:
        return ast.get_docstring(tree) or ""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_docstring(node) or ""
    raise LookupError(f"{module} defines no {name}")


class Command:
    """A subcommand: the subclass's docstring is its help, `run` its handler beside `add_arguments`."""

    name: ClassVar[str]
    explained_by: ClassVar[str]  # the library module or `module:function` whose docstring --help adds

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring: the command's entry in `where223 --help`."""
        return inspect.getdoc(cls).splitlines()[0]

    @classmethod
    def description(cls) -> str:
        """The whole docstring, then the library's own."""
        return f"{inspect.getdoc(cls)}\n\n{cls.explained_by.replace(':', '.')}:\n{library_doc(cls.explained_by)}"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Declare the command's options."""

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        """Do the work and print the result; return the exit status."""
        raise NotImplementedError


def _say(line: str) -> None:
    print(line, flush=True)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _complain(command: str, message: str) -> None:
    print(f"where223 {command}: {printable(message, ERROR_LIMIT)}", file=sys.stderr, flush=True)


ORT_TIMEOUT_S = 60.0  # default time ONNX Runtime may take to create a session for `repair`'s result


def positive_float(text: str) -> float:
    """An option's value as a float above 0."""
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def non_negative_int(text: str) -> int:
    """An option's value as an int of 0 or more (argparse names this function in its error)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _writable_file(spelled: str) -> Path:
    """The file a user named, if it can be written without creating a folder; else a UsageError saying why."""
    path = Path(spelled)
    if spelled.endswith(("/", os.sep)) or path.is_dir():
        raise UsageError(f"{spelled}: is a directory; name the file to write")
    folder = path.parent
    if not folder.exists():
        raise UsageError(f"{folder}: no such directory (it is not created)")
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a directory")
    return path


def _same_file(first: Path, second: Path) -> bool:
    if first.exists() and second.exists():
        return os.path.samefile(first, second)
    return first.resolve() == second.resolve()


class Run(Command):
    """Execute the planned notebooks with papermill into outputs/ (what `make run` does).

    Exit 0 when every notebook ran, 1 when one failed (its executed copy, traceback included, is kept under
    outputs/failed/), 2 for a plan file or an option the runner cannot use.
    """

    name = "run"
    explained_by = "where223.pipeline.run"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--params", metavar="FILE.yaml", help="a plan file in the format of notebooks/plan.yaml")
        parser.add_argument("--only", metavar="01,03", help="run only notebooks whose names start with these prefixes")
        parser.add_argument("--output-root", help="write outputs under this folder instead of outputs/")
        parser.add_argument("--kernel", default="where223", help="Jupyter kernel name (default: where223)")
        parser.add_argument("--wait", action="store_true", help="if another run is writing the outputs, start after it")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import run as pipeline

        only = [prefix.strip() for prefix in args.only.split(",")] if args.only is not None else None
        plan = pipeline.select(pipeline.load_plan(args.params or pipeline.DEFAULT_PLAN), only)
        output_root = Path(args.output_root).resolve() if args.output_root else pipeline.OUTPUTS
        try:
            pipeline.run_plan(plan, output_root, args.kernel, progress=_say, wait=args.wait)
        except pipeline.NotebookFailedError as failure:
            _complain("run", str(failure))
            return 1
        return 0


class Report(Command):
    """Regenerate outputs/REPORT.md, the reviewer write-up, from the recorded JSON; prints its path."""

    name = "report"
    explained_by = "where223.study.report"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--outputs", help="the outputs folder to read and write (default outputs/)")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.study import report

        outputs = Path(args.outputs) if args.outputs else report.OUTPUTS
        if not outputs.is_dir():
            raise UsageError(f"{outputs}: no such outputs folder")
        _say(str(report.write_report(outputs)))
        return 0


class Compare(Command):
    """Say whether the outputs reproduce a reference's records (default: the committed ones, HEAD).

    REF is a folder of outputs or a git revision (its outputs/). Prints what differs, the deciding differences
    first, then one summary line. Exit 0 reproduced, 1 not reproduced, 2 a bad REF or a tree without records.
    """

    name = "compare"
    explained_by = "where223.pipeline.compare"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("ref", nargs="?", default="HEAD", help="a git revision or a folder of outputs (HEAD)")
        parser.add_argument("--outputs", help="the outputs folder to judge (default outputs/)")
        parser.add_argument("--summary", action="store_true", help="print only the one-line summary")
        parser.add_argument("--all", action="store_true", help="list the differences not judged too")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import compare

        outputs = Path(args.outputs) if args.outputs else compare.OUTPUTS
        result = compare.compare(args.ref, outputs)
        if not args.summary:
            kinds = compare.KINDS if args.all else ("differs",)
            if result.of("differs") or args.all:
                _say(compare.table(result, kinds))
        _say(result.summary())
        return 0 if result.reproduced else 1


class Lint(Command):
    """Check every node's type constraints against ONNX's own operator schemas.

    Roots are listed first, each with the consequences that follow from it. Exit 0 clean (every node checked),
    1 violations found, 2 unreadable input or onnx's inliner or shape inference failing on it (one line),
    3 incomplete: no violation among the nodes checked, but some values stayed untyped or nodes unchecked.
    """

    name = "lint"
    explained_by = "where223.graph.lint"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="path to an .onnx file")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.lint import LintOutcome, lint_model

        report = lint_model(args.model)
        _say(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
        return {LintOutcome.CLEAN: 0, LintOutcome.VIOLATIONS: 1, LintOutcome.INCOMPLETE: 3}[report.outcome]


class Blame(Command):
    """Show the Python source lines that produced an ONNX node.

    Exit 0 found, 1 no source recorded, 2 unreadable model or unknown node.
    """

    name = "blame"
    explained_by = "where223.graph.blame"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="path to an .onnx file")
        parser.add_argument("node", help="node name, e.g. /transformer/h.0/attn/Where or Where_223")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument(
            "--all", action="store_true", help="also show torch's nn.Module call and export machinery frames"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.blame import blame
        from where223.pipeline import portable

        result = blame(args.model, args.node)
        # paths relative to site-packages or the repository, as in the records
        if args.json:
            _say(json.dumps(portable.record(result.to_dict()), indent=2))
        elif result.frames:
            _say(portable.text(result.format(all_frames=args.all)))
        else:
            print(result.format(), file=sys.stderr)
        return 0 if result.frames else 1


class Draw(Command):
    """Draw a node's dtype-labelled neighbourhood as PNG and SVG; prints the two paths.

    Exit 0 drawn, 1 no node named and no violation to centre on, 2 bad input or output path. No folder is
    created: the folder of --out must exist.
    """

    name = "draw"
    explained_by = "where223.graph.draw:draw_neighbourhood"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="path to an .onnx file")
        parser.add_argument("node", nargs="?", help="centre node (default: the first lint violation)")
        parser.add_argument(
            "--hops", type=non_negative_int, default=2, help="neighbourhood radius in edges (default 2)"
        )
        parser.add_argument(
            "--out", default="neighbourhood", help="output path without suffix (default ./neighbourhood)"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.draw import NothingToDrawError, draw_neighbourhood

        for suffix in (".png", ".svg"):
            _writable_file(f"{args.out}{suffix}")
        try:
            paths = draw_neighbourhood(args.model, args.node, args.hops, args.out)
        except NothingToDrawError as nothing:
            _complain("draw", str(nothing))
            return 1
        for path in paths:
            _say(printable(str(path), None))
        return 0


class Repair(Command):
    """Insert Casts that resolve every type-binding violation, re-lint, and load the result in ONNX Runtime.

    Prints every change. Exit 0 repaired (or nothing to repair: nothing is written), 1 not repairable or refused
    by ONNX Runtime, 2 unreadable input (its external weights included) or an output that cannot be written: a
    directory, a missing folder (none is created), or the input itself without --in-place. The output is
    written atomically (a temporary file beside it, then renamed).
    """

    name = "repair"
    explained_by = "where223.graph.repair:repair"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("input", help="the exported .onnx file")
        parser.add_argument("output", nargs="?", help="where to write the repaired model (not the input)")
        parser.add_argument("--in-place", action="store_true", help="overwrite the input instead (give no output)")
        parser.add_argument(
            "--to",
            default="output",
            help="cast target: 'output' (the type the node's output already has, default) or an ONNX "
            "type name such as float, float16, bfloat16",
        )
        parser.add_argument(
            "--ort-timeout", type=positive_float, default=ORT_TIMEOUT_S, metavar="SECONDS",
            help=f"time ONNX Runtime may take to judge the result (default {ORT_TIMEOUT_S:g}; then: timeout, exit 1)",
        )  # fmt: skip

    @staticmethod
    def output_path(args: argparse.Namespace) -> Path:
        """Where the repaired model goes: OUTPUT, or INPUT with --in-place; never the input by accident."""
        source = Path(args.input)
        if args.in_place:
            if args.output is not None and not _same_file(Path(args.output), source):
                raise UsageError("--in-place overwrites the input: give no output")
            # a symlinked input: the file it points to is rewritten, the link stays a link
            return _writable_file(str(source.resolve()) if source.is_symlink() else args.input)
        if args.output is None:
            raise UsageError("name the output file, or pass --in-place to overwrite the input")
        output = _writable_file(args.output)
        if _same_file(output, source):
            raise UsageError(f"{args.output} is the input; pass --in-place to overwrite it")
        return output

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.dtypes import tensor_type_string
        from where223.graph.lint import lint_model
        from where223.graph.loading import load_model
        from where223.graph.ort import OrtVerdict, judge
        from where223.graph.repair import RepairError, repair, save_model

        output = Repair.output_path(args)
        if args.to != "output":
            try:
                tensor_type_string(args.to)
            except ValueError as error:
                raise UsageError(f"--to: {error}") from error
        model, _ = load_model(args.input, load_weights=True)
        try:
            repaired, changes = repair(model, target=args.to)
        except RepairError as error:
            _complain("repair", str(error))
            return 1
        if not changes:
            _say(f"{args.input}: no type-binding conflicts; nothing changed, nothing written")
            return 0
        save_model(repaired, output)
        _say(f"repaired {args.input} -> {output}: {len(changes)} change(s)")
        for change in changes:
            _say(f"  {change}")
        relinted = lint_model(output)
        remaining = relinted.violations
        left = (
            f"; {len(remaining)} other finding(s) left in place:"
            if remaining
            else ", clean"
            if relinted.clean
            else ", no other finding among the nodes checked"
        )
        _say(f"re-lint: no type-binding conflict left{left}")
        for violation in remaining:
            _say(f"  {violation.message()}")
        judgement = judge(output, timeout_s=args.ort_timeout)  # in a child process: bounded, and no torch here
        if judgement.verdict == OrtVerdict.MISSING_KERNEL:
            _say(
                "ONNX Runtime accepts the repaired model's types; this machine cannot execute it: "
                + printable((judgement.message or "").strip(), ERROR_LIMIT)
            )
        elif judgement.verdict == OrtVerdict.TIMEOUT:
            unchecked = f"{output} is written but unchecked: {judgement.message}"
            _complain("repair", f"{unchecked} (--ort-timeout to wait longer)")
            return 1
        elif judgement.verdict != OrtVerdict.ACCEPTED:
            _complain("repair", f"ONNX Runtime refuses the repaired model: {judgement.message}")
            return 1
        else:
            _say("ONNX Runtime loads the repaired model")
        return 0


class BenchVariants(Command):
    """Measure every way of writing GPT-2's scale and mask lines: tracing, numbers, syncs, step time.

    Prints the table and the recommendation; writes outputs/variants/variants-DEVICE.json.
    """

    name = "bench-variants"
    explained_by = "where223.study.variants.run"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
        parser.add_argument("--amp-dtype", default="auto", help="auto (fp16 on CUDA, bf16 on CPU) | bf16 | fp16")
        parser.add_argument("--preset", default="gpt2", help="model of the training steps: gpt2 (124M) | tiny")
        parser.add_argument("--batch-size", type=int, default=1, help="rows per training step (default 1)")
        parser.add_argument("--seq-len", type=int, default=16, help="tokens per row (default 16)")
        parser.add_argument("--steps", type=int, default=20, help="timed steps per variant (default 20)")
        parser.add_argument("--warmup", type=int, default=2, help="untimed round-robin rounds first (default 2)")
        parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps per variant, CUDA only")
        parser.add_argument("--seed", type=int, default=0, help="model initialisation and synthetic data (default 0)")
        parser.add_argument("--variants", help="comma-separated variant names (default: every measured variant)")
        parser.add_argument("--no-export", action="store_true", help="skip the ONNX export checks")
        parser.add_argument("--out", help="output root (default outputs/); the JSON goes to <out>/variants/")
        parser.add_argument("--wait", action="store_true", help="if a run is writing the outputs, start after it")

    @staticmethod
    def study_settings(args: argparse.Namespace) -> StudySettings:
        """The study's StudySettings from the options (a ParameterError names a bad one)."""
        from where223.study.variants import run as bench

        return bench.StudySettings.resolve(
            device=args.device,
            amp_dtype=args.amp_dtype,
            preset=args.preset,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            steps=args.steps,
            warmup=args.warmup,
            profile_steps=args.profile_steps,
            seed=args.seed,
            export=not args.no_export,
            names=args.variants.split(",") if args.variants else bench.MEASURED,
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import paths, publish
        from where223.study.variants import analysis as ranking
        from where223.study.variants import run as bench

        settings = BenchVariants.study_settings(args)
        output_root = Path(args.out).resolve() if args.out else paths.OUTPUTS
        # Staged like a notebook run: the record reaches the outputs only from a study that completed.
        with publish.staged(f"bench-variants-{settings.device}", output_root, wait=args.wait) as stage:
            record = bench.run_study(settings, stage, progress=_progress)
        _say(ranking.format_table(record))
        _say(f"\nwritten: {output_root / Path(record['path']).relative_to(stage)}")
        return 0


def _deadline(text: str) -> dt.datetime:
    """An ISO date and time, UTC when it names no zone."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO time such as 2026-12-01T18:00: {text!r}") from error
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def _patterns(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _scheduler(text: str) -> str:
    """A Dask scheduler address such as tcp://HOST:8786."""
    if "://" not in text or not text.split("://", 1)[1]:
        raise argparse.ArgumentTypeError(f"not a scheduler address such as tcp://HOST:8786: {text!r}")
    return text


class Sweep(Command):
    """Run (or resume) a sweep's cells on dask.distributed, then summarize its records.

    --space names a committed YAML space (spaces/matrix.yaml, spaces/architectures.yaml); every cell not yet
    recorded with its key runs as a Dask task, on a local cluster of single-threaded workers (one per core) or on
    the cluster at --scheduler. A status line tells done / failed / left, the rate and the time left. The outputs
    tree is locked for the sweep's whole run. Unknown names in the space or the filters, or an unreachable
    scheduler: one line, exit 2, nothing written. `make sweep` runs both spaces, then notebooks 05 and 06.
    """

    name = "sweep"
    explained_by = "where223.sweep.driver"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--space", required=True, type=Path, help="a YAML space (spaces/*.yaml)")
        parser.add_argument("--scheduler", type=_scheduler, help="a running Dask scheduler, tcp://HOST:8786")
        parser.add_argument("--workers", type=non_negative_int, help="local workers (default: one per core)")
        for field in ("stack", "model", "recipe", "exporter"):
            parser.add_argument(f"--{field}", help=f"comma-separated glob patterns: only cells whose {field} matches")
        parser.add_argument("--force", action="store_true", help="rerun cells that are already recorded")
        parser.add_argument(
            "--deadline", type=_deadline, help="ISO time (UTC if naive) after which unfinished cells become not_run"
        )
        parser.add_argument("--outputs", type=Path, help="the outputs tree the records go to (default: outputs/)")
        parser.add_argument("--summary-only", action="store_true", help="only rewrite the study's summary")
        parser.add_argument(
            "--lock", action="store_true", help="only compile the locks of the space's environments (uv pip compile)"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import paths, publish
        from where223.sweep import driver
        from where223.sweep.space import load_space

        space = load_space(args.space)
        if args.lock:
            from where223.sweep import stacks

            environments = {stack.environment.name: stack.environment for stack in space.stacks.values()}
            common = stacks.load_stacks().common
            for name, environment in environments.items():
                if name != stacks.PROJECT:
                    _say(f"{name}: {stacks.compile_lock(environment, common)}")
            return 0
        filters = {field: _patterns(getattr(args, field)) for field in ("stack", "model", "recipe", "exporter")}
        if any(filters.values()):
            space = space.select(filters)
        outputs = (args.outputs or paths.OUTPUTS).resolve()
        if not outputs.is_dir():
            raise UsageError(f"{outputs}: no such outputs folder")
        with publish.outputs_lock(outputs):
            if not args.summary_only:
                _say(f"{space.name}: {len(space.cells)} cells")
                counts = driver.run(
                    space, scheduler=args.scheduler, workers=args.workers or None, force=args.force,
                    output_root=outputs, deadline=args.deadline, say=_say,
                )  # fmt: skip
                _say(f"{space.name}: ran {sum(counts.values())} cells: {json.dumps(dict(sorted(counts.items())))}")
            summary = _summarize(space.study, outputs)
        _say(f"{space.name}: {summary}")
        return 0


def _summarize(study: str, outputs: Path) -> str:
    """Rewrite a study's summary from its records under `outputs`; its counts, in one line."""
    if study == "matrix" and (outputs / "matrix" / "cells").is_dir():
        from where223.study.matrix import analysis as matrix

        return f"matrix.json: {json.dumps(matrix.aggregate(outputs / 'matrix')['counts'], sort_keys=True)}"
    if study == "architectures" and (outputs / "architectures").is_dir():
        from where223.study.architectures import analysis as architectures

        counts = architectures.summarize(outputs / "architectures")["counts"]
        return f"summary.json: {json.dumps(counts, sort_keys=True)}"
    return "no summary for this study"


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
                _say(f"stripped {path}")
        return 0


COMMANDS: dict[str, type[Command]] = {
    command.name: command for command in (Run, Report, Compare, Lint, Blame, Draw, Repair, BenchVariants, Sweep, Strip)
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, and a description written only when help is shown."""

    def __init__(self, *args: Any, describe: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        self._describe = describe

    def format_help(self) -> str:
        if self._describe is not None:
            self.description = self._describe()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {printable(message, ERROR_LIMIT)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
    parser = _Parser(
        prog="where223",
        description="Reproduce, explain and fix ONNX type-constraint failures such as GPT-2's Where_223.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS.values():
        command.add_arguments(sub.add_parser(command.name, help=command.summary(), describe=command.description))
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that `finally` blocks (temporary files) run as for Ctrl-C."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """While the command runs, SIGTERM raises Terminated instead of ending the process at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the command, and turn a usage or file error into one line and exit 2."""
    try:
        args, unknown = build_parser().parse_known_args(argv)
    except SystemExit as stop:  # --help, or a usage error argparse has already told in one line
        return stop.code if isinstance(stop.code, int) else 2
    name = args.command
    if unknown:
        _complain(name, f"unrecognized arguments: {' '.join(unknown)} (see where223 {name} --help)")
        return 2
    try:
        with _terminate_as_exception():
            return COMMANDS[name].run(args)
    except KeyboardInterrupt:
        _complain(name, "interrupted (Ctrl-C): temporary files removed, nothing published")
        return 130
    except Terminated:
        _complain(name, "terminated (SIGTERM): temporary files removed, nothing published")
        return 143
    except BrokenPipeError:  # e.g. `where223 lint big.onnx | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as error:  # one line per problem when it lists several (a plan file's, say)
        for problem in getattr(error, "problems", None) or [str(error)]:
            _complain(name, problem)
    except OSError as error:
        _complain(name, f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error))
    return 2


if __name__ == "__main__":
    sys.exit(main())
