"""Lint separates root violations from their consequences, never calls an incomplete check clean, and turns
onnx's own failures on a malformed model into one line and exit 2."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from where223.cli import main
from where223.graph.lint import LintOutcome, lint_model
from where223.graph.ort import OrtVerdict, judge

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
CHAIN = 12


def _model(nodes, inputs, outputs, functions=(), extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    opsets = [helper.make_opsetid("", 17), *extra_opsets]
    return helper.make_model(graph, functions=list(functions), opset_imports=opsets, ir_version=8)


def _chain(prefix: str, source: str, length: int) -> tuple[list[onnx.NodeProto], str]:
    """`length` Adds, each adding a float input `w` to the previous result; returns the nodes and the last value."""
    nodes, previous = [], source
    for k in range(1, length + 1):
        nodes.append(helper.make_node("Add", [previous, "w"], [f"{prefix}{k}"], name=f"{prefix}Add_{k}"))
        previous = f"{prefix}{k}"
    return nodes, previous


def _wrong_cast_model(chains: int) -> onnx.ModelProto:
    """Per chain: x cast to float16 by mistake, then CHAIN Adds with the float `w`."""
    nodes, outputs = [], []
    for c in range(chains):
        nodes.append(helper.make_node("Cast", ["x"], [f"c{c}"], name=f"Cast_wrong_{c}", to=F16))
        chain, last = _chain(f"chain{c}_", f"c{c}", CHAIN)
        nodes += chain
        outputs.append(helper.make_tensor_value_info(last, F32, [2]))
    inputs = [helper.make_tensor_value_info(name, F32, [2]) for name in ("x", "w")]
    return _model(nodes, inputs, outputs)


def test_one_wrong_cast_is_one_root_and_its_consequences(save, capsys):
    model = _wrong_cast_model(1)
    report = lint_model(model)
    assert len(report.violations) == CHAIN  # every Add of the chain violates
    (root,) = report.roots
    assert root.node == "chain0_Add_1" and root is report.violations[0]  # the Cast's consumer
    consequences = report.violations[1:]
    assert len(consequences) == CHAIN - 1
    assert all(not v.root and v.caused_by == ["chain0_Add_1"] for v in consequences)
    # ONNX Runtime names the same node: the first root is where it stops
    ort = judge(model)
    assert ort.verdict == OrtVerdict.TYPE_ERROR and ort.type_binding.node == root.node
    assert main(["lint", str(save(model))]) == 1
    text = capsys.readouterr().out
    assert f"{CHAIN} violation(s): 1 root(s), {CHAIN - 1} consequence(s)" in text
    assert f"+ {CHAIN - 1} consequence(s): chain0_Add_2, chain0_Add_3" in text
    assert "in node (chain0_Add_5)" not in text  # consequences are counted under their root, not listed


def test_two_independent_wrong_casts_are_two_roots():
    """Control: a second chain from its own wrong Cast is a root of its own, not a consequence of the first."""
    report = lint_model(_wrong_cast_model(2))
    assert [v.node for v in report.roots] == ["chain0_Add_1", "chain1_Add_1"]
    assert len(report.violations) == 2 * CHAIN
    assert {tuple(v.caused_by) for v in report.violations if not v.root} == {("chain0_Add_1",), ("chain1_Add_1",)}


def test_derivation_stops_at_a_cast_back():
    """A Cast back to float ends the root's reach: a wrong value joining after it is a new root."""
    nodes = [
        helper.make_node("Cast", ["x"], ["c"], name="Cast_wrong", to=F16),
        helper.make_node("Add", ["c", "w"], ["a"], name="Add_root"),
        helper.make_node("Add", ["a", "w"], ["b"], name="Add_consequence"),
        helper.make_node("Cast", ["b"], ["back"], name="Cast_back", to=F32),
        helper.make_node("Add", ["back", "h"], ["out"], name="Add_second_root"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", F32, [2]),
        helper.make_tensor_value_info("w", F32, [2]),
        helper.make_tensor_value_info("h", F16, [2]),
    ]
    report = lint_model(_model(nodes, inputs, [helper.make_tensor_value_info("out", F32, [2])]))
    assert [(v.node, v.root, v.caused_by) for v in report.violations] == [
        ("Add_root", True, []),
        ("Add_second_root", True, []),
        ("Add_consequence", False, ["Add_root"]),
    ]


def _custom_op_model(custom: bool) -> onnx.ModelProto:
    """x -> an op (custom domain, or Neg) -> Relu: the custom op's output reaches a standard op untyped."""
    name = "mystery\x1b[31m"
    first = (
        helper.make_node("Mystery", ["x"], [name], name="Mystery_1", domain="com.example")
        if custom
        else helper.make_node("Neg", ["x"], [name], name="Neg_1")
    )
    nodes = [first, helper.make_node("Relu", [name], ["out"], name="Relu_1")]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_tensor_value_info("out", F32, [2])],
        extra_opsets=[helper.make_opsetid("com.example", 1)] if custom else (),
    )


