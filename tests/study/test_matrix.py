"""Version matrix: error parsing, resume, aggregation, one real cell, and the notebook on committed data."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from where223.graph.ort import OrtVerdict
from where223.outcomes import Outcome
from where223.pipeline import paths, records
from where223.study.matrix import analysis as matrix
from where223.study.matrix import analysis as matrix_analysis
from where223.study.matrix import figure as matrix_figure
from where223.study.matrix import run as matrix_cell
from where223.sweep import exporters, stages

ORT_WHERE = (
    "[ONNXRuntimeError] : 1 : FAIL : Load model from /tmp/m.onnx failed:Type Error: Type parameter (T) of "
    "Optype (Where) bound to different types (tensor(float) and tensor(bfloat16) in node "
    "(/model/transformer/h.0/attn/Where)."
)
ORT_MUL = ORT_WHERE.replace("(Where)", "(Mul)").replace("attn/Where", "attn/Mul")
ORT_COMPLEX = (
    "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from /tmp/m.onnx failed:This is an invalid model. "
    "Type Error: Type 'tensor(complex128)' of input parameter (/model/transformer/h.1/attn/Cast_output_0) of "
    "operator (Add) in node (/model/transformer/h.1/attn/Add) is invalid."
)
ORT_NO_KERNEL = (
    "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Gemm(13) node with "
    "name '/model/transformer/h.0/attn/c_attn/Gemm'"
)
COMMITTED = paths.OUTPUTS / "matrix" / "matrix.json"


def _error(message: str, stage: str = "load") -> dict[str, Any]:
    return {"stage": stage, "type": "onnxruntime.Fail", "message": message, "causes": []}


def test_where_binding_is_recorded_with_element_and_onnx_types() -> None:
    record: dict[str, Any] = {}
    matrix_cell.record_failure(record, _error(ORT_WHERE))
    assert record["outcome"] == OrtVerdict.WHERE_TYPE_ERROR
    assert record["where_error"] == {
        "op_type": "Where",
        "param": "T",
        "node": "/model/transformer/h.0/attn/Where",
        "types": ["float", "bfloat16"],
        "onnx_types": ["tensor(float)", "tensor(bfloat16)"],
        "message": ORT_WHERE,
    }


def test_other_refusals_get_their_own_verdict() -> None:
    record: dict[str, Any] = {}
    matrix_cell.record_failure(record, _error(ORT_MUL))
    assert record["outcome"] == OrtVerdict.TYPE_ERROR and "where_error" not in record
    assert record["error"]["type_binding"]["op_type"] == "Mul"
    assert matrix_cell.classify(_error(ORT_COMPLEX)).verdict == OrtVerdict.TYPE_ERROR
    assert matrix_cell.classify(_error(ORT_NO_KERNEL)).verdict == OrtVerdict.MISSING_KERNEL
    assert matrix_cell.classify(_error("export failed")).verdict == OrtVerdict.OTHER_ERROR


def test_the_where_error_in_a_cause_outranks_the_others() -> None:
    wrapped = _error(ORT_NO_KERNEL)
    wrapped["causes"] = [{"type": "Fail", "message": ORT_MUL}, {"type": "Fail", "message": ORT_WHERE}]
    judgement = matrix_cell.classify(wrapped)
    assert (judgement.verdict, judgement.message) == (OrtVerdict.WHERE_TYPE_ERROR, ORT_WHERE)


def _misfiled(cells: list[dict[str, Any]]) -> list[str]:
    """Cells whose outcome is not in the vocabulary, or not the verdict their recorded error states."""
    refusals = set(OrtVerdict) - {OrtVerdict.ACCEPTED}
    return [
        c["cell"]
        for c in cells
        if c["outcome"] not in set(Outcome)
        or (c["outcome"] in refusals and matrix_cell.classify(c["error"]).verdict != c["outcome"])
    ]


def test_committed_cells_are_filed_under_the_verdict_their_error_states() -> None:
    committed = records.read_json(COMMITTED)
    cells = matrix.load_cells(COMMITTED.parent)
    assert len(cells) == len(committed["cells"]) > 0
    assert _misfiled(cells) == [] and _misfiled(committed["cells"]) == []
    assert committed["counts"] == dict(Counter(c["outcome"] for c in cells))


def test_misfiled_cells_are_caught() -> None:
    cells = [
        _cell("2.1.2", "4.22.0", "torchscript", "other_error", error=_error(ORT_NO_KERNEL)),  # filed before
        _cell("2.1.2", "4.23.1", "torchscript", "bf16_kernel_missing", error=_error(ORT_NO_KERNEL)),
        _cell("2.1.2", "4.24.0", "torchscript", OrtVerdict.MISSING_KERNEL, error=_error(ORT_NO_KERNEL)),
        _cell("2.1.2", "4.25.1", "torchscript", "not_applicable", reason="no dynamo exporter"),
    ]
    assert _misfiled(cells) == ["2.1.2-4.22.0-torchscript", "2.1.2-4.23.1-torchscript"]


def test_describe_error_keeps_type_message_and_cause() -> None:
    try:
        try:
            raise ValueError("inner")
        except ValueError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        error = stages.describe_error(exc, "export")
    assert error["stage"] == "export"
    assert error["type"] == "builtins.RuntimeError" and error["message"] == "outer"
    assert error["causes"] == [{"type": "ValueError", "message": "inner"}]


def test_warning_lines_are_distinct_and_capped() -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            warnings.warn("same\nsecond line", UserWarning, stacklevel=1)
            warnings.warn(f"other {i}", DeprecationWarning, stacklevel=1)
    assert stages.warning_lines(caught, limit=3) == [
        "UserWarning: same",
        "DeprecationWarning: other 0",
        "DeprecationWarning: other 1",
    ]


def _cell(torch: str, tf: str, exporter: str, outcome: str, **extra: Any) -> dict[str, Any]:
    return {
        "cell": f"{torch}-{tf}-{exporter}",
        "torch_requested": torch,
        "transformers_requested": tf,
        "exporter": exporter,
        "outcome": outcome,
        "reason": extra.pop("reason", ""),
        "recorded_by": "cell",
        **extra,
    }


def _write(out_dir: Path, cell: dict[str, Any]) -> None:
    records.write_json(out_dir / "cells" / f"{cell['cell']}.json", cell)


def test_aggregate_axes_counts_and_envs(tmp_path: Path) -> None:
    versions = {"torch": "2.1.2", "onnx": "1.16.2", "transformers": "4.25.1"}
    _write(tmp_path, _cell("2.1.2", "4.25.1", "torchscript", "other_error", versions=versions))
    _write(tmp_path, _cell("1.13.1", "4.26.0", "dynamo", "not_applicable", reason="no dynamo exporter"))
    result = matrix.aggregate(tmp_path)
    assert result["axes"] == {
        "torch": ["1.13.1", "2.1.2"],
        "transformers": ["4.25.1", "4.26.0"],
        "exporter": ["torchscript", "dynamo"],
    }
    assert result["counts"] == {"other_error": 1, "not_applicable": 1}
    assert result["cell_environments"] == {"2.1.2": {"torch": "2.1.2", "onnx": "1.16.2"}}
    assert json.loads((tmp_path / "matrix.json").read_text())["counts"] == result["counts"]


def test_labels_and_conclusions() -> None:
    where = _cell("2.1.2", "4.25.1", "torchscript", "not_run")
    matrix_cell.record_failure(where, _error(ORT_WHERE))
    cells = [
        where,
        _cell("2.2.2", "4.25.1", "torchscript", OrtVerdict.MISSING_KERNEL, error=_error(ORT_NO_KERNEL)),
        _cell("2.1.2", "4.26.0", "torchscript", OrtVerdict.ACCEPTED),
    ]
    assert matrix_analysis.cell_label(cells[0]) == "Where\nfp32 vs bf16"
    assert matrix_analysis.cell_label(cells[1]) == "load: no kernel\nGemm(13)"
    complex_cell = _cell("2.2.2", "4.26.0", "torchscript", OrtVerdict.TYPE_ERROR, error=_error(ORT_COMPLEX))
    assert matrix_analysis.cell_label(complex_cell) == "load: Add\ncomplex128 input invalid"
    legend = matrix_figure.colours({"cells": [*cells, complex_cell]})
    assert list(legend) == [
        "accepted",
        "where_type_error",
        "missing_kernel: load: no kernel Gemm(13)",
        "type_error: load: Add complex128 input invalid",
    ]
    assert len(set(legend.values())) == 4
    assert matrix_figure.cell_colour(complex_cell, legend) == legend["type_error: load: Add complex128 input invalid"]
    data = {
        "axes": {
            "torch": ["2.1.2", "2.2.2"],
            "transformers": ["4.25.1", "4.26.0"],
            "exporter": ["torchscript"],
        },
        "counts": {"where_type_error": 1, "missing_kernel": 1, "accepted": 1},
        "cells": cells,
    }
    text = "\n".join(matrix_analysis.conclusions(data))
    assert "fail with the Where type error: torch 2.1.2 with transformers 4.25.1" in text
    assert "accepted (exported, loaded and run): torch 2.1.2 with transformers 4.26.0" in text
    assert "torch 2.2.2, transformers 4.25.1 (Where error on other torch): load: no kernel Gemm(13)" in text
    assert "pass onnxruntime's type check but have no CPU kernel: Gemm(13) (1 cells)" in text


@pytest.mark.slow
def test_notebook_runs_on_committed_data(tmp_path: Path) -> None:
    from tests.conftest import run_notebook

    run_notebook("05_matrix", tmp_path, matrix_json=str(COMMITTED))
    assert (tmp_path / "matrix" / "heatmap.png").stat().st_size > 10_000
    assert (tmp_path / "matrix" / "heatmap.svg").is_file()


def test_source_notebook_is_clean() -> None:
    import nbformat

    from where223.pipeline.notebooks import is_clean

    nb = json.loads((paths.NOTEBOOKS / "05_matrix.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert is_clean(nbformat.read(paths.NOTEBOOKS / "05_matrix.ipynb", as_version=4))
    assert "parameters" in code[1]["metadata"].get("tags", [])


def _committed_matrix() -> dict[str, Any]:
    return records.read_json(paths.OUTPUTS / "matrix" / "matrix.json")


def _generated_part(notes: str) -> tuple[str, str]:
    """NOTES.md split into its generated section and the hand-written rest."""
    start, end = notes.index(matrix_analysis.NOTES_BEGIN), notes.index(matrix_analysis.NOTES_END)
    return notes[start : end + len(matrix_analysis.NOTES_END)], notes[:start] + notes[end:]


def test_matrix_notes_quote_the_committed_cells() -> None:
    committed = _committed_matrix()
    generated, _ = _generated_part((paths.OUTPUTS / "matrix" / "NOTES.md").read_text())
    assert generated == matrix_analysis.notes_section(committed)
    # the control: a cell that took longer than any recorded shows in the figures, and the notes no longer match
    slowest = max(cell["wall_s"] for cell in committed["cells"])
    committed["cells"][0]["wall_s"] = slowest + 5
    changed = matrix_analysis.notes_section(committed)
    assert changed != generated and f"slowest {slowest + 5:.1f} s ({committed['cells'][0]['cell']})" in changed


def test_matrix_notes_figures_follow_the_cells() -> None:
    committed = _committed_matrix()
    section = matrix_analysis.notes_section(committed)
    dynamo = [c for c in committed["cells"] if c["exporter"] == "dynamo" and c.get("lint", {}).get("report")]
    checked = [c["lint"]["report"]["nodes_checked"] for c in dynamo if c["torch_requested"] == "2.4.1"]
    assert f"dynamo, torch 2.4.1: lint checked {min(checked)}–{max(checked)} nodes" in section
    assert f"### Results ({len(committed['cells'])} cells: " in section
    assert "Cell records holding an absolute path of the recording machine: 0." in section
    committed["cells"][0]["error"] = {"message": "Load model from /home/someone/model.onnx failed"}
    assert "Cell records holding an absolute path of the recording machine: 1." in matrix_analysis.notes_section(
        committed
    )


def test_hand_written_matrix_notes_quote_no_measured_figure() -> None:
    """Timings and node counts live in the generated section only; the prose cannot drift from the cells."""
    _, prose = _generated_part((paths.OUTPUTS / "matrix" / "NOTES.md").read_text())
    assert not re.search(r"\d+(\.\d+)? (s|min)\b|nodes_checked: \d|\d+ cells", prose)
    with pytest.raises(ValueError, match="no generated section"):
        matrix_analysis.update_notes(prose.replace(matrix_analysis.NOTES_END, ""), _committed_matrix())


def test_aggregate_refreshes_the_notes(tmp_path: Path) -> None:
    (tmp_path / "cells").mkdir()
    for cell in _committed_matrix()["cells"][:4]:
        records.write_json(tmp_path / "cells" / f"{cell['cell']}.json", cell)
    notes = tmp_path / "NOTES.md"
    notes.write_text(f"# prose\n\n{matrix_analysis.NOTES_BEGIN}\nstale\n{matrix_analysis.NOTES_END}\n\nmore prose\n")
    written = matrix.aggregate(tmp_path)
    text = notes.read_text()
    assert "stale" not in text and text.startswith("# prose") and text.endswith("more prose\n")
    assert _generated_part(text)[0] == matrix_analysis.notes_section(written)


def _naming_matrix(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {"axes": {"transformers": ["4.25.1", "4.26.0"]}, "cells": cells}


def test_node_naming_tells_numbered_from_scoped_exporters() -> None:
    numbered = _cell(
        "1.12.1", "4.25.1", "torchscript", OrtVerdict.WHERE_TYPE_ERROR,
        graph={"opset": 16, "where_node_names": ["Where_127", "Where_350"]},
        where_error={"op_type": "Where", "node": "Where_127", "types": ["float", "bfloat16"]},
        plain_export={"opset_requested": 16, "where_node_names": ["Where_144", "Where_367"]},
    )  # fmt: skip
    scoped = _cell("2.1.2", "4.25.1", "torchscript", OrtVerdict.MISSING_KERNEL, error=_error(ORT_NO_KERNEL))
    lines = matrix_analysis.node_naming(_naming_matrix([numbered, scoped]))
    text = "\n".join(lines)
    assert "Node names numbered (op type and a running number): torchscript with torch 1.12.1 (Where_127" in text
    assert "Node names scoped (the module scope of the op): torchscript with torch 2.1.2 (" in text
    assert "torchscript, plain export with torch 1.12.1 (Where_144, Where_367)" in text
    assert "ONNX Runtime refuses the torchscript graph of torch 1.12.1 at Where_127." in text
    assert "rises by 223" in text  # 350 - 127 and 367 - 144
    assert "Where_127 (torchscript); Where_144 (torchscript, plain export)" in text
    assert "no cell records that number" in text and matrix_analysis.SEED_NODE in text
    # the control: cells that name nodes by scope only give no numbered claim and no word on the seed's number
    control = "\n".join(matrix_analysis.node_naming(_naming_matrix([scoped])))
    assert "numbered" not in control and matrix_analysis.SEED_NODE not in control and "Where_" not in control
    assert "Node names scoped" in control


def test_node_naming_of_the_committed_cells() -> None:
    committed = _committed_matrix()
    text = "\n".join(matrix_analysis.node_naming(committed))
    numbered = r"Node names numbered \(op type and a running number\): [^\n]*torchscript with torch 1\.12\.1 \("
    assert re.search(numbered, text)
    assert re.search(r"Node names scoped \(the module scope of the op\): torchscript with torch 1\.13\.1, ", text)
    old = [c for c in committed["cells"] if c["torch_requested"] == "1.12.1"]
    where_errors = {c["where_error"]["node"] for c in old if c.get("where_error")}
    assert where_errors and all(re.fullmatch(r"Where_\d+", node) for node in where_errors)
    # the control: without the torch 1.12.1 cells the numbered TorchScript names are gone
    newer = {**committed, "cells": [c for c in committed["cells"] if c["torch_requested"] != "1.12.1"]}
    assert "torchscript with torch 1.12.1" not in "\n".join(matrix_analysis.node_naming(newer))


def test_torch_1_12_cells_record_python_3_10_and_opset_16() -> None:
    cells = [c for c in _committed_matrix()["cells"] if c["exporter"] == "torchscript" and "graph" in c]
    old = [c for c in cells if c["torch_requested"] == "1.12.1"]
    assert old and all(c["python"].startswith("3.10.") and c["graph"]["opset"] == 16 for c in old)
    assert all(c["export"]["opset_requested"] == exporters.OPSET_FOR_TORCH["1.12"] == 16 for c in old)
    newer = [c for c in cells if c["torch_requested"] != "1.12.1"]
    assert newer and all(c["graph"]["opset"] == exporters.OPSET == 17 for c in newer)
    dynamo = [c for c in _committed_matrix()["cells"] if c["exporter"] == "dynamo" and c["torch_requested"] == "1.12.1"]
    assert dynamo and all(c["outcome"] == "not_applicable" and "no dynamo" in c["reason"] for c in dynamo)


def test_the_cell_imports_under_python_3_10() -> None:
    """torch 1.12.1's environment runs Python 3.10: the cell's own imports work there (onnx, which lint needs,
    is installed only in the matrix environment itself)."""
    import subprocess

    from where223.sweep.stacks import machine_python

    python = machine_python("3.10")
    if python is None:
        pytest.skip("this machine has no python3.10")
    env = {"PYTHONPATH": str(paths.ROOT / "src"), "PATH": "/usr/bin:/bin"}
    probe = (
        "import where223.study.matrix.run as m, where223.sweep.cell, where223.outcomes as o; "
        "print(o.Outcome.NOT_RUN, f'{m.OrtVerdict.ACCEPTED}', m.OrtVerdict('where_type_error') == 'where_type_error')"
    )
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["not_run", "accepted", "True"]
    # the control: that interpreter really lacks 3.11's enum.StrEnum, which these modules therefore avoid
    control = [str(python), "-c", "from enum import StrEnum"]
    failed = subprocess.run(control, capture_output=True, text=True, env=env, check=False)
    assert failed.returncode != 0 and "StrEnum" in failed.stderr
