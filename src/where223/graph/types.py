"""The type of every value in an ONNX model, subgraphs included, without loading weights.

Sources, in order of precedence: graph inputs, initializers (their headers only), Constant nodes, graph
outputs, declared value_info, then `onnx.shape_inference` (non-strict), then, for values inference left
untyped, the node's own inference function run alone and finally the schema's type-parameter binding
(a parameter bound by an input fixes the outputs bound to the same parameter).
"""

from __future__ import annotations

import functools
import math
from collections import ChainMap
from dataclasses import dataclass

import onnx
import onnx.defs
import onnx.shape_inference
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from onnx.onnx_cpp2py_export import shape_inference as c_shape_inference

from where223.graph.loading import ModelLike, load_model, subgraph_path, subgraphs

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


def elem_type_name(elem_type: int) -> str:
    """The lower-case TensorProto name of an element type: 1 -> 'float', 10 -> 'float16'."""
    return onnx.helper.tensor_dtype_to_string(elem_type).split(".")[-1].lower()


def type_string(type_proto: onnx.TypeProto) -> str | None:
    """ONNX Runtime style type string ('tensor(float)', 'seq(tensor(int64))'), None when undefined."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(type_proto, kind).elem_type
        if elem == onnx.TensorProto.UNDEFINED:
            return None
        prefix = "tensor" if kind == "tensor_type" else "sparse_tensor"
        return f"{prefix}({elem_type_name(elem)})"
    if kind in ("sequence_type", "optional_type"):
        inner = type_string(getattr(type_proto, kind).elem_type)
        prefix = "seq" if kind == "sequence_type" else "optional"
        return f"{prefix}({inner})" if inner else None
    if kind == "map_type":
        value = type_string(type_proto.map_type.value_type)
        if value is None:
            return None
        # onnx's schemas spell map values bare: map(string, float)
        return f"map({elem_type_name(type_proto.map_type.key_type)}, {short_type(value)})"
    return None


def short_type(ort: str) -> str:
    """The human name of a type string: 'tensor(float16)' -> 'float16'; other kinds are kept whole."""
    if ort.startswith("tensor(") and ort.endswith(")"):
        return ort[len("tensor(") : -1]
    return ort


def tensor_type_string(name: str) -> str:
    """'float16' or 'tensor(float16)' -> 'tensor(float16)'; ValueError for unknown element types."""
    bare = short_type(name.strip().lower())
    known = {elem_type_name(v) for v in onnx.TensorProto.DataType.values() if v}
    if bare not in known:
        raise ValueError(f"unknown ONNX element type {name!r}; expected one of {', '.join(sorted(known))}")
    return f"tensor({bare})"


def elem_type_of(ort: str) -> int:
    """The TensorProto enum of a tensor type string: 'tensor(float16)' -> 10."""
    return int(getattr(onnx.TensorProto, short_type(tensor_type_string(ort)).upper()))


@dataclass(frozen=True)
class Formal:
    """One formal input or output of an operator schema."""

    name: str
    type_str: str  # a type parameter such as 'T', or a literal type such as 'tensor(int64)'
    variadic: bool
    homogeneous: bool


@dataclass(frozen=True)
class Signature:
    """The typing part of an operator schema, in plain Python (cached per op, domain and opset)."""

    op_type: str
    domain: str
    since_version: int
    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    constraints: tuple[tuple[str, tuple[str, ...]], ...]  # (type parameter, allowed type strings)

    def allowed(self, type_str: str) -> tuple[str, ...]:
        """The types a formal's type_str admits: its constraint's list, or the literal type itself."""
        return dict(self.constraints).get(type_str, (type_str,))


def _formal(param: onnx.defs.OpSchema.FormalParameter) -> Formal:
    return Formal(
        name=param.name,
        type_str=param.type_str,
        variadic=param.option == onnx.defs.OpSchema.FormalParameterOption.Variadic,
        homogeneous=param.is_homogeneous,
    )


@functools.cache
def signature(op_type: str, domain: str, opset: int) -> Signature | None:
    """The signature onnx registers for an op at an opset of its domain, None when it has none."""
    if not onnx.defs.has(op_type, domain):
        return None
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    return Signature(
        op_type=op_type,
        domain=domain,
        since_version=schema.since_version,
        inputs=tuple(_formal(p) for p in schema.inputs),
        outputs=tuple(_formal(p) for p in schema.outputs),
        constraints=tuple((c.type_param_str, tuple(c.allowed_type_strs)) for c in schema.type_constraints),
    )


def signature_for(node: onnx.NodeProto, opsets: dict[str, int]) -> Signature | None:
    """The signature of a node's op at the model's opset, None for ops onnx does not know."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    version = opsets.get(domain)
    return None if version is None else signature(node.op_type, domain, version)


