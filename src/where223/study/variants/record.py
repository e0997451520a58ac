"""The variant study's records: where they go and their types (standard library only)."""

from __future__ import annotations

from pathlib import Path

from where223.pipeline import paths


def output_path(device: str, output_root: str | Path | None = None) -> Path:
    """`outputs/variants/variants-<device>.json` (under `output_root` when given)."""
    return paths.run_dir("variants", output_root or None) / f"variants-{device}.json"
