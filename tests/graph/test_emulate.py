"""Reduced-precision kernels emulated on CPU: bf16 graphs run and round as float32 compute rounded to bf16,
graphs that fail the type check stay refused, float graphs are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from where223.graph.emulate import (
    EmulationRefused,
    _Rewriter,
    emulate_reduced_precision,
    emulated_outputs,
    run_float_boundary,
    spacing,
    without_dropout,
)
from where223.graph.ort import OrtVerdict, judge
from where223.graph.types import model_types

F32, BF16, F16 = TensorProto.FLOAT, TensorProto.BFLOAT16, TensorProto.FLOAT16
BOOL, I64 = TensorProto.BOOL, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "emulate_test", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _bf16_round(values: np.ndarray, truncate: bool = False) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), or cut to bfloat16, as float32."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    if not truncate:
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits & 0xFFFF0000).astype(np.uint32).view(np.float32)


def _matmul_bf16() -> onnx.ModelProto:
    """bf16 in, bf16 out: a MatMul (no bf16 kernel on CPU) then an Add of a bf16 initializer."""
    bias = helper.make_tensor("bias", BF16, [3], [0.5, -0.25, 1.0])
    return _model(
        [helper.make_node("MatMul", ["a", "b"], ["ab"], name="MatMul_0"),
         helper.make_node("Add", ["ab", "bias"], ["y"], name="Add_1")],
        [helper.make_tensor_value_info("a", BF16, [4, 8]), helper.make_tensor_value_info("b", BF16, [8, 3])],
        [helper.make_tensor_value_info("y", BF16, [4, 3])],
        [bias],
    )  # fmt: skip


def _unfixed_where() -> onnx.ModelProto:
    """The seed's refusal in miniature: Where(cond, float, bf16) feeding a bf16 MatMul."""
    return _model(
        [helper.make_node("Cast", ["x"], ["x16"], name="Cast_0", to=BF16),
         helper.make_node("Where", ["cond", "x", "x16"], ["w"], name="Where_223"),
         helper.make_node("Cast", ["w"], ["w16"], name="Cast_1", to=BF16),
         helper.make_node("MatMul", ["w16", "x16"], ["y"], name="MatMul_2")],
        [helper.make_tensor_value_info("cond", BOOL, [2, 2]), helper.make_tensor_value_info("x", F32, [2, 2])],
        [helper.make_tensor_value_info("y", BF16, [2, 2])],
    )  # fmt: skip


def test_bf16_matmul_runs_and_rounds_like_float32_rounded_to_bf16():
    model = _matmul_bf16()
    assert judge(model).verdict == OrtVerdict.MISSING_KERNEL  # the reason for emulating: no bf16 MatMul on CPU
    emulation = emulate_reduced_precision(model)
    assert emulation.label == "emulated bf16"
    assert emulation.emulated_nodes == {"MatMul": 1, "Add": 1}
    assert [(v.name, v.type.tensor_type.elem_type) for v in emulation.model.graph.output] == [("y", BF16)]
    assert [(v.name, v.type.tensor_type.elem_type) for v in emulation.model.graph.input] == [("a", BF16), ("b", BF16)]
    rng = np.random.default_rng(0)
    a, b = _bf16_round(rng.normal(size=(4, 8))), _bf16_round(rng.normal(size=(8, 3)))
    measured = emulated_outputs(emulation, {"a": a, "b": b})["y"]
    bias = np.array([0.5, -0.25, 1.0], np.float32)
    expected = _bf16_round(_bf16_round(a @ b) + bias)  # each node rounds its output
    np.testing.assert_array_equal(measured, expected)
    # control: the comparison tells rounding from truncation, and from unrounded float32
    assert not np.array_equal(measured, _bf16_round(_bf16_round(a @ b, truncate=True) + bias, truncate=True))
    assert not np.array_equal(measured, a @ b + bias)


def test_unfixed_where_stays_refused_though_a_naive_rewrite_would_run_it():
    model = _unfixed_where()
    with pytest.raises(EmulationRefused, match="where_type_error") as refused:
        emulate_reduced_precision(model)
    assert refused.value.judgement.verdict == OrtVerdict.WHERE_TYPE_ERROR
    assert [v.op_type for v in refused.value.conflicts] == ["Where"]
    # control: the same rewrite without the type check makes ONNX Runtime accept the graph
    naive = _Rewriter(model, model_types(model), {BF16}).apply()
    assert judge(naive).verdict == OrtVerdict.ACCEPTED


def test_float_only_graph_is_unchanged():
    model = _model(
        [helper.make_node("MatMul", ["x", "x"], ["y"], name="MatMul_0")],
        [helper.make_tensor_value_info("x", F32, [2, 2])],
        [helper.make_tensor_value_info("y", F32, [2, 2])],
    )
    emulation = emulate_reduced_precision(model)
    assert emulation.model.SerializeToString() == model.SerializeToString()
    assert emulation.reduced_types == () and emulation.label == "no reduced precision"
    assert emulation.type_check.verdict == OrtVerdict.ACCEPTED


