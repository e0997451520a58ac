"""The case's records: what notebook 01 writes for each path (`<run>/reproduce.json`), standard library only.

Roles (`where223.pipeline.roles`): how long the run took is a timing; the call stack's frames are
`path:line:function`, and the line is the code that ran (where223's own lines move whenever its code does, the
packages' with their builds), so only the paths and functions decide.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Environment
from where223.pipeline.roles import FRAMES, TIMING, Within


class ReproduceRecord(TypedDict):
    path: str
    parameters: dict[str, Any]
    status: str
    ort_verdict: str
    error: dict[str, Any] | None
    call_stack: Annotated[list[str], FRAMES]
    exported_model: str | None
    timing: Annotated[dict[str, Any], Within({"seconds": TIMING})]
    environment: Environment


RECORDS: dict[str, type] = {"*/reproduce.json": ReproduceRecord}
