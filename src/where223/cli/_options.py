"""Option groups several commands share, one name per concept, and the value types of options.

- `output_root`: the outputs tree a command reads or writes (`--output-root DIR`, default `outputs/`), for
  `run`, `report`, `compare`, `bench-variants` and `sweep` alike;
- `wait`: start after the run that is writing the outputs instead of refusing (`--wait`);
- `json_output`: print the result as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

from where223.errors import UsageError


def output_root(parser: argparse.ArgumentParser, what: str) -> None:
    """`--output-root DIR`: the outputs tree the command `what`s (default: the repository's outputs/)."""
    parser.add_argument("--output-root", type=folder, metavar="DIR",
                        help=f"the outputs tree to {what} (default outputs/)")


def folder(text: str) -> Path:
    """A folder's name as given: an empty one is refused (Path('') would be the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty name names no folder (write . for the current one)")
    return Path(text)


def resolved_output_root(args: argparse.Namespace, default: Path, must_exist: bool = True) -> Path:
    """The outputs tree `--output-root` names (absolute), else `default`; a UsageError when it must exist and
    does not."""
    root = Path(args.output_root).resolve() if args.output_root else default
    if must_exist and not root.is_dir():
        raise UsageError(f"{root}: no such outputs folder")
    return root


def wait(parser: argparse.ArgumentParser) -> None:
    """`--wait`: if another run is writing the outputs, start after it (default: refuse at once)."""
    parser.add_argument("--wait", action="store_true", help="if another run is writing the outputs, start after it")


def json_output(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """`--json`: print the result as JSON."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


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


def writable_file(spelled: str) -> Path:
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


def deadline(text: str) -> dt.datetime:
    """An ISO date and time, UTC when it names no zone."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO time such as 2026-12-01T18:00: {text!r}") from error
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def patterns(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def scheduler(text: str) -> str:
    """A Dask scheduler address such as tcp://HOST:8786."""
    if "://" not in text or not text.split("://", 1)[1]:
        raise argparse.ArgumentTypeError(f"not a scheduler address such as tcp://HOST:8786: {text!r}")
    return text


def same_file(first: Path, second: Path) -> bool:
    if first.exists() and second.exists():
        return os.path.samefile(first, second)
    return first.resolve() == second.resolve()