def test_constants_casts_and_subgraphs_of_reduced_type():
    """ConstantOfShape's bf16 value becomes float32 (exactly), Cast and Constant stay, an If's branch is
    rewritten inside, and the bf16 interface is kept."""
    shape = helper.make_tensor("shape", I64, [1], [3])
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["filled", "x16"], ["then_out"], name="then_mul")],
        "then", [], [helper.make_tensor_value_info("then_out", BF16, [3])],
    )  # fmt: skip
    else_branch = helper.make_graph(
        [helper.make_node("Add", ["filled", "x16"], ["else_out"], name="else_add")],
        "else", [], [helper.make_tensor_value_info("else_out", BF16, [3])],
    )  # fmt: skip
    model = _model(
        [helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="Fill_0",
                          value=helper.make_tensor("value", BF16, [1], [1.5])),
         helper.make_node("Cast", ["x"], ["x16"], name="Cast_1", to=BF16),
         helper.make_node("If", ["flag"], ["y"], name="If_2", then_branch=then_branch, else_branch=else_branch)],
        [helper.make_tensor_value_info("x", F32, [3]), helper.make_tensor_value_info("flag", BOOL, [])],
        [helper.make_tensor_value_info("y", BF16, [3])],
        [shape],
    )  # fmt: skip
    emulation = emulate_reduced_precision(model)
    assert emulation.emulated_nodes == {"ConstantOfShape": 1, "Mul": 1, "Add": 1}
    assert emulation.kept_nodes == {"Cast": 1, "If": 1}
    fill = emulation.model.graph.node[[n.name for n in emulation.model.graph.node].index("Fill_0")]
    assert fill.attribute[0].t.data_type == F32
    x = np.array([1.0, 3.0, 1 / 3], np.float32)
    for flag, expected in ((True, 1.5 * _bf16_round(x)), (False, 1.5 + _bf16_round(x))):
        measured = emulated_outputs(emulation, {"x": x, "flag": np.array(flag)})["y"]
        np.testing.assert_array_equal(measured, _bf16_round(expected))


def test_fp16_is_emulated_too():
    model = _model(
        [helper.make_node("Cast", ["x"], ["x16"], name="Cast_0", to=F16),
         helper.make_node("Softmax", ["x16"], ["y"], name="Softmax_1", axis=-1)],
        [helper.make_tensor_value_info("x", F32, [2, 3])],
        [helper.make_tensor_value_info("y", F16, [2, 3])],
    )  # fmt: skip
    emulation = emulate_reduced_precision(model)
    assert emulation.label == "emulated fp16" and emulation.emulated_nodes == {"Softmax": 1}
    x = np.array([[0.1, 2.0, -1.0], [3.0, 3.0, 0.5]], np.float32)
    rounded = x.astype(np.float16).astype(np.float32)
    exp = np.exp(rounded - rounded.max(-1, keepdims=True))
    expected = (exp / exp.sum(-1, keepdims=True)).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(emulated_outputs(emulation, {"x": x})["y"], expected, rtol=0, atol=2**-11)


def test_spacing_of_the_reduced_types():
    assert spacing(1.0) == 2**-7 and spacing(1.99) == 2**-7 and spacing(-2.0) == 2**-6
    assert spacing(0.17) == 2**-10  # 0.17 lies in [2**-3, 2**-2)
    assert spacing(1.0, "float16") == 2**-10
    assert spacing(0.0) == 2.0**-133  # the smallest normal's spacing, never zero


def test_without_dropout_passes_inputs_through():
    ratio = helper.make_tensor("ratio", F32, [], [0.5])
    training = helper.make_tensor("training", BOOL, [], [True])
    model = _model(
        [helper.make_node("Dropout", ["x", "ratio", "training"], ["y"], name="Dropout_0")],
        [helper.make_tensor_value_info("x", F32, [64])],
        [helper.make_tensor_value_info("y", F32, [64])],
        [ratio, training],
    )
    x = np.arange(1, 65, dtype=np.float32)
    assert not np.array_equal(run_float_boundary(model, {"x": x})["y"], x)  # control: training mode drops
    np.testing.assert_array_equal(run_float_boundary(without_dropout(model), {"x": x})["y"], x)


def test_model_local_functions_are_inlined_and_emulated():
    body = helper.make_function(
        "local", "Project", ["a", "b"], ["out"], [helper.make_node("MatMul", ["a", "b"], ["out"])],
        [helper.make_opsetid("", 17)],
    )  # fmt: skip
    model = _matmul_bf16()
    model.graph.node[0].CopyFrom(helper.make_node("Project", ["a", "b"], ["ab"], name="Project_0", domain="local"))
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(body)
    emulation = emulate_reduced_precision(model)
    assert emulation.emulated_nodes == {"MatMul": 1, "Add": 1} and not emulation.model.functions
    a, b = np.ones((4, 8), np.float32), np.full((8, 3), 0.5, np.float32)
    expected = 4.0 + np.array([[0.5, -0.25, 1.0]] * 4, np.float32)
    np.testing.assert_array_equal(emulated_outputs(emulation, {"a": a, "b": b})["y"], expected)
