"""What an fp32-to-fp16 converter leaves (issue 39): declared types a node contradicts (a `Cast(to=FLOAT)` whose output
the converter declared float16: in the main graph, an If's branch, a model-local function's call), a
`com.microsoft` operator given float16, and the function body ONNX Runtime runs for Attention-23 where it has no
kernel. Each: ONNX Runtime refuses the model, lint finds it where ONNX Runtime does, repair makes a model ONNX
Runtime accepts; the control, the same model typed as the node computes it, is clean and accepted."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from where223.cli import main
from where223.graph.lint import FindingKind, lint_model
from where223.graph.lint_formats import sarif
from where223.graph.ort import OrtVerdict, judge, load_session, parse_declared_mismatch
from where223.graph.repair import repair
from where223.graph.schema import runtime_registry


def _v(name, elem, shape=(2,)):
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def _model(nodes, inputs, outputs, value_info=(), opsets=(("", 17),), functions=(), ir_version=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                             functions=list(functions), ir_version=ir_version)  # fmt: skip


def _two_node(declared=T.FLOAT16, consumer=T.FLOAT16):
    """Cast from INT64 with `to=FLOAT`, its output declared `declared`, an Add of type `consumer` after it."""
    nodes = [helper.make_node("Cast", ["ids"], ["c"], name="Cast_1", to=T.FLOAT),
             helper.make_node("Add", ["c", "h"], ["y"], name="Add_1")]
    return _model(nodes, [_v("ids", T.INT64), _v("h", consumer)], [_v("y", consumer)], [_v("c", declared)])


def _summary(report):
    return [(v.kind, v.label, v.expected, v.root) for v in report.violations]


def _accepted(model):
    return judge(model).verdict in (OrtVerdict.ACCEPTED, OrtVerdict.MISSING_KERNEL)


def test_a_cast_whose_output_is_declared_another_type_is_found_and_retargeted():
    model = _two_node()
    refusal = judge(model)
    assert refusal.verdict == OrtVerdict.TYPE_ERROR
    assert parse_declared_mismatch(refusal.message).node == "Cast_1"
    report = lint_model(model)
    assert _summary(report) == [(FindingKind.DECLARED_TYPE, "Cast_1", "tensor(float)", True)]
    assert report.violations[0].message() == (
        "Type (tensor(float16)) of output arg (c) of node (Cast_1) does not match expected type (tensor(float))")
    assert report.violations[0].computed_by == "its `to` is tensor(float)"
    repaired, changes = repair(model)
    assert [(c.kind, c.node, c.from_type, c.to_type) for c in changes] == [
        ("retarget_cast", "Cast_1", "tensor(float)", "tensor(float16)")]  # every consumer takes float16
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    (y,) = load_session(repaired).run(None, {"ids": np.array([1, 2]), "h": np.ones(2, np.float16)})
    assert y.dtype == np.float16 and y.tolist() == [2.0, 3.0]
    # control: the output declared as the Cast computes it
    control = _two_node(T.FLOAT, T.FLOAT)
    assert lint_model(control).clean and judge(control).verdict == OrtVerdict.ACCEPTED
    assert repair(control) == (control, [])


def test_a_declaration_its_consumers_contradict_is_corrected_and_graph_outputs_keep_theirs():
    """keep_io_types: the converter kept the float Add (and the float graph output); only the value_info between
    says float16. The Add's conflict follows from the declaration, so the declaration is what the repair corrects;
    a graph output declared float16 after the same Cast keeps its type (the Cast is retargeted)."""
    model = _two_node(T.FLOAT16, consumer=T.FLOAT)
    report = lint_model(model)
    assert _summary(report) == [(FindingKind.DECLARED_TYPE, "Cast_1", "tensor(float)", True),
                                (FindingKind.BINDING_CONFLICT, "Add_1", "tensor(float)", False)]
    repaired, changes = repair(model)
    assert [(c.kind, c.value, c.from_type, c.to_type) for c in changes] == [
        ("redeclare", "c", "tensor(float16)", "tensor(float)")]
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    at_output = _model([helper.make_node("Cast", ["ids"], ["c"], name="Cast_1", to=T.FLOAT)], [_v("ids", T.INT64)],
                       [_v("c", T.FLOAT16)])
    repaired, changes = repair(at_output)
    assert [(c.kind, c.to_type) for c in changes] == [("retarget_cast", "tensor(float16)")]
    assert repaired.graph.output[0].type.tensor_type.elem_type == T.FLOAT16 and judge(repaired).verdict == "accepted"


def _if_model(then_to=T.FLOAT):
    """An If whose then_branch casts ids with `to=then_to` into an output declared float16; the else_branch casts
    to float16; a float16 Add after the If."""
    then = helper.make_graph([helper.make_node("Cast", ["ids"], ["t"], name="then_cast", to=then_to)], "then", [],
                             [_v("t", T.FLOAT16)])
    other = helper.make_graph([helper.make_node("Cast", ["ids"], ["e"], name="else_cast", to=T.FLOAT16)], "else", [],
                              [_v("e", T.FLOAT16)])
    nodes = [helper.make_node("If", ["flag"], ["c"], name="If_1", then_branch=then, else_branch=other),
             helper.make_node("Add", ["c", "h"], ["y"], name="Add_1")]
    return _model(nodes, [_v("flag", T.BOOL, ()), _v("ids", T.INT64), _v("h", T.FLOAT16)], [_v("y", T.FLOAT16)])


def test_a_declared_type_inside_an_if_branch():
    model = _if_model()
    refusal = parse_declared_mismatch(judge(model).message)
    assert (refusal.holder, refusal.node) == ("If_1", "then_cast")  # "Graph attribute inferencing failed: ..."
    assert _summary(lint_model(model)) == [(FindingKind.DECLARED_TYPE, "If_1/then_branch/then_cast", "tensor(float)",
                                            True)]
    repaired, changes = repair(model)
    assert [(c.kind, c.subgraph, c.to_type) for c in changes] == [
        ("retarget_cast", "If_1/then_branch", "tensor(float16)")]  # a branch's output keeps its declared type
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    control = _if_model(then_to=T.FLOAT16)
    assert lint_model(control).clean and judge(control).verdict == OrtVerdict.ACCEPTED


def _function_model(call_output=T.FLOAT16, function_value_info=False):
    """A model-local function casting its input with `to=FLOAT` (then an Identity); its call's output declared
    `call_output` in the graph's value_info, consumed by an Add of that type."""
    body = [helper.make_node("Cast", ["a"], ["b"], name="fcast", to=T.FLOAT),
            helper.make_node("Identity", ["b"], ["o"], name="fid")]
    function = helper.make_function("local", "ToFloat", ["a"], ["o"], body, [helper.make_opsetid("", 17)])
    if function_value_info:  # a function's own value_info, which ONNX Runtime does not read
        function.value_info.append(_v("b", T.FLOAT16))
    nodes = [helper.make_node("ToFloat", ["ids"], ["c"], name="call", domain="local"),
             helper.make_node("Add", ["c", "h"], ["y"], name="Add_1")]
    return _model(nodes, [_v("ids", T.INT64), _v("h", call_output)], [_v("y", call_output)], [_v("c", call_output)],
                  opsets=(("", 17), ("local", 1)), functions=[function], ir_version=10)


