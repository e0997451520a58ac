"""Type names and their conversions."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from where223.graph.dtypes import elem_type_name, elem_type_of, short_type, tensor_type_string, type_string


def test_type_names():
    assert elem_type_name(TensorProto.FLOAT) == "float"
    assert elem_type_name(TensorProto.FLOAT16) == "float16"
    assert elem_type_name(TensorProto.BFLOAT16) == "bfloat16"
    assert type_string(helper.make_tensor_type_proto(TensorProto.BFLOAT16, [2])) == "tensor(bfloat16)"
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, None))
    assert type_string(seq) == "seq(tensor(int64))"
    assert type_string(helper.make_tensor_type_proto(TensorProto.UNDEFINED, None)) is None
    assert short_type("tensor(float16)") == "float16" and short_type("seq(tensor(float))") == "seq(tensor(float))"
    assert tensor_type_string("float16") == tensor_type_string("tensor(float16)") == "tensor(float16)"
    with pytest.raises(ValueError, match="unknown ONNX element type 'half'"):
        tensor_type_string("half")


def test_elem_type_round_trip():
    assert elem_type_of("tensor(bfloat16)") == TensorProto.BFLOAT16
    assert elem_type_of("float16") == TensorProto.FLOAT16
    for elem in (TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL):
        assert elem_type_of(f"tensor({elem_type_name(elem)})") == elem
    with pytest.raises(ValueError, match="unknown ONNX element type"):
        elem_type_of("seq(tensor(float))")
