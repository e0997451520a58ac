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


def slug(value: object) -> str:
    """A filesystem-safe token for one parameter value."""
    text = str(value).strip().lower()
    return re.sub(r"[^a-z0-9_.]+", "-", text).strip("-") or "none"


def run_name(*parts: object) -> str:
    """Join parameter values into a run name such as `tiny-cpu-bf16-onnx_export`."""
    return "-".join(slug(p) for p in parts)


def run_dir(name: str, output_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of one run's records, created if missing (under `outputs/` unless overridden)."""
    base = Path(output_root) if output_root else OUTPUTS
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def portable(path: str) -> str:
    """A path without machine-specific prefixes: site-packages and the repo root are stripped."""
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return path
