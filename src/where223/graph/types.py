"""The type of every value in an ONNX model, subgraphs included, without loading weights.

Sources, in order of precedence: graph inputs (a Loop's or Scan's body inputs declared without a type take
the node's), initializers (their headers only), Constant nodes, graph outputs, declared value_info, then
`onnx.shape_inference` (non-strict), then, for values inference left untyped, the node's own inference
function run alone and finally the schema's type-parameter binding (a parameter bound by an input fixes the
outputs bound to the same parameter).
"""

from __future__ import annotations

import functools
import math
from collections import ChainMap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx.shape_inference
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from onnx.onnx_cpp2py_export import shape_inference as c_shape_inference

from where223.graph.dtypes import elem_type_of, tensor_type, type_string
from where223.graph.guards import usable_opsets
from where223.graph.loading import ModelLike, load_model, onnx_failure, subgraph_path, subgraphs
from where223.graph.schema import Signature, formal_pairs, op_schema, opset_imports, signature_for

# initializers with at most this many elements keep their data for shape inference; larger ones are
# handed to inference as typed graph inputs, so their data is never copied or needed
_INFERENCE_DATA_LIMIT = 1024

_CONSTANT_ATTRIBUTE_TYPES = {
    "value_float": onnx.TensorProto.FLOAT,
    "value_floats": onnx.TensorProto.FLOAT,
    "value_int": onnx.TensorProto.INT64,
    "value_ints": onnx.TensorProto.INT64,
    "value_string": onnx.TensorProto.STRING,
    "value_strings": onnx.TensorProto.STRING,
}


def _constant_type(node: onnx.NodeProto) -> onnx.TypeProto | None:
    for attr in node.attribute:
        if attr.name == "value":
            return tensor_type(attr.t.data_type, list(attr.t.dims))
        if attr.name == "sparse_value":
            return tensor_type(attr.sparse_tensor.values.data_type, list(attr.sparse_tensor.dims))
        if attr.name in _CONSTANT_ATTRIBUTE_TYPES:
            dims = [] if attr.name in ("value_float", "value_int", "value_string") else None
            return tensor_type(_CONSTANT_ATTRIBUTE_TYPES[attr.name], dims)
    return None


def _needs_inference_copy(model: onnx.ModelProto) -> bool:
    """Whether any initializer of the main graph is external or too large to hand to inference."""
    return any(
        init.data_location == onnx.TensorProto.EXTERNAL or math.prod(init.dims) > _INFERENCE_DATA_LIMIT
        for init in model.graph.initializer
    )


