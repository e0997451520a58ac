"""Papermill orchestration: execute the planned notebooks into outputs/, never in place.

A plan (notebooks/plan.yaml by default) lists executed copies: a notebook and the parameters it runs with, both
checked (schema, the notebook's declared parameter names and types) before anything runs. Each copy is named by its
parameters and runs in a staging folder (see pipeline.publish): only a copy that completes, its own final checks
included, publishes its records, the executed notebook and its HTML (inputs hidden) into outputs/; a failed copy's
files, traceback included, are kept under outputs/failed/ and the published outputs stay byte for byte as they were.
An interrupt (Ctrl-C, SIGTERM) does the same, and stops the notebook's kernel at once, quietly (`notebook_kernel`).
One `where223 run` at a time writes into a tree.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from where223 import markdown
from where223.errors import Finding, UsageError
from where223.files import write_atomic
from where223.pipeline import portable, yamlfile
from where223.pipeline.paths import KERNEL_NAME, NOTEBOOKS, OUTPUTS, ROOT, slug
from where223.pipeline.publish import PublishError, failed_dir, outputs_lock, staged

DEFAULT_PLAN = NOTEBOOKS / "plan.yaml"
EXECUTED = "notebooks"  # the folder of executed copies and their HTML, in an outputs tree
# The keys of a plan file, for its reader (`where223.pipeline.yamlfile`): every other key is refused where it appears.
PLAN_SCHEMA: yamlfile.Schema = {"runs": yamlfile.Items({"notebook": None, "parameters": yamlfile.Names()})}
PARAMETERS_TABLE_ID = "run-parameters"  # the id of the parameters table the HTML export adds under the title


class PlanError(UsageError, ValueError):
    """A plan file, planned parameters or a selection the runner cannot use; one line per problem."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class NotebookFailedError(Finding, RuntimeError):
    """A planned notebook raised; its staged files and executed copy, traceback included, are under outputs/failed/."""


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


# The parameters the runner sets itself: where a notebook writes (its staging folder), where it reads.
RUNNER_PARAMETERS = ("output_root", "input_root")
# A value the notebook's typed default accepts, by papermill's inferred type name.
_ACCEPTS: dict[str, Callable[[object], bool]] = {
    "str": lambda value: isinstance(value, str),
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "bool": lambda value: isinstance(value, bool),
}


def declared_parameters(notebook: str) -> dict[str, dict[str, Any]]:
    """A notebook's parameters as papermill reads its `parameters` cell: name -> inferred type, default, help."""
    from papermill.inspection import inspect_notebook

    return inspect_notebook(str(NOTEBOOKS / f"{notebook}.ipynb"))


def parameter_problems(run: PlannedRun) -> list[str]:
    """What is wrong with `run`'s parameters against its notebook's: unknown names, wrong types; one line each."""
    declared = declared_parameters(run.notebook)
    problems = []
    for name, value in run.parameters.items():
        if name in RUNNER_PARAMETERS:
            problems.append(f"{name}: set by the runner, not by a plan (pass --output-root to move the outputs)")
        elif name not in declared:
            hint = yamlfile.suggestion(str(name), list(declared))
            problems.append(f"{name}: not a parameter of {run.notebook}; {hint}")
        elif not _ACCEPTS.get(declared[name]["inferred_type_name"], lambda _: True)(value):
            expected = declared[name]["inferred_type_name"]
            problems.append(
                f"{name}: {run.notebook} takes {expected} (default {declared[name]['default']}), "
                f"not {type(value).__name__} {value!r}"
            )
    if "output_root" not in declared:
        problems.append(f"{run.notebook} declares no output_root parameter: the runner cannot stage its outputs")
    return problems


def _entry_problems(index: int, entry: object) -> tuple[PlannedRun | None, list[str]]:
    """One `runs:` entry checked against the plan's schema and its notebook's parameters."""
    where = f"runs[{index}]"
    if not isinstance(entry, dict):
        return None, [f"{where}: must be a mapping with 'notebook' and 'parameters', not {type(entry).__name__}"]
    problems: list[str] = []
    notebook, parameters = entry.get("notebook"), entry.get("parameters", {})
    known = sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))
    if not isinstance(notebook, str) or not notebook:
        problems.append(f"{where}: 'notebook' must be a notebook name such as 01_reproduce")
    elif notebook not in known:
        problems.append(f"{where}: notebook {notebook!r} does not exist; {yamlfile.suggestion(notebook, known)}")
    if not isinstance(parameters, dict):
        problems.append(f"{where}: 'parameters' must be a mapping of names to values, not {type(parameters).__name__}")
    if problems:
        return None, problems
    run = PlannedRun(notebook, dict(parameters))
    return run, [f"{where} {notebook}: {problem}" for problem in parameter_problems(run)]


