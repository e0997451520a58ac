"""benchmarks/lint_speed.py: its record on a small model, and NOTES.md quoting the committed record."""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from where223.pipeline import records
from where223.pipeline.paths import OUTPUTS, ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("lint_speed_benchmark", ROOT / "benchmarks" / "lint_speed.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measure_records_both_tools_on_a_model_with_external_weights(bench, tmp_path):
    weight = numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    path = tmp_path / "small.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(path), save_as_external_data=True, location="small.onnx.data", size_threshold=0)
    record = bench.measure(path, repeats=2)
    assert record["lint_result"] == {"nodes_checked": 1, "violations": 0, "unchecked": 0, "untyped_values": 0}
    assert len(record["lint_s"]["runs"]) == len(record["checker_s"]["runs"]) == 2
    assert record["lint_s"]["min"] <= record["lint_s"]["median"] and record["model"]["weights_mib"] == 0


def test_notes_quote_the_committed_lint_speed_record(bench):
    record = records.read_json(OUTPUTS / "benchmarks" / "lint_speed.json")
    assert record["environment"]["packages"]["onnx"] == record["versions"]["onnx"]
    notes = (ROOT / "NOTES.md").read_text()
    assert bench.notes_line(record) in notes.splitlines()
    # the control: a record with another median is not what NOTES.md quotes
    other = copy.deepcopy(record)
    other["lint_s"]["median"] += 0.1
    assert bench.notes_line(other) not in notes.splitlines()
