"""The version matrix's records: transformers x torch x exporter for the tiny GPT-2 under CPU bf16 autocast.

`spaces/matrix.yaml` is the sweep (`where223 sweep --space spaces/matrix.yaml`, `make sweep`): one stack per torch
environment and transformers release (`spaces/stacks.yaml`), the tiny GPT-2 of `where223.study.matrix_cell` in
each, both exporters. Each cell's record lands at `outputs/matrix/cells/<torch>-<transformers>-<exporter>.json`;
`aggregate` writes `outputs/matrix/matrix.json` from them (and refreshes the figures of `NOTES.md` beside it).
Reads records only: no torch.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from where223 import files
from where223.pipeline import environment, paths, publish, records
from where223.study.matrix_analysis import update_notes, version_key
from where223.sweep.worker import now

EXPORTERS: tuple[str, ...] = ("torchscript", "dynamo")
MATRIX_OUT: Path = paths.OUTPUTS / "matrix"


def load_cells(out_dir: Path = MATRIX_OUT) -> list[dict[str, Any]]:
    """Every cell record under `out_dir/cells`, sorted by name."""
    return [records.read_json(p) for p in sorted((out_dir / "cells").glob("*.json"))]


def aggregate(out_dir: Path = MATRIX_OUT) -> dict[str, Any]:
    """Build and write `matrix.json` from the cell records (axes, counts, per-env versions, cells); refresh the
    figures of `NOTES.md` beside it (`matrix_analysis.update_notes`)."""
    cells = load_cells(out_dir)
    envs: dict[str, dict[str, Any]] = {}
    for cell in cells:
        versions = cell.get("versions")
        if versions:
            envs.setdefault(cell["torch_requested"], {k: v for k, v in versions.items() if k != "transformers"})
    torch_axis = sorted({c["torch_requested"] for c in cells}, key=version_key)
    tf_axis = sorted({c["transformers_requested"] for c in cells}, key=version_key)
    exporters = [e for e in EXPORTERS if any(c["exporter"] == e for c in cells)]
    matrix = {
        "description": (
            "Tiny GPT-2 (random weights) exported to ONNX under torch.autocast('cpu', torch.bfloat16), "
            "then loaded and run with onnxruntime's CPU provider"
        ),
        "axes": {"torch": torch_axis, "transformers": tf_axis, "exporter": exporters},
        "counts": dict(Counter(c["outcome"] for c in cells)),
        "driver_environment": environment.describe(),
        "cell_environments": envs,
        "updated_at": now(),
        "cells": cells,
    }
    publish.write_record(out_dir / "matrix.json", matrix, out_dir.parent)
    notes = out_dir / "NOTES.md"
    with publish.outputs_lock(out_dir.parent, wait=True):
        if notes.is_file():  # its figures follow the cells
            files.write_atomic(notes, update_notes(notes.read_text(), matrix))
    return matrix