def test_a_functions_output_declared_another_type_is_found_at_the_call():
    model = _function_model()
    assert parse_declared_mismatch(judge(model).message).node == "call"
    (violation,) = lint_model(model).violations
    assert (violation.kind, violation.node, violation.op_type, violation.expected) == (
        FindingKind.DECLARED_TYPE, "call", "ToFloat", "tensor(float)")
    assert "function's body" in violation.computed_by
    repaired, changes = repair(model)
    assert [(c.kind, c.node) for c in changes] == [("cast_output", "call")]
    assert lint_model(repaired).violations == [] and judge(repaired).verdict == OrtVerdict.ACCEPTED
    # controls: the call's output declared float; and a function's own value_info, which ONNX Runtime ignores
    for control in (_function_model(T.FLOAT), _function_model(T.FLOAT, function_value_info=True)):
        assert lint_model(control).violations == [] and judge(control).verdict == OrtVerdict.ACCEPTED


def _cdist(elem):
    node = helper.make_node("CDist", ["a", "b"], ["d"], name="CDist_1", domain="com.microsoft", metric="euclidean")
    return _model([node], [_v("a", elem, (2, 3)), _v("b", elem, (4, 3))], [_v("d", elem, None)],
                  opsets=(("", 17), ("com.microsoft", 1)))


