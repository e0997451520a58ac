"""Atomic writing and reading of the JSON records every notebook leaves behind."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from where223.pipeline.paths import ROOT

_SITE_PACKAGES = re.compile(r"/\S*?/site-packages/")


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary file and a rename, so readers never see half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def portable_text(text: str) -> str:
    """Strip machine-specific prefixes from paths inside a text: site-packages and the repo root."""
    return _SITE_PACKAGES.sub("", text).replace(f"{ROOT}/", "")


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
