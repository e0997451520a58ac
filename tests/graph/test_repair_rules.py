"""Each repair rule end to end on a small graph of the class the sweeps found: ONNX Runtime refuses the model,
the repaired one loads (and, where this CPU can run it, computes what a reference computed within a tolerance
fixed here), and a control shows what the rule must not do."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from where223.cli import main
from where223.graph.lint import lint_model
from where223.graph.ort import OrtVerdict, judge, load_session
from where223.graph.repair import RepairError, repair
from where223.graph.repair._edit import Editor
from where223.graph.schema import runtime_registry
from where223.graph.types import model_types

BF16_SPACING = 2.0**-7  # one bfloat16 spacing at 1: the outputs below are rounded to bf16 once


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (round to nearest even), as float32."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def _layer_norm_model(x_type=T.BFLOAT16, weight_type=T.FLOAT, y_type=None):
    """float input -> Cast to x_type -> LayerNormalization with weights of weight_type -> Cast to float."""
    scale = helper.make_tensor("scale", weight_type, [4], [1.0, 0.5, 2.0, 1.00390625])
    bias = helper.make_tensor("bias", weight_type, [4], [0.0, 0.25, -1.0, 0.00390625])
    nodes = [helper.make_node("Cast", ["x_f"], ["x"], name="Cast_x", to=x_type),
             helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="node_layer_norm_1", axis=-1),
             helper.make_node("Cast", ["y"], ["out"], name="Cast_out", to=T.FLOAT)]
    value_info = [helper.make_tensor_value_info("y", y_type or x_type, [2, 4])]
    model = _model(nodes, [helper.make_tensor_value_info("x_f", T.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("out", T.FLOAT, [2, 4])], initializers=[scale, bias])
    model.graph.value_info.extend(value_info)
    return model


X = np.array([[0.5, -1.25, 3.0, 0.75], [2.0, 0.125, -0.5, 1.5]], np.float32)


def _layer_norm_reference(x: np.ndarray) -> np.ndarray:
    """In float64 from bf16 activations and float weights, rounded to bf16 once: eager's native_layer_norm."""
    x = _bf16(x).astype(np.float64)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return _bf16((normed * [1.0, 0.5, 2.0, 1.00390625] + [0.0, 0.25, -1.0, 0.00390625]).astype(np.float32))


def test_a_mixed_layer_norm_is_computed_in_float_and_cast_back():
    """bf16 activations with float weights (the dynamo exporter under CPU bf16 autocast): on a bare model the
    widest bound type, float, computes it, the output cast back to bf16; the control: the old rule ('output')
    rounds the weights to bf16 instead."""
    model = _layer_norm_model()
    assert judge(model).verdict == OrtVerdict.TYPE_ERROR
    repaired, changes = repair(model)
    assert [(c.kind, c.value, c.from_type, c.to_type) for c in changes] == [
        ("cast_input", "x", "tensor(bfloat16)", "tensor(float)"),
        ("cast_output", "y", "tensor(float)", "tensor(bfloat16)")]
    assert all("eager not consulted" in c.why for c in changes)
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    (out,) = load_session(repaired).run(None, {"x_f": X})
    reference = _layer_norm_reference(X)
    assert np.abs(out - reference).max() <= BF16_SPACING * np.abs(reference).max()
    _, old = repair(model, target="output")
    assert [(c.value, c.to_type) for c in old] == [("scale", "tensor(bfloat16)"), ("bias", "tensor(bfloat16)")]


def _report(node: str, inputs: list[str]) -> dict:
    return {"blame": [{"node": node, "op_type": "LayerNormalization", "eager_kernels": [
        {"op": "view", "inputs": [inputs[0]], "outputs": [inputs[0]]},
        {"op": "native_layer_norm", "inputs": inputs, "outputs": [inputs[0], "float", "float"]}]}]}


def test_a_conflict_follows_eager_when_its_report_is_given(tmp_path):
    """A float activation with fp16 weights (BERT in fp16 through the TorchScript exporter): eager ran the layer in
    fp16 throughout, so with the report the node computes in fp16 (the activation cast down), not in the widest
    type; eager handed bf16/float/float: computed in float. The control: a report without the node falls back
    to the widest type and says so."""
    model = _layer_norm_model(x_type=T.FLOAT, weight_type=T.FLOAT16, y_type=T.FLOAT16)
    _, changes = repair(model, eager=_report("node_layer_norm_1", ["float16", "float16", "float16"]))
    assert [(c.kind, c.value, c.from_type, c.to_type) for c in changes] == [
        ("cast_input", "x", "tensor(float)", "tensor(float16)")]
    assert "eager's native_layer_norm was handed float16/float16/float16: computed in tensor(float16)" in changes[0].why
    mixed = _layer_norm_model()
    _, changes = repair(mixed, eager=_report("node_layer_norm_1", ["bfloat16", "float", "float"]))
    assert changes[0].to_type == "tensor(float)" and "as eager's kernel does" in changes[0].why
    _, changes = repair(model, eager=_report("another_node", ["float16", "float16", "float16"]))
    assert changes[0].to_type == "tensor(float)" and "no eager kernel recorded for this node" in changes[0].why
    report = tmp_path / "record.json"
    report.write_text(json.dumps(_report("node_layer_norm_1", ["float16", "float16", "float16"])))
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(source))
    assert main(["repair", str(source), str(out), "--eager", str(report)]) == 0
    assert lint_model(out).clean