def test_a_contrib_op_given_float16_is_checked_against_onnx_runtimes_schema():
    """With the runtime's schema list, CDist (float, double) given float16 is found and computed in float. Without
    it (onnxruntime 1.19), CDist is left unchecked, as before, and the repair has nothing to change (`where223
    repair` then asks ONNX Runtime: the test below)."""
    model, control = _cdist(T.FLOAT16), _cdist(T.FLOAT)
    assert judge(model).verdict == OrtVerdict.TYPE_ERROR and _accepted(control)
    report = lint_model(model)
    if runtime_registry().schemas is None:
        assert report.unchecked == {"com.microsoft:CDist": 1} and report.violations == []
        assert repair(model)[1] == [] and lint_model(control).unchecked == {"com.microsoft:CDist": 1}
        return
    (violation,) = report.violations
    assert (violation.kind, violation.node, violation.allowed) == (
        FindingKind.NOT_ALLOWED, "CDist_1", ["tensor(float)", "tensor(double)"])
    repaired, changes = repair(model)
    assert {(c.kind, c.to_type) for c in changes} == {("cast_input", "tensor(float)"),
                                                      ("cast_output", "tensor(float16)")}
    assert lint_model(repaired).clean and _accepted(repaired)
    assert lint_model(control).clean


def _attention(q=T.BFLOAT16, v=T.FLOAT16):
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="Attn")
    return _model([node], [_v("q", q, (1, 2, 3, 4)), _v("k", q, (1, 2, 3, 4)), _v("v", v, (1, 2, 3, 4))],
                  [_v("y", q, None)], opsets=(("", 23),), ir_version=10)


@pytest.mark.skipif(onnx.defs.onnx_opset_version() < 23, reason="onnx before 1.18 defines no Attention-23")
@pytest.mark.parametrize(("q", "v"), [(T.BFLOAT16, T.FLOAT16), (T.FLOAT16, T.BFLOAT16)])
def test_attention_23_refused_inside_the_function_body_onnx_runtime_runs(q, v):
    """No CPU kernel for Attention-23 at bf16 and fp16: ONNX Runtime runs onnx's function body, whose MatMul binds
    both (it names that nameless node `()`). lint finds the MatMul in the body, repair computes the node in float.
    Control: float16 throughout has a kernel."""
    if runtime_registry().kernels is None:
        pytest.skip("this onnxruntime lists no kernels")
    model = _attention(q, v)
    refusal = judge(model)
    assert (refusal.verdict, refusal.type_binding.op_type, refusal.type_binding.node) == ("type_error", "MatMul", "")
    (violation,) = lint_model(model).violations
    assert (violation.kind, violation.op_type, violation.subgraph, violation.function_call["node"]) == (
        FindingKind.BINDING_CONFLICT, "MatMul", "Attn/function body", "Attn")
    assert "in the function body ONNX Runtime runs for Attention node (Attn)" in lint_model(model).format()
    repaired, changes = repair(model)
    assert {c.to_type for c in changes if c.kind == "cast_input"} == {"tensor(float)"}
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    control = _attention(T.FLOAT16, T.FLOAT16)
    assert lint_model(control).clean and judge(control).verdict == OrtVerdict.ACCEPTED