def _inference_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy for shape inference in which large or external initializers become typed inputs."""
    copy = onnx.ModelProto(ir_version=model.ir_version)
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)
    graph, source = copy.graph, model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    graph.sparse_initializer.extend(source.sparse_initializer)
    declared = {v.name for v in source.input}
    for init in source.initializer:
        external = init.data_location == onnx.TensorProto.EXTERNAL
        if not external and math.prod(init.dims) <= _INFERENCE_DATA_LIMIT:
            graph.initializer.append(init)
        elif init.name not in declared:
            proto = tensor_type(init.data_type, list(init.dims))
            graph.input.append(onnx.helper.make_value_info(init.name, proto))
    return copy


@functools.lru_cache(maxsize=1)
def _main_graph_types_reader() -> tuple[type, type]:
    """Message classes that read only ModelProto.graph's output and value_info, leaving nodes and
    initializers as unparsed bytes (much faster with the pure-Python protobuf runtime)."""
    bytes_field, optional, repeated = (
        descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    file = descriptor_pb2.FileDescriptorProto(name="where223_types.proto", package="where223_types")
    model = file.message_type.add(name="Model")
    model.field.add(name="graph", number=7, type=bytes_field, label=optional)
    graph = file.message_type.add(name="Graph")
    graph.field.add(name="output", number=12, type=bytes_field, label=repeated)
    graph.field.add(name="value_info", number=13, type=bytes_field, label=repeated)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    # GetMessageClass since protobuf 4.21; MessageFactory.GetPrototype before (removed in 5.x)
    message_class = getattr(message_factory, "GetMessageClass", None)
    if message_class is None:
        message_class = message_factory.MessageFactory(pool).GetPrototype
    return (
        message_class(pool.FindMessageTypeByName("where223_types.Model")),
        message_class(pool.FindMessageTypeByName("where223_types.Graph")),
    )


class _InferredTypes:
    """onnx's shape inference over a model (non-strict: gaps allowed), read per subgraph path on demand."""

    def __init__(self, model: onnx.ModelProto, path: Path | None = None, opsets: dict[str, int] | None = None) -> None:
        # onnx's own binding, as onnx.shape_inference.infer_shapes calls it, minus the full re-parse; a
        # model whose initializers are all small and inline goes as it is (its other fields do not affect
        # inference). Opset versions beyond the installed onnx's are given as its newest (`opsets`).
        declared = opset_imports(model)
        clamp = opsets is not None and opsets != declared
        source = _inference_copy(model) if clamp or _needs_inference_copy(model) else model
        if clamp:
            for entry in source.opset_import:
                entry.version = opsets.get("" if entry.domain == "ai.onnx" else entry.domain, entry.version)
        try:
            self._inferred = c_shape_inference.infer_shapes(source.SerializeToString(), False, False, False)
        except Exception as error:  # non-strict inference still raises on models it cannot walk
            raise onnx_failure(path, "shape inference", error) from error
        self._subgraphs: dict[str, dict[str, onnx.TypeProto]] | None = None

    def types(self, path: str) -> dict[str, onnx.TypeProto]:
        """Value name -> inferred type in the graph at `path` ("" is the main graph)."""
        if path == "":
            model_reader, graph_reader = _main_graph_types_reader()
            graph = graph_reader.FromString(model_reader.FromString(self._inferred).graph)
            values = (onnx.ValueInfoProto.FromString(raw) for raw in (*graph.value_info, *graph.output))
            return {v.name: v.type for v in values}
        if self._subgraphs is None:  # the first subgraph: parse the whole inferred model once
            full = onnx.load_model_from_string(self._inferred)
            self._subgraphs = {
                sub_path: {v.name: v.type for v in (*graph.value_info, *graph.output)}
                for sub_path, graph in subgraphs(full.graph)
            }
        return self._subgraphs.get(path, {})


@dataclass
class Scope:
    """One graph (main or subgraph) and the types visible in it, outer scopes included."""

    path: str
    graph: onnx.GraphProto
    types: ChainMap[str, str]  # value name -> ORT-style type string
    protos: ChainMap[str, onnx.TypeProto]
    sources: ChainMap[str, str]  # value name -> where its type came from

    def type_of(self, name: str) -> str | None:
        """The ORT-style type of a value visible here, None if unknown."""
        for types in self.types.maps:  # ChainMap.get, without its per-call overhead (lint's hot path)
            found = types.get(name)
            if found is not None:
                return found
        return None


@dataclass
class ModelTypes:
    """The scopes of a model keyed by subgraph path ("" is the main graph), with its opset imports."""

    scopes: dict[str, Scope]
    opsets: dict[str, int]  # the versions schemas are looked up at (see `notes`)
    declared_opsets: dict[str, int] = field(default_factory=dict)  # as the model declares them
    notes: list[str] = field(default_factory=list)  # e.g. an opset newer than the installed onnx's schemas

    def type_of(self, name: str, path: str = "") -> str | None:
        """The ORT-style type of `name` as seen from the subgraph at `path`."""
        return self.scopes[path].type_of(name)

    def untyped(self) -> list[tuple[str, str]]:
        """(subgraph path, value name) of every node output no source could type."""
        return [
            (path, out)
            for path, scope in self.scopes.items()
            for node in scope.graph.node
            for out in node.output
            if out and scope.type_of(out) is None
        ]