def load_plan(path: str | os.PathLike[str] = DEFAULT_PLAN) -> list[PlannedRun]:
    """Read and check a plan file: `runs:` a non-empty list of `{notebook: 01_reproduce, parameters: {...}}`.

    The file is read by the one YAML reader (`where223.pipeline.yamlfile`: no aliases, no deep nesting, string
    keys, no key outside PLAN_SCHEMA); every entry is checked against its notebook's declared parameters (names
    and types) before anything runs. Raises PlanError listing every problem, one line each, each naming the file.
    """
    plan_path = Path(path)
    if not plan_path.exists():
        raise PlanError(f"plan file {plan_path} does not exist")
    if not plan_path.is_file():
        raise PlanError(f"plan file {plan_path} is not a file")
    try:
        data = yamlfile.read(plan_path, PLAN_SCHEMA)  # no alias, no deep nesting, string keys, no unknown key
    except yamlfile.YamlFileError as error:
        raise PlanError(error.problems) from None
    if not isinstance(data, dict):
        raise PlanError(f"{plan_path}: a plan is a mapping with a 'runs' list, not {type(data).__name__}")
    problems: list[str] = []
    entries = data.get("runs")
    if not isinstance(entries, list) or not entries:
        problems.append("'runs' must be a non-empty list of {notebook, parameters} entries")
        entries = []
    planned: dict[str, tuple[int, PlannedRun]] = {}
    for index, entry in enumerate(entries):
        run, found = _entry_problems(index, entry)
        problems += found
        if run is not None and run.name in planned:
            problems.append(f"runs[{index}]: the same executed copy as runs[{planned[run.name][0]}] ({run.name})")
        elif run is not None:
            planned[run.name] = (index, run)
    if problems:
        raise PlanError([f"{plan_path}: {problem}" for problem in problems])
    return [run for _, run in planned.values()]


def select(runs: list[PlannedRun], only: list[str] | None) -> list[PlannedRun]:
    """Keep the runs whose notebook starts with one of `only` (e.g. ['01', '03']); None keeps every run.

    Raises PlanError when `only` names no prefix, or listing each prefix that matches no planned notebook.
    """
    if only is None:
        return runs
    prefixes = [prefix for prefix in only if prefix]
    if not prefixes:
        raise PlanError("--only names no notebook prefix (e.g. --only 01,03)")
    known = ", ".join(dict.fromkeys(run.notebook for run in runs))
    unmatched = [prefix for prefix in prefixes if not any(run.notebook.startswith(prefix) for run in runs)]
    if unmatched:
        raise PlanError([f"--only {prefix}: matches no notebook in the plan ({known})" for prefix in unmatched])
    return [run for run in runs if any(run.notebook.startswith(prefix) for prefix in prefixes)]


class UnknownKernelError(UsageError, LookupError):
    """The Jupyter kernel asked for is not installed."""


def check_kernel(kernel: str) -> None:
    """Fail fast, saying what to do, when the Jupyter kernel is not installed."""
    from jupyter_client.kernelspec import KernelSpecManager

    known = KernelSpecManager().find_kernel_specs()
    if kernel not in known:
        raise UnknownKernelError(
            f"Jupyter kernel {kernel!r} is not installed (known: {sorted(known)}); run `make setup` "
            "or pass --kernel NAME"
        )


def _root_parameter(root: Path) -> str:
    """A tree as a notebook parameter: relative to the repository root when inside it, so copies stay portable."""
    resolved = root.resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)


# The kernel's own log (not the notebook's output): errors only, so that its notices (ipykernel's about its TCP
# transport on loopback, at every start) stay off the runner's stderr.
KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=ERROR",)
# Loggers of the libraries that run a notebook, silenced while an interrupted run stops its kernel.
_KERNEL_LOGGERS = ("papermill", "nbclient", "jupyter_client", "traitlets", "asyncio")


@functools.cache
def _kernel_manager_class() -> type:
    from jupyter_client.manager import AsyncKernelManager

    class NotebookKernel(AsyncKernelManager):
        """jupyter_client's manager, keeping the clients made from it (nbclient's) so that whoever stops the
        kernel stops their channels too."""

        def client(self, **kwargs: Any) -> Any:
            made = super().client(**kwargs)
            self.__dict__.setdefault("made", []).append(made)
            return made

    return NotebookKernel


