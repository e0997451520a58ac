"""The remedies study's records: one per model type, recipe and exporter it reran under each stack's transformers
release (`remedies/<release>/<recipe>-<exporter>/<type>.json`), and `remedies/summary.json` built from them.
Standard library only: the cell writes its record in its stack's own interpreter."""

from __future__ import annotations

from typing import Any, TypedDict

from where223.pipeline.record import Environment
from where223.sweep.cell_types import CellError, EngineError, EngineRecord


class _Cell(EngineRecord):
    model_type: str
    release: str


_CellOptional = TypedDict("_CellOptional", {
    "settings": dict[str, Any], "environment": Environment, "class": str, "head": str, "shrink": str,
    "config_changes": dict[str, Any], "parameters": int, "inputs": dict[str, Any], "attempts": list[dict[str, Any]],
    "built": bool, "fed": bool, "eager": dict[str, Any],
    # the plain export as the class study exports it, `where223 repair` of it, the export with the fixes
    "plain": dict[str, Any], "repair": dict[str, Any], "fixed": dict[str, Any], "pair": dict[str, Any],
    "error": CellError | EngineError, "reason": str, "timings_s": dict[str, float], "threads": dict[str, Any],
    "subject": dict[str, Any],
}, total=False)


class RemedyCellRecord(_Cell, _CellOptional):
    """One model type under one recipe and exporter: the engine's parts (`EngineRecord`), the plain export's
    judgement and explanation, the repair's and the fixed export's judgements and numerics (each with its control),
    and the repaired graph against the fixed one."""


class RemediesSummary(TypedDict):
    description: str
    tolerances: dict[str, Any]
    counts: dict[str, dict[str, int]]
    controls_not_failing: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    samples: dict[str, dict[str, Any]]
    timing: dict[str, dict[str, Any]]
    driver_environment: Environment
    updated_at: str


class OrtModuleRoute(TypedDict):
    """The seed's route on ELECTRA (ORTModule, CPU bf16 autocast), as exported and with the fixes: each run's ONNX
    Runtime verdict, its message and the type binding it names."""

    description: str
    runs: list[dict[str, Any]]
    environment: Environment


RECORDS: dict[str, type] = {"remedies/*/*/*.json": RemedyCellRecord, "remedies/summary.json": RemediesSummary,
                            "remedies/ortmodule_electra.json": OrtModuleRoute}
