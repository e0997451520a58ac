"""What every command shares: the Command class (its docstring is its help), the parser with one-line errors,
the three ways a handler talks (a result line on stdout, progress on stderr, a complaint on stderr), and the
record of what it has written so far (`wrote`), which `main` words its line from when the command is interrupted."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from where223.errors import printable

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


def say(line: str) -> None:
    """A result line, on stdout."""
    print(line, flush=True)


def progress(line: str) -> None:
    """A progress line, on stderr (stdout stays the result)."""
    print(line, file=sys.stderr, flush=True)


class Written:
    """What the running command has written where the user will look, and what it had yet to do then. `main`
    empties it before each command and words an interrupted command's line from it. Two feed it: every write
    through `where223.files` (each file it puts in place), and the command itself (`wrote`), which names what
    `where223.files` does not see (a published tree, a kept failure) and what an interrupt leaves undone. The line
    names the files still there when it is printed: a staged file an interrupt moved or removed is left out."""

    SHOWN = 3  # files named in the line; beyond that, their number and the last one

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Nothing written yet: a new command starts."""
        self.paths: dict[str, None] = {}  # in the order written (a file written again moves to the end)
        self.unfinished = "the command did not finish"

    def add(self, path: str | os.PathLike[str], unfinished: str | None = None) -> None:
        """`path` is written; an interrupt from now on leaves `unfinished` undone (when given; the latest says)."""
        self.paths.pop(str(path), None)
        self.paths[str(path)] = None
        if unfinished is not None:
            self.unfinished = unfinished

    def interrupted(self, how: str) -> str:
        """The one line of an interrupted command: `interrupted (Ctrl-C) after writing OUT: what did not finish`."""
        there = [path for path in self.paths if os.path.lexists(path)]
        if not there:
            return f"{how}: temporary files removed, nothing written"
        what = ", ".join(there) if len(there) <= self.SHOWN else f"{len(there)} files (the last {there[-1]})"
        return f"{how} after writing {what}: {self.unfinished}; temporary files removed"


WRITTEN = Written()


def wrote(path: str | os.PathLike[str], unfinished: str) -> None:
    """Tell `main` that the command has written `path` where the user will look, and what an interrupt from now on
    leaves undone (e.g. "ONNX Runtime's check did not finish"), for its line should one come."""
    WRITTEN.add(path, unfinished)


def complain(command: str, message: str) -> None:
    """The one-line complaint of `command` on stderr: `where223 CMD: message`."""
    print(f"where223 {command}: {printable(message, ERROR_LIMIT)}", file=sys.stderr, flush=True)


class Parser(argparse.ArgumentParser):
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


