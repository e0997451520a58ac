"""Papermill orchestration: execute the planned notebooks into outputs/, never in place.

A plan (notebooks/plan.yaml by default) lists executed copies: a notebook and the parameters it runs with, both
checked (schema, the notebook's declared parameter names and types) before anything runs. Each copy is named by its
parameters and runs in a staging folder (see pipeline.publish): only a copy that completes, its own final checks
included, publishes its records, the executed notebook and its HTML (inputs hidden) into outputs/; a failed copy's
files, traceback included, are kept under outputs/failed/ and the published outputs stay byte for byte as they were.
An interrupt (Ctrl-C, SIGTERM) does the same, and stops the notebook's kernel at once, quietly (`notebook_kernel`).
One `where223 run` at a time writes into a tree.

Copies run side by side, `JOBS` at a time (`run_plan`): a copy starts once the copies it reads are published (its
`after:` notebooks, planned before it), and one marked `alone:` (notebook 04, which times training steps) runs with
nothing beside it, until it has written its `alone_until:` file where it names one (04: its record, written once its
timed rounds are over). Execution is parallel, publishing serial: each copy is published whole, one at a time, under
the one lock. Kernels listen on Unix sockets in a folder of their own (IPC), not on TCP ports.
"""

from __future__ import annotations

import copy
import functools
import os
import queue
import shutil
import stat
import sys
import tempfile
import threading
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
from where223.pipeline.publish import PublishError, failed_dir, outputs_lock, readers_inside, staged, staging_dir

DEFAULT_PLAN = NOTEBOOKS / "plan.yaml"
EXECUTED = "notebooks"  # the folder of executed copies and their HTML, in an outputs tree
# The keys of a plan file, for its reader (`where223.pipeline.yamlfile`): every other key is refused where it appears.
PLAN_SCHEMA: yamlfile.Schema = {
    "runs": yamlfile.Items({"notebook": None, "parameters": yamlfile.Names(), "after": yamlfile.Items(), "alone": None,
                            "alone_until": None})
}
# Copies executed at a time: two, one a core on the machines the README's times come from (`--jobs`).
JOBS = 2
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
    """One executed copy: which notebook, with which parameters; the notebooks whose copies planned before it must
    be published before it starts (`after`: it reads their records), and whether it runs with nothing beside it
    (`alone`: it times something), until it has written the file `alone_until` names (relative to its outputs;
    None: to its end). None of these changes the copy's name or what it computes."""

    notebook: str
    parameters: dict[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()
    alone: bool = False
    alone_until: str | None = None

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
    """A notebook's parameters as papermill reads its `parameters` cell: name -> inferred type, default, help.
    Read once per version of the file (a plan names a notebook several times)."""
    path = NOTEBOOKS / f"{notebook}.ipynb"
    found = path.stat()
    return copy.deepcopy(_inspected(str(path), found.st_mtime_ns, found.st_size))


@functools.lru_cache(maxsize=64)
def _inspected(path: str, mtime_ns: int, size: int) -> dict[str, dict[str, Any]]:
    from papermill.inspection import inspect_notebook

    return inspect_notebook(path)


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
    after, alone, until = entry.get("after", []), entry.get("alone", False), entry.get("alone_until")
    known = sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))
    if not isinstance(notebook, str) or not notebook:
        problems.append(f"{where}: 'notebook' must be a notebook name such as 01_reproduce")
    elif notebook not in known:
        problems.append(f"{where}: notebook {notebook!r} does not exist; {yamlfile.suggestion(notebook, known)}")
    if not isinstance(parameters, dict):
        problems.append(f"{where}: 'parameters' must be a mapping of names to values, not {type(parameters).__name__}")
    if not isinstance(after, list) or not all(isinstance(name, str) and name for name in after):
        problems.append(f"{where}: 'after' must be a list of notebook names such as [01_reproduce]")
    if not isinstance(alone, bool):
        problems.append(f"{where}: 'alone' must be true or false, not {type(alone).__name__} {alone!r}")
    if until is not None and not (alone is True and isinstance(until, str) and until
                                  and not Path(until).is_absolute() and ".." not in Path(until).parts):
        problems.append(f"{where}: 'alone_until' must be a path inside the copy's outputs (such as "
                        "variants/variants-cpu.json), beside 'alone: true'")
    if problems:
        return None, problems
    run = PlannedRun(notebook, dict(parameters), tuple(dict.fromkeys(after)), alone, until)
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
            before = {earlier.notebook for _, earlier in planned.values()}
            problems += [f"runs[{index}] {run.notebook}: after {name}: no copy of {name} is planned before it "
                         f"(planned before it: {', '.join(sorted(before)) or 'nothing'})"
                         for name in run.after if name not in before]
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


