"""One fuzz case run as the command line would run it, in a child forked from a warmed parent, and judged.

The parent has imported onnx, onnxruntime, yaml and the CLI once (`warm`); each case forks a child that puts itself
under the bounds (`LIMIT_S` seconds of CPU by an alarm, ITIMER_PROF's SIGPROF; `LIMIT_BYTES` by RLIMIT_DATA:
RLIMIT_AS would break torch and ONNX Runtime, whose address-space reservations are large; and, for a case that waits
rather than computes, a FIFO or a lock, a wall-clock alarm at WALL_FACTOR times the CPU bound), sends stdout and
stderr to files, applies the case's stubs (what stops a command before it runs a notebook or a cell) and calls
`where223.cli.main(argv)`. The parent waits on the child's pidfd, kills it (its whole process group: ONNX Runtime's
check and git run below it) at the hard deadline, and judges what came back:

- at most one line on stderr, and no traceback; on exit 2 several lines only where each is the command's own
  complaint (`where223 CMD: ...`), as a UsageError listing several problems prints them (`problems`: one line
  each, a plan's or a YAML file's);
- an exit status the command documents (README: 0, 1, 2, with 3 and 4 for lint);
- on exit 2 (a usage or file error) each line names one of the case's files (its path or name, as printed, escaped
  by `where223.errors.printable`) and says why: not an exception's name alone, not a message with no words;
- no signal, within `LIMIT_S` seconds of CPU (the child's and its waited-for children's: ONNX Runtime's check in
  `repair`), `WALL_FACTOR * LIMIT_S` seconds of wall-clock time and `LIMIT_BYTES` of peak resident memory.

The time bound is CPU time, not wall-clock time, so that a machine shared with other work (two cores, a load
average of six) does not fail cases that an idle one runs in a second; on an idle machine the two agree for the
commands here, which compute on one thread.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import resource
import select
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from where223.errors import printable

LIMIT_S = 10.0  # each case's time bound, seconds of CPU (the child's alarm)
WALL_FACTOR = 3.0  # the wall-clock alarm, in multiples of LIMIT_S: a case that waits
LIMIT_BYTES = 2 * 2**30  # each case's memory bound (the child's RLIMIT_DATA; its peak RSS is judged too)
GRACE_S = 5.0  # after the alarm, the parent kills what is left
TRACEBACK = "Traceback (most recent call last)"
# what a message that says nothing looks like once the prefix and the file's name are taken away
_WORD = re.compile(r"[A-Za-z]{3,}")
_CATCH_ALL = re.compile(r"^\W*(?:[A-Za-z_.]*(?:Error|Exception|Warning)\b\W*)?$|unexpected error|internal error",
                        re.IGNORECASE)


def warm() -> None:
    """Import once, in the parent, what every case would otherwise import again: the CLI and its readers."""
    import onnx  # noqa: F401
    import yaml  # noqa: F401

    import where223.cli  # noqa: F401
    import where223.graph.blame  # noqa: F401
    import where223.graph.draw  # noqa: F401
    import where223.graph.kernels  # noqa: F401
    import where223.graph.lint  # noqa: F401
    import where223.graph.repair  # noqa: F401
    import where223.pipeline.compare  # noqa: F401
    import where223.pipeline.run  # noqa: F401
    import where223.sweep.driver  # noqa: F401
    import where223.sweep.space  # noqa: F401
    from where223.graph.ort import import_onnxruntime

    import_onnxruntime()  # imported, no session created: no thread pool crosses the fork
    from where223.pipeline import run, schema
    from where223.pipeline.paths import NOTEBOOKS

    schema.record_types()  # every record module, which compare reads the roles of

    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):  # papermill imported, each notebook's parameters read once
        run.declared_parameters(notebook.stem)


def cli_main(argv: list[str]) -> int:
    """The command line's one entry point, as `where223 ARGV` runs it."""
    from where223 import cli

    return cli.main(argv)


