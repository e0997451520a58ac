"""benchmarks/kernel_table.py: its counts are the table's (a restricted build, nothing timed)."""

from __future__ import annotations

import json

import pytest

from tests import benchmark_records, benchmark_scripts
from where223.graph.kernels import KernelEntry, KernelStatus
from where223.pipeline import records


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("kernel_table")


@pytest.mark.parametrize(("key", "kind"), [
    ("MatMul(13) opset 17 T=tensor(bfloat16)", "bfloat16"),
    ("Where(16) opset 17 B=tensor(bool),T=tensor(float16)", "float16"),
    ("LayerNormalization(17) opset 17 T=tensor(double),U=tensor(float)", "double"),  # float: the default's type
    ("Relu(14) opset 17 T=tensor(float)", "float"),
    ("Shape(15) opset 17 T=tensor(int64)", None),
    ("If(16) opset 17 ", None),
])
def test_an_entry_is_filed_under_the_type_it_varies(bench, key, kind):
    assert bench.type_of_entry(key) == kind


def test_summary_counts_by_status_and_type(bench):
    entries = {
        "MatMul(13) opset 17 T=tensor(float)": KernelEntry(KernelStatus.AVAILABLE),
        "MatMul(13) opset 17 T=tensor(bfloat16)": KernelEntry(KernelStatus.MISSING, "no"),
        "Relu(14) opset 17 T=tensor(bfloat16)": KernelEntry(KernelStatus.MISSING, "no"),
        "Cast(13) opset 17 T1=tensor(float)": KernelEntry(KernelStatus.UNKNOWN, "why"),
    }
    summary = bench.summarize(entries)
    assert summary["entries"] == 4 and summary["ops"] == 3
    assert summary["status"] == {"available": 1, "missing": 2, "unknown": 1}
    assert summary["by_type"]["float"] == {"available": 1, "unknown": 1}
    assert summary["missing"]["bfloat16"] == ["MatMul(13)", "Relu(14)"] and summary["missing"]["float16"] == []


def test_a_restricted_build_is_what_onnx_runtime_says(bench):
    (table,) = bench.measure_tables([17], 1, ops=["MatMul"]).values()
    assert table["entries"] == 4 and len(table["runs_s"]) == 1
    assert table["missing"]["bfloat16"] == ["MatMul(13)"] and table["by_type"]["float"] == {"available": 1}


def test_the_written_record_carries_its_run_for_every_interpreter_measured(bench, tmp_path):
    measured = {"onnxruntime": "9.9.9", "import_s": 0.1, "tables": {}, "lint": {}}
    python = tmp_path / "python"  # an interpreter that answers `--here` with its measurement
    python.write_text(f"#!/bin/sh\necho '{json.dumps(measured)}'\n")
    python.chmod(0o755)
    out = tmp_path / "kernel_table.json"
    assert bench.main(["--python", str(python), "--out", str(out)]) == 0
    record = records.read_json(out)
    assert list(record["runtimes"]) == ["9.9.9"] and benchmark_records.problems(record) == []