# How the runner talks to its kernels: ZMQ over Unix sockets in a folder only this user can enter (`notebook_kernel`),
# not TCP on loopback, which any local user can connect to and which ipykernel warns about at every start
# ("Kernel is running over TCP without encryption"). The kernel's own log keeps its level: its warnings are real.
KERNEL_TRANSPORT = "ipc"
# Loggers of the libraries that run a notebook, silenced while an interrupted run stops its kernel.
_KERNEL_LOGGERS = ("papermill", "nbclient", "jupyter_client", "traitlets", "asyncio")


class _Quieted:
    """The threads stopping a kernel at once (`_quiet`), and the loggers' flags from before the first of them."""

    lock = threading.Lock()
    threads = 0
    disabled_before: list[bool] = []


# Set in every kernel: accelerate (imported by transformers and optimum) installs rich's traceback handler in the
# process whenever rich is importable, and in a kernel that handler replaces the error papermill reports (a cell's
# UsageError arrives as "CellExecutionError" with an empty message). Its own switch turns that off.
KERNEL_ENVIRONMENT = {"ACCELERATE_DISABLE_RICH": "1"}


@functools.cache
def _kernel_manager_class() -> type:
    from jupyter_client.manager import AsyncKernelManager

    class NotebookKernel(AsyncKernelManager):
        """jupyter_client's manager, keeping the clients made from it (nbclient's) so that whoever stops the
        kernel stops their channels too, and starting the kernel with `KERNEL_ENVIRONMENT` over the runner's."""

        async def _async_pre_start_kernel(self, **kwargs: Any) -> Any:
            kwargs["env"] = {**kwargs.get("env", os.environ), **KERNEL_ENVIRONMENT}
            return await super()._async_pre_start_kernel(**kwargs)

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
    parent gone. Either way its channels are closed and its connection file removed.

    The kernel listens on Unix sockets (`KERNEL_TRANSPORT`) in a fresh folder of mode 0700 holding its connection
    file too, removed with them (`kernel_folder`): kernels running side by side never share a name, and nothing
    reaches them but this user."""
    folder = kernel_folder()
    try:
        manager = _kernel_manager_class()(kernel_name=kernel, transport=KERNEL_TRANSPORT,
                                          connection_file=str(folder / "kernel.json"), ip=str(folder / "kernel"))
        try:
            yield manager
        except Exception:
            _stop_kernel(manager, at_once=False)
            raise
        except BaseException:
            _stop_kernel(manager, at_once=True)
            raise
        _stop_kernel(manager, at_once=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


KERNEL_FOLDER = "where223-kernel-"  # then the runner's pid, `-` and mkdtemp's letters, in the temporary folder


def kernel_folder() -> Path:
    """A fresh folder of mode 0700 for one kernel's sockets and connection file, named by this process's pid. The
    folders of runners no longer alive (killed before they could remove theirs) go first: only this user's, only
    folders (never a link), only where no process has that pid."""
    for stale in Path(tempfile.gettempdir()).glob(f"{KERNEL_FOLDER}*-*"):
        try:
            pid = int(stale.name.removeprefix(KERNEL_FOLDER).split("-", 1)[0])
            found = os.lstat(stale)
        except (ValueError, OSError):
            continue
        if stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not _alive(pid):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{KERNEL_FOLDER}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _interrupt_told_once(loop: Any, context: dict[str, Any]) -> None:
    """asyncio's handler of errors nobody awaited, less the interrupt itself (the command line has said it)."""
    error = context.get("exception")
    if not (isinstance(error, BaseException) and not isinstance(error, Exception)):
        loop.default_exception_handler(context)


