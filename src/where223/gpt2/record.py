"""The case's records: what notebook 01 writes for each path (`<run>/reproduce.json`), standard library only."""

from __future__ import annotations

from typing import Any, TypedDict

from where223.pipeline.record import Environment


class ReproduceRecord(TypedDict):
    path: str
    parameters: dict[str, Any]
    status: str
    ort_verdict: str
    error: dict[str, Any] | None
    call_stack: list[str]
    exported_model: str | None
    timing: dict[str, Any]
    environment: Environment


RECORDS: dict[str, type] = {"*/reproduce.json": ReproduceRecord}
