"""The fix study's records: where a verification run writes, and the record types of `verification.json`.

Standard library only (the record types are read by the validator and by record readers that import no torch)."""

from __future__ import annotations

from typing import Any, TypedDict

from where223.pipeline.record import Environment

FIXED_MODEL, FP32_MODEL, REPAIRED_MODEL = "model.onnx", "model-fp32.onnx", "repaired.onnx"


class _CheckRequired(TypedDict):
    name: str
    question: str
    value: Any
    tolerance: Any
    verdict: str
    detail: str
    not_judged: str
    not_measured: str


class CheckRecord(_CheckRequired, total=False):
    per_model: dict[str, Any]


class ControlRecord(TypedDict):
    name: str
    description: str
    breaks: list[str]
    checks: list[CheckRecord]


class VerificationRecord(TypedDict):
    variant: str
    source_run: str
    verdict: str
    verdict_statement: str
    not_measured: list[str]
    checks: list[CheckRecord]
    controls: list[ControlRecord]
    losses: dict[str, Any]
    gradients: list[Any]
    numerics: dict[str, Any]
    ortmodule_execution: dict[str, Any]
    environment: Environment


RECORDS: dict[str, type] = {"*/fix-*/verification.json": VerificationRecord}