def _stop_kernel(manager: Any, at_once: bool) -> None:
    import asyncio

    from jupyter_core.utils import ensure_event_loop

    loop = ensure_event_loop()  # this thread's loop: the one nbclient ran the notebook in (jupyter_core's run_sync)
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

    with _quiet(at_once):
        loop.run_until_complete(stop())


@contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """The loggers of `_KERNEL_LOGGERS` disabled for the block (when `quiet`), and restored when the last of the
    threads that disabled them (kernels stopped side by side) is done."""
    import logging

    if not quiet:
        yield
        return
    loggers = [logging.getLogger(name) for name in _KERNEL_LOGGERS]
    with _Quieted.lock:
        if _Quieted.threads == 0:
            _Quieted.disabled_before = [logger.disabled for logger in loggers]
            for logger in loggers:
                logger.disabled = True
        _Quieted.threads += 1
    try:
        yield
    finally:
        with _Quieted.lock:
            _Quieted.threads -= 1
            if _Quieted.threads == 0:
                for logger, disabled in zip(loggers, _Quieted.disabled_before, strict=True):
                    logger.disabled = disabled


class _Stop:
    """An interrupt the runner's main thread hands to a copy executing in a thread of its own (`run_plan`).

    Signals reach only the main thread. While papermill runs the copy, the interrupt is raised inside the copy's
    event loop, where the signal itself lands when one copy runs on the main thread: nbclient's tasks are left as
    they were and `notebook_kernel` stops the kernel at once. Before or after that (kernel started, HTML written,
    publishing) it is raised at the copy's next step; a publish under way completes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: Any = None  # the copy's event loop while papermill runs in it
        self.interrupt: type[BaseException] | None = None

    def request(self, interrupt: type[BaseException]) -> None:
        """Stop the copy with `interrupt` (a KeyboardInterrupt, or the command line's SIGTERM, which is one)."""
        with self._lock:
            self.interrupt = interrupt if issubclass(interrupt, KeyboardInterrupt) else KeyboardInterrupt
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:  # in the copy's thread, inside its event loop
        with self._lock:
            interrupt = self.interrupt if self._loop is not None else None
        if interrupt is not None:
            raise interrupt

    def check(self) -> None:
        """Raise the interrupt asked for, if any: between the copy's steps."""
        with self._lock:
            interrupt = self.interrupt
        if interrupt is not None:
            raise interrupt

    @contextmanager
    def executing(self) -> Iterator[None]:
        """While the block runs papermill in this thread, an interrupt asked for is raised inside its loop."""
        from jupyter_core.utils import ensure_event_loop

        loop = ensure_event_loop()  # the one jupyter_core's run_sync runs nbclient in, in this thread
        with self._lock:
            if self.interrupt is not None:
                raise self.interrupt
            self._loop = loop
        try:
            yield
        finally:
            with self._lock:
                self._loop = None


def _did_not_finish(notebooks: list[str], not_run: int = 0) -> str:
    """What an interrupt left undone: the copies it stopped (each kept under failed/), and the copies not started."""
    if len(notebooks) == 1:
        stopped = f"{notebooks[0]} did not finish (its executed copy so far is kept there, nothing of it published)"
    else:
        stopped = (f"{', '.join(notebooks[:-1])} and {notebooks[-1]} did not finish (their executed copies so far "
                   "are kept there, nothing of them published)")
    return stopped + (f"; {not_run} planned notebook(s) did not run" if not_run else "")


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
    check_kernel(kernel)
    with outputs_lock(Path(output_root), wait):
        return _execute(run, Path(output_root), kernel, written, _Stop(), progress_bar=sys.stderr.isatty())


def _execute(run: PlannedRun, root: Path, kernel: str, written: Callable[[Path, str], None], stop: _Stop,
             progress_bar: bool) -> Path:
    """`execute`, the tree's lock held, the copy stopped by `stop` when another thread asks."""
    import papermill

    problems = parameter_problems(run)
    if problems:
        raise PlanError([f"{run.name}: {problem}" for problem in problems])
    try:
        with staged(run.name, root) as stage:
            parameters = {**run.parameters, "output_root": _root_parameter(stage)}
            if "input_root" in declared_parameters(run.notebook):
                parameters["input_root"] = _root_parameter(root)
            executed = stage / EXECUTED / f"{run.name}.ipynb"
            executed.parent.mkdir()
            with notebook_kernel(kernel) as manager, stop.executing():
                papermill.execute_notebook(
                    str(NOTEBOOKS / f"{run.notebook}.ipynb"),
                    str(executed),
                    parameters=parameters,
                    kernel_name=kernel,
                    cwd=str(NOTEBOOKS),
                    progress_bar=progress_bar,
                    km=manager,
                )
            stop.check()
            portable.rewrite_notebook(executed)
            export_html(executed)
            stop.check()
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
            written(kept, _did_not_finish([run.notebook]))
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
    left out, and the stdout text they leave side by side joined into one output (how a kernel's writes are split
    into messages, and how stdout and stderr interleave, depends on timing: a rerun's page is the same page); the
    checkout's absolute paths made relative to the repository.
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
        kept = []
        for output in cell.outputs:
            if output.output_type == "stream" and output.name == "stderr":
                continue
            if output.output_type == "stream" and kept and kept[-1].output_type == "stream":
                kept[-1].text += output.text  # one stdout text however the kernel chunked it
            else:
                kept.append(output)
        cell.outputs = kept
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
    jobs: int = JOBS,
) -> list[Path]:
    """Execute every planned copy, `jobs` at a time, telling `progress` one line per copy as it starts, and
    `written` each executed copy published (or kept under failed/ when interrupted) with what an interrupt then
    leaves undone. Returns the published executed copies, in plan order.

    Copies start in plan order as far as the plan allows: a copy waits until every copy planned before it of the
    notebooks it is `after` is published, and an `alone` copy starts when nothing runs and lets nothing start
    beside it (nor any copy planned after it start before it) until it ends or its stage holds its `alone_until`
    file. Each copy is published whole as it completes, one at a time. A copy that fails lets the copies running
    beside it finish (each is published or kept on its own merits), starts nothing more, and is raised; an
    interrupt stops every running copy at once (`_Stop`).

    Holds the outputs tree's lock throughout: another writer makes it refuse at once (OutputsBusyError), or
    wait for that writer to finish with `wait`.
    """
    check_kernel(kernel)  # before the lock and the first notebook
    root = Path(output_root)
    with outputs_lock(root, wait, progress), readers_inside(root) if jobs > 1 else _nothing():
        return _Schedule(plan, root, kernel, progress, written, max(1, jobs)).run()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


ALONE_POLL_S = 0.2  # how often the runner looks for an `alone_until` file
# How long the main thread waits for a copy at most before it runs Python again: a signal the kernel hands to
# another of the runner's threads (the copies', ZMQ's) only marks it for the main thread, whose handler then runs at
# its next step; blocked in a wait without end, a Ctrl-C would wait for the running copy to finish.
SIGNAL_POLL_S = 0.5


def _close_event_loop() -> None:
    """Close the event loop nbclient ran a copy in, in this thread (a thread of `_Schedule`, ending)."""
    import asyncio

    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # none in this thread
        return
    if not loop.is_running() and not loop.is_closed():
        loop.close()


class _Schedule:
    """One `run_plan`: the copies not started, those running (each in a thread of its own) and those published."""

    def __init__(self, plan: list[PlannedRun], root: Path, kernel: str, progress: Callable[[str], None],
                 written: Callable[[Path, str], None], jobs: int) -> None:
        self.plan, self.root, self.kernel, self.progress, self.written, self.jobs = (
            plan, root.resolve(), kernel, progress, written, jobs)
        self.pending = list(plan)
        self.running: dict[str, tuple[PlannedRun, _Stop, threading.Thread]] = {}
        self.published: dict[str, Path] = {}
        self.kept: list[tuple[Path, str]] = []  # copies an interrupt stopped: their executed copy so far, notebook
        self.finished: queue.Queue[tuple[str, Path | BaseException]] = queue.Queue()

    def alone(self, run: PlannedRun) -> bool:
        """Whether running copy `run` must still run alone: it is `alone`, and its stage lacks its `alone_until`."""
        return run.alone and not (run.alone_until and (staging_dir(run.name, self.root) / run.alone_until).is_file())

    def ready(self, run: PlannedRun) -> bool:
        """Whether `run` may start now: the copies it reads are published, and nothing runs that must run alone."""
        if run.alone and self.running or any(self.alone(other) for other, *_ in self.running.values()):
            return False
        earlier = self.plan[:self.plan.index(run)]
        return all(other.name in self.published for other in earlier if other.notebook in run.after)

    def next_run(self) -> PlannedRun | None:
        """The first copy not started that may start now; none past a copy that runs alone."""
        for run in self.pending:
            if self.ready(run):
                return run
            if run.alone:
                return None
        return None

    def start(self, run: PlannedRun) -> None:
        self.progress(f"[{len(self.plan) - len(self.pending) + 1}/{len(self.plan)}] {run.name}")
        stop = _Stop()

        def kept(path: Path, unfinished: str) -> None:  # told once every running copy has stopped (`interrupted`)
            self.kept.append((path, run.notebook))

        def work() -> None:
            outcome: Path | BaseException
            try:
                outcome = _execute(run, self.root, self.kernel, kept, stop,
                                   progress_bar=self.jobs == 1 and sys.stderr.isatty())
            except BaseException as error:  # handed to the main thread, which raises it
                outcome = error
            finally:
                _close_event_loop()
            self.finished.put((run.name, outcome))

        thread = threading.Thread(target=work, name=f"where223 run: {run.name}")
        self.pending.remove(run)
        self.running[run.name] = (run, stop, thread)
        thread.start()

    def wait(self) -> BaseException | None:
        """Wait for a running copy to end: record it published, or return what it raised; None when none ended in
        time. While a copy runs alone until it writes a file, wait at most `ALONE_POLL_S`, so that others start soon
        after it does; else at most `SIGNAL_POLL_S`, so that a signal is acted on while copies run."""
        polling = any(run.alone_until and self.alone(run) for run, *_ in self.running.values())
        try:
            name, outcome = self.finished.get(timeout=ALONE_POLL_S if polling else SIGNAL_POLL_S)
        except queue.Empty:
            return None
        del self.running[name]
        if isinstance(outcome, BaseException):
            return outcome
        self.published[name] = outcome
        left = len(self.plan) - len(self.published)
        self.written(outcome, f"{left} planned notebook(s) did not run" if left else "every planned notebook ran")
        return None

    def run(self) -> list[Path]:
        failure: BaseException | None = None
        try:
            while True:
                while failure is None and len(self.running) < self.jobs and (run := self.next_run()):
                    self.start(run)
                if not self.running:
                    break
                raised = self.wait()
                if raised is not None and not isinstance(raised, Exception):
                    raise raised  # an interrupt raised in a copy's thread: stop the others as for a signal
                failure = failure or raised
        except BaseException as interrupt:  # Ctrl-C or SIGTERM, raised in this thread while it waits for copies
            self.interrupted(interrupt)
            raise
        if failure is not None:
            raise failure
        return [self.published[run.name] for run in self.plan if run.name in self.published]

    def interrupted(self, interrupt: BaseException) -> None:
        """Stop every running copy (its kernel at once, its files kept under failed/) and wait for them; then tell
        `written` each copy kept and what did not finish."""
        for name, (run, stop, thread) in list(self.running.items()):
            if thread.ident is None:  # interrupted before it started: not run
                del self.running[name]
                self.pending.insert(0, run)
            stop.request(type(interrupt))
        while self.running:
            self.wait()
        notebooks = [notebook for _, notebook in self.kept]
        for path, _ in self.kept:
            self.written(path, _did_not_finish(notebooks, len(self.pending)))
