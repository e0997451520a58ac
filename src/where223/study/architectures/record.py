"""The architecture sweep's records: one per model type and release (`architectures/<release>/<type>.json`) and
`architectures/summary.json` built from them. Standard library only: the cell writes its record in its stack's
own interpreter.

Roles (`where223.pipeline.roles`): the engine's (`where223.sweep.cell_types`: times, host, tracebacks) and the
environment's; the summary's update time is a timing; the exported file's size is informational (its doc strings
hold the call stack's paths). Everything else decides.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Environment
from where223.pipeline.roles import TIMING
from where223.sweep.cell_types import ATTEMPTS, EXPORTED_BYTES, CellError, CellRecord


class _Architecture(CellRecord):
    model_type: str
    release: str
    transformers_version: str
    settings: dict[str, Any]
    built: bool
    fed: bool
    exported: bool
    judged: bool
    environment: Environment


# `class` is not a Python name: the optional keys in the functional form
_ArchitectureOptional = TypedDict("_ArchitectureOptional", {
    "class": str, "head": str, "shrink": str, "config_changes": dict[str, Any], "parameters": int,
    "inputs": dict[str, Any],
    "attempts": Annotated[list[dict[str, Any]], ATTEMPTS], "export": dict[str, Any], "export_warnings": list[str],
    "onnx_bytes": Annotated[int, EXPORTED_BYTES], "ort": dict[str, Any], "lint": dict[str, Any],
    "blame": list[dict[str, Any]],
    "divergence": dict[str, Any], "error": CellError,
}, total=False)


class ArchitectureRecord(_Architecture, _ArchitectureOptional):
    """A model type's cell: what the engine writes (`CellRecord`), how far the model got, and what each stage
    found (present when the stage ran)."""


class ArchitecturesSummary(TypedDict):
    description: str
    releases: list[str]
    counts: dict[str, dict[str, int]]
    outcomes: dict[str, dict[str, int]]
    architectures: dict[str, Any]
    failure_groups: list[dict[str, Any]]
    release_changes: list[dict[str, Any]]
    driver_environment: Environment
    updated_at: Annotated[str, TIMING]


RECORDS: dict[str, type] = {"architectures/*/*.json": ArchitectureRecord,
                            "architectures/summary.json": ArchitecturesSummary}
