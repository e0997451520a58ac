"""Hostile ONNX models: what a downloaded model may contain to turn the graph tools against their user.

Each builder makes the smallest model that shows one attack or one malformation (onnx.helper only, no torch);
tests/graph/test_hostile.py runs the tools on them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL
LOCAL = "local.functions"


def _model(nodes, inputs, outputs, initializers=(), functions=(), opset: int = 17, ir_version: int = 8):
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    if functions:
        opsets.append(helper.make_opsetid(LOCAL, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version, functions=list(functions))


def where_conflict(doc_string: str = "", node_name: str = "Where_223") -> onnx.ModelProto:
    """Where(cond, float x, float16 y): one repairable type-binding conflict, its doc string chosen by the caller."""
    node = helper.make_node("Where", ["cond", "x", "y"], ["w"], name=node_name, doc_string=doc_string)
    inputs = [
        helper.make_tensor_value_info("cond", BOOL, [2]),
        helper.make_tensor_value_info("x", F32, [2]),
        helper.make_tensor_value_info("y", F16, [2]),
    ]
    return _model([node], inputs, [helper.make_tensor_value_info("w", F32, [2])])


def with_weight(folder: Path, location: str, length: int | None = None) -> Path:
    """A Where conflict whose float operand is a weight stored externally at `location` (relative to `folder`);
    `length` overrides the recorded byte count. Returns the model's path; the caller makes the data file."""
    weight = numpy_helper.from_array(np.ones(2, dtype=np.float32), "x")
    model = where_conflict()
    model.graph.input.remove(next(v for v in model.graph.input if v.name == "x"))
    onnx.external_data_helper.set_external_data(weight, location=location, offset=0, length=length or 8)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    model.graph.initializer.append(weight)  # a copy: appended once complete
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


def recursive_function() -> onnx.ModelProto:
    """A model-local function that calls itself (onnx's inliner and shape inference recurse until they crash)."""
    body = [helper.make_node("loop", ["a"], ["b"], domain=LOCAL)]
    function = helper.make_function(LOCAL, "loop", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    node = helper.make_node("loop", ["x"], ["y"], name="call", domain=LOCAL)
    return _model(
        [node], [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])],
        functions=[function],
    )  # fmt: skip


def mutually_recursive_functions() -> onnx.ModelProto:
    """f calls g, g calls f: recursion through two functions."""
    opsets = [helper.make_opsetid("", 17)]
    f = helper.make_function(LOCAL, "f", ["a"], ["b"], [helper.make_node("g", ["a"], ["b"], domain=LOCAL)], opsets)
    g = helper.make_function(LOCAL, "g", ["a"], ["b"], [helper.make_node("f", ["a"], ["b"], domain=LOCAL)], opsets)
    node = helper.make_node("f", ["x"], ["y"], name="call", domain=LOCAL)
    return _model(
        [node], [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])],
        functions=[f, g],
    )  # fmt: skip


def doubling_functions(depth: int = 25) -> onnx.ModelProto:
    """f0 calls f1 twice, f1 calls f2 twice, ...: inlined, 2**depth nodes from a model of 2 * depth."""
    opsets = [helper.make_opsetid("", 17)]
    functions = [
        helper.make_function(
            LOCAL, f"f{k}", ["a"], ["b"],
            [helper.make_node(f"f{k + 1}", ["a"], ["t"], domain=LOCAL),
             helper.make_node(f"f{k + 1}", ["t"], ["b"], domain=LOCAL)],
            opsets,
        )
        for k in range(depth)
    ]  # fmt: skip
    functions.append(
        helper.make_function(LOCAL, f"f{depth}", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])], opsets)
    )
    node = helper.make_node("f0", ["x"], ["y"], name="call", domain=LOCAL)
    return _model(
        [node], [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])],
        functions=functions,
    )  # fmt: skip


def slow_to_load(matmuls: int = 200, size: int = 2048) -> onnx.ModelProto:
    """A graph ONNX Runtime takes minutes to create a session for, in every release here, beside a Where conflict
    that `repair` can fix (so that repair goes on to ask ONNX Runtime). Session creation folds constants: a chain of
    `matmuls` MatMuls of a `size` x `size` ConstantOfShape is computed then, 2 * size**3 flops each (about 3.4
    TFLOP at the defaults), from a file of a few hundred bytes. Memory stays bounded by the time limit that kills
    it (16 MB per folded MatMul at the default size). onnxruntime 1.19's session creation was also exponential in
    nested Ifs; 1.32's is not, so nested Ifs no longer serve (NOTES)."""
    fill = helper.make_tensor("fill", F32, [1], [1e-3])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="constant", value=fill)]
    previous = "c"
    for k in range(matmuls):
        nodes.append(helper.make_node("MatMul", [previous, "c"], [f"m{k}"], name=f"MatMul_{k}"))
        previous = f"m{k}"
    nodes.append(helper.make_node("ReduceSum", [previous], ["folded"], name="reduce", keepdims=0))
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [size, size])
    model = where_conflict()
    model.graph.node.extend(nodes)
    model.graph.initializer.append(shape)
    model.graph.output.append(helper.make_tensor_value_info("folded", F32, []))
    return model


def without_where(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` without where_conflict's Where node and output, so that what is left is what is judged."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.node.remove(next(n for n in copy.graph.node if n.op_type == "Where"))
    copy.graph.output.remove(next(o for o in copy.graph.output if o.name == "w"))
    return copy


def unknown_element_type() -> onnx.ModelProto:
    """An input of element type 999, which no ONNX release defines."""
    node = helper.make_node("Neg", ["x"], ["y"], name="neg")
    model = _model(
        [node], [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])]
    )
    model.graph.input[0].type.tensor_type.elem_type = 999
    return model


def huge_opset() -> onnx.ModelProto:
    """The Where conflict at an opset version of 2**62."""
    model = where_conflict()
    model.opset_import[0].version = 2**62
    return model


def future_opset() -> onnx.ModelProto:
    """The Where conflict at an opset one past the newest the installed onnx knows."""
    model = where_conflict()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    return model


def cycle(self_loop: bool = False) -> onnx.ModelProto:
    """A -> B -> A (or one node consuming its own output): no topological order exists."""
    if self_loop:
        nodes = [helper.make_node("Add", ["x", "a"], ["a"], name="A")]
        out = "a"
    else:
        nodes = [
            helper.make_node("Add", ["x", "b"], ["a"], name="A"),
            helper.make_node("Neg", ["a"], ["b"], name="B"),
        ]
        out = "b"
    return _model(nodes, [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info(out, F32, [2])])


def unsorted_but_acyclic() -> onnx.ModelProto:
    """The control for `cycle`: nodes listed out of order, but a topological order exists."""
    nodes = [
        helper.make_node("Neg", ["a"], ["b"], name="B"),
        helper.make_node("Abs", ["x"], ["a"], name="A"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("b", F32, [2])])


def duplicate_names() -> onnx.ModelProto:
    """Two different nodes both called `twin`, with a type conflict between them."""
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], name="twin", to=F16),
        helper.make_node("Add", ["x", "h"], ["y"], name="twin"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])])


def symlink(link: Path, target: Path) -> Path:
    """`link` -> `target` (a fresh symlink)."""
    if link.exists() or link.is_symlink():
        link.unlink()
    os.symlink(target, link)
    return link