def test_without_the_runtimes_kernel_list_function_bodies_are_not_checked_and_the_report_says_so(no_runtime_lists):
    """The fallback: a float loss (an op onnx defines by a function body) checked against its own schema, and a note
    naming it; a model without such an op gets no note (control)."""
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "labels"], ["loss"], name="sce")]
    model = _model(nodes, [_v("x", T.FLOAT, (3, 4)), _v("labels", T.INT64, (3,))], [_v("loss", T.FLOAT, ())])
    report = lint_model(model)
    assert report.violations == [] and len(report.notes) == 1
    assert "lists no kernels" in report.notes[0] and "(SoftmaxCrossEntropyLoss x1)" in report.notes[0]
    assert lint_model(_two_node(T.FLOAT, T.FLOAT)).notes == []


def test_repair_asks_onnx_runtime_when_lint_finds_nothing(tmp_path, capsys):
    """An op no schema knows: lint finds nothing to repair, ONNX Runtime refuses the model: exit 1 with its message,
    nothing written (it said "nothing changed" and exit 0). Control (`test_repair.py::test_cli`): a clean model,
    exit 0, ONNX Runtime loads it."""
    unknown = _model([helper.make_node("Mystery", ["h"], ["y"], name="m", domain="com.example")],
                     [_v("h", T.FLOAT)], [_v("y", T.FLOAT)], opsets=(("", 17), ("com.example", 1)))
    path, out = tmp_path / "unknown.onnx", tmp_path / "out.onnx"
    onnx.save(unknown, str(path))
    assert main(["repair", str(path), str(out)]) == 1
    err = capsys.readouterr().err
    assert "no type violation lint finds, yet ONNX Runtime refuses the model" in err and "Mystery" in err
    assert err.count("\n") == 1 and not out.exists()


def test_a_declared_type_finding_in_sarif_and_json():
    report = lint_model(_two_node())
    (result,) = sarif(report)["runs"][0]["results"]
    assert (result["ruleId"], result["ruleIndex"], result["level"]) == ("declared_type_mismatch", 3, "error")
    assert result["properties"]["computed"] == "tensor(float)"
    record = report.to_dict()["violations"][0]
    assert record["computed_by"] == "its `to` is tensor(float)" and "function_call" not in record
    # control: other findings' records keep their keys as before
    conflict = lint_model(_two_node(T.FLOAT16, T.FLOAT)).to_dict()["violations"][1]
    assert "computed_by" not in conflict and "function_call" not in conflict


def _softmax_model(elem, axes=(-1,)):
    nodes = [helper.make_node("Softmax", ["x"], [f"y{k}"], name=f"softmax_{k}", axis=axis)
             for k, axis in enumerate(axes)]  # fmt: skip
    return _model(nodes, [_v("x", elem, (2, 3))], [_v(f"y{k}", elem, (2, 3)) for k in range(len(axes))])


