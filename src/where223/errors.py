"""What reaches the user when something is wrong: one error class for what cannot be done as asked (exit 2),
one for what the tool did and found wanting (exit 1), and one way to show text read from a file (node names
above all) on a single line. `where223.cli` maps them to exit codes in one place.

Standard library only, so that `graph/`, `pipeline/` and the matrix's worker environments can all use it.
"""

from __future__ import annotations


class UsageError(Exception):
    """A bad argument, a missing or unreadable input, an output that cannot be written where asked.

    The command line prints its message as one line on stderr (a subclass that finds several problems lists
    them in a `problems` attribute: one line each) and exits 2; library callers catch it like any other
    exception (each subclass is also the built-in error it refines, e.g. ValueError).
    """


class Finding(Exception):
    """The tool did its work and found something the user must act on: a model it cannot repair, one ONNX Runtime
    still refuses, a notebook that failed, nothing to draw. The command line prints the message as one line on
    stderr and exits 1 (each subclass is also the built-in error it refines)."""


NAME_LIMIT = 200  # characters of a name shown before it is cut


def printable(text: str | bytes, limit: int | None = NAME_LIMIT) -> str:
    """`text` safe to print on one line: control and other unprintable characters escaped as `repr` writes
    them (a newline as \\n, ESC as \\x1b), and cut after `limit` characters with a marker saying how many
    were left out (None: never cut). Names read from a model pass through here before they are shown; one that
    protobuf hands back as bytes (its UTF-8 broken) is shown with the bytes that are not UTF-8 escaped (\\xff)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    if limit is not None and len(text) > limit:
        return f"{printable(text[:limit], None)}…[{len(text) - limit} more characters]"
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
