"""Atomic writing and reading of the JSON records every notebook leaves behind."""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from where223.pipeline.paths import ROOT, published

_SITE_PACKAGES = re.compile(r"/\S*?/site-packages/")
# Every temporary file starts so (.gitignore hides them wherever a killed process leaves one).
TEMPORARY_PREFIX = ".tmp-"


def _reserve_temporary(target: Path) -> Path:
    """Create an empty, uniquely named temporary file beside `target`, with the umask's permissions."""
    while True:
        candidate = target.with_name(f"{TEMPORARY_PREFIX}{secrets.token_hex(6)}-{target.name}")
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return candidate


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside `path` to write the whole file to; renamed onto `path` when the block completes.

    Readers of `path` see the old file or the new one, never half of one; a block that raises leaves `path`
    untouched and removes the temporary file. The temporary name keeps `path`'s suffix (ONNX, for one, picks
    its format from it).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = _reserve_temporary(target)
    try:
        yield partial
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary file and a rename, so readers never see half a file."""
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as partial:
        partial.write_bytes(raw)
    return Path(path)


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