def test_a_body_is_checked_only_where_the_kernel_list_has_no_kernel_and_at_most_so_many_per_model(
        fake_kernels, monkeypatch):
    """With a kernel list that serves Softmax in float alone: a bfloat16 loss (no kernel) is found inside its body in
    either onnx; a float Softmax (a kernel) builds no body, a bfloat16 one builds a clean one; past BODY_CHECKS
    distinct bodies, the rest are left unchecked and the report says how many."""
    import where223.graph.lint as lint

    loss = _model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "labels"], ["loss"], name="sce")],
                  [_v("x", T.BFLOAT16, (3, 4)), _v("labels", T.INT64, (3,))], [_v("loss", T.BFLOAT16, ())])
    (violation,) = lint_model(loss).violations
    assert (violation.op_type, violation.subgraph, violation.function_call["node"]) == (
        "NegativeLogLikelihoodLoss", "sce/function body", "sce")
    # what the export-time fixes decide by (where223.fixes): the body's refusal, in the op's allowed types
    assert "tensor(bfloat16)" not in lint.allowed_types("SoftmaxCrossEntropyLoss", 17, "T")
    assert "tensor(bfloat16)" in lint.allowed_types("Softmax", 17, "T")  # control: its body takes bfloat16
    built = []
    monkeypatch.setattr(lint, "_check_body", lambda *args: built.append(args[0].name) or [])
    assert lint_model(_softmax_model(T.FLOAT)).clean and built == []
    assert lint_model(_softmax_model(T.BFLOAT16)).clean and built == ["softmax_0"]
    monkeypatch.setattr(lint, "BODY_CHECKS", 1)
    report = lint_model(_softmax_model(T.BFLOAT16, axes=(0, 1)))
    assert built == ["softmax_0", "softmax_0"] and report.notes == [
        "the function bodies of 1 node(s) were not checked: 1 distinct bodies were built for this model, the most "
        "lint builds"]


def _loop_model(given=T.FLOAT16):
    """A Loop whose body declares its carried input float, given `given` by the node."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"], name="b_cond"),
                              helper.make_node("Add", ["a_in", "a_in"], ["a_out"], name="b_add")], "body",
                             [_v("i", T.INT64, ()), _v("cond_in", T.BOOL, ()), _v("a_in", T.FLOAT)],
                             [_v("cond_out", T.BOOL, ()), _v("a_out", T.FLOAT)])  # fmt: skip
    node = helper.make_node("Loop", ["trips", "", "a"], ["a_final"], name="Loop_1", body=body)
    return _model([node], [_v("trips", T.INT64, ()), _v("a", given)], [_v("a_final", T.FLOAT)])


def test_a_body_input_declared_another_type_than_its_node_gives_it():
    """ONNX Runtime: "Node (Loop_1) ... Tensor element type mismatch. 10 != 1"; the repair casts the node's input to
    what the body declares. Control: the Loop given float."""
    model = _loop_model()
    assert judge(model).verdict == OrtVerdict.TYPE_ERROR and "Loop_1" in judge(model).message
    assert _summary(lint_model(model)) == [(FindingKind.DECLARED_TYPE, "Loop_1", "tensor(float16)", True)]
    repaired, changes = repair(model)
    assert [(c.kind, c.node, c.value, c.to_type) for c in changes] == [("cast_input", "Loop_1", "a", "tensor(float)")]
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    control = _loop_model(T.FLOAT)
    assert lint_model(control).clean and judge(control).verdict == OrtVerdict.ACCEPTED


def _layer_norm(declared, **stash):
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="LN_1", axis=-1, **stash)
    return _model([node], [_v("x", T.FLOAT16, (2, 3)), _v("s", T.FLOAT16, (3,))],
                  [_v("y", T.FLOAT16, (2, 3)), _v("mean", declared, None)])


def _declared(report):
    return [(v.label, v.expected, v.computed_by) for v in report.violations if v.kind == FindingKind.DECLARED_TYPE]


def test_a_layer_normalizations_mean_is_of_its_stash_type_not_its_inputs():
    """Mean and InvStdDev take `stash_type` (float unless set), whatever the input's type: what onnx infers too."""
    assert _declared(lint_model(_layer_norm(T.FLOAT16))) == [
        ("LN_1", "tensor(float)", "`stash_type` unset gives tensor(float)")]
    assert _declared(lint_model(_layer_norm(T.FLOAT, stash_type=T.BFLOAT16))) == [
        ("LN_1", "tensor(bfloat16)", "its `stash_type` gives tensor(bfloat16)")]
    # the controls: declared as the stash type gives
    assert lint_model(_layer_norm(T.FLOAT)).clean
    assert lint_model(_layer_norm(T.BFLOAT16, stash_type=T.BFLOAT16)).clean