def test_an_eager_report_that_is_not_one_is_one_line_and_exit_2(tmp_path, capsys):
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_layer_norm_model(), str(source))
    for name, text in (("garbage.json", "{not json"), ("list.json", "[1, 2]"), ("absent.json", None)):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        assert main(["repair", str(source), str(out), "--eager", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--eager" in err or "blame" in err, err
        assert not out.exists()


def _conv_model():
    weight = helper.make_tensor("w", T.BFLOAT16, [2, 1, 1, 1], [0.5, -1.5])
    nodes = [helper.make_node("Cast", ["x_f"], ["x"], name="Cast_x", to=T.BFLOAT16),
             helper.make_node("Conv", ["x", "w"], ["y"], name="node_Conv_1"),
             helper.make_node("Cast", ["y"], ["out"], name="Cast_out", to=T.FLOAT)]
    model = _model(nodes, [helper.make_tensor_value_info("x_f", T.FLOAT, [1, 1, 2, 2])],
                   [helper.make_tensor_value_info("out", T.FLOAT, [1, 2, 2, 2])], initializers=[weight])
    model.graph.value_info.append(helper.make_tensor_value_info("y", T.BFLOAT16, [1, 2, 2, 2]))
    return model


def test_a_bf16_conv_is_computed_in_float_and_says_what_it_costs():
    """bf16 into Conv at opset 17 (its schema allows bfloat16 from opset 22): computed in float, cast back; the
    change says the cost and the opset alternative. The control: the model as exported is refused."""
    model = _conv_model()
    assert judge(model).verdict == OrtVerdict.TYPE_ERROR
    repaired, changes = repair(model)
    assert [(c.kind, c.value, c.to_type) for c in changes] == [
        ("cast_input", "x", "tensor(float)"), ("cast_input", "w", "tensor(float)"),
        ("cast_output", "y", "tensor(bfloat16)")]
    why = changes[0].why
    assert "tensor(bfloat16) is not allowed for T of Conv at opset 17: computed in tensor(float)" in why
    assert "the cost of 3 Cast(s)" in why
    newest = onnx.defs.onnx_opset_version()
    assert ("opset 22 would allow tensor(bfloat16) (not raised)" in why) == (newest >= 22)
    assert lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    x = np.array([[[[1.0, -2.0], [0.3, 4.0]]]], np.float32)
    (out,) = load_session(repaired).run(None, {"x_f": x})
    reference = _bf16(_bf16(x) * np.array([0.5, -1.5], np.float32).reshape(1, 2, 1, 1))
    assert np.abs(out - reference).max() <= BF16_SPACING * np.abs(reference).max()


def _sdpa_scale_model():
    """The TorchScript exporter's attention scale: Cast(to=15) meant torch's bfloat16, ONNX reads complex128."""
    nodes = [helper.make_node("Cast", ["q_f"], ["q"], name="Cast_q", to=T.BFLOAT16),
             helper.make_node("Constant", [], ["c"], name="Const_c",
                              value=helper.make_tensor("cv", T.FLOAT, [], [0.25])),
             helper.make_node("Cast", ["c"], ["s"], name="Cast_15", to=15),
             helper.make_node("Sqrt", ["s"], ["r"], name="Sqrt_1"),
             helper.make_node("Mul", ["q", "r"], ["m"], name="Mul_2"),
             helper.make_node("Cast", ["m"], ["out"], name="Cast_out", to=T.FLOAT)]
    return _model(nodes, [helper.make_tensor_value_info("q_f", T.FLOAT, [2, 4])],
                  [helper.make_tensor_value_info("out", T.FLOAT, [2, 4])])


def test_a_wrong_cast_target_is_retargeted_at_its_root():
    """Cast(to=15) is retargeted to bfloat16; no Cast from or to complex128 is inserted, and ONNX Runtime
    accepts the types. The controls: a Cast from complex128 is refused by the editor itself, and a wrong Cast into
    `Not` (which takes neither bfloat16 nor anything else the Cast could mean) is refused with its reason."""
    model = _sdpa_scale_model()
    assert judge(model).verdict == OrtVerdict.TYPE_ERROR
    repaired, changes = repair(model)
    assert [(c.kind, c.node, c.from_type, c.to_type) for c in changes] == [
        ("retarget_cast", "Cast_15", "tensor(complex128)", "tensor(bfloat16)")]
    assert "`to=15` is torch's number for bfloat16 and ONNX's for complex128" in changes[0].why
    casts = [n for n in repaired.graph.node if n.op_type == "Cast"]
    assert len(casts) == 3 and all(a.i != T.COMPLEX128 for n in casts for a in n.attribute)
    assert lint_model(repaired).clean
    assert judge(repaired).verdict in (OrtVerdict.ACCEPTED, OrtVerdict.MISSING_KERNEL)
    editor = Editor(model, model_types(model))
    mul = next(i for i, n in enumerate(model.graph.node) if n.name == "Mul_2")
    with pytest.raises(RepairError, match=r"a Cast from tensor\(complex128\) to tensor\(bfloat16\) is not allowed"):
        editor.cast_input("", mul, 1, "tensor(bfloat16)", "control")
    nodes = [helper.make_node("Constant", [], ["c"], name="Const_c", value=helper.make_tensor("cv", T.FLOAT, [], [1])),
             helper.make_node("Cast", ["c"], ["s"], name="Cast_15", to=15),
             helper.make_node("Not", ["s"], ["n"], name="Not_1")]
    neither = _model(nodes, [], [helper.make_tensor_value_info("n", T.BOOL, [])])  # Not takes no bfloat16 either
    refused = r"Cast_15: tensor\(complex128\) is not allowed for T2 of Cast at opset 17 and no allowed type holds it"
    with pytest.raises(RepairError, match=refused):
        repair(neither)


def test_a_bf16_constant_of_shape_is_computed_in_float_with_its_value_retyped():
    """ConstantOfShape's T2 comes from its `value` attribute alone (bf16 allowed from opset 20): the repair makes
    the value float (1.5 holds exactly) and casts the output back; the control, the repaired node with its value
    put back to bf16, is the violation again."""
    value = helper.make_tensor("v", T.BFLOAT16, [1], [1.5])
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"], value=value)],
                   [helper.make_tensor_value_info("s", T.INT64, [1])],
                   [helper.make_tensor_value_info("y", T.BFLOAT16, None)])  # fmt: skip
    assert lint_model(model).violations
    repaired, changes = repair(model)
    assert changes and not lint_model(repaired).violations
    node = next(n for n in repaired.graph.node if n.op_type == "ConstantOfShape")
    retyped = onnx.numpy_helper.to_array(node.attribute[0].t)
    assert node.attribute[0].t.data_type == T.FLOAT and retyped.tolist() == [1.5]
    assert judge(repaired).verdict != OrtVerdict.TYPE_ERROR
    node.attribute[0].t.CopyFrom(value)  # the control
    assert [v.op_type for v in lint_model(repaired).violations] == ["ConstantOfShape"]


def _cross_entropy_model(x_type=T.BFLOAT16):
    """The TorchScript exporter's bf16 loss (retribert): SoftmaxCrossEntropyLoss of bf16 logits, int64 labels."""
    nodes = [helper.make_node("Cast", ["x_f"], ["x"], name="Cast_x", to=x_type),
             helper.make_node("SoftmaxCrossEntropyLoss", ["x", "labels"], ["loss"], name="sce", reduction="mean"),
             helper.make_node("Cast", ["loss"], ["out"], name="Cast_out", to=T.FLOAT)]
    return _model(nodes, [helper.make_tensor_value_info("x_f", T.FLOAT, [3, 4]),
                          helper.make_tensor_value_info("labels", T.INT64, [3])],
                  [helper.make_tensor_value_info("out", T.FLOAT, [])])  # fmt: skip


def test_a_bf16_loss_refused_inside_its_function_body_is_computed_in_float():
    """SoftmaxCrossEntropyLoss's schema allows bfloat16, but ONNX Runtime runs its function body, whose
    NegativeLogLikelihoodLoss does not before opset 22: where the runtime lists its kernels (none for this loss), lint
    checks the body onnx builds and finds the refusal there, at the loss's node; where it lists none (onnxruntime
    1.19), the loss's own `T` is narrowed to what the body allows (`schema.FALLBACK_FUNCTION_BODY_OPS`). Either way
    the repair computes the loss in float. Controls: ONNX Runtime refuses the model as exported; a float loss is
    clean."""
    model = _cross_entropy_model()
    assert judge(model).verdict == OrtVerdict.TYPE_ERROR
    (violation,) = lint_model(model).violations
    if runtime_registry().kernels is not None:
        assert (violation.op_type, violation.kind, violation.subgraph, violation.function_call["node"]) == (
            "NegativeLogLikelihoodLoss", "type_not_allowed", "sce/function body", "sce")
    else:
        assert (violation.op_type, violation.kind, violation.allowed) == (
            "SoftmaxCrossEntropyLoss", "type_not_allowed", ["tensor(float16)", "tensor(float)", "tensor(double)"])
    repaired, changes = repair(model)
    assert changes and lint_model(repaired).clean and judge(repaired).verdict == OrtVerdict.ACCEPTED
    x, labels = np.array([[0.5, -1.0, 2.0, 0.25]] * 3, np.float32), np.array([0, 2, 3], np.int64)
    (out,) = load_session(repaired).run(None, {"x_f": x, "labels": labels})
    logits = _bf16(x).astype(np.float64)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    reference = -log_p[np.arange(3), labels].mean()
    assert abs(float(out) - reference) <= BF16_SPACING * abs(reference)  # the loss rounded to bf16 once
    assert lint_model(_cross_entropy_model(T.FLOAT)).clean
