"""`make strip` leaves notebooks clean, and `is_clean` tells a clean notebook from one with outputs."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from where223.pipeline.notebooks import is_clean, strip


def executed_notebook(path: Path) -> Path:
    """A notebook as Jupyter saves it after a run: outputs, execution counts, papermill metadata."""
    cell = new_code_cell("print(1)", execution_count=3, outputs=[new_output("stream", name="stdout", text="1\n")])
    cell.metadata["papermill"] = {"duration": 0.1}
    notebook = new_notebook(cells=[new_markdown_cell("# title"), cell], metadata={"papermill": {"parameters": {}}})
    nbformat.write(notebook, path)
    return path


def test_strip_cleans_an_executed_notebook(tmp_path: Path):
    path = executed_notebook(tmp_path / "n.ipynb")
    assert not is_clean(nbformat.read(path, as_version=4))  # control: outputs and counts are seen
    assert strip(path) is True
    stripped = nbformat.read(path, as_version=4)
    assert is_clean(stripped)
    assert "papermill" not in stripped.metadata and "papermill" not in stripped.cells[1].metadata
    assert strip(path) is False  # nothing left to change


def test_an_execution_count_alone_is_not_clean(tmp_path: Path):
    notebook = new_notebook(cells=[new_code_cell("x = 1", execution_count=1)])
    assert not is_clean(notebook)
    notebook.cells[0].execution_count = None
    assert is_clean(notebook)


def test_strip_writes_atomically_and_keeps_the_mode(tmp_path: Path, monkeypatch):
    import pytest

    path = executed_notebook(tmp_path / "n.ipynb")
    path.chmod(0o600)
    before = path.read_bytes()

    def interrupted(self, data):  # the write stops half-way, as Ctrl-C would
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        strip(path)
    assert path.read_bytes() == before  # the notebook as it was, no temporary left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.ipynb"]
    monkeypatch.undo()
    assert strip(path) is True and (path.stat().st_mode & 0o777) == 0o600
