"""What a remedy left refused, exported once more without reduced precision: is the refusal the precision's?

A member whose repaired or fixed export ONNX Runtime still refuses is exported again, by the same exporter on the
same stack, under the sweep recipe `fp32_model` (the model left in float32, no autocast), as a class cell
(`where223.study.classes.run`); the records go to `classes/baseline/<release>/fp32_model-<exporter>/<model>.json`
(`spaces/classes-baseline-today.yaml`, whose planner is this module's `plan`). When the float32 export is refused
alike (same operator, same verdict), the refusal is the exporter's whatever the precision: no precision remedy can
be asked to fix it, and that is the reason recorded for it. Records only: no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from where223.graph import ort
from where223.outcomes import TYPES_ACCEPTED
from where223.pipeline import records
from where223.study.classes import refusals
from where223.study.remedies.record import OUT_DIR

RECIPE = "fp32_model"
RECORDS = "baseline"  # classes/baseline/<release>/<recipe>-<exporter>/<model>.json
ALIKE_IN_FLOAT32 = "refused alike in float32: the exporter's, not the reduced precision's"
NOT_ALIKE = "the float32 export is not refused alike"
NOT_RUN = "no float32 export recorded"
NOT_REFUSED = "not refused by ONNX Runtime (the remedy was not run, or refused by the repair tool)"


def load_baseline_records(class_dir: Path = refusals.OUT_DIR) -> list[dict[str, Any]]:
    """The float32 exports' records, in path order."""
    return [records.read_json(path) for path in sorted((Path(class_dir) / RECORDS).glob("*/*/*.json"))]


def refused_parts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The fixed, then the repaired export of a remedies record that ONNX Runtime still refused (not those merely
    refused by the repair tool, which says why itself, or never run)."""
    parts = [record.get("fixed") or {}, record.get("repair") or {}]
    return [part for part in parts if part.get("outcome") and part["outcome"] not in TYPES_ACCEPTED]


def plan_lines(remedies_rows: list[dict[str, Any]], stack: str) -> list[str]:
    """One stack's cells (`MODEL fp32_model EXPORTER auto`): each (model, exporter) a remedy left refused, once."""
    lines: list[str] = []
    for record in remedies_rows:
        stack_label, _, exporter = refusals.column(record)
        line = f"{record.get('model_type')} {RECIPE} {exporter} auto"
        if stack_label == stack and refused_parts(record) and line not in lines:
            lines.append(line)
    return lines


def plan(stacks: list[str]) -> list[str]:
    """The float32 cells for a space's stacks (`planner:` of spaces/classes-baseline-*.yaml)."""
    rows = refusals.load_records(OUT_DIR)
    return [line for stack in stacks for line in plan_lines(rows, refusals.STACK_LABELS.get(stack, stack))]


def _refusal(part: dict[str, Any]) -> tuple[str, str] | None:
    """(verdict, operator) of ONNX Runtime's refusal of an export, None when it did not refuse it."""
    outcome = part.get("outcome")
    if not outcome or outcome in TYPES_ACCEPTED:
        return None
    message = (part.get("ort") or {}).get("message")
    typed = refusals.refusal(part)
    resolved = ort.resolution_refusal(message)
    operator = typed["operator"] if typed else resolved[1] if resolved else ort.refused_operator(message)
    return str(outcome), operator or "?"


def reason(part: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    """Why a remedy's export is still refused, as far as the float32 export can say."""
    if baseline is None:
        return NOT_RUN
    mine, theirs = _refusal(part), _refusal(baseline)
    return ALIKE_IN_FLOAT32 if mine is not None and mine == theirs else NOT_ALIKE


# the write-up's table says each reason in a word or two (its text gives the reasons in full)
SHORT = {ALIKE_IN_FLOAT32: "refused alike", NOT_ALIKE: "not alike", NOT_RUN: "not exported", NOT_REFUSED: "—"}


def refusal_left(part: dict[str, Any]) -> str | None:
    """`Operator (verdict)` of ONNX Runtime's refusal of an export, None when it did not refuse it."""
    refused = _refusal(part)
    return f"{refused[1]} ({refused[0]})" if refused else None


def by_cell(baseline_rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(stack label, exporter, model) -> its float32 record."""
    return {(refusals.column(r)[0], refusals.column(r)[2], str(r.get("model_type"))): r for r in baseline_rows}