def test_untyped_values_are_incomplete_not_clean(save, capsys):
    report = lint_model(_custom_op_model(custom=True))
    # no violation, but not clean: clean means no finding and every node checked (one definition)
    assert not report.violations and not report.clean
    assert not report.complete and report.outcome == LintOutcome.INCOMPLETE
    assert report.unchecked == {"com.example:Mystery": 1} and report.untyped_values == 1
    assert report.untyped_examples == ["mystery\x1b[31m"]
    path = save(_custom_op_model(custom=True))
    assert main(["lint", str(path)]) == 3
    text = capsys.readouterr().out
    assert "incomplete: 1 value(s) untyped (e.g. mystery\\x1b[31m), 1 node(s) unchecked" in text
    assert "no type-constraint violations" not in text and "\x1b" not in text
    assert main(["lint", str(path), "--json"]) == 3
    assert '"outcome": "incomplete"' in capsys.readouterr().out


def test_the_same_model_with_a_standard_op_is_clean(save, capsys):
    """Control: Neg in place of the custom op types every value, so the same check is complete and exits 0."""
    report = lint_model(_custom_op_model(custom=False))
    assert report.complete and report.outcome == LintOutcome.CLEAN and report.untyped_examples == []
    assert report.clean
    assert main(["lint", str(save(_custom_op_model(custom=False)))]) == 0
    assert "no type-constraint violations" in capsys.readouterr().out


def _function_model(call_outputs: list[str]) -> onnx.ModelProto:
    """A model-local function declaring one output, called with `call_outputs`."""
    body = helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])], [helper.make_opsetid("", 17)]
    )
    call = helper.make_node("F", ["x"], call_outputs, domain="local", name="call")
    return _model(
        [call],
        [helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_tensor_value_info("y", F32, [2])],
        functions=[body],
        extra_opsets=[helper.make_opsetid("local", 1)],
    )


@pytest.mark.parametrize("call_outputs, code", [(["y", "z"], 2), (["y"], 0)], ids=["too-many-outputs", "control"])
def test_inliner_failure_is_one_line_exit_2(call_outputs, code, save, capsys):
    assert main(["lint", str(save(_function_model(call_outputs)))]) == code
    captured = capsys.readouterr()
    if code == 0:
        assert captured.err == "" and "no type-constraint violations" in captured.out
        return
    assert captured.out == "" and "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("where223 lint: ") and "onnx's function inliner failed" in line
    assert "Number of actual parameters cannot exceed number of formal parameters" in line


def _loop_model(initial: int) -> onnx.ModelProto:
    """A Loop whose body declares its inputs without types and adds a float constant to the carried value."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Constant", [], ["one"], name="body_one", value=helper.make_tensor("v", F32, [], [1.0])),
            helper.make_node("Add", ["carried_in", "one"], ["carried_out"], name="body_add"),
        ],
        "body",
        [helper.make_value_info(name, onnx.TypeProto()) for name in ("i", "cond_in", "carried_in")],
        [helper.make_value_info(name, onnx.TypeProto()) for name in ("cond_out", "carried_out")],
    )
    loop = helper.make_node("Loop", ["trips", "", "start"], ["final"], name="Loop_1", body=body)
    inputs = [
        helper.make_tensor_value_info("trips", TensorProto.INT64, []),
        helper.make_tensor_value_info("start", initial, []),
    ]
    return _model([loop], inputs, [helper.make_tensor_value_info("final", initial, [])])


def test_a_loop_body_reads_its_input_types_from_the_loop():
    """Body inputs declared without a type take the Loop's (iteration count, condition, carried values)."""
    report = lint_model(_loop_model(F32))
    assert report.complete and report.outcome == LintOutcome.CLEAN
    # control: a float16 carried value meets the body's float constant, found only if the type reached the body
    (violation,) = lint_model(_loop_model(F16)).violations
    assert (violation.node, violation.subgraph) == ("body_add", "Loop_1/body")