@contextmanager
def notebook_kernel(kernel: str = KERNEL_NAME) -> Iterator[Any]:
    """A kernel manager to hand papermill (`km=`), whose kernel is stopped here rather than by nbclient: gracefully
    (a shutdown request, time for its exit handlers) when the block ends or raises an error; at once when an
    interrupt ends it (KeyboardInterrupt, or any BaseException that is not an Exception, such as the command
    line's SIGTERM), with the loggers of papermill, nbclient and jupyter_client silenced and nbclient's pending
    tasks cancelled. A graceful shutdown of a kernel interrupted mid-cell races its reply against the closing of
    its sockets and prints ZMQ tracebacks; a kernel interrupted while starting would be left to notice its
    parent gone. Either way its channels are closed and its connection file removed."""
    manager = _kernel_manager_class()(kernel_name=kernel)
    try:
        yield manager
    except Exception:
        _stop_kernel(manager, at_once=False)
        raise
    except BaseException:
        _stop_kernel(manager, at_once=True)
        raise
    _stop_kernel(manager, at_once=False)


def _interrupt_told_once(loop: Any, context: dict[str, Any]) -> None:
    """asyncio's handler of errors nobody awaited, less the interrupt itself (the command line has said it)."""
    error = context.get("exception")
    if not (isinstance(error, BaseException) and not isinstance(error, Exception)):
        loop.default_exception_handler(context)


def _stop_kernel(manager: Any, at_once: bool) -> None:
    import asyncio
    import logging

    from jupyter_core.utils import ensure_event_loop

    loop = ensure_event_loop()  # this thread's loop: the one nbclient ran the notebook in (jupyter_core's run_sync)
    quiet = [logging.getLogger(name) for name in _KERNEL_LOGGERS] if at_once else []
    before = [logger.disabled for logger in quiet]
    if at_once:  # an interrupt raised inside one of nbclient's tasks stays that task's result, never retrieved
        loop.set_exception_handler(_interrupt_told_once)

    async def stop() -> None:
        if at_once:  # what nbclient was awaiting when the interrupt came: cancelled, not left to fail later
            pending = asyncio.all_tasks(loop) - {asyncio.current_task()}
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        try:
            if manager.has_kernel:
                await manager.shutdown_kernel(now=at_once)
        except RuntimeError:  # no kernel running (it died, or never started)
            pass
        finally:
            await manager.cleanup_resources()
            for client in manager.__dict__.get("made", []):
                client.stop_channels()

    for logger in quiet:
        logger.disabled = True
    try:
        loop.run_until_complete(stop())
    finally:
        for logger, disabled in zip(quiet, before, strict=True):
            logger.disabled = disabled


def execute(
    run: PlannedRun,
    output_root: Path = OUTPUTS,
    kernel: str = KERNEL_NAME,
    wait: bool = False,
    written: Callable[[Path, str], None] = lambda path, unfinished: None,
) -> Path:
    """Execute one copy with papermill into its staging folder; publish its files only if it completes.

    The notebook writes under its staging folder (its `output_root` parameter) and reads other runs' records from
    the published tree (`input_root`, where the notebook declares it). A failure or an interrupt leaves the tree
    as it was: the staged files, the executed copy with its traceback among them, go to outputs/failed/<copy>/
    (on an interrupt, `written` is told that copy, and the kernel is stopped at once: `notebook_kernel`).
    Returns the published executed copy.
    """
    import papermill

    check_kernel(kernel)
    problems = parameter_problems(run)
    if problems:
        raise PlanError([f"{run.name}: {problem}" for problem in problems])
    root = Path(output_root)
    with outputs_lock(root, wait):
        try:
            with staged(run.name, root) as stage:
                parameters = {**run.parameters, "output_root": _root_parameter(stage)}
                if "input_root" in declared_parameters(run.notebook):
                    parameters["input_root"] = _root_parameter(root)
                executed = stage / EXECUTED / f"{run.name}.ipynb"
                executed.parent.mkdir()
                with notebook_kernel(kernel) as manager:
                    papermill.execute_notebook(
                        str(NOTEBOOKS / f"{run.notebook}.ipynb"),
                        str(executed),
                        parameters=parameters,
                        kernel_name=kernel,
                        cwd=str(NOTEBOOKS),
                        progress_bar=sys.stderr.isatty(),
                        km=manager,
                        extra_arguments=list(KERNEL_ARGUMENTS),
                    )
                portable.rewrite_notebook(executed)
                export_html(executed)
        except PublishError:
            raise  # the run completed; its files could not be switched in (one line, the tree as it was)
        except Exception as error:
            kept = failed_dir(run.name, root) / EXECUTED / f"{run.name}.ipynb"
            why = f"{getattr(error, 'ename', type(error).__name__)}: {getattr(error, 'evalue', error)}"
            where = f"executed copy with traceback: {kept}" if kept.is_file() else "no executed copy was written"
            raise NotebookFailedError(f"{run.notebook} failed ({why}); {where}") from error
        except BaseException:  # an interrupt stays an interrupt; its copy so far is kept
            kept = failed_dir(run.name, root) / EXECUTED / f"{run.name}.ipynb"
            if kept.is_file():
                written(kept, f"{run.notebook} did not finish (its executed copy so far is kept there, nothing of it "
                        "published)")
            raise
    return root / EXECUTED / f"{run.name}.ipynb"


