"""The guards' walks over what `nodes.read_graphs` read (issue 39.7): the node names, attribute names and the nodes
holding an attribute outside PLAIN_ATTRIBUTES, read in the one walk over each graph's nodes, and the external-data
walk that visits only those nodes finds every tensor the full walk finds."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from tests.graph import hostile
from where223.graph import guards
from where223.graph.nodes import read_graphs

F32 = TensorProto.FLOAT


def _if_model() -> onnx.ModelProto:
    """A main graph with a plain Cast, a Constant holding a tensor, an If whose then-branch holds another, and a
    custom node whose TENSOR attribute also holds a graph (read by its `g`, as a reader going by what is set would)."""
    hidden = helper.make_graph([helper.make_node("Constant", [], ["h"], value=hostile.external("hidden.bin"))],
                               "hidden", [], [helper.make_tensor_value_info("h", F32, [2])])
    odd = helper.make_node("Opaque", ["a"], ["t"], domain="custom")
    odd.attribute.append(onnx.AttributeProto(name="blob", type=onnx.AttributeProto.TENSOR, g=hidden))
    nodes = [helper.make_node("Cast", ["x"], ["x2"], name="cast", to=F32), helper.make_node("Identity", ["x2"], ["a"]),
             odd, *hostile._in_if(hostile._plus_constant(value=hostile.external(
                 "branch.bin"))[:1]), helper.make_node("Identity", ["b"], ["y"])]  # fmt: skip
    model = hostile._model(nodes, [helper.make_tensor_value_info("x", F32, [2])],
                           [helper.make_tensor_value_info("y", F32, [2])], [hostile.external("init.bin")])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    return model


def test_read_graphs_reads_names_attributes_and_the_nodes_that_may_hold_tensors():
    graphs = read_graphs(_if_model().graph)
    main = graphs[0]
    ops = [node.op_type for node in main.nodes]
    assert main.names == [node.name for node in main.graph.node]
    assert main.attribute_names == [a.name for node in main.graph.node for a in node.attribute]
    # the Constants and the If hold tensors or graphs; the Cast (INT `to`) and the ReduceSum (INT `keepdims`) do not
    assert [ops[i] for i in main.holding] == ["Opaque", "Constant", "If"]
    if_index = ops.index("If")
    assert [body.attribute for body in main.nodes[if_index].bodies] == ["else_branch", "then_branch"]  # as stored
    assert [read.path for read in graphs] == ["", "<If #6>/else_branch", "<If #6>/then_branch"]
    assert all(read.holding == [0] for read in graphs[1:])  # each branch's Constant


def test_control_a_graph_of_plain_attributes_holds_nothing():
    values = [helper.make_tensor_value_info(name, F32, [2]) for name in ("x", "y")]
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=F32)], "g", values[:1], values[1:])
    (read,) = read_graphs(graph)
    assert read.holding == [] and read.attribute_names == ["to"] and read.names == [""]


def test_the_walk_over_read_graphs_finds_what_the_full_walk_finds():
    model = _if_model()
    full = [(where, tensor.name) for where, tensor in guards.model_tensors(model)]
    assert [(where, tensor.name) for where, tensor in guards.model_tensors(model, read_graphs(model.graph))] == full
    external = [where for where, _ in guards.external_tensors(model, read_graphs(model.graph))]
    assert external == [where for where, t in guards.model_tensors(model) if t.data_location == TensorProto.EXTERNAL]
    assert any("subgraph <Opaque #2>/blob" in where for where in external)  # the graph beside a TENSOR declaration
    assert len(external) == 3


@pytest.mark.parametrize("location", ["hidden.bin", "branch.bin", "init.bin"])
def test_a_tensor_outside_the_folder_is_refused_with_the_graphs_given(location, tmp_path):
    model = _if_model()
    for _, tensor in guards.model_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value == location:
                entry.value = f"../{location}"
    with pytest.raises(guards.StructureError, match=f"'../{location}' resolves outside the model's folder"):
        guards.check_external_locations(model, tmp_path, read_graphs(model.graph))
    control = _if_model()  # every location inside the folder
    guards.check_external_locations(control, tmp_path, read_graphs(control.graph))


def _plain() -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", F32, [1])],
        [helper.make_tensor_value_info("y", F32, [1])]))


def _plain_if() -> onnx.ModelProto:
    """An If whose branches hold no tensor: of its graphs only the main graph's read holds a node (the If)."""
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", F32, [1])])
    return helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F32, [1])],
        [helper.make_tensor_value_info("y", F32, [1])]))


def _with(change) -> onnx.ModelProto:
    model = _plain()
    change(model)
    return model


def test_the_quick_test_for_external_data_says_yes_wherever_the_walk_has_a_tensor_to_check():
    plain = _plain()
    assert not guards.may_hold_external(plain, read_graphs(plain.graph))
    inline = _with(lambda m: m.graph.initializer.append(helper.make_tensor("w", F32, [1], [1.0])))
    assert not guards.may_hold_external(inline, read_graphs(inline.graph))  # the control: inline keeps nothing out
    cases = {
        "external initializer": _with(lambda m: m.graph.initializer.append(hostile.external("w.bin"))),
        "sparse initializer": _with(lambda m: m.graph.sparse_initializer.append(helper.make_sparse_tensor(
            helper.make_tensor("v", F32, [1], [1.0]), helper.make_tensor("i", TensorProto.INT64, [1], [0]), [2]))),
        "function": _with(lambda m: m.functions.append(helper.make_function("local", "f", ["a"], ["b"], [
            helper.make_node("Identity", ["a"], ["b"])], [helper.make_opsetid("", 17)]))),
        "training graph": _with(lambda m: m.training_info.add()),
        "tensor or graph attribute": _if_model(),
        "graph attribute alone": _plain_if(),  # only the main graph's read says it: its branches hold nothing
    }
    for what, model in cases.items():
        graphs = read_graphs(model.graph)
        assert guards.may_hold_external(model, graphs), what
        assert guards.may_hold_external(model, graphs[::-1]), what  # the main graph's read found wherever it is
        assert guards.may_hold_external(model, []), what  # graphs not read: the walk decides
    assert guards.may_hold_external(plain, [])


def test_the_external_walk_takes_its_graphs_as_any_iterable(tmp_path):
    outside = _with(lambda m: m.graph.initializer.append(hostile.external("../w.bin")))
    for graphs in (read_graphs(outside.graph), iter(read_graphs(outside.graph)), tuple(read_graphs(outside.graph))):
        with pytest.raises(guards.StructureError, match="outside"):
            guards.check_external_locations(outside, tmp_path, graphs)
    inside = _with(lambda m: m.graph.initializer.append(hostile.external("w.bin")))  # the control: a file inside
    guards.check_external_locations(inside, tmp_path, iter(read_graphs(inside.graph)))