class _Builder:
    """Walks a model's graphs, filling each scope from the sources in precedence order."""

    def __init__(self, model: onnx.ModelProto, path: Path | None = None) -> None:
        self.model = model
        self.declared = opset_imports(model)
        self.opsets, self.notes = usable_opsets(self.declared)
        self.inferred = _InferredTypes(model, path, self.opsets)
        self.scopes: dict[str, Scope] = {}
        self.initializer_types: dict[tuple[int, tuple[int, ...]], tuple[onnx.TypeProto, str | None]] = {}

    def build(
        self,
        graph: onnx.GraphProto,
        path: str,
        outer: Scope | None,
        implied_inputs: Sequence[onnx.TypeProto | None] = (),
    ) -> Scope:
        scope = Scope(
            path=path,
            graph=graph,
            types=ChainMap({}, *(outer.types.maps if outer else [])),
            protos=ChainMap({}, *(outer.protos.maps if outer else [])),
            sources=ChainMap({}, *(outer.sources.maps if outer else [])),
        )
        own_types, own_protos, own_sources = scope.types.maps[0], scope.protos.maps[0], scope.sources.maps[0]

        def put(name: str, proto: onnx.TypeProto | None, source: str) -> None:
            if name and name not in own_types and proto is not None:
                text = type_string(proto)
                if text is not None:
                    own_types[name], own_protos[name], own_sources[name] = text, proto, source

        for value in graph.input:
            put(value.name, value.type, "input")
        for value, proto in zip(graph.input, implied_inputs, strict=False):  # for inputs declared without a type
            put(value.name, proto, "body_input")
        for init in graph.initializer:  # put, inlined, with one TypeProto and type string per dtype and shape
            if init.name and init.name not in own_types:
                key = (init.data_type, tuple(init.dims))
                known = self.initializer_types.get(key)
                if known is None:
                    proto = tensor_type(init.data_type, list(init.dims))
                    known = self.initializer_types[key] = (proto, type_string(proto))
                proto, text = known
                if text is not None:
                    own_types[init.name], own_protos[init.name], own_sources[init.name] = text, proto, "initializer"
        for sparse in graph.sparse_initializer:
            put(sparse.values.name, tensor_type(sparse.values.data_type, list(sparse.dims)), "initializer")
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                put(node.output[0], _constant_type(node), "constant")
        for value in graph.output:
            put(value.name, value.type, "output")
        for value in graph.value_info:
            put(value.name, value.type, "value_info")
        for name, proto in self.inferred.types(path).items():  # put(name, proto, "inferred"), inlined: one per value
            if name and name not in own_types:
                text = type_string(proto)
                if text is not None:
                    own_types[name], own_protos[name], own_sources[name] = text, proto, "inferred"

        self.scopes[path] = scope
        type_maps = scope.types.maps
        outer = len(type_maps) > 1
        for index, node in enumerate(graph.node):
            branches = self._build_subgraphs(node, index, scope) if node.attribute else {}
            for out in node.output:  # any output untyped? (scope.type_of(out) is None, inlined: runs for every node)
                if out and (not any(out in types for types in type_maps) if outer else out not in own_types):
                    for name, proto in self._fallback(node, scope, branches).items():
                        put(name, proto, "propagated")
                    break
        return scope

    def _build_subgraphs(self, node: onnx.NodeProto, index: int, scope: Scope) -> dict[str, Scope]:
        built: dict[str, Scope] = {}
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                path = subgraph_path(scope.path, node, index, attr.name)
                built[attr.name] = self.build(attr.g, path, scope, self._body_inputs(node, attr.name, scope))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for k, sub in enumerate(attr.graphs):
                    name = f"{attr.name}[{k}]"
                    built[name] = self.build(sub, subgraph_path(scope.path, node, index, name), scope)
        return built

    def _body_inputs(self, node: onnx.NodeProto, attribute: str, scope: Scope) -> list[onnx.TypeProto | None]:
        """The types a Loop's or Scan's body receives from the node's own inputs (a body may leave its inputs'
        types undeclared); element types only, since a carried value's shape may change between iterations."""
        if node.domain not in ("", "ai.onnx") or attribute != "body":
            return []
        if node.op_type == "Loop":
            carried = [scope.protos.get(name) if name else None for name in node.input[2:]]
            counters = [tensor_type(onnx.TensorProto.INT64, []), tensor_type(onnx.TensorProto.BOOL, [])]
            return [*counters, *map(_unshaped, carried)]
        if node.op_type == "Scan" and self.opsets.get("", 0) >= 9:  # state variables, then one slice per scan input
            return [_unshaped(scope.protos.get(name)) if name else None for name in node.input]
        return []

    def _fallback(
        self, node: onnx.NodeProto, scope: Scope, branches: dict[str, Scope]
    ) -> dict[str, onnx.TypeProto]:
        """Types for a node's outputs that graph-level inference left untyped."""
        if node.op_type == "If" and "then_branch" in branches:
            branch = branches["then_branch"]
            outputs = [branch.protos.get(v.name) for v in branch.graph.output]
            return {o: t for o, t in zip(node.output, outputs, strict=False) if o and t is not None}
        sig = signature_for(node, self.opsets)
        if sig is None:
            return {}
        present = [name for name in node.input if name]
        if all(name in scope.protos for name in present):
            try:
                return dict(
                    onnx.shape_inference.infer_node_outputs(
                        op_schema(sig.op_type, sig.domain, self.opsets[sig.domain]),
                        node,
                        {name: scope.protos[name] for name in present},
                        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in self.opsets.items()],
                        ir_version=self.model.ir_version,
                    )
                )
            except Exception:  # the node's own inference failed: fall back to the schema's binding
                pass
        return _bind_outputs(node, sig, scope)


