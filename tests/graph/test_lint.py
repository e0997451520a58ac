"""The linter finds every violation (subgraphs included), skips unknown ops, fails cleanly on bad files."""

from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper

from where223.cli import main
from where223.graph.lint import Binding, FindingKind, lint_model


def _summary(report):
    return [(v.node, v.op_type, v.type_param, v.kind, v.subgraph, v.root) for v in report.violations]


def test_reports_every_violation_not_only_the_first(violations_model):
    """Roots first; Clip_7 reads Where_223's output and its own `max` alone would not conflict."""
    report = lint_model(violations_model)
    assert _summary(report) == [
        ("Where_223", "Where", "T", FindingKind.BINDING_CONFLICT, "", True),
        ("Concat_9", "Concat", "T", FindingKind.BINDING_CONFLICT, "", True),
        ("Where_float_cond", "Where", "B", FindingKind.NOT_ALLOWED, "", True),
        ("then_add", "Add", "T", FindingKind.BINDING_CONFLICT, "If_3/then_branch", True),
        ("Clip_7", "Clip", "T", FindingKind.BINDING_CONFLICT, "", False),
    ]
    assert report.violations[-1].caused_by == ["Where_223"]
    assert [v.caused_by for v in report.roots] == [[], [], [], []]
    # onnx's own checker stops at the first one
    with pytest.raises(onnx.shape_inference.InferenceError, match="Where_223") as caught:
        onnx.checker.check_model(violations_model, full_check=True)
    assert "Clip_7" not in str(caught.value)


def test_conflict_details(violations_model):
    where, concat, not_allowed, then_add, clip = lint_model(violations_model).violations
    assert where.bindings == [
        Binding("input", 1, "x", "tensor(float)"),
        Binding("input", 2, "y", "tensor(float16)"),
        Binding("output", 0, "w", "tensor(float)"),
    ]
    assert where.offending == [Binding("input", 2, "y", "tensor(float16)")]
    assert where.expected == "tensor(float)"
    assert where.message() == (
        "Type parameter (T) of Optype (Where) bound to different types (tensor(float) and tensor(float16)) "
        "in node (Where_223)"
    )
    # the omitted optional `min` (empty name) is skipped; `max` keeps its position 2
    assert clip.offending == [Binding("input", 2, "hi", "tensor(float16)")]
    # variadic inputs all bind the same parameter
    assert concat.offending == [
        Binding("input", 1, "y", "tensor(float16)"),
        Binding("input", 2, "y", "tensor(float16)"),
    ]
    assert not_allowed.offending == [Binding("input", 0, "x", "tensor(float)")]
    assert not_allowed.allowed == ["tensor(bool)"]
    assert then_add.offending == [Binding("input", 1, "y", "tensor(float16)")]
    assert then_add.node_index == 0 and where.node_index == 0 and concat.node_index == 2


def test_literal_formal_type():
    """Reshape's `shape` is typed tensor(int64) in the schema itself, not through a type parameter."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"], name="Reshape_1")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("shape", TensorProto.INT32, [2]),
        ],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
    )
    (violation,) = lint_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ).violations
    assert (violation.node, violation.kind, violation.type_param) == (
        "Reshape_1",
        FindingKind.NOT_ALLOWED,
        "tensor(int64)",
    )
    assert violation.offending == [Binding("input", 1, "shape", "tensor(int32)")]
    assert violation.allowed == ["tensor(int64)"]


def test_heterogeneous_variadic_is_not_a_conflict():
    """Loop carries a float and an int64 through its heterogeneous `V`: no binding conflict."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Identity", ["a_in"], ["a_out"], name="body_a"),
            helper.make_node("Identity", ["b_in"], ["b_out"], name="body_b"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a_in", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("b_in", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a_out", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("b_out", TensorProto.INT64, [2]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "a", "b"], ["a_final", "b_final"], name="Loop_1", body=body)],
        "g",
        [
            helper.make_tensor_value_info("trips", TensorProto.INT64, []),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("b", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("a_final", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("b_final", TensorProto.INT64, [2]),
        ],
    )
    report = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert report.violations == [] and report.nodes_checked == 4 and report.untyped_values == 0


def test_unknown_ops_are_counted_not_failed(violations_model):
    report = lint_model(violations_model)
    assert report.unchecked == {"com.example:FusedMatMul": 1}
    assert report.opset == 17 and report.opset_imports == {"": 17, "com.example": 1}
    assert report.nodes_checked == 7  # 5 main-graph nodes with a schema, then_add, else_identity


def test_clean_model(clean_model, save, capsys):
    report = lint_model(clean_model)
    assert report.clean and report.violations == [] and report.untyped_values == 0
    assert main(["lint", str(save(clean_model))]) == 0
    assert "no type-constraint violations" in capsys.readouterr().out


def test_cli_exit_1_and_json(violations_model, save, capsys):
    path = save(violations_model)
    assert main(["lint", str(path)]) == 1
    text = capsys.readouterr().out
    assert "Type parameter (T) of Optype (Where) bound to different types" in text
    assert "in node (then_add) in subgraph If_3/then_branch" in text
    assert main(["lint", str(path), "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["model_path"] == str(path) and record["clean"] is False
    assert [(v["node"], v["root"], v["caused_by"]) for v in record["violations"]] == [
        ("Where_223", True, []),
        ("Concat_9", True, []),
        ("Where_float_cond", True, []),
        ("then_add", True, []),
        ("Clip_7", False, ["Where_223"]),
    ]
    assert record["outcome"] == "violations" and record["complete"] is False  # FusedMatMul is unchecked
    assert record["violations"][0]["offending"] == [
        {"io": "input", "position": 2, "name": "y", "type": "tensor(float16)"}
    ]


@pytest.mark.parametrize("kind", ["missing", "garbage", "text", "truncated"])
def test_unreadable_input_exit_2_one_line(kind, unreadable_files, capsys):
    path = unreadable_files[kind]
    assert main(["lint", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"where223 lint: {path}")
    assert "Traceback" not in captured.err


def test_command_line_without_torch(violations_model, save, unreadable_files):
    """The installed entry point: right exit codes, one stderr line, and torch never imported."""
    path = save(violations_model)
    script = (
        "import sys; from where223.cli import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; sys.exit(rc)"
    )
    found = subprocess.run([sys.executable, "-c", script, "lint", str(path)], capture_output=True, text=True)
    assert found.returncode == 1, found.stderr
    bad = subprocess.run(
        [sys.executable, "-c", script, "lint", str(unreadable_files["truncated"])],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_nodes_inside_model_local_functions_are_checked():
    from onnx import TensorProto, helper

    body = helper.make_function(
        "local",
        "MixedWhere",
        ["c", "a", "b"],
        ["w"],
        [helper.make_node("Where", ["c", "a", "b"], ["w"], name="Where_in_function")],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("MixedWhere", ["cond", "x", "y"], ["out"], name="call", domain="local")],
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, [2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(
        graph, functions=[body], opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    )
    report = lint_model(model)
    assert report.inlined_functions == 1 and report.unchecked == {}
    assert [(v.kind, v.op_type, v.type_param) for v in report.violations] == [
        (FindingKind.BINDING_CONFLICT, "Where", "T")
    ]
    assert "1 model-local function(s) inlined first" in report.format()
