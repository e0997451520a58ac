"""Operator signatures: lookup per opset, unknown ops, formal/actual pairing."""

from __future__ import annotations

from onnx import helper

from where223.graph.schema import (
    body_version,
    formal_pairs,
    from_runtime,
    opset_imports,
    runs_as_function_body,
    runtime_registry,
    signature,
    signature_for,
)


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


def test_without_the_runtimes_kernel_list_an_op_run_as_its_body_allows_only_what_the_body_allows(no_runtime_lists):
    """The fallback where the installed onnxruntime lists no kernels (onnxruntime-training 1.19)."""
    import onnx.defs

    loss = signature("SoftmaxCrossEntropyLoss", "", 17)
    assert "tensor(bfloat16)" not in loss.allowed("T") and loss.allowed("Tind") == ("tensor(int32)", "tensor(int64)")
    schema = onnx.defs.get_schema("SoftmaxCrossEntropyLoss", 17)  # control: onnx's own schema lists bfloat16
    assert "tensor(bfloat16)" in next(c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == "T")
    if onnx.defs.onnx_opset_version() >= 22:  # where NegativeLogLikelihoodLoss takes bfloat16, so does the loss
        assert "tensor(bfloat16)" in signature("SoftmaxCrossEntropyLoss", "", 22).allowed("T")
    assert runs_as_function_body(loss, 17, {"T": "tensor(float)", "Tind": "tensor(int64)"}) is None


def test_with_the_runtimes_kernel_list_an_op_keeps_its_schema_and_runs_as_its_body_where_no_kernel_serves(
        fake_kernels):
    """onnx's own schema stands (lint checks the body itself); whether the body runs is the kernel list's answer."""
    loss = signature("SoftmaxCrossEntropyLoss", "", 17)
    assert "tensor(bfloat16)" in loss.allowed("T")
    softmax = signature("Softmax", "", 17)
    assert runs_as_function_body(softmax, 17, {"T": "tensor(float)"}) is False  # the fake list's one kernel
    assert runs_as_function_body(softmax, 17, {"T": "tensor(bfloat16)"}) is True
    assert runs_as_function_body(signature("Relu", "", 17), 17, {"T": "tensor(bfloat16)"}) is False  # no body at 17
    assert body_version("Relu", 18) == 18 and body_version("Relu", 17) is None and body_version("Softmax", 17) == 13


def test_ops_of_onnx_runtimes_own_domains_have_its_signatures():
    """`com.microsoft` ops are checked against the schemas the installed onnxruntime registers; without that list
    (onnxruntime 1.19), they have none, as before."""
    cdist = signature("CDist", "com.microsoft", 1)
    if runtime_registry().schemas is None:
        assert cdist is None
        return
    assert cdist.allowed("T") == ("tensor(float)", "tensor(double)") and from_runtime(cdist)
    assert not from_runtime(signature("Relu", "", 17))
    assert signature("NoSuchOp", "com.microsoft", 1) is None
