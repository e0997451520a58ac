"""Repo-root anchored paths. Every other module asks here; nobody builds `../` paths."""

from __future__ import annotations

import os
import re
from pathlib import Path


def _find_root() -> Path:
    override = os.environ.get("WHERE223_ROOT")
    if override:
        return Path(override).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "where223").is_dir():
            return parent
    raise RuntimeError(
        "where223 cannot find its repository root; install it editable (pip install -e .) "
        "or set WHERE223_ROOT to the checkout"
    )


ROOT: Path = _find_root()
NOTEBOOKS: Path = ROOT / "notebooks"
OUTPUTS: Path = ROOT / "outputs"
CACHE: Path = ROOT / ".cache"
KERNEL_NAME = "where223"
# Where a run writes until it completes: `.<tree>.staging/<run>/`, beside its outputs tree (pipeline.publish; a
# `.staging/` inside a tree is what earlier versions left); inside the tree, where a failed run's files are kept.
STAGING = ".staging"
FAILED = "failed"
# `<parent>/.<tree>.staging/<run>/x` is published as `<parent>/<tree>/x` (a path starts a text, a line or a word, or
# follows a folder, a quote, a bracket, `=` or `:`).
_STAGED = re.compile(rf"(?<![^\s/'\"(\[=:])\.([^/\s\"']+){re.escape(STAGING)}/[^/\s\"']+/")


def slug(value: object) -> str:
    """A filesystem-safe token for one parameter value."""
    text = str(value).strip().lower()
    return re.sub(r"[^a-z0-9_.]+", "-", text).strip("-") or "none"


def join_slugs(*parts: object) -> str:
    """Parameter values as one folder name, each made a slug: `tiny-cpu-bf16-onnx_export` (a run's name is
    `where223.gpt2.runs.run_name`, which builds it with this)."""
    return "-".join(slug(p) for p in parts)


def outputs_root(root: str | os.PathLike[str] | None = None) -> Path:
    """An outputs tree: `outputs/` when `root` is empty, else `root` (a relative one from the repository root)."""
    return ROOT / root if root else OUTPUTS


def run_dir(name: str, output_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder a run writes its records to, created if missing (under `outputs/` unless overridden)."""
    path = outputs_root(output_root) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def input_dir(name: str, input_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of another run's records, to read (under `outputs/` unless overridden); never created."""
    return outputs_root(input_root) / name


def published(path: str) -> str:
    """The path a staged file takes once its run is published (other paths unchanged)."""
    return _STAGED.sub(r"\1/", path)


