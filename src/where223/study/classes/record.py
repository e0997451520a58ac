"""The class study's records: one per model type, recipe and exporter under each stack's transformers release
(`classes/<release>/<recipe>-<exporter>/<type>.json`), and `classes/summary.json` built from them. Standard
library only: the cell writes its record in its stack's own interpreter."""

from __future__ import annotations

from typing import Any, TypedDict

from where223.pipeline.record import Environment
from where223.sweep.cell_types import CellError, EngineError, EngineRecord


class _Cell(EngineRecord):
    model_type: str
    release: str


# `class` is not a Python name: the optional keys in the functional form. Engine-written records (timeout,
# crashed) carry the required keys only.
_CellOptional = TypedDict("_CellOptional", {
    "transformers_version": str, "settings": dict[str, Any], "built": bool, "fed": bool, "exported": bool,
    "judged": bool, "environment": Environment, "class": str, "head": str, "shrink": str,
    "config_changes": dict[str, Any], "parameters": int, "inputs": dict[str, Any], "attempts": list[dict[str, Any]],
    "eager": dict[str, Any], "export": dict[str, Any], "export_warnings": list[str], "emitters": dict[str, Any],
    "onnx_bytes": int, "onnx_opset": int, "ir_version": int, "ort": dict[str, Any], "lint": dict[str, Any],
    "blame": list[dict[str, Any]], "blame_error": CellError, "numerics": dict[str, Any],
    "error": CellError | EngineError,
    "reason": str, "timings_s": dict[str, float], "threads": dict[str, Any], "subject": dict[str, Any],
}, total=False)


class ClassCellRecord(_Cell, _CellOptional):
    """One model type under one recipe and exporter: what the engine writes into every record (`EngineRecord`;
    a record of the engine's own, a timeout say, holds no more), how far the model got, and what each stage found
    (present when the stage ran)."""


class ClassesSummary(TypedDict):
    description: str
    columns: list[dict[str, str]]
    counts: dict[str, dict[str, int]]
    groups: list[dict[str, Any]]
    emulated_only: list[dict[str, Any]]
    timing: dict[str, dict[str, Any]]
    driver_environment: Environment
    updated_at: str


RECORDS: dict[str, type] = {"classes/*/*/*.json": ClassCellRecord, "classes/opsets/*/*/*.json": ClassCellRecord,
                            "classes/emulated/*/*/*.json": ClassCellRecord,
                            "classes/baseline/*/*/*.json": ClassCellRecord,
                            "classes/summary.json": ClassesSummary}
