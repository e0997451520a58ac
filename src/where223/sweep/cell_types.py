"""The parts every sweep cell's record shares, as record types (standard library only: the cell's own interpreter,
in any stack, writes them). The question packages' record types (`where223.study.matrix.record`, ...) build on
`CellRecord`.

Roles (`where223.pipeline.roles`): a cell's times and when it was recorded are timings, the host that ran it is
the environment, and a traceback's tail is the code that ran (its paths, lines and source text change with
where223's and the stack's code; the error's type, message and causes decide); everything else a cell records
decides whether a rerun of it reproduced.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.roles import ENVIRONMENT, TIMING, Informational, Role, Within

TRACEBACK = Role("environment", "a traceback's last lines: the frames of the code that ran (where223's and the "
                 "stack's paths, lines and source) and the end of the message, which `message` and `causes` hold")
ATTEMPTS = Within({"[*].traceback_tail": TRACEBACK})  # a record's earlier attempts, each ended by an error
# An exported file's size: the exporters write the Python call stack into node doc strings, so the size moves with
# the paths and lines of the code that called them (a faithful rerun after a file moved differs by those bytes).
EXPORTED_BYTES = Informational("the exported file's size, which holds the call stack's paths in node doc strings")


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


class _EngineFactsRequired(TypedDict):
    host: Annotated[str, ENVIRONMENT]
    threads: int
    prepare_s: Annotated[float | None, TIMING]


class EngineFacts(_EngineFactsRequired, total=False):
    """How the engine ran the cell (`where223.sweep.worker`; a record older than the warm engine has none of
    these): forked from its stack's warm server or in a new interpreter, the cell's wall time less its timed
    stages, the warm server's start when this cell started one, why a stack's cells ran cold, and the first run
    of a cell the engine lost once."""

    kind: Annotated[str, ENVIRONMENT]  # "warm" or "cold"
    overhead_s: Annotated[float | None, TIMING]
    server_start_s: Annotated[float, TIMING]
    warm_refused: Annotated[str, ENVIRONMENT]
    # the cell's first run, which the engine lost (timeout, crashed), before this one with a longer limit
    # (`where223.sweep.driver.LONGER_LIMIT`): whether a limit sufficed the first time depends on the machine's load
    first_run: Annotated[dict[str, Any], TIMING]


class EngineError(TypedDict):
    """How a cell ended that left no record of its own (the engine writes it: timeout, crashed, not_built)."""

    stage: str
    type: str
    message: str


class _CellErrorRequired(EngineError):
    causes: list[dict[str, Any]]
    traceback_tail: Annotated[str, TRACEBACK]


class CellError(_CellErrorRequired, total=False):
    shrink: str


class _EngineRecordRequired(TypedDict):
    key: CellKey
    outcome: str
    recorded_at: Annotated[str, TIMING]
    recorded_by: str
    stack: StackFacts
    engine: EngineFacts
    wall_s: Annotated[float, TIMING]


class EngineRecord(_EngineRecordRequired, total=False):
    """The keys of every cell's record, the engine's own (timeout, crashed, not_built) included; `code`, which
    commit of this repository the sweep ran and whether its src/where223 differed from it
    (`where223.pipeline.git.code_version`; a record older than the field has none), is what `where223 sweep
    --rerun-older-code` reads."""

    code: Annotated[dict[str, Any], ENVIRONMENT]


class CellRecord(EngineRecord):
    """The keys the engine writes into every record a cell itself wrote, whatever the model."""

    threads: dict[str, Any]
    timings_s: Annotated[dict[str, float], TIMING]


class MigratedOutcomes(TypedDict):
    """`outputs/sweeps/migrated_outcomes.json`: each migrated record's key and outcome (`where223.sweep.migrate`)."""

    migrated_from: str
    cells: dict[str, dict[str, Any]]
