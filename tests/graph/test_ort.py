"""ONNX Runtime's verdict: its type-binding message parsed, every message classified, real models judged."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper

from where223.graph import ort as parser
from where223.graph.ort import (
    ORT_TIMEOUT_S,
    DeclaredMismatch,
    OrtJudgement,
    OrtVerdict,
    TypeBinding,
    classify,
    first_message_line,
    judge,
    judge_message,
    load_session,
    message_node,
    parse_declared_mismatch,
    refused_node,
    refused_operator,
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


DECLARED = ("Type Error: Type (tensor(float16)) of output arg (y) of node (Cast_1) does not match expected type "
            "(tensor(float)).")


def test_a_declared_types_refusal_names_its_holder_only_inside_a_subgraph():
    nested = f"Node (If_1) Op (If) [TypeInferenceError] Graph attribute inferencing failed: {DECLARED}"
    assert parse_declared_mismatch(nested) == DeclaredMismatch("Cast_1", "y", "tensor(float16)", "tensor(float)",
                                                               "If_1")
    # controls: at the top level no holder, nor from a graph resolution's prefix that is not a subgraph's
    assert parse_declared_mismatch(DECLARED).holder is None
    assert parse_declared_mismatch(f"Node (Add_1) Op (Add) [ShapeInferenceError] {DECLARED}").holder is None
    assert parse_declared_mismatch("Type Error: something else") is None and parse_declared_mismatch(None) is None


def test_nested_shape_inference_errors_are_about_their_outermost_node():
    message = ("[ShapeInferenceError] (op_type:If, node name: If_1): [ShapeInferenceError] (op_type:Add, node name: "
               "Add_2): B has inconsistent type tensor(float16)")
    assert message_node(message) == "If_1"


def test_parsed_refusals_are_values():
    """A parsed binding, mismatch or judgement is shared by the records that quote it: hashable and immutable."""
    judgement, mismatch = judge_message(SEED), parse_declared_mismatch(DECLARED)
    binding = judgement.type_binding
    assert len({binding, judge_message(SEED).type_binding}) == 1
    assert len({mismatch, parse_declared_mismatch(DECLARED)}) == 1
    assert len({judgement, judge_message(SEED)}) == 1
    for value in (binding, mismatch, judgement):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.message = "other"


def test_the_first_node_a_refusal_quotes_is_the_one_refused():
    message = "Could not find an implementation for Add(14) node with name 'first' in node (second)"
    assert refused_node(message) == "first" and message_node(message) == "first"


def test_the_parser_loads_neither_onnx_nor_onnxruntime():
    """Record readers and the version-matrix cells name verdicts without loading onnx (the module's promise)."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, where223.graph.ort; "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'onnx', 'onnxruntime', 'torch', 'numpy'}))"],
        capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert loaded == "[]"


def test_the_documented_time_limit_is_ort_timeout_s():
    from where223.pipeline.paths import ROOT

    stated = re.findall(r"--ort-timeout\b.*?default (\d+)", (ROOT / "README.md").read_text())
    assert stated and {float(n) for n in stated} == {ORT_TIMEOUT_S}


@pytest.mark.parametrize(("message", "operator"), [
    (INVALID_TYPE, "Add"),  # the type check's wording
    (MISSING_KERNEL, "Gemm"),  # a missing kernel's
    (SEED, None),  # a binding: parse_type_binding's, not this parser's
    (None, None),
])
def test_the_operator_a_refusal_names(message, operator):
    assert refused_operator(message) == operator


def test_graph_resolutions_parser_takes_no_message():
    assert resolution_refusal(None) is None


def test_only_where_s_t_bound_twice_is_the_seed_s_error():
    other = SEED.replace("Type parameter (T)", "Type parameter (B)")
    assert judge_message(SEED).verdict == OrtVerdict.WHERE_TYPE_ERROR
    assert judge_message(other).verdict == OrtVerdict.TYPE_ERROR and not judge_message(other).type_binding.is_where


@pytest.mark.parametrize("message", [
    "[ShapeInferenceError] Mismatched tensor element type: inferred=float16 declared=float",  # an If's branches
    "Node (If_1) Op (If) [TypeInferenceError] Graph attribute inferencing failed: Tensor element type mismatch. "
    "10 != 1",  # a subgraph's declared input given another type
])
def test_an_if_s_branches_or_inputs_typed_apart_are_type_refusals(message):
    assert classify(message) == OrtVerdict.TYPE_ERROR
    assert classify(message.replace("element type", "shape")) == OrtVerdict.OTHER_ERROR  # control


def test_the_first_line_of_a_message_without_onnxruntime_s_prefixes():
    assert first_message_line(f"\n  {INVALID_TYPE}\nsecond line") == (
        "This is an invalid model. Type Error: Type 'tensor(complex128)' of input parameter (cast_out) of operator "
        "(Add) in node (Add_1) is invalid.")
    assert first_message_line("Type Error: as it is") == "Type Error: as it is"  # control: no prefix to take


def test_the_anatomy_patterns_read_their_parts():
    assert parser.INVALID_TYPE.search(INVALID_TYPE).group("type", "io", "op") == ("complex128", "input", "Add")
    assert parser.UNSUPPORTED.search(UNSUPPORTED_TYPE)["type"] == "bfloat16"
    assert parser.NO_KERNEL.search(MISSING_KERNEL)["op"] == "Gemm(13)"
