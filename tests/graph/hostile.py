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


def huge_opset(version: int = 2**62, where: str = "main") -> onnx.ModelProto:
    """The Where conflict with an opset `version` (2**31 and past: no C++ int) for ai.onnx (`where="main"`), for a
    domain no node uses ("domain"), or for ai.onnx in the opset imports of a model-local function it calls
    ("function")."""
    model = where_conflict()
    if where == "main":
        model.opset_import[0].version = version
    elif where == "domain":
        model.opset_import.append(helper.make_opsetid("custom.domain", version))
    else:
        body = [helper.make_node("Identity", ["a"], ["b"])]
        model.functions.append(helper.make_function(LOCAL, "f", ["a"], ["b"], body, [helper.make_opsetid("", version)]))
        model.opset_import.append(helper.make_opsetid(LOCAL, 1))
        model.graph.node.insert(0, helper.make_node("f", ["x"], ["fx"], name="call", domain=LOCAL))
        model.graph.node[1].input[1] = "fx"
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


# --- external data in every place a tensor may lie ------------------------------------------------------------

WEIGHTS = np.array([7.0, 9.0], dtype=np.float32).tobytes() + np.array([0, 1], dtype=np.int64).tobytes()  # 24 bytes


def external(location: str, dtype: type = np.float32, offset: int = 0) -> TensorProto:
    """A tensor `k` of two elements whose data lies in the file at `location` (bytes `offset`.. of `WEIGHTS`)."""
    tensor = numpy_helper.from_array(np.zeros(2, dtype=dtype), "k")
    onnx.external_data_helper.set_external_data(tensor, location=location, offset=offset, length=2 * dtype().itemsize)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    return tensor


def _sparse(location: str, part: str) -> onnx.SparseTensorProto:
    """A sparse float [2] tensor whose `part` (values or indices) is `external`."""
    values = external(location) if part == "values" else numpy_helper.from_array(np.ones(2, np.float32), "k")
    indices = external(location, np.int64, 8) if part == "indices" else numpy_helper.from_array(np.arange(2), "i")
    return helper.make_sparse_tensor(values, indices, [2])


def _calling(body: list[onnx.NodeProto], **function: object) -> onnx.ModelProto:
    """y = local.f(x): a model-local function whose body (reading `a`, writing `b`) is `body`."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    f = helper.make_function(LOCAL, "f", ["a"], ["b"], body, opsets, **function)
    node = helper.make_node("f", ["x"], ["y"], name="call", domain=LOCAL)
    model = _model(
        [node], [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])],
        functions=[f],
    )  # fmt: skip
    model.opset_import.append(helper.make_opsetid("custom", 1))
    return model


def _plus_constant(**value: object) -> list[onnx.NodeProto]:
    return [helper.make_node("Constant", [], ["c"], **value), helper.make_node("Add", ["a", "c"], ["b"])]


def _in_if(branch_body: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`b = a + (if a[0] > 0: branch's c else: 0)`: `branch_body` (writing `c`) in an If's then-branch."""
    out = [helper.make_tensor_value_info("c", F32, [2])]
    then = helper.make_graph(branch_body, "then", [], out)
    zero = helper.make_tensor("z", F32, [2], [0.0, 0.0])
    other = helper.make_graph([helper.make_node("Constant", [], ["c"], value=zero)], "else", [], out)
    return [
        helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", F32, [], [0.0])),
        helper.make_node("Greater", ["s", "zero"], ["p"]),
        helper.make_node("If", ["p"], ["c"], then_branch=then, else_branch=other),
        helper.make_node("Add", ["a", "c"], ["b"]),
    ]


def _custom(attribute: str, value: object) -> list[onnx.NodeProto]:
    """A node of a custom domain (no schema) holding `value` in `attribute`, then b = a."""
    node = helper.make_node("Opaque", ["a"], ["t"], domain="custom")
    node.attribute.append(helper.make_attribute(attribute, value))
    return [node, helper.make_node("Identity", ["a"], ["b"])]


def _function_default(location: str) -> onnx.ModelProto:
    """A function whose Constant takes its value from the function's attribute `k`, whose default is external."""
    reference = onnx.AttributeProto(name="value", type=onnx.AttributeProto.TENSOR, ref_attr_name="k")
    constant = helper.make_node("Constant", [], ["c"])
    constant.attribute.append(reference)
    default = helper.make_attribute("k", external(location))
    return _calling([constant, helper.make_node("Add", ["a", "c"], ["b"])], attribute_protos=[default])


def _main(nodes: list[onnx.NodeProto], initializers=(), sparse=()) -> onnx.ModelProto:
    """y = nodes(x) in the main graph (`a` read, `b` written, as in a function body)."""
    model = _model(
        [helper.make_node("Identity", ["x"], ["a"]), *nodes, helper.make_node("Identity", ["b"], ["y"])],
        [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, [2])],
        initializers,
    )  # fmt: skip
    model.graph.sparse_initializer.extend(sparse)
    return model


# every place a tensor may lie, each with its data at a location the caller names (the tensor is called `k`)
EXTERNAL_PLACES = {
    "initializer": lambda at: _main([helper.make_node("Add", ["a", "k"], ["b"])], [external(at)]),
    "sparse initializer values": lambda at: _main([helper.make_node("Add", ["a", "k"], ["b"])],
                                                  sparse=[_sparse(at, "values")]),
    "sparse initializer indices": lambda at: _main([helper.make_node("Add", ["a", "k"], ["b"])],
                                                   sparse=[_sparse(at, "indices")]),
    "Constant sparse_value": lambda at: _main(_plus_constant(sparse_value=_sparse(at, "values"))),
    "subgraph Constant": lambda at: _main(_in_if(_plus_constant(value=external(at))[:1])),
    "function Constant": lambda at: _calling(_plus_constant(value=external(at))),
    "function TENSORS attribute": lambda at: _calling(_custom("blobs", [external(at)])),
    "function SPARSE_TENSOR attribute": lambda at: _calling(_custom("blob", _sparse(at, "values"))),
    "function SPARSE_TENSORS attribute": lambda at: _calling(_custom("blobs", [_sparse(at, "indices")])),
    "function's subgraph Constant": lambda at: _calling(_in_if(_plus_constant(value=external(at))[:1])),
    "function attribute default": _function_default,
}  # fmt: skip


def function_constant(location: str) -> onnx.ModelProto:
    """y = x + local.f's Constant, whose value is external at `location` (ONNX Runtime reads it, onnx 1.16's list of
    a model's tensors does not have it)."""
    return EXTERNAL_PLACES["function Constant"](location)


def saved_with_weights(folder: Path, model: onnx.ModelProto, data: bytes = WEIGHTS) -> Path:
    """`model` saved as FOLDER/model.onnx with FOLDER/weights.bin holding `data`; the model's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "weights.bin").write_bytes(data)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def wide_node(inputs: int = 100_000) -> onnx.ModelProto:
    """One Sum node `wide` with `inputs` graph inputs: a neighbourhood of as many edges."""
    names = [f"x{k}" for k in range(inputs)]
    graph = helper.make_graph([helper.make_node("Sum", names, ["y"], name="wide")], "wide", [],
                              [helper.make_tensor_value_info("y", F32, [2])])  # fmt: skip
    info = helper.make_tensor_value_info("x", F32, [2])
    for name in names:
        value = graph.input.add()
        value.CopyFrom(info)
        value.name = name
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