def formal_pairs(actual: list[str], formals: tuple[Formal, ...]) -> list[tuple[int, str, Formal]]:
    """(position, name, formal) for each present actual input or output.

    A trailing variadic formal takes all remaining names; empty names (omitted optionals) and names
    beyond the schema's formals are left out.
    """
    pairs = []
    for position, name in enumerate(actual):
        if position < len(formals):
            formal = formals[position]
        elif formals and formals[-1].variadic:
            formal = formals[-1]
        else:
            break
        if name:
            pairs.append((position, name, formal))
    return pairs


def opset_imports(model: onnx.ModelProto) -> dict[str, int]:
    """Domain -> opset version, with 'ai.onnx' folded into ''."""
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}


def _tensor_type(elem_type: int, dims: list[int] | None = None) -> onnx.TypeProto:
    return onnx.helper.make_tensor_type_proto(elem_type, dims)


def _constant_type(node: onnx.NodeProto) -> onnx.TypeProto | None:
    for attr in node.attribute:
        if attr.name == "value":
            return _tensor_type(attr.t.data_type, list(attr.t.dims))
        if attr.name == "sparse_value":
            return _tensor_type(attr.sparse_tensor.values.data_type, list(attr.sparse_tensor.dims))
        if attr.name in _CONSTANT_ATTRIBUTE_TYPES:
            dims = [] if attr.name in ("value_float", "value_int", "value_string") else None
            return _tensor_type(_CONSTANT_ATTRIBUTE_TYPES[attr.name], dims)
    return None


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
            proto = _tensor_type(init.data_type, list(init.dims))
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


def _inferred_types(model: onnx.ModelProto) -> dict[str, dict[str, onnx.TypeProto]]:
    """Per subgraph path, the value types onnx's shape inference finds (non-strict: gaps allowed)."""
    # onnx's own binding, as onnx.shape_inference.infer_shapes calls it, minus the full re-parse
    inferred = c_shape_inference.infer_shapes(_inference_copy(model).SerializeToString(), False, False, False)
    if len(subgraphs(model.graph)) > 1:
        full = onnx.load_model_from_string(inferred)
        return {
            path: {v.name: v.type for v in (*graph.value_info, *graph.output)}
            for path, graph in subgraphs(full.graph)
        }
    model_reader, graph_reader = _main_graph_types_reader()
    graph = graph_reader.FromString(model_reader.FromString(inferred).graph)
    values = (onnx.ValueInfoProto.FromString(raw) for raw in (*graph.value_info, *graph.output))
    return {"": {v.name: v.type for v in values}}


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
        return self.types.get(name)


@dataclass
class ModelTypes:
    """The scopes of a model keyed by subgraph path ("" is the main graph), with its opset imports."""

    scopes: dict[str, Scope]
    opsets: dict[str, int]

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

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.opsets = opset_imports(model)
        self.inferred = _inferred_types(model)
        self.scopes: dict[str, Scope] = {}

    def build(self, graph: onnx.GraphProto, path: str, outer: Scope | None) -> Scope:
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
        for init in graph.initializer:
            put(init.name, _tensor_type(init.data_type, list(init.dims)), "initializer")
        for sparse in graph.sparse_initializer:
            put(sparse.values.name, _tensor_type(sparse.values.data_type, list(sparse.dims)), "initializer")
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                put(node.output[0], _constant_type(node), "constant")
        for value in graph.output:
            put(value.name, value.type, "output")
        for value in graph.value_info:
            put(value.name, value.type, "value_info")
        for name, proto in self.inferred.get(path, {}).items():
            put(name, proto, "inferred")

        self.scopes[path] = scope
        for index, node in enumerate(graph.node):
            branches = self._build_subgraphs(node, index, scope)
            if any(out and out not in scope.types for out in node.output):
                for name, proto in self._fallback(node, scope, branches).items():
                    put(name, proto, "propagated")
        return scope

    def _build_subgraphs(self, node: onnx.NodeProto, index: int, scope: Scope) -> dict[str, Scope]:
        built: dict[str, Scope] = {}
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                path = subgraph_path(scope.path, node, index, attr.name)
                built[attr.name] = self.build(attr.g, path, scope)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for k, sub in enumerate(attr.graphs):
                    name = f"{attr.name}[{k}]"
                    built[name] = self.build(sub, subgraph_path(scope.path, node, index, name), scope)
        return built

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
                        onnx.defs.get_schema(sig.op_type, self.opsets[sig.domain], sig.domain),
                        node,
                        {name: scope.protos[name] for name in present},
                        opset_imports=list(self.model.opset_import),
                        ir_version=self.model.ir_version,
                    )
                )
            except Exception:  # the node's own inference failed: fall back to the schema's binding
                pass
        return _bind_outputs(node, sig, scope)


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
            result[name] = _tensor_type(elem_type_of(choices[0]))
    return result


def model_types(source: ModelLike) -> ModelTypes:
    """The type of every value in every graph of a model, weights never loaded."""
    model, _ = load_model(source)
    builder = _Builder(model)
    builder.build(model.graph, "", None)
    return ModelTypes(scopes=builder.scopes, opsets=builder.opsets)
