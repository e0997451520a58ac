"""The remedies study's records: one per model type, recipe and exporter it reran under each stack's transformers
release (`remedies/<release>/<recipe>-<exporter>/<type>.json`), and `remedies/summary.json` built from them.
Standard library only: the cell writes its record in its stack's own interpreter.

Roles (`where223.pipeline.roles`): as the class study's cells (`where223.study.classes.record`), for the plain
export, the repair, the fixed export and the pair of repaired and fixed graphs; the summary's numbers of the
comparisons not judged are informational (which comparisons, and why, decide); the ORTModule route's times are
timings and its call stacks' line numbers the code that ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

from where223.pipeline import paths
from where223.pipeline.record import Environment
from where223.pipeline.roles import FRAMES, TIMING, Informational, Within
from where223.study.classes.record import CONTROL, NUMERICS, SUMMARY_TIMING
from where223.sweep.cell_types import ATTEMPTS, CellError, EngineError, EngineRecord

_PART = Within({"timings_s": TIMING,
                **{f"numerics.{pattern}": role for pattern, role in {**NUMERICS, **CONTROL}.items()}})


class _Cell(EngineRecord):
    model_type: str
    release: str


_CellOptional = TypedDict("_CellOptional", {
    "settings": dict[str, Any], "environment": Environment, "class": str, "head": str, "shrink": str,
    "config_changes": dict[str, Any], "parameters": int, "inputs": dict[str, Any],
    "attempts": Annotated[list[dict[str, Any]], ATTEMPTS],
    "built": bool, "fed": bool, "eager": dict[str, Any],
    # the seeds tried while eager's outputs were all zero or constant, each with what its outputs were
    "seeds": list[dict[str, Any]],
    # the plain export as the class study exports it, `where223 repair` of it, the export with the fixes
    "plain": Annotated[dict[str, Any], _PART], "repair": Annotated[dict[str, Any], _PART],
    "fixed": Annotated[dict[str, Any], _PART], "pair": Annotated[dict[str, Any], Within(NUMERICS)],
    "error": CellError | EngineError, "reason": str, "timings_s": Annotated[dict[str, float], TIMING],
    "threads": dict[str, Any], "subject": dict[str, Any],
}, total=False)


class RemedyCellRecord(_Cell, _CellOptional):
    """One model type under one recipe and exporter: the engine's parts (`EngineRecord`), the plain export's
    judgement and explanation, the repair's and the fixed export's judgements and numerics (each with its control),
    and the repaired graph against the fixed one."""


class RemediesSummary(TypedDict):
    description: str
    tolerances: dict[str, Any]
    counts: dict[str, dict[str, int]]
    # every comparison that could not have failed, with why (study.judging)
    not_judged: Annotated[list[dict[str, Any]], Within({
        "[*].relative": Informational("a comparison's difference, not judged: which comparisons and why decide"),
        "[*].control_relative": Informational("its control's difference, which did not fail"),
    })]
    classes: list[dict[str, Any]]
    samples: dict[str, dict[str, Any]]
    timing: Annotated[dict[str, dict[str, Any]], SUMMARY_TIMING]
    driver_environment: Environment
    updated_at: Annotated[str, TIMING]


class OrtModuleRoute(TypedDict):
    """The seed's route on ELECTRA (ORTModule, CPU bf16 autocast), as exported and with the fixes: each run's ONNX
    Runtime verdict, its message and the type binding it names."""

    description: str
    runs: Annotated[list[dict[str, Any]], Within({"[*].timing": TIMING, "[*].call_stack": FRAMES})]
    environment: Environment


# where the records go: what the analysis and the float32 baseline's planner both read
OUT_DIR: Path = paths.OUTPUTS / "remedies"
RECORDS: dict[str, type] = {"remedies/*/*/*.json": RemedyCellRecord, "remedies/summary.json": RemediesSummary,
                            "remedies/ortmodule_electra.json": OrtModuleRoute}
