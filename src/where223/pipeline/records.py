"""Writing and reading the JSON records every notebook leaves behind (atomically, through `where223.files`).

A record is strict JSON (RFC 8259): `write_json` never writes `NaN`, `Infinity` or `-Infinity`, which Python's
`json` writes by default and most other readers refuse. A value JSON cannot represent (a non-finite float: an
overflowing config value such as `hidden_size=1e309`, an infinite ratio of graph to eager outputs) is written as
`null`, and the record says so in its top-level `not_representable` list: one entry per such value, its place
as a JSON Pointer (RFC 6901, e.g. `/subject/config/hidden_size`) and the text Python's `json` would have written
(`Infinity`, `-Infinity`, `NaN`). A record that had nothing to replace is written exactly as before, without
the key. Every record type accepts the key (`where223.pipeline.schema.check_records`), and the validator refuses
a committed record that is not strict JSON.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, TypedDict

from where223.files import write_atomic
from where223.pipeline import portable

NOT_REPRESENTABLE = "not_representable"


class NotRepresentable(TypedDict):
    """One value a record could not hold: where it was (a JSON Pointer) and its text in Python's `json`."""

    path: str
    text: str


def _pointer_part(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def representable(record: dict[str, Any]) -> dict[str, Any]:
    """`record` (JSON types only) with each non-finite float replaced by None and listed under
    `not_representable` (appended to the list the record has); `record` itself when there is none."""
    found: list[NotRepresentable] = []

    def walk(value: Any, at: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            found.append({"path": at, "text": json.dumps(value)})
            return None
        if isinstance(value, dict):
            return {key: walk(item, f"{at}/{_pointer_part(str(key))}") for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item, f"{at}/{index}") for index, item in enumerate(value)]
        return value

    cleaned = walk(record, "")
    if not found:
        return record
    if not isinstance(cleaned, dict):
        raise ValueError(f"{found[0]['text']} at {found[0]['path']} in JSON that is not an object, so it cannot "
                         f"say so under {NOT_REPRESENTABLE!r}")
    cleaned[NOT_REPRESENTABLE] = [*(cleaned.get(NOT_REPRESENTABLE) or []), *found]
    return cleaned


def write_json(path: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write a record as indented, key-sorted, portable, strict JSON (stable diffs), atomically; a value JSON
    cannot represent becomes null, named in the record's `not_representable` (see the module's docstring)."""
    value = representable(portable.record(json.loads(json.dumps(record, default=str))))
    text = json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return write_atomic(path, text)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record written by `write_json`, with a message that says which notebook makes it."""
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(
            f"{target} does not exist: run the notebook that writes it first (see README, `make run`)"
        )
    return json.loads(target.read_text())
