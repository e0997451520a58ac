"""Operator signatures: lookup per opset, unknown ops, formal/actual pairing."""

from __future__ import annotations

from onnx import helper

from where223.graph.schema import formal_pairs, opset_imports, signature, signature_for


def test_signature_follows_the_opset():
    where = signature("Where", "", 17)
    assert where is not None and where.since_version == 16
    assert [f.type_str for f in where.inputs] == ["B", "T", "T"]
    assert where.allowed("B") == ("tensor(bool)",)
    assert "tensor(bfloat16)" in where.allowed("T")
    assert "tensor(bfloat16)" not in signature("Where", "", 15).allowed("T")  # bfloat16 arrived in opset 16
    assert where.admitted("T") == frozenset(where.allowed("T")) and where.admitted("B") == {"tensor(bool)"}
    scaler = signature("Scaler", "ai.onnx.ml", 1)
    assert scaler.outputs[0].type_str == "tensor(float)"  # a literal type, not a parameter
    assert scaler.allowed("tensor(float)") == ("tensor(float)",)
    assert scaler.admitted("tensor(float)") == {"tensor(float)"}
    assert signature("NoSuchOp", "", 17) is None
    assert signature("Where", "", 1) is None  # before the op existed


def test_signature_for_folds_ai_onnx_and_skips_unknown_domains():
    model = helper.make_model(
        helper.make_graph([], "g", [], []),
        opset_imports=[helper.make_opsetid("ai.onnx", 17), helper.make_opsetid("example.custom", 1)],
    )
    opsets = opset_imports(model)
    assert opsets == {"": 17, "example.custom": 1}
    assert signature_for(helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx"), opsets) is not None
    assert signature_for(helper.make_node("Relu", ["x"], ["y"], domain="com.microsoft"), opsets) is None
    assert signature_for(helper.make_node("Custom", ["x"], ["y"], domain="example.custom"), opsets) is None


def test_formal_pairs_variadic_and_omitted():
    concat = signature("Concat", "", 17)
    assert [(p, n, f.name) for p, n, f in formal_pairs(["a", "b", "c"], concat.inputs)] == [
        (0, "a", "inputs"),
        (1, "b", "inputs"),
        (2, "c", "inputs"),
    ]
    clip = signature("Clip", "", 17)  # input, optional min, optional max; no variadic tail
    assert [(p, n) for p, n, _ in formal_pairs(["x", "", "hi", "extra"], clip.inputs)] == [(0, "x"), (2, "hi")]


def test_an_op_run_as_its_function_body_allows_only_what_the_body_allows():
    import onnx.defs

    loss = signature("SoftmaxCrossEntropyLoss", "", 17)
    assert "tensor(bfloat16)" not in loss.allowed("T") and loss.allowed("Tind") == ("tensor(int32)", "tensor(int64)")
    schema = onnx.defs.get_schema("SoftmaxCrossEntropyLoss", 17)  # control: onnx's own schema lists bfloat16
    assert "tensor(bfloat16)" in next(c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == "T")
    if onnx.defs.onnx_opset_version() >= 22:  # where NegativeLogLikelihoodLoss takes bfloat16, so does the loss
        assert "tensor(bfloat16)" in signature("SoftmaxCrossEntropyLoss", "", 22).allowed("T")
