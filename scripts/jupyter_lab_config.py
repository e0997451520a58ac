"""JupyterLab's configuration for `make lab` (passed with --config): source notebooks stay without outputs on disk.

JupyterLab saves a notebook with its outputs, and autosaves it every two minutes: a source notebook opened and
run from notebooks/ would be rewritten with outputs, which the clean-notebook test (it reads the files on disk)
rejects. Before each save of a notebook directly under notebooks/, this hook drops the outputs and execution
counts from what is written; the open notebook keeps showing them. Executed copies (outputs/notebooks/) and
notebooks anywhere else are saved as they are. A hook, rather than jupytext pairing or a git filter: the source
stays one .ipynb that papermill runs as it is, and the file on disk is clean, not only what git sees.

It also turns off JupyterLab's news prompt and update check (neither fetches anything then).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

SOURCE_FOLDER = "notebooks"  # relative to the server's root, the repository


def keep_source_notebooks_clean(model: dict[str, Any], path: str, **_: Any) -> None:
    """ContentsManager pre-save hook: strip outputs and execution counts from notebooks/*.ipynb before writing."""
    if model.get("type") != "notebook" or not model.get("content"):
        return
    if PurePosixPath(path.lstrip("/")).parent != PurePosixPath(SOURCE_FOLDER):
        return
    for cell in model["content"]["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None


if "get_config" in globals():  # read by Jupyter, which defines get_config; imported by the tests, which do not
    c = get_config()  # noqa: F821
    c.FileContentsManager.pre_save_hook = keep_source_notebooks_clean
    # no "get notified about official Jupyter news?" prompt and no update check: nothing asks to reach the internet
    c.LabApp.news_url = None
    c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
