"""The variant study's records: where they go and their types (standard library only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from where223.pipeline import paths
from where223.pipeline.record import Environment


def output_path(device: str, output_root: str | Path | None = None) -> Path:
    """`outputs/variants/variants-<device>.json` (under `output_root` when given)."""
    return paths.run_dir("variants", output_root or None) / f"variants-{device}.json"


class VariantsRecord(TypedDict):
    study: str
    settings: dict[str, Any]
    baseline: str
    export_from: str | None
    variants: dict[str, dict[str, Any]]
    ort_statuses: dict[str, str]
    tracing_levels: list[str]
    skipped: dict[str, str]
    timing: dict[str, Any]
    recommendation: dict[str, Any]
    environment: Environment


RECORDS: dict[str, type] = {"variants/variants-*.json": VariantsRecord}
