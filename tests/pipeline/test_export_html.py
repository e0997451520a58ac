"""The HTML export a reviewer opens: titled, parameters on top, no library logs, relative paths, nothing fetched."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

from where223.pipeline.paths import ROOT
from where223.pipeline.run import export_html

LOG_LINE = "INFO:onnxruntime.training:exporting the model (a library log)"
ABSOLUTE = f"{ROOT}/outputs/tiny-cpu-bf16-onnx_export/model.onnx"
# A script, stylesheet or image fetched from another host when the page is opened.
REMOTE_LOAD = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.IGNORECASE)


def executed_notebook(path: Path) -> Path:
    """A small executed notebook as papermill leaves one: a title, parameters, a log on stderr, an absolute path."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["papermill"] = {"parameters": {"path": "onnx_export", "output_root": "outputs/.staging/x"}}
    code = nbformat.v4.new_code_cell("print(model_path)")
    code.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=LOG_LINE + "\n"),
        nbformat.v4.new_output("stream", name="stdout", text=f"model: {ABSOLUTE}\n"),
    ]
    notebook.cells = [nbformat.v4.new_markdown_cell("# 02 · Graph forensics\n\nWhat it asks."), code]
    nbformat.write(notebook, path)
    return path


def test_export_is_titled_with_parameters_and_without_logs_absolute_paths_or_remote_loads(tmp_path):
    html = export_html(executed_notebook(tmp_path / "02_graph.ipynb")).read_text()
    assert "<title>02 · Graph forensics</title>" in html
    assert re.search(r"<td><code>path</code></td>\s*<td><code>onnx_export</code></td>", html)
    assert LOG_LINE not in html
    assert "model: outputs/tiny-cpu-bf16-onnx_export/model.onnx" in html
    assert str(ROOT) not in html
    assert REMOTE_LOAD.findall(html) == []
    # the executed notebook keeps what the HTML leaves out
    assert LOG_LINE in (tmp_path / "02_graph.ipynb").read_text()


def test_nbconverts_default_export_is_the_control(tmp_path):
    """What the checks above catch: nbconvert's own export keeps the log, the path, and loads from CDNs."""
    notebook = nbformat.read(executed_notebook(tmp_path / "02_graph.ipynb"), as_version=4)
    html, _ = HTMLExporter(exclude_input=True).from_notebook_node(notebook)
    assert LOG_LINE in html
    assert str(ROOT) in html
    assert "<title>Notebook</title>" in html
    assert REMOTE_LOAD.findall(html) != []


def _chunked(path: Path, outputs: list) -> Path:
    notebook = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("print(a); warn(); print(b)", id="code")  # ids fixed: pages comparable
    code.outputs = outputs
    notebook.cells = [nbformat.v4.new_markdown_cell("# 01 · Reproduce", id="title"), code]
    nbformat.write(notebook, path)
    return path


def test_a_reruns_page_is_the_same_however_the_kernel_chunked_its_output(tmp_path):
    """stdout in one message, or split in two around a stderr write (a loaded machine's timing): the same page;
    the control, the same chunks with nbconvert's own export, differ."""
    stdout, stderr = (lambda text: nbformat.v4.new_output("stream", name="stdout", text=text),
                      lambda text: nbformat.v4.new_output("stream", name="stderr", text=text))
    whole = _chunked(tmp_path / "a.ipynb", [stdout("first\nsecond\n"), stderr(LOG_LINE + "\n")])
    split = _chunked(tmp_path / "b.ipynb", [stdout("first\n"), stderr(LOG_LINE + "\n"), stdout("second\n")])
    pages = [export_html(path).read_text() for path in (whole, split)]
    assert pages[0] == pages[1] and "first\nsecond" in pages[0]
    control = [HTMLExporter(exclude_input=True).from_notebook_node(nbformat.read(path, as_version=4))[0]
               for path in (whole, split)]
    assert control[0] != control[1]
