"""ONNX Runtime's verdict: its type-binding message parsed, every message classified, real models judged."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from where223.graph.ort import (
    OrtJudgement,
    OrtVerdict,
    TypeBinding,
    classify,
    judge,
    judge_message,
    load_session,
    message_node,
    resolution_refusal,
)

# The seed's message, verbatim (ONNX Runtime's parentheses do not balance).
SEED = (
    "Type Error: Type parameter (T) of Optype (Where) bound to different types (tensor(float) and "
    "tensor(float16) in node (Where_223)."
)
MISSING_KERNEL = (
    "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Gemm(13) node with "
    "name '/model/transformer/h.0/attn/c_attn/Gemm'"
)
INVALID_TYPE = (
    "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from m.onnx failed:This is an invalid model. Type Error: "
    "Type 'tensor(complex128)' of input parameter (cast_out) of operator (Add) in node (Add_1) is invalid."
)
UNSUPPORTED_TYPE = (
    "[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:[ShapeInferenceError] (op_type:SplitToSequence, "
    "node name: n0): input typestr: T, has unsupported type: tensor(bfloat16)"
)


def test_parses_the_seeds_message():
    judgement = judge_message(SEED)
    assert judgement.type_binding == TypeBinding("Where", "T", "Where_223", ("tensor(float)", "tensor(float16)"))
    assert judgement.verdict == OrtVerdict.WHERE_TYPE_ERROR and judgement.type_binding.is_where
    assert judgement.message == SEED
    assert judgement.type_binding.to_dict() == {
        "op_type": "Where",
        "type_parameter": "T",
        "node": "Where_223",
        "bound_types": ["tensor(float)", "tensor(float16)"],
    }


def test_a_binding_on_another_op_is_a_type_error_not_the_where_error():
    judgement = judge_message(SEED.replace("Optype (Where)", "Optype (Add)").replace("Where_223", "Add_7"))
    assert judgement.verdict == OrtVerdict.TYPE_ERROR
    assert judgement.type_binding == TypeBinding("Add", "T", "Add_7", ("tensor(float)", "tensor(float16)"))
    assert not judgement.type_binding.is_where


def test_bound_types_may_nest():
    message = SEED.replace("tensor(float) and tensor(float16)", "seq(tensor(float)) and seq(tensor(float16))")
    binding = judge_message(message).type_binding
    assert binding is not None and binding.bound_types == ("seq(tensor(float))", "seq(tensor(float16))")


@pytest.mark.parametrize(
    ("message", "verdict"),
    [
        (MISSING_KERNEL, OrtVerdict.MISSING_KERNEL),
        (INVALID_TYPE, OrtVerdict.TYPE_ERROR),
        (UNSUPPORTED_TYPE, OrtVerdict.TYPE_ERROR),
        ("[ShapeInferenceError] (op_type:Add, node name: n1): B has inconsistent type tensor(double)",
         OrtVerdict.TYPE_ERROR),
        ("Element type of inputs are expected to be the same.", OrtVerdict.TYPE_ERROR),
        ("Attribute nodes_values must have same type as input X", OrtVerdict.TYPE_ERROR),
        ("[ONNXRuntimeError] : 1 : FAIL : Failed to find kernel for Cast(19) (node n0). Kernel not found",
         OrtVerdict.MISSING_KERNEL),
        ("[ONNXRuntimeError] : 1 : FAIL : Failed to find a kernel", OrtVerdict.OTHER_ERROR),  # control: not the phrase
        ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : opset 99 is not supported", OrtVerdict.OTHER_ERROR),
        ("Type parameter (T) of Optype (Where) bound to", OrtVerdict.OTHER_ERROR),  # cut short: no binding
        ("", OrtVerdict.OTHER_ERROR),
        ("garbage \x00 (((", OrtVerdict.OTHER_ERROR),
    ],
)
def test_other_messages_are_classified_without_a_binding(message, verdict):
    assert classify(message) == verdict
    assert judge_message(message).type_binding is None


def test_verdicts_read_as_their_values():
    assert [str(v) for v in OrtVerdict] == [
        "accepted",
        "where_type_error",
        "type_error",
        "missing_kernel",
        "other_error",
        "timeout",
    ]
    assert {v for v in OrtVerdict if v.types_accepted} == {OrtVerdict.ACCEPTED, OrtVerdict.MISSING_KERNEL}


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int]], output: tuple[str, int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "ort_verdict",
        [helper.make_tensor_value_info(name, elem, [2, 2]) for name, elem in inputs],
        [helper.make_tensor_value_info(output[0], output[1], [2, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _where(y_type: int) -> onnx.ModelProto:
    node = helper.make_node("Where", ["cond", "x", "y"], ["out"], name="Where_223")
    inputs = [("cond", TensorProto.BOOL), ("x", TensorProto.FLOAT), ("y", y_type)]
    return _model([node], inputs, ("out", TensorProto.FLOAT))


def test_judges_a_model_onnx_runtime_accepts(tmp_path):
    model = _where(TensorProto.FLOAT)
    assert judge(model) == OrtJudgement(OrtVerdict.ACCEPTED)
    path = tmp_path / "accepted.onnx"
    onnx.save(model, str(path))
    assert judge(path).verdict == OrtVerdict.ACCEPTED and judge(str(path)).message is None
    assert [i.name for i in load_session(path).get_inputs()] == ["cond", "x", "y"]


def test_judges_the_where_type_error():
    judgement = judge(_where(TensorProto.FLOAT16))
    assert judgement.verdict == OrtVerdict.WHERE_TYPE_ERROR, judgement.message
    assert judgement.type_binding == TypeBinding("Where", "T", "Where_223", ("tensor(float)", "tensor(float16)"))
    with pytest.raises(Exception, match=r"bound to different types"):
        load_session(_where(TensorProto.FLOAT16))


@pytest.mark.parametrize(
    "model",
    [
        _model(
            [helper.make_node("Add", ["a", "b"], ["c"], name="Add_1")],
            [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT16)],
            ("c", TensorProto.FLOAT),
        ),
        _model(
            [helper.make_node("Add", ["a", "b"], ["c"], name="Add_1")],
            [("a", TensorProto.COMPLEX128), ("b", TensorProto.COMPLEX128)],
            ("c", TensorProto.COMPLEX128),
        ),
        # a Where whose condition is float: refused types on the Where node, but not the Where binding
        _model(
            [helper.make_node("Where", ["cond", "x", "y"], ["out"], name="Where_223")],
            [("cond", TensorProto.FLOAT), ("x", TensorProto.FLOAT), ("y", TensorProto.FLOAT)],
            ("out", TensorProto.FLOAT),
        ),
    ],
    ids=["binding_on_add", "type_not_allowed", "where_condition"],
)
def test_judges_other_type_refusals(model):
    judgement = judge(model)
    assert judgement.verdict == OrtVerdict.TYPE_ERROR, judgement.message


def test_judges_a_missing_kernel():
    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="MatMul_bf16")
    bf16 = TensorProto.BFLOAT16
    judgement = judge(_model([node], [("a", bf16), ("b", bf16)], ("c", bf16)))
    assert judgement.verdict == OrtVerdict.MISSING_KERNEL, judgement.message
    assert "MatMul" in judgement.message and judgement.type_binding is None


def test_judges_a_missing_file_as_another_error(tmp_path):
    judgement = judge(tmp_path / "absent.onnx")
    assert judgement.verdict == OrtVerdict.OTHER_ERROR and "absent.onnx" in judgement.message


@pytest.mark.parametrize(("message", "node"), [
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:Type Error: Type parameter (T) of Optype (Where) "
     "bound to different types (tensor(float) and tensor(float16) in node (Where_223).", "Where_223"),
    ("Type Error: Type (tensor(float)) of output arg (y) of node (n0_DFT) does not match expected type "
     "(tensor(double)).", "n0_DFT"),
    ("[ShapeInferenceError] (op_type:Add, node name: n25_Add): B has inconsistent type tensor(float16)", "n25_Add"),
    ("Could not find an implementation for MatMul(13) node with name '/h.0/MatMul'", "/h.0/MatMul"),
    ("Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Conv) in node (conv) is invalid.",
     "conv"),
    ("Unsupported model IR version: 12, max supported IR version: 11", None),
    (None, None),
])
def test_the_node_a_refusal_is_about_in_each_of_its_wordings(message, node):
    assert message_node(message) == node


def test_graph_resolutions_refusals_name_their_node_and_operator():
    message = ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:Node (/l.0/mamba/Transpose_9) Op "
               "(Transpose) [TypeInferenceError] Invalid attribute perm {0, -2, -1, 1}, input shape = {0, 0, 0, 0}")
    assert resolution_refusal(message) == ("/l.0/mamba/Transpose_9", "Transpose")
    # controls: a type check's wording and a missing kernel's are other parsers' (message_node, refused_operator)
    assert resolution_refusal("Could not find an implementation for MatMul(13) node with name '/h.0/MatMul'") is None
    assert resolution_refusal("Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Conv) in "
                              "node (conv) is invalid.") is None
