"""Keep source notebooks reviewable: no outputs, no execution counts, no per-run metadata."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from where223.pipeline.paths import NOTEBOOKS


def is_clean(notebook: nbformat.NotebookNode) -> bool:
    """True when no code cell carries outputs or an execution count."""
    return all(
        not cell.get("outputs") and cell.get("execution_count") is None
        for cell in notebook.cells
        if cell.cell_type == "code"
    )


def strip(path: Path) -> bool:
    """Remove outputs, execution counts and papermill/widget metadata in place; True if the file changed."""
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
        path.write_text(after)
    return after != before


def main(argv: list[str] | None = None) -> int:
    """`python -m where223.pipeline.notebooks [FILES]`: strip the given (default: all source) notebooks."""
    files = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in files:
        if strip(path):
            print(f"stripped {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
