"""The class study's records: one per model type, recipe and exporter under each stack's transformers release
(`classes/<release>/<recipe>-<exporter>/<type>.json`), and `classes/summary.json` built from them. Standard
library only: the cell writes its record in its stack's own interpreter.

Roles (`where223.pipeline.roles`): besides the engine's (`where223.sweep.cell_types`), a cell's stage times are
timings and its environment is the environment; its numerics against eager may move by their own tolerance
(`within_tolerance` decides), the absolute differences and magnitudes behind them are informational, and so is the
exported file's size (its doc strings hold the call stack's paths).
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Environment
from where223.pipeline.roles import TIMING, Informational, Measured, Within
from where223.sweep.cell_types import ATTEMPTS, EXPORTED_BYTES, CellError, EngineError, EngineRecord

_RELATIVE = Measured(tolerance_key="tolerance", why="a relative difference from eager, which may move by the "
                     "numerics' own tolerance: `within_tolerance` decides")
_BEHIND = Informational("an absolute difference or magnitude behind the relative one, which decides")
# numerics against eager, as classes.run and remedies.run record them (`where223.study.judging`)
NUMERICS: dict[str, object] = {
    "relative": _RELATIVE, "outputs[*].relative": _RELATIVE, "outputs[*].max_abs_diff": _BEHIND,
    "outputs[*].max_abs_reference": _BEHIND, "outputs[*].reference_spread": _BEHIND,
}
# a remedy's numerics also run on their control (the inputs rolled), which must fail
CONTROL = {"control.relative": Informational("the control's difference from eager: `fails_as_built` decides")}
# a sweep summary's time per stack: its counts decide
SUMMARY_TIMING = Within({f"*.{key}": TIMING for key in ("wall_s_sum", "mean_wall_s", "median_wall_s",
                                                         "median_outside_stages_s", "projected_worker_hours")})


class _Cell(EngineRecord):
    model_type: str
    release: str


# `class` is not a Python name: the optional keys in the functional form. Engine-written records (timeout,
# crashed) carry the required keys only.
_CellOptional = TypedDict("_CellOptional", {
    "transformers_version": str, "settings": dict[str, Any], "built": bool, "fed": bool, "exported": bool,
    "judged": bool, "environment": Environment, "class": str, "head": str, "shrink": str,
    "config_changes": dict[str, Any], "parameters": int, "inputs": dict[str, Any],
    "attempts": Annotated[list[dict[str, Any]], ATTEMPTS],
    "eager": dict[str, Any], "export": dict[str, Any], "export_warnings": list[str], "emitters": dict[str, Any],
    "onnx_bytes": Annotated[int, EXPORTED_BYTES], "onnx_opset": int, "ir_version": int, "ort": dict[str, Any],
    "lint": dict[str, Any],
    "blame": list[dict[str, Any]], "blame_error": CellError,
    "numerics": Annotated[dict[str, Any], Within(NUMERICS)], "error": CellError | EngineError,
    "reason": str, "timings_s": Annotated[dict[str, float], TIMING], "threads": dict[str, Any],
    "subject": dict[str, Any],
}, total=False)


class ClassCellRecord(_Cell, _CellOptional):
    """One model type under one recipe and exporter: what the engine writes into every record (`EngineRecord`;
    a record of the engine's own, a timeout say, holds no more), how far the model got, and what each stage found
    (present when the stage ran)."""


class ClassesSummary(TypedDict):
    description: str
    columns: list[dict[str, str]]
    counts: dict[str, dict[str, int]]
    coverage: dict[str, dict[str, Any]]  # column -> model types recorded, listed, the share recorded, lost cells
    lost_target: float  # the ceiling on a column's lost cells, as a share of its listed types (issue 40)
    groups: list[dict[str, Any]]
    emulated_only: list[dict[str, Any]]
    timing: Annotated[dict[str, dict[str, Any]], SUMMARY_TIMING]
    driver_environment: Environment
    updated_at: Annotated[str, TIMING]


RECORDS: dict[str, type] = {"classes/*/*/*.json": ClassCellRecord, "classes/opsets/*/*/*.json": ClassCellRecord,
                            "classes/emulated/*/*/*.json": ClassCellRecord,
                            "classes/baseline/*/*/*.json": ClassCellRecord,
                            "classes/summary.json": ClassesSummary}