@dataclass
class Case:
    """One run: the arguments, the files an error may name, the exit statuses the command documents, and what the
    child does first (`env` set, `prepare` called: stubs that stop the command before a notebook or a cell)."""

    reader: str
    argv: list[str]
    names: tuple[str, ...]  # the paths (or a node's name) a one-line error must name one of
    codes: frozenset[int]
    env: dict[str, str] = field(default_factory=dict)
    prepare: Callable[[], None] | None = None
    cwd: str | None = None
    target: Callable[[list[str]], int] = cli_main


@dataclass
class Outcome:
    """What the child did: exit status or signal, time, peak memory, what it printed; `problems` the judge's."""

    status: int | None
    signal: str | None
    seconds: float
    cpu_seconds: float
    peak_bytes: int
    stdout: str
    stderr: str
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, object]:
        """The JSON-ready facts of a failing case (its output cut)."""
        return {"status": self.status, "signal": self.signal, "seconds": round(self.seconds, 3),
                "cpu_seconds": round(self.cpu_seconds, 3),
                "peak_mib": round(self.peak_bytes / 2**20, 1), "stderr": self.stderr[-3000:],
                "stdout_tail": self.stdout[-500:], "problems": self.problems}


# Python's own warning filters (a release build, no -W option): what a `where223` process starts with
_DEFAULT_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                    ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                    ("ignore", ResourceWarning, ""))


def _print_warning(message: warnings.WarningMessage) -> None:
    """Python's own way of showing a warning: its formatted text on stderr."""
    sys.stderr.write(warnings.formatwarning(message.message, message.category, message.filename, message.lineno,
                                            message.line))


def _as_a_fresh_interpreter() -> None:
    """Undo in the child what a parent under pytest changed: warnings recorded rather than shown and filtered by
    pytest's options, log records captured by pytest's handlers, faulthandler writing to pytest's stream. A
    warning or a library's log record then reaches stderr as it would from `where223` itself."""
    warnings.resetwarnings()
    for action, category, module in reversed(_DEFAULT_FILTERS):
        warnings.filterwarnings(action, category=category, module=module)
    warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
    warnings._showwarnmsg_impl = _print_warning  # type: ignore[attr-defined]
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    faulthandler.disable()


def _child(case: Case, out: Path, err: Path, limit_s: float, limit_bytes: int, wall_s: float) -> None:
    """In the forked child: bounds, redirections, stubs, then the command; never returns."""
    status = 70
    try:
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))
        for number in (signal.SIGALRM, signal.SIGPROF, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_PROF, limit_s)
        signal.setitimer(signal.ITIMER_REAL, wall_s)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, out), (2, err)):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        # fresh streams on the redirected descriptors, as an interpreter writing to files has them (pytest's
        # capture objects, inherited from the parent, stay out of it)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        _as_a_fresh_interpreter()
        if case.cwd is not None:
            os.chdir(case.cwd)
        os.environ.update(case.env)
        if case.prepare is not None:
            case.prepare()
        status = case.target(list(case.argv))
        if not isinstance(status, int):
            print(f"the command returned {status!r}, not an exit status", file=sys.stderr)
            status = 71
    except SystemExit as stop:  # as the interpreter would: an int is the status, anything else is printed
        if isinstance(stop.code, int) or stop.code is None:
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException:  # what the interpreter does with an uncaught exception: its traceback, exit 1
        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed stream, a full disk: what was written is what is judged
                pass
        os._exit(status & 0xFF)


