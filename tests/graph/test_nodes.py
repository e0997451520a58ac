"""nodes.read_graphs: a graph of a few nodes (read by a plain loop) and one of many (read by C iterators) give the
same reading; each graph's values are read with it."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from where223.graph import nodes


def _model(count: int) -> onnx.ModelProto:
    """`count` nodes: Relu, a Constant holding a tensor, an If holding two graphs, a node with plain attributes."""
    branch = helper.make_graph([helper.make_node("Identity", ["a"], ["b"], name="inner")], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    made = []
    for k in range(count):
        kind = k % 4
        if kind == 0:
            made.append(helper.make_node("Relu", ["x"], [f"r{k}"], name=f"relu{k}"))
        elif kind == 1:
            made.append(helper.make_node("Constant", [], [f"c{k}"], name=f"const{k}",
                                         value=helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0])))
        elif kind == 2:
            made.append(helper.make_node("If", ["cond"], [f"i{k}"], name=f"if{k}", then_branch=branch,
                                         else_branch=branch))
        else:
            made.append(helper.make_node("Softmax", ["x"], [f"s{k}"], name=f"soft{k}", axis=-1))
    graph = helper.make_graph(made, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                                          helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("r0", TensorProto.FLOAT, [1])],
                              initializer=[helper.make_tensor("w", TensorProto.FLOAT, [1], [2.0])],
                              value_info=[helper.make_tensor_value_info("s3", TensorProto.FLOAT, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reading(graphs: list[nodes.ReadGraph]) -> list[tuple]:
    return [(read.path, [(n.op_type, n.domain, n.inputs, n.outputs, [b.attribute for b in n.bodies])
                         for n in read.nodes], read.names, read.attribute_names, read.holding,
             [v.name for v in read.inputs], [v.name for v in read.outputs], [v.name for v in read.value_info],
             [t.name for t in read.initializers]) for read in graphs]


@pytest.mark.parametrize("count", [1, 4, nodes._SMALL_GRAPH, nodes._SMALL_GRAPH + 1, 40])
def test_the_plain_loop_and_the_c_iterators_read_a_graph_alike(count, monkeypatch):
    model = _model(count)
    small = _reading(nodes.read_graphs(model.graph))
    monkeypatch.setattr(nodes, "_SMALL_GRAPH", -1)  # every graph read by the C iterators
    assert _reading(nodes.read_graphs(model.graph)) == small
    monkeypatch.setattr(nodes, "_SMALL_GRAPH", 10**9)  # every graph read by the plain loop
    assert _reading(nodes.read_graphs(model.graph)) == small
    main = small[0]
    assert main[5:] == (["x", "cond"], ["r0"], ["s3"], ["w"])
    holding = [k for k in range(count) if k % 4 in (1, 2)]  # the Constant's tensor, the If's graphs
    assert main[4] == holding
    assert len(small) == 1 + 2 * len([k for k in range(count) if k % 4 == 2])  # each If's two branches
