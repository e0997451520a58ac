"""onnx's shape inference of a model for `where223.graph.types`.

`infer` hands a model to onnx's own inference (non-strict: gaps allowed) through the binding
`onnx.shape_inference.infer_shapes` calls, minus its full re-parse, on a copy made for it (`_inference_copy`); with
`shapes=False` the copy lets it infer element types only (the docstring of `where223.graph.types`).
`InferredTypes` reads its result back per graph, each type left serialized until it is needed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import onnx
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from onnx.onnx_cpp2py_export import shape_inference as c_shape_inference

from where223.graph.loading import onnx_failure
from where223.graph.nodes import subgraph_path
from where223.graph.schema import opset_imports

_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS
# initializers with at most this many elements keep their data for shape inference; larger ones are
# handed to inference as typed graph inputs, so their data is never copied or needed
_INFERENCE_DATA_LIMIT = 1024
# a model whose inline initializers hold at most this many elements in all is copied whole for inference (weights
# too, then dropped); a larger one node list by node list, so that its weights are never held twice
_COPY_ELEMENTS_LIMIT = 2**24


class Initializer(NamedTuple):
    """The header of an initializer: all that typing reads of it (its data never)."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    external: bool  # its data lies in an external file


def initializers(tensors: Iterable[onnx.TensorProto]) -> list[Initializer]:
    """The headers of a graph's initializers (`graph.initializer`), each read once (reading a field builds a Python
    object)."""
    external = onnx.TensorProto.EXTERNAL
    return [
        Initializer(init.name, init.data_type, tuple(init.dims), init.data_location == external)
        for init in tensors
    ]


def _inference_copy(
    model: onnx.ModelProto, headers: list[Initializer], shapes: bool = True
) -> onnx.ModelProto | None:
    """A copy for shape inference in which large or external initializers become typed inputs; without `shapes`,
    every initializer becomes an input of its element type alone, and the graph's inputs lose their shapes. None
    when the model can go as it is: with shapes, every initializer small and inline."""
    elements = [math.prod(init.dims) for init in headers]
    keep = [shapes and not init.external and n <= _INFERENCE_DATA_LIMIT
            for init, n in zip(headers, elements, strict=True)]  # fmt: skip
    if all(keep):
        return None
    source = model.graph
    kept = [source.initializer[index] for index, flag in enumerate(keep) if flag]
    if sum(n for init, n in zip(headers, elements, strict=True) if not init.external) <= _COPY_ELEMENTS_LIMIT:
        copy = onnx.ModelProto()  # one copy in C, weights and all, then the initializers taken out: on a graph
        copy.CopyFrom(model)  # of many nodes far faster than copying the nodes one by one
        del copy.graph.initializer[:]
    else:
        copy = onnx.ModelProto(ir_version=model.ir_version)
        copy.opset_import.extend(model.opset_import)
        copy.functions.extend(model.functions)
        copy.graph.name = source.name
        copy.graph.node.extend(source.node)
        copy.graph.input.extend(source.input)
        copy.graph.output.extend(source.output)
        copy.graph.value_info.extend(source.value_info)
        copy.graph.sparse_initializer.extend(source.sparse_initializer)
    graph = copy.graph
    graph.initializer.extend(kept)
    if not shapes:
        for value in graph.input:
            if value.type.HasField("tensor_type"):
                value.type.tensor_type.ClearField("shape")
    declared = {v.name for v in graph.input}
    for init, in_graph in zip(headers, keep, strict=True):
        if not in_graph and init.name not in declared:
            value = graph.input.add(name=init.name)
            value.type.tensor_type.elem_type = init.data_type
            if shapes:
                value.type.tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in init.dims)
    return copy


