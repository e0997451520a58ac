"""`where223` command line: one table of commands, each handler beside its parser, as Polygraphy keeps its tools.

A command is a class: the first line of its docstring is its help in `where223 --help`; `where223 CMD --help`
adds the rest, then the docstring of the library module or function it runs (read from the source, so asking
for help imports nothing). Handlers only call the library (`where223.graph`, `where223.pipeline`,
`where223.study`, `where223.sweep`), importing it when they run, so `where223 lint` never loads torch; library
modules return data and raise, and only this package prints. The commands live by kind in `_graph`, `_studies`
and `_pipeline`; option groups shared by several commands, with one name per concept (`--output-root` for every
outputs tree), in `_options`; `main` below is the one place that turns the library's errors into exit codes.

Exit status: 0 done, 1 the tool worked and found something (violations, no recorded source, a model it cannot
repair, a notebook that failed), 2 a usage or file error, told in one line on stderr (`where223 CMD: ...`);
`lint` adds 3, incomplete: nothing found, but not every node could be checked. Ctrl-C: one line, exit 130;
SIGTERM: one line, exit 143; either way temporary files are removed, and the line says what the command had
written by then (`_base.Written`: what `where223.files` put in place and what the command told with `wrote`) and
what did not finish, or that nothing was written. A warning of where223's own (a corrupt cache discarded, say)
is one line on stderr too, `where223 CMD: warning: ...`; the command goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator

from where223 import files
from where223.cli._base import WRITTEN, Command, Parser, complain, library_doc
from where223.cli._graph import Blame, Convert, Diff, Draw, Lint, Repair
from where223.cli._pipeline import Compare, Run, Strip
from where223.cli._studies import BenchVariants, Explain, Report, Sweep
from where223.errors import Finding, UsageError

__all__ = ["COMMANDS", "Command", "build_parser", "library_doc", "main"]

COMMANDS: dict[str, type[Command]] = {
    command.name: command
    for command in (Run, Report, Compare, Lint, Blame, Draw, Repair, Diff, Convert, Explain, BenchVariants, Sweep,
                    Strip)
}


def build_parser() -> Parser:
    """The top-level parser with one subparser per command."""
    parser = Parser(
        prog="where223",
        description="Reproduce, explain and fix ONNX type-constraint failures such as GPT-2's Where_223.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS.values():
        command.add_arguments(sub.add_parser(command.name, help=command.summary(), describe=command.description))
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that `finally` blocks (temporary files) run as for Ctrl-C. A
    KeyboardInterrupt, so that libraries let it through as they let Ctrl-C through: an asyncio task (nbclient's,
    while a notebook runs) re-raises only KeyboardInterrupt and SystemExit, and keeps any other BaseException
    raised in it as its result, where nobody may look."""


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


@contextlib.contextmanager
def _told(name: str) -> Iterator[None]:
    """While the command runs: what it writes is kept for an interrupt's line (empty at the start), and a warning
    of where223's own is shown as one line (other libraries' warnings as Python shows them)."""
    WRITTEN.clear()
    files.placed.append(WRITTEN.add)
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: object = None, line: str | None = None) -> None:
            if category.__module__.split(".")[0] != "where223":
                shown(message, category, filename, lineno, file, line)
            else:
                complain(name, f"warning: {message}")

        warnings.showwarning = one_line
        try:
            yield
        finally:
            files.placed.remove(WRITTEN.add)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the command, and turn what it raised into one line and its exit status: a
    `Finding` (the tool worked and found something) 1, a `UsageError` or an OS error 2, Ctrl-C 130, SIGTERM 143."""
    try:
        args, unknown = build_parser().parse_known_args(argv)
    except SystemExit as stop:  # --help, or a usage error argparse has already told in one line
        return stop.code if isinstance(stop.code, int) else 2
    name = args.command
    if unknown:
        complain(name, f"unrecognized arguments: {' '.join(unknown)} (see where223 {name} --help)")
        return 2
    try:
        with _told(name), _terminate_as_exception():
            return COMMANDS[name].run(args)
    except Terminated:  # before KeyboardInterrupt, which it is
        complain(name, WRITTEN.interrupted("terminated (SIGTERM)"))
        return 143
    except KeyboardInterrupt:
        complain(name, WRITTEN.interrupted("interrupted (Ctrl-C)"))
        return 130
    except BrokenPipeError:  # e.g. `where223 lint big.onnx | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Finding as finding:
        complain(name, str(finding))
        return 1
    except UsageError as error:  # one line per problem when it lists several (a plan file's, say)
        for problem in getattr(error, "problems", None) or [str(error)]:
            complain(name, problem)
    except OSError as error:
        complain(name, f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error))
    return 2
