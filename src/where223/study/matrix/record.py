"""The version matrix's records: one per cell (`matrix/cells/<torch>-<transformers>-<exporter>.json`) and
`matrix/matrix.json` built from them. Standard library only: the cell writes its record in its stack's own
interpreter.

Roles (`where223.pipeline.roles`): the engine's (`where223.sweep.cell_types`: times, host, tracebacks); a cell's
interpreter, the packages its stack installed (`versions`) and where its transformers checkout lies are the
environment (the releases it asked for and got, `torch_version` and `transformers_version`, decide); the summary's
update time is a timing and the cells' environments are the environment.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Environment
from where223.pipeline.roles import ENVIRONMENT, TIMING
from where223.sweep.cell_types import CellError, CellRecord


class _MatrixCell(CellRecord):
    cell: str
    torch_requested: str
    transformers_requested: str
    exporter: str
    python: Annotated[str, ENVIRONMENT]
    torch_version: str
    transformers_version: str
    transformers_path: Annotated[str, ENVIRONMENT]
    versions: Annotated[dict[str, str | None], ENVIRONMENT]
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
    cell_environments: Annotated[dict[str, dict[str, Any]], ENVIRONMENT]
    updated_at: Annotated[str, TIMING]
    cells: list[MatrixCellRecord]


RECORDS: dict[str, type] = {"matrix/cells/*.json": MatrixCellRecord, "matrix/matrix.json": MatrixRecord}
