"""Published outputs hold no machine path: executed notebooks are rewritten before publication, and no committed
file under outputs/ names the checkout, a home folder or a site-packages folder."""

from __future__ import annotations

import re
import subprocess

import nbformat

from where223.pipeline.paths import ROOT
from where223.pipeline.portable import rewrite_notebook

# what the before-stop checklist looks for: a site-packages folder or an absolute path under a machine's roots
MACHINE_PATH = re.compile(rb"/lib(?:64)?/python3\.\d+/site-packages/|(?<![\w.])/(?:work|tmp|root|home)/[\w.-]+/")


def _notebook_with(text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("print()")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=text),
        nbformat.v4.new_output("display_data", data={"text/plain": text}),
        nbformat.v4.new_output("error", ename="E", evalue="e", traceback=[text]),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["papermill"] = {"input_path": f"{ROOT}/notebooks/x.ipynb", "output_path": f"{ROOT}/outputs/x"}
    return notebook


def test_rewrite_notebook_rewrites_every_output(tmp_path):
    text = (
        f"{ROOT}/.venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning\n"
        f"{ROOT}/.outputs.staging/05_matrix/matrix/heatmap.png\n"
    )
    path = tmp_path / "executed.ipynb"
    nbformat.write(_notebook_with(text), path)
    assert MACHINE_PATH.search(path.read_bytes())  # control: the file as papermill leaves it names the checkout
    rewrite_notebook(path)
    rewritten = path.read_bytes()
    assert not MACHINE_PATH.search(rewritten) and str(ROOT).encode() not in rewritten
    portable = nbformat.read(path, as_version=4)
    assert portable.metadata["papermill"] == {"input_path": "notebooks/x.ipynb", "output_path": "outputs/x"}
    outputs = portable.cells[0].outputs
    assert outputs[0].text == "tqdm/auto.py:21: TqdmWarning\noutputs/matrix/heatmap.png\n"
    assert outputs[1].data["text/plain"] == outputs[0].text and outputs[2].traceback == [outputs[0].text]


def test_no_committed_output_holds_a_machine_path():
    listed = subprocess.run(["git", "ls-files", "-z", "outputs"], cwd=ROOT, capture_output=True, check=True)
    files = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    assert len(files) > 100
    holding = [str(p.relative_to(ROOT)) for p in files if p.is_file() and MACHINE_PATH.search(p.read_bytes())]
    assert holding == []
