"""Value types from every source: inputs, initializers, constants, inference, subgraphs, propagation."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from where223.graph.types import model_types


def test_every_source_is_read(tmp_path):
    weight = numpy_helper.from_array(np.zeros((4, 4), np.float16), "weight")
    nodes = [
        helper.make_node("Constant", [], ["scale"], name="c0", value_float=2.0),
        helper.make_node(
            "Constant", [], ["mask"], name="c1", value=helper.make_tensor("m", TensorProto.BOOL, [1], [1])
        ),
        helper.make_node("MatMul", ["x", "weight"], ["mm"], name="mm"),
        helper.make_node("Cast", ["mm"], ["mm32"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mm32", "scale"], ["scaled"], name="mul"),
        helper.make_node("Where", ["mask", "scaled", "scaled"], ["out"], name="where"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])],
        initializer=[weight],
        value_info=[helper.make_tensor_value_info("mm", TensorProto.FLOAT16, [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    (tmp_path / "m.onnx.data").unlink()  # external weights are never read: the header gives the type
    scope = model_types(path).scopes[""]
    assert {
        name: scope.type_of(name) for name in ("x", "weight", "scale", "mask", "mm", "mm32", "scaled", "out")
    } == {
        "x": "tensor(float16)",
        "weight": "tensor(float16)",
        "scale": "tensor(float)",
        "mask": "tensor(bool)",
        "mm": "tensor(float16)",
        "mm32": "tensor(float)",
        "scaled": "tensor(float)",
        "out": "tensor(float)",
    }
    assert {name: scope.sources[name] for name in ("x", "weight", "scale", "mm", "mm32", "out")} == {
        "x": "input",
        "weight": "initializer",
        "scale": "constant",
        "mm": "value_info",
        "mm32": "inferred",
        "out": "output",
    }


def test_subgraphs_see_outer_scope(repairable_model):
    types = model_types(repairable_model)
    assert list(types.scopes) == ["", "If_3/else_branch", "If_3/then_branch"]
    then = types.scopes["If_3/then_branch"]
    assert then.type_of("y") == types.type_of("y", "If_3/then_branch") == "tensor(float16)"  # outer scope
    assert then.type_of("then_out") == "tensor(float)"
    assert "then_out" not in types.scopes[""].types
    assert types.untyped() == []


def test_inference_gaps_are_filled_from_the_schema_binding():
    nodes = [
        # shapes [2] and [3] do not broadcast: onnx's inference gives up on this node
        helper.make_node("Add", ["a", "b"], ["sum"], name="add"),
        helper.make_node("Relu", ["sum"], ["relu"], name="relu"),
        helper.make_node("Custom", ["a"], ["custom"], name="custom", domain="example.custom"),
        helper.make_node("Neg", ["custom"], ["neg"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT16, [2]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT16, [3]),
        ],
        [helper.make_tensor_value_info("neg", TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)]
    )
    types = model_types(model)
    scope = types.scopes[""]
    assert (scope.type_of("sum"), scope.sources["sum"]) == ("tensor(float16)", "propagated")
    assert scope.type_of("relu") == "tensor(float16)"
    assert types.untyped() == [("", "custom"), ("", "neg")]
