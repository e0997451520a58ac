"""What every cell runner of every sweep reports the same way: the stage it is in (on stderr, so the worker can
tell where a crashed cell died), each stage's time, an exception as a record, and the warnings an export raised.
Standard library only."""

from __future__ import annotations

import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

MESSAGE_LIMIT = 20_000


ANNOUNCE = {"stages": False}  # set by the cell entry point (`where223.sweep.cell`); a library call stays quiet


def stage(name: str) -> None:
    """Announce a stage on stderr when running as a sweep cell, so the driver can tell where a crashed cell died."""
    if not ANNOUNCE["stages"]:
        return
    sys.stderr.write(f"WHERE223_STAGE {name}\n")
    sys.stderr.flush()


def time_stage(record: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
    """Announce stage `name`, run `fn` and keep its seconds in `record["timings_s"]` (even when it raises)."""
    stage(name)
    start = time.perf_counter()
    try:
        return fn()
    finally:
        record["timings_s"][name] = round(time.perf_counter() - start, 2)


def describe_error(exc: BaseException, where: str) -> dict[str, Any]:
    """Exception type and message verbatim (capped), its cause chain, and the traceback tail."""
    message = str(exc)
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + f"\n... [{len(str(exc)) - MESSAGE_LIMIT} more characters]"
    causes = []
    seen = {id(exc)}
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen and len(causes) < 5:
        seen.add(id(cause))
        causes.append({"type": type(cause).__name__, "message": str(cause)[:MESSAGE_LIMIT]})
        cause = cause.__cause__ or cause.__context__
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "stage": where,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": message,
        "causes": causes,
        "traceback_tail": "\n".join(tb.strip().splitlines()[-25:]),
    }


def warning_lines(caught: Sequence[warnings.WarningMessage], limit: int = 10) -> list[str]:
    """Distinct `Category: first line` of the warnings an export raised, in order, at most `limit`."""
    lines: list[str] = []
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).strip().splitlines()[0] if str(w.message).strip() else ''}"
        if text not in lines:
            lines.append(text)
    return lines[:limit]