def run_case(case: Case, folder: Path, limit_s: float = LIMIT_S, limit_bytes: int = LIMIT_BYTES,
             wall_s: float | None = None) -> Outcome:
    """Fork a child for `case` (stdout and stderr into `folder`), wait for it within the bounds (`wall_s`: the
    wall-clock one, WALL_FACTOR * `limit_s` by default), judge it."""
    wall_s = limit_s * WALL_FACTOR if wall_s is None else wall_s
    out, err = folder / "stdout.txt", folder / "stderr.txt"
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(case, out, err, limit_s, limit_bytes, wall_s)
    killed = False
    waiter = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([waiter], [], [], wall_s + GRACE_S)
        if not ready:
            killed = True
            _kill_group(pid)
    finally:
        os.close(waiter)
    _, wait_status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - started
    _kill_group(pid)  # what the child left running (an ONNX Runtime check, a git) goes with it
    code = os.waitstatus_to_exitcode(wait_status)
    outcome = Outcome(
        status=code if code >= 0 else None,
        signal=None if code >= 0 else signal.Signals(-code).name,
        seconds=seconds,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_bytes=usage.ru_maxrss * 1024,
        stdout=_read(out),
        stderr=_read(err),
    )
    outcome.problems = judge(case, outcome, limit_s, limit_bytes, killed, wall_s)
    return outcome


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="backslashreplace")
    except FileNotFoundError:
        return ""


def shown_names(names: tuple[str, ...]) -> list[str]:
    """The ways an error line may show each of `names`: whole or its last part, raw or escaped as printed."""
    shown = []
    for name in names:
        if not name:  # an empty name (a node's) shows as quotes around nothing
            shown += ["''", '""']
            continue
        for form in (name, os.path.basename(name.rstrip("/")) or name):
            for text in (form, printable(form, None), printable(form)):
                if text and text not in shown:
                    shown.append(text)
    return shown


def says_why(line: str, names: tuple[str, ...]) -> bool:
    """Whether `line`, less its `where223 CMD: ` prefix and the names in it, still says something: words, and not
    an exception's name alone."""
    text = re.sub(r"^where223 [\w-]+: ", "", line)
    for name in sorted(shown_names(names), key=len, reverse=True):
        text = text.replace(name, " ")
    return len(_WORD.findall(text)) >= 2 and not _CATCH_ALL.search(text.strip())


def judge(case: Case, outcome: Outcome, limit_s: float = LIMIT_S, limit_bytes: int = LIMIT_BYTES,
          killed: bool = False, wall_s: float | None = None) -> list[str]:
    """What is wrong with `outcome` (empty: the case passed)."""
    problems = []
    wall_s = limit_s * WALL_FACTOR if wall_s is None else wall_s
    if killed:
        problems.append(f"still running {wall_s + GRACE_S:g} s after it started: killed")
    elif outcome.signal == "SIGPROF":
        problems.append(f"ran past {limit_s:g} s of CPU (the alarm)")
    elif outcome.signal == "SIGALRM":
        problems.append(f"still running after {wall_s:g} s (the wall-clock alarm): waiting, not computing")
    elif outcome.signal is not None:
        problems.append(f"killed by {outcome.signal}")
    elif outcome.status not in case.codes:
        problems.append(f"exit status {outcome.status}, not one of {sorted(case.codes)}")
    if TRACEBACK in outcome.stderr:
        last = [line for line in outcome.stderr.splitlines() if line.strip()][-1:]
        problems.append(f"a traceback on stderr ({last[0][:300] if last else ''})")
    lines = outcome.stderr.splitlines()
    error = outcome.status == 2 and outcome.signal is None
    prefix = f"where223 {case.argv[0]}: " if case.argv else "where223 "
    if len(lines) > 1 and not (error and all(line.startswith(prefix) for line in lines)):
        problems.append(f"{len(lines)} lines on stderr")
    if error:
        if not lines:
            problems.append("exit 2 with nothing on stderr")
        shown = shown_names(case.names)
        if any(not any(name in line for name in shown) for line in lines):
            problems.append("the error line names none of the case's files")
        if any(not says_why(line, case.names) for line in lines):
            problems.append("the error line does not say why")
    if outcome.cpu_seconds > limit_s:
        problems.append(f"used {outcome.cpu_seconds:.1f} s of CPU (bound {limit_s:g} s)")
    if outcome.seconds > wall_s:
        problems.append(f"took {outcome.seconds:.1f} s (wall-clock bound {wall_s:g} s)")
    if outcome.peak_bytes > limit_bytes:
        problems.append(f"peak resident memory {outcome.peak_bytes / 2**20:.0f} MiB (bound {limit_bytes / 2**20:.0f})")
    return problems
