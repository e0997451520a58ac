"""Reading sweep records: the one reader every study's records go through, and the check of each outcome.

Standard library only: readers of records import no torch. A record is a JSON object with the cell's `key`
(`where223.sweep.space.KEY_FIELDS`), an `outcome` of `where223.outcomes.Outcome`, the stack's facts and what the
cell's runner recorded; a cell ONNX Runtime judged carries `ort` (its verdict, message and parsed binding).
`outcome_problems` says where a record's outcome disagrees with the message it recorded (the outcome is re-derived
from the message with `where223.graph.ort.judge_message`, the one parser of ONNX Runtime's messages).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from where223.graph.ort import OrtVerdict, judge_message
from where223.outcomes import Outcome
from where223.sweep.cell_types import CellKey, MigratedOutcomes

KEY_FIELDS: tuple[str, ...] = tuple(CellKey.__annotations__)  # the key's fields, declared once in CellKey
# the types live beside the other cell parts, in a module of the standard library only
RECORDS: dict[str, type] = {"sweeps/migrated_outcomes.json": MigratedOutcomes}


class RecordError(ValueError):
    """A file that is not a sweep record of this schema (the message says which and why)."""


def read_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A sweep record, checked: a JSON object with a complete key and a known outcome."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise RecordError(f"{path}: unreadable: {error}") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: not a JSON object")
    key = record.get("key")
    if not isinstance(key, dict) or set(key) != set(KEY_FIELDS):
        raise RecordError(f"{path}: its key is not {{{', '.join(KEY_FIELDS)}}}: {key!r}")
    try:
        Outcome(record.get("outcome"))
    except ValueError:
        raise RecordError(f"{path}: unknown outcome {record.get('outcome')!r}") from None
    return record


def ort_outcome(ort: dict[str, Any]) -> Outcome:
    """The outcome an `ort` entry states: accepted without a message, else what its message says (a session
    creation stopped at its time limit is `timeout`)."""
    if ort.get("verdict") == OrtVerdict.TIMEOUT:
        return Outcome.TIMEOUT
    message = ort.get("message")
    return Outcome.ACCEPTED if not message else Outcome(judge_message(message).verdict)


def outcome_problems(record: dict[str, Any]) -> list[str]:
    """Where the record's outcome disagrees with its recorded ONNX Runtime message (empty when it agrees)."""
    outcome = Outcome(record["outcome"])
    ort = record.get("ort")
    if outcome.judged and not isinstance(ort, dict):
        return [f"outcome {outcome} without ONNX Runtime's verdict (no `ort` entry)"]
    if isinstance(ort, dict):
        said = ort_outcome(ort)
        if said != outcome:
            return [f"outcome {outcome}, but its ONNX Runtime message says {said}"]
        if ort.get("verdict") is not None and Outcome(ort["verdict"]) != outcome:
            return [f"outcome {outcome}, but its recorded verdict is {ort['verdict']}"]
    return []