@functools.lru_cache(maxsize=2)
def _inferred_values_reader(nodes: bool = False) -> type:
    """A message class that reads of a serialized ModelProto only its main graph's output and value_info, each as
    its name and its type's bytes: nodes and initializers are skipped unparsed, no TypeProto is built. With `nodes`,
    every node's name, op type and attributes too, each attribute's name, type and graphs, read the same way: every
    subgraph's values, no deeper than the model's graphs nest (a TypeProto would add levels protobuf may refuse)."""
    string, message, raw, int32 = (
        descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    )
    labels = descriptor_pb2.FieldDescriptorProto
    optional, repeated = labels.LABEL_OPTIONAL, labels.LABEL_REPEATED
    package = "where223_subgraph_types" if nodes else "where223_types"
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package)
    model = file.message_type.add(name="Model")
    model.field.add(name="graph", number=7, type=message, type_name=f".{package}.Graph", label=optional)
    graph = file.message_type.add(name="Graph")
    graph.field.add(name="output", number=12, type=message, type_name=f".{package}.Value", label=repeated)
    graph.field.add(name="value_info", number=13, type=message, type_name=f".{package}.Value", label=repeated)
    value = file.message_type.add(name="Value")  # ValueInfoProto's name and type, the type left serialized
    value.field.add(name="name", number=1, type=string, label=optional)
    value.field.add(name="type", number=2, type=raw, label=optional)
    if nodes:  # NodeProto's name, op_type and attributes; AttributeProto's name, type, g and graphs
        graph.field.add(name="node", number=1, type=message, type_name=f".{package}.Node", label=repeated)
        node = file.message_type.add(name="Node")
        node.field.add(name="name", number=3, type=string, label=optional)
        node.field.add(name="op_type", number=4, type=string, label=optional)
        node.field.add(name="attribute", number=5, type=message, type_name=f".{package}.Attribute", label=repeated)
        attribute = file.message_type.add(name="Attribute")
        attribute.field.add(name="name", number=1, type=string, label=optional)
        attribute.field.add(name="type", number=20, type=int32, label=optional)
        attribute.field.add(name="g", number=6, type=message, type_name=f".{package}.Graph", label=optional)
        attribute.field.add(name="graphs", number=11, type=message, type_name=f".{package}.Graph", label=repeated)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    # GetMessageClass since protobuf 4.21; MessageFactory.GetPrototype before (removed in 5.x)
    message_class = getattr(message_factory, "GetMessageClass", None)
    if message_class is None:
        message_class = message_factory.MessageFactory(pool).GetPrototype
    return message_class(pool.FindMessageTypeByName(f"{package}.Model"))


def _subgraph_values(graph: Any) -> dict[str, dict[str, bytes]]:
    """Subgraph path -> value name -> its type's bytes, for every graph of `graph` (read by
    `_inferred_values_reader(nodes=True)`), in `nodes.read_graphs`'s order (depth first, without recursion; of two
    subgraphs that share a path, the later)."""
    found: dict[str, dict[str, bytes]] = {}
    pending = [("", graph)]
    while pending:
        path, current = pending.pop()
        found[path] = {v.name: v.type for v in (*current.value_info, *current.output)}
        bodies = []
        for index, node in enumerate(current.node):
            for attr in node.attribute:
                if attr.type == _GRAPH:
                    bodies.append((subgraph_path(path, node, index, attr.name), attr.g))
                elif attr.type == _GRAPHS:
                    bodies += [(subgraph_path(path, node, index, f"{attr.name}[{k}]"), sub)
                               for k, sub in enumerate(attr.graphs)]
        pending.extend(reversed(bodies))
    return found


def infer(
    model: onnx.ModelProto, path: Path | None = None, opsets: dict[str, int] | None = None, shapes: bool = True,
    headers: list[Initializer] | None = None,
) -> bytes:  # fmt: skip
    """onnx's inference of `model`, serialized: a model whose initializers are all small and inline goes as it is (its
    other fields do not affect inference), else a copy (`_inference_copy`); opset versions beyond the installed onnx's
    are given as its newest (`opsets`). `headers`: the model's `initializers`, when read already.
    MalformedModelError (one line) when onnx's inference fails."""
    declared = opset_imports(model)
    clamp = opsets is not None and opsets != declared
    source = _inference_copy(model, initializers(model.graph.initializer) if headers is None else headers, shapes)
    if source is None and clamp:
        source = onnx.ModelProto()
        source.CopyFrom(model)
    source = model if source is None else source
    if clamp:
        for entry in source.opset_import:
            entry.version = opsets.get("" if entry.domain == "ai.onnx" else entry.domain, entry.version)
    try:
        return c_shape_inference.infer_shapes(source.SerializeToString(), False, False, False)
    except Exception as error:  # non-strict inference still raises on models it cannot walk
        raise onnx_failure(path, "shape inference", error) from error


class InferredTypes:
    """onnx's inference of a model, made when first asked for (`make`), its result read per subgraph path."""

    def __init__(self, make: Callable[[], bytes]) -> None:
        self._make = make
        self._inferred: bytes | None = None
        self._subgraphs: dict[str, dict[str, bytes]] | None = None

    def result(self) -> bytes:
        """The serialized inferred model (inferred the first time it is asked for)."""
        if self._inferred is None:
            self._inferred = self._make()
        return self._inferred

    def types(self, path: str) -> dict[str, bytes]:
        """Value name -> its inferred type, serialized (a TypeProto's bytes), in the graph at `path` ("" is the main
        graph)."""
        if path == "":
            graph = _inferred_values_reader().FromString(self.result()).graph
            return {v.name: v.type for v in (*graph.value_info, *graph.output)}
        if self._subgraphs is None:  # the first subgraph: read every graph's values once
            self._subgraphs = _subgraph_values(_inferred_values_reader(nodes=True).FromString(self.result()).graph)
        return self._subgraphs.get(path, {})
