"""Notebook 04 with tiny parameters: it measures, records, draws and recommends from the record."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tests.conftest import load_json, run_notebook
from where223.graph.ort import OrtVerdict
from where223.pipeline.notebooks import is_clean
from where223.pipeline.paths import NOTEBOOKS
from where223.study.variants import analysis as ranking
from where223.study.variants import run as bench

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(session_outputs: Path):
    root = session_outputs / "variants-notebook"
    executed = run_notebook("04_variants", root, model_preset="tiny", batch_size=1, seq_len=8, steps=2, warmup=0,
                            emulated=False)  # the emulated export columns: make run (about a minute)
    return executed, load_json(root / "variants" / "variants-cpu.json"), root


def test_source_notebook_is_clean_and_parameterised():
    notebook = nbformat.read(NOTEBOOKS / "04_variants.ipynb", as_version=4)
    assert notebook.metadata.kernelspec.name == "where223"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert is_clean(notebook)
    assert "import" in code[0].source and "tags" not in code[0].metadata
    assert code[1].metadata.get("tags") == ["parameters"]
    assert sum("parameters" in cell.metadata.get("tags", []) for cell in notebook.cells) == 1
    for line in code[1].source.splitlines():
        assert ": " in line.split("=")[0] and "  # " in line, line


def test_records_every_measured_variant_with_its_environment(tiny_run):
    executed, record, _ = tiny_run
    assert executed.is_file()
    assert set(record["variants"]) == set(bench.MEASURED)
    assert record["settings"]["preset"] == "tiny" and record["settings"]["steps"] == 2
    assert record["environment"]["device"] == "cpu"
    for row in ranking.table_rows(record):
        assert set(row) == {key for key, _ in ranking.COLUMNS}
        assert row["syncs_per_step"] == ranking.NOT_MEASURED


def test_recorded_verdicts(tiny_run):
    _, record, _ = tiny_run
    rows = record["variants"]
    assert all(row["eager_equal"] for row in rows.values())  # tiny: head size 16, exact in bf16
    assert rows["4.25"]["ort"]["status"] == OrtVerdict.WHERE_TYPE_ERROR
    assert rows["4.24"]["trace_correct"] and rows["4.26"]["trace_correct"]
    assert rows["4.24"]["host_tensors_per_forward"] == 2 * rows["4.25"]["host_tensors_per_forward"]
    best = record["recommendation"]["variant"]
    assert best in record["recommendation"]["ranking"]
    assert rows[best]["trace_correct"] and rows[best]["eager_equal"]


def test_figure_and_recommendation_are_in_the_executed_notebook(tiny_run):
    executed, record, root = tiny_run
    assert (root / "variants" / "variants-cpu.png").is_file()
    assert (root / "variants" / "variants-cpu.svg").is_file()
    cells = nbformat.read(executed, as_version=4).cells
    text = json.dumps(next(cell for cell in cells if "recommendation = record" in cell.source).outputs)
    assert f"recommended: {record['recommendation']['variant']}" in text
