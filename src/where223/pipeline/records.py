"""Writing and reading the JSON records every notebook leaves behind (atomically, through `where223.files`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from where223.files import write_atomic
from where223.pipeline import portable


def write_json(path: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write a record as indented, key-sorted, portable JSON (stable diffs), atomically."""
    text = json.dumps(portable.record(json.loads(json.dumps(record, default=str))), indent=2, sort_keys=True) + "\n"
    return write_atomic(path, text)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record written by `write_json`, with a message that says which notebook makes it."""
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(
            f"{target} does not exist: run the notebook that writes it first (see README, `make run`)"
        )
    return json.loads(target.read_text())