def _unshaped(proto: onnx.TypeProto | None) -> onnx.TypeProto | None:
    """A tensor type without its shape (other types as they are)."""
    if proto is not None and proto.HasField("tensor_type"):
        return tensor_type(proto.tensor_type.elem_type)
    return proto


def _bind_outputs(node: onnx.NodeProto, sig: Signature, scope: Scope) -> dict[str, onnx.TypeProto]:
    """Output types fixed by the schema: an input's binding of the same parameter, or a single type."""
    bound: dict[str, onnx.TypeProto] = {}
    for _, name, formal in formal_pairs(list(node.input), sig.inputs):
        if name in scope.protos and formal.homogeneous:
            bound.setdefault(formal.type_str, scope.protos[name])
    result: dict[str, onnx.TypeProto] = {}
    for _, name, formal in formal_pairs(list(node.output), sig.outputs):
        choices = sig.allowed(formal.type_str)
        if formal.type_str in bound:
            result[name] = bound[formal.type_str]
        elif len(choices) == 1 and choices[0].startswith("tensor("):
            result[name] = tensor_type(elem_type_of(choices[0]))
    return result


def model_types(source: ModelLike, path: Path | None = None) -> ModelTypes:
    """The type of every value in every graph of a model, weights never loaded.

    `path` names an in-memory model in errors; MalformedModelError when onnx's shape inference fails on it.
    """
    model, loaded_from = load_model(source)
    return types_of_loaded(model, loaded_from or path)


def types_of_loaded(model: onnx.ModelProto, path: Path | None = None) -> ModelTypes:
    """`model_types` of a model that `load_model` has just returned, without running its guards a second time
    (they are a walk over every node: a large graph pays for it once)."""
    builder = _Builder(model, path)
    builder.build(model.graph, "", None)
    opsets = {"opsets": builder.opsets, "declared_opsets": builder.declared}
    return ModelTypes(scopes=builder.scopes, notes=builder.notes, **opsets)
