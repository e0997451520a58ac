"""Writing and reading the JSON records every notebook leaves behind (atomically, through `where223.files`)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from where223.files import write_atomic
from where223.pipeline.paths import ROOT, published

_SITE_PACKAGES = re.compile(r"/\S*?/site-packages/")


def portable_text(text: str) -> str:
    """Make paths inside a text portable: site-packages and the repo root stripped, staged paths as published."""
    return published(_SITE_PACKAGES.sub("", text).replace(f"{ROOT}/", ""))


def portable(record: Any) -> Any:
    """The record with every string made portable (records compare across machines and checkouts)."""
    if isinstance(record, str):
        return portable_text(record)
    if isinstance(record, dict):
        return {key: portable(value) for key, value in record.items()}
    if isinstance(record, (list, tuple)):
        return [portable(value) for value in record]
    return record


def write_json(path: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write a record as indented, key-sorted, portable JSON (stable diffs), atomically."""
    text = json.dumps(portable(json.loads(json.dumps(record, default=str))), indent=2, sort_keys=True) + "\n"
    return write_atomic(path, text)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record written by `write_json`, with a message that says which notebook makes it."""
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(
            f"{target} does not exist: run the notebook that writes it first (see README, `make run`)"
        )
    return json.loads(target.read_text())
