"""The version matrix's records: one per cell (`matrix/cells/<torch>-<transformers>-<exporter>.json`) and
`matrix/matrix.json` built from them. Standard library only: the cell writes its record in its stack's own
interpreter."""

from __future__ import annotations

from typing import Any, TypedDict

from where223.pipeline.record import Environment
from where223.sweep.cell_types import CellError, CellRecord


class _MatrixCell(CellRecord):
    cell: str
    torch_requested: str
    transformers_requested: str
    exporter: str
    python: str
    torch_version: str
    transformers_version: str
    transformers_path: str
    versions: dict[str, str | None]
    model: dict[str, Any]
    export_warnings: list[str]


class MatrixCellRecord(_MatrixCell, total=False):
    reason: str
    error: CellError
    export: dict[str, Any]
    graph: dict[str, Any]
    lint: dict[str, Any]
    ort: dict[str, Any]
    plain_export: dict[str, Any]
    where_error: dict[str, Any]


class MatrixRecord(TypedDict):
    description: str
    axes: dict[str, list[str]]
    counts: dict[str, int]
    driver_environment: Environment
    cell_environments: dict[str, dict[str, Any]]
    updated_at: str
    cells: list[MatrixCellRecord]


RECORDS: dict[str, type] = {"matrix/cells/*.json": MatrixCellRecord, "matrix/matrix.json": MatrixRecord}
