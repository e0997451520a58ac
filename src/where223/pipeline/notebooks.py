"""Keep source notebooks reviewable: no outputs, no execution counts, no per-run metadata."""

from __future__ import annotations

from pathlib import Path

import nbformat

from where223.files import write_atomic


def is_clean(notebook: nbformat.NotebookNode) -> bool:
    """True when no code cell carries outputs or an execution count."""
    return all(
        not cell.get("outputs") and cell.get("execution_count") is None
        for cell in notebook.cells
        if cell.cell_type == "code"
    )


def strip(path: Path) -> bool:
    """Remove outputs, execution counts and papermill/widget metadata in place (written atomically, with the file's
    mode kept: an interrupted strip leaves the notebook as it was); True if the file changed."""
    notebook = nbformat.read(path, as_version=4)
    before = nbformat.writes(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "papermill", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
    for key in ("papermill", "widgets"):
        notebook.metadata.pop(key, None)
    after = nbformat.writes(notebook)
    if after != before:
        write_atomic(path, after, keep_mode=True)
    return after != before
