"""The one home of every path normaliser: what makes a record, a notebook, a stack or a source name the same
wherever the clone, the interpreter and the kernel live. Standard library only (nbformat loaded by `notebook`).

- `path`: one path, site-packages and the checkout stripped, a staged path as it will be published;
- `text`: the same for every path inside a text (an error message, a traceback), and `record` for every string
  of a JSON record (`where223.pipeline.records.write_json` writes records through it);
- `stack`: a recorded Python stack (node doc strings of an export): `text`, plus a notebook cell's
  `/tmp/ipykernel_<pid>/` and the standard library's folder;
- `frame_file`: a stack frame's file as records name it (a path already portable stays as it is);
- `checkout_relative`: this checkout's absolute paths relative to the repository (the HTML a reviewer reads);
- `without_side_folder`: a source path with its transformers release's side folder left out, so the same file
  of two releases groups together;
- `notebook`: an executed notebook's outputs and papermill's record of its paths, through `text`;
  `rewrite_notebook` does it to a file, so the committed copy is the same wherever the clone lives.
"""

from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path
from typing import Any

from where223.files import write_atomic
from where223.pipeline.paths import ROOT, published

_SITE_PACKAGES_MARKER = "site-packages/"
_SITE_PACKAGES = re.compile(r"/\S*?/site-packages/")
# Jupyter runs each cell from /tmp/ipykernel_<pid>/<hash of the code>.py: the pid changes every run.
_KERNEL_CELL = re.compile(r"/tmp/ipykernel_\d+/")
# The interpreter's standard library (asyncio, runpy frames below a notebook's cell), stripped like site-packages.
_STDLIB_DIRS = tuple(
    sorted({f"{sysconfig.get_paths()[key]}/" for key in ("stdlib", "platstdlib")}, key=len, reverse=True)
)
# A release's side folder in a portable path, or in an error that quotes one (a path starts the text or follows a
# space, a quote or a bracket).
_SIDE_FOLDER = re.compile(r"(?:^|(?<=[\s'\"(\[]))\.cache/transformers/[^/\s]+/")
# papermill gives the cell it injects a random id: a fixed one, so reruns agree
INJECTED_CELL_ID = "injected-parameters"


def path(value: str) -> str:
    """A path without machine-specific prefixes (site-packages and the repo root stripped), as published."""
    if _SITE_PACKAGES_MARKER in value:
        return value.split(_SITE_PACKAGES_MARKER, 1)[1]
    try:
        return published(str(Path(value).resolve().relative_to(ROOT)))
    except ValueError:
        return published(value)


def text(value: str) -> str:
    """Make paths inside a text portable: site-packages and the repo root stripped, staged paths as published."""
    return published(_SITE_PACKAGES.sub("", value).replace(f"{ROOT}/", ""))


def record(value: Any) -> Any:
    """The record with every string made portable (records compare across machines and checkouts)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {key: record(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [record(item) for item in value]
    return value


def stack(value: str) -> str:
    """A recorded Python stack with machine-specific parts rewritten, as records are (`text`).

    Paths inside site-packages and the standard library become relative to them (`torch/onnx/utils.py`),
    paths inside the checkout relative to the repository (`src/where223/gpt2/export.py`), and a notebook
    cell's `/tmp/ipykernel_<pid>/` becomes `<ipykernel>/`. `blame` and the divergence report read library
    frames from the relative paths the same way (a test compares them before and after).
    """
    value = text(_KERNEL_CELL.sub("<ipykernel>/", value))
    for stdlib in _STDLIB_DIRS:
        value = value.replace(stdlib, "")
    return value


def frame_file(file: str) -> str:
    """A stack frame's file as records name it; a path the export already made portable stays as it is (resolving
    it would make it relative to the working folder, not to site-packages)."""
    return path(file) if os.path.isabs(file) else file


def checkout_relative(value: str) -> str:
    """`value` with this checkout's absolute paths written relative to the repository root."""
    return value.replace(f"{ROOT}{os.sep}", "").replace(str(ROOT), ".")


def without_side_folder(source: str | None) -> str:
    """A source path (or an error quoting one) without its transformers release's side folder."""
    return _SIDE_FOLDER.sub("", source or "")


def notebook(executed: Any) -> Any:
    """An executed notebook (nbformat node) rewritten in place with portable paths in its outputs and papermill's
    record of its paths, and a fixed id for the cell papermill injects; returns it."""
    for cell in executed.cells:
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell["id"] = INJECTED_CELL_ID
    run = executed.metadata.get("papermill", {})
    for key in ("input_path", "output_path"):
        if run.get(key):
            run[key] = text(run[key])
    for cell in executed.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                output.text = text(output.text)
            for mime in ("text/plain", "text/html", "text/markdown"):
                if mime in output.get("data", {}):
                    output.data[mime] = text(output.data[mime])
            if output.output_type == "error":
                output.traceback = [text(line) for line in output.traceback]
    return executed


def rewrite_notebook(path: Path) -> Path:
    """Rewrite the executed notebook at `path` with `notebook`, atomically."""
    import nbformat

    return write_atomic(path, nbformat.writes(notebook(nbformat.read(path, as_version=4))))
