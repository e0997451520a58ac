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


class EngineError(TypedDict):
    """How a cell ended that left no record of its own (the engine writes it: timeout, crashed, not_built)."""

    stage: str
    type: str
    message: str


class _CellErrorRequired(EngineError):
    causes: list[dict[str, Any]]
    traceback_tail: str


class CellError(_CellErrorRequired, total=False):
    shrink: str


class EngineRecord(TypedDict):
    """The keys of every cell's record, the engine's own (timeout, crashed, not_built) included."""

    key: CellKey
    outcome: str
    recorded_at: str
    recorded_by: str
    stack: StackFacts
    engine: EngineFacts
    wall_s: float


class CellRecord(EngineRecord):
    """The keys the engine writes into every record a cell itself wrote, whatever the model."""

    threads: dict[str, Any]
    timings_s: dict[str, float]


class MigratedOutcomes(TypedDict):
    """`outputs/sweeps/migrated_outcomes.json`: each migrated record's key and outcome (`where223.sweep.migrate`)."""

    migrated_from: str
    cells: dict[str, dict[str, Any]]