# nbconvert's lab template without the scripts it loads from public CDNs (require.js, MathJax, mermaid): an
# export is read offline, and the notebooks show no widgets, formulas or diagrams that would need them.
OFFLINE_TEMPLATE = "where223-offline.html.j2"
_OFFLINE_TEMPLATE_TEXT = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def reviewer_copy(notebook: Any, name: str = "") -> Any:
    """An executed notebook (nbformat node) as a reviewer reads it, the node itself left untouched.

    Titled by its first `# ` heading (the HTML page's title; `name` when it has none); the parameters the run was
    given, in a table under that heading; stderr streams (library logs, warnings: they stay in the executed .ipynb)
    left out; the checkout's absolute paths made relative to the repository.
    """
    import copy

    import nbformat

    copied = copy.deepcopy(notebook)
    headings = [
        line[2:].strip()
        for cell in copied.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("# ")
    ]
    copied.metadata["title"] = headings[0].replace("`", "") if headings else name
    given = copied.metadata.get("papermill", {}).get("parameters", {})
    if given:
        rows = [[f"`{name}`", f"`{portable.checkout_relative(str(value))}`"] for name, value in sorted(given.items())]
        table = nbformat.v4.new_markdown_cell(
            "\n".join(["Run with (other parameters at the notebook's defaults):", "",
                       *markdown.table(["parameter", "value"], rows)]),
            id=PARAMETERS_TABLE_ID,  # not a random one: the HTML of a rerun is the same
        )
        titled = next(
            (k for k, c in enumerate(copied.cells)
             if c.cell_type == "markdown" and any(line.startswith("# ") for line in c.source.splitlines())),
            -1,
        )
        copied.cells.insert(titled + 1, table)  # under the title, or first when there is none
    for cell in copied.cells:
        if cell.cell_type == "markdown":
            cell.source = portable.checkout_relative(cell.source)
        if cell.cell_type != "code":
            continue
        cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
        for output in cell.outputs:
            if output.output_type == "stream":
                output.text = portable.checkout_relative(output.text)
            for mime in ("text/plain", "text/html", "text/markdown"):
                if mime in output.get("data", {}):
                    output.data[mime] = portable.checkout_relative(output.data[mime])
    return copied


def export_html(notebook: Path) -> Path:
    """Write `<notebook>.html` beside an executed notebook for reviewers: inputs hidden, a title and the run's
    parameters at the top, no stderr, relative paths (see `reviewer_copy`), and no request to any host."""
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        extra_loaders=[DictLoader({OFFLINE_TEMPLATE: _OFFLINE_TEMPLATE_TEXT})],
        template_file=OFFLINE_TEMPLATE,
    )
    body, _ = exporter.from_notebook_node(reviewer_copy(nbformat.read(notebook, as_version=4), notebook.stem))
    return write_atomic(notebook.with_suffix(".html"), body)


def run_plan(
    plan: list[PlannedRun],
    output_root: Path = OUTPUTS,
    kernel: str = KERNEL_NAME,
    progress: Callable[[str], None] = lambda line: None,
    wait: bool = False,
    written: Callable[[Path, str], None] = lambda path, unfinished: None,
) -> list[Path]:
    """Execute every planned copy in order, telling `progress` one line per copy before it starts, and `written`
    each executed copy published (or kept under failed/ when interrupted) with what an interrupt then leaves
    undone.

    Holds the outputs tree's lock throughout: another writer makes it refuse at once (OutputsBusyError), or
    wait for that writer to finish with `wait`.
    """
    check_kernel(kernel)  # before the lock and the first notebook
    done = []
    with outputs_lock(output_root, wait, progress):
        for index, run in enumerate(plan, start=1):
            progress(f"[{index}/{len(plan)}] {run.name}")
            done.append(execute(run, output_root, kernel, written=written))
            left = len(plan) - index
            written(done[-1], f"{left} planned notebook(s) did not run" if left else "every planned notebook ran")
    return done
