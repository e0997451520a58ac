"""The parts every sweep cell's record shares, as record types (standard library only: the cell's own interpreter,
in any stack, writes them). The question packages' record types (`where223.study.matrix.record`, ...) build on
`CellRecord`."""

from __future__ import annotations

from typing import Any, TypedDict


class CellKey(TypedDict):
    """What a cell is (`where223.sweep.space.KEY_FIELDS`): resuming matches records by it."""

    stack: str
    model: str
    recipe: str
    exporter: str
    opset: int | str
    mode: str


class StackFacts(TypedDict):
    name: str
    environment: str
    python: str
    lock: str | None
    torch: str | None
    transformers: str | None


class EngineFacts(TypedDict):
    host: str
    threads: int
    prepare_s: float | None


class _CellErrorRequired(TypedDict):
    stage: str
    type: str
    message: str
    causes: list[dict[str, Any]]
    traceback_tail: str


class CellError(_CellErrorRequired, total=False):
    shrink: str


class CellRecord(TypedDict):
    """The keys the engine writes into every cell's record, whatever the model."""

    key: CellKey
    outcome: str
    recorded_at: str
    recorded_by: str
    stack: StackFacts
    engine: EngineFacts
    threads: dict[str, Any]
    timings_s: dict[str, float]
    wall_s: float


class MigratedOutcomes(TypedDict):
    """`outputs/sweeps/migrated_outcomes.json`: each migrated record's key and outcome (`where223.sweep.migrate`)."""

    migrated_from: str
    cells: dict[str, dict[str, Any]]
