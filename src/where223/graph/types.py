"""The type of every value in an ONNX model, subgraphs included, without loading weights.

Sources, in order of precedence: graph inputs (a Loop's or Scan's body inputs declared without a type take
the node's), initializers (their headers only), Constant nodes, graph outputs, declared value_info, then
`onnx.shape_inference` (non-strict), then, for values inference left untyped, the node's own inference
function run alone and finally the schema's type-parameter binding (a parameter bound by an input fixes the
outputs bound to the same parameter). What a graph declares (its outputs, its value_info) is also kept apart
(`Scope.declared`): lint checks each declaration against what the value's node computes. A main graph without
subgraphs whose own sources type every node output does not ask onnx's inference at all: what they typed takes
precedence, so it could add nothing (onnx's conformance models are mostly one node whose output is declared).

Types without shapes. `lint` asks for types only (`shapes=False`): onnx's inference then sees every initializer
as a graph input of its element type and the graph's inputs without their shapes, so that it infers element
types without computing a shape for every value. A node's output type in onnx's schemas follows from its inputs'
types and its attributes, not from a shape (over onnx's conformance models and their mutants, both ways give every
value the same type: `tests/graph/test_inference.py`); where an inference function gives up without its inputs'
shapes, the node's own inference and the schema's binding fill the gap as above.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path

import onnx
import onnx.shape_inference

from where223.graph import inference
from where223.graph.dtypes import elem_type_of, tensor_type, type_string
from where223.graph.guards import _INT32_MAX, newest_opsets, usable_opsets
from where223.graph.loading import ModelLike, UnknownElementTypeError, open_model
from where223.graph.nodes import Node, ReadGraph, read_graphs
from where223.graph.schema import Signature, formal_pairs, op_schema, opset_imports, signature_for

_CONSTANT_ATTRIBUTE_TYPES = {
    "value_float": onnx.TensorProto.FLOAT,
    "value_floats": onnx.TensorProto.FLOAT,
    "value_int": onnx.TensorProto.INT64,
    "value_ints": onnx.TensorProto.INT64,
    "value_string": onnx.TensorProto.STRING,
    "value_strings": onnx.TensorProto.STRING,
}


def constant_type(node: onnx.NodeProto) -> onnx.TypeProto | None:
    for attr in node.attribute:
        if attr.name == "value":
            return tensor_type(attr.t.data_type, list(attr.t.dims))
        if attr.name == "sparse_value":
            return tensor_type(attr.sparse_tensor.values.data_type, list(attr.sparse_tensor.dims))
        if attr.name in _CONSTANT_ATTRIBUTE_TYPES:
            dims = [] if attr.name in ("value_float", "value_int", "value_string") else None
            return tensor_type(_CONSTANT_ATTRIBUTE_TYPES[attr.name], dims)
    return None


class _TypeTexts(dict):
    """A serialized TypeProto -> its ONNX Runtime style type string (None when undefined), each parsed once."""

    def __missing__(self, raw: bytes) -> str | None:
        text = self[raw] = type_string(onnx.TypeProto.FromString(raw))
        return text


@dataclass
class Scope:
    """One graph (main or subgraph) and the types visible in it, outer scopes included."""

    path: str
    graph: onnx.GraphProto
    types: ChainMap[str, str]  # value name -> ORT-style type string
    protos: ChainMap[str, onnx.TypeProto | bytes]  # value name -> its TypeProto, serialized where inference gave it
    sources: ChainMap[str, str]  # value name -> where its type came from
    nodes: list[Node] = field(default_factory=list)  # the graph's nodes, read (`where223.graph.nodes`)
    # value name -> the type this graph declares for it (its outputs, then its value_info; the first of each name):
    # a claim lint checks against what the value's producer computes, whichever source typed the value
    declared: dict[str, str] = field(default_factory=dict)

    def proto(self, name: str) -> onnx.TypeProto | None:
        """The TypeProto of a value visible here, None if unknown."""
        found = self.protos.get(name)
        return onnx.TypeProto.FromString(found) if isinstance(found, bytes) else found

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
            for node in scope.nodes
            for out in node.outputs
            if out and scope.type_of(out) is None
        ]


class _Builder:
    """Walks a model's graphs, filling each scope from the sources in precedence order."""

    def __init__(
        self, model: onnx.ModelProto, path: Path | None = None, shapes: bool = True, main: ReadGraph | None = None
    ) -> None:
        self.model = model
        self.declared = opset_imports(model)
        newest = newest_opsets()
        if all(newest.get(domain, _INT32_MAX) >= version for domain, version in self.declared.items()):
            self.opsets, self.notes = dict(self.declared), []  # usable_opsets' answer where no version is too new
        else:
            self.opsets, self.notes = usable_opsets(self.declared)
        # the main graph's, read once for both (from `main`, its graph read, when given)
        self.initializers = inference.initializers(main.initializers if main is not None else model.graph.initializer)
        # run when the main graph's inferred types are first read, after the sources that need no inference
        opsets, headers = self.opsets, self.initializers  # not `self`: a closure over it would make a cycle, and
        # every scope built would wait for the cyclic collector instead of being freed with the builder
        self.inferred = inference.InferredTypes(lambda: inference.infer(model, path, opsets, shapes, headers))
        self.scopes: dict[str, Scope] = {}
        self.initializer_types: dict[tuple[int, tuple[int, ...]], tuple[onnx.TypeProto, str | None]] = {}
        self.type_texts = _TypeTexts()

    def build(
        self,
        read: ReadGraph,
        outer: Scope | None,
        implied_inputs: Sequence[onnx.TypeProto | None] = (),
    ) -> Scope:
        graph, path, nodes = read.graph, read.path, read.nodes
        own_types: dict[str, str] = {}
        own_protos: dict[str, onnx.TypeProto | bytes] = {}
        own_sources: dict[str, str] = {}
        if outer is None:
            types, protos, sources = ChainMap(own_types), ChainMap(own_protos), ChainMap(own_sources)
        else:
            types = ChainMap(own_types, *outer.types.maps)
            protos = ChainMap(own_protos, *outer.protos.maps)
            sources = ChainMap(own_sources, *outer.sources.maps)
        scope = Scope(path, graph, types, protos, sources, nodes)

        def put(name: str, proto: onnx.TypeProto | None, source: str) -> None:
            if name and name not in own_types and proto is not None:
                text = type_string(proto)
                if text is not None:
                    own_types[name], own_protos[name], own_sources[name] = text, proto, source

        for value in read.inputs:
            put(value.name, value.type, "input")
        if implied_inputs:  # for inputs declared without a type
            for value, proto in zip(read.inputs, implied_inputs, strict=False):
                put(value.name, proto, "body_input")
        known_types = self.initializer_types
        headers = self.initializers if outer is None else inference.initializers(read.initializers)
        for name, data_type, dims, _ in headers:
            if name and name not in own_types:  # put, inlined, with one TypeProto and type string per dtype and shape
                known = known_types.get((data_type, dims))
                if known is None:
                    proto = tensor_type(data_type, list(dims))
                    known = known_types[(data_type, dims)] = (proto, type_string(proto))
                proto, text = known
                if text is not None:
                    own_types[name], own_protos[name], own_sources[name] = text, proto, "initializer"
        for sparse in graph.sparse_initializer:
            put(sparse.values.name, tensor_type(sparse.values.data_type, list(sparse.dims)), "initializer")
        if "Constant" in map(itemgetter(0), nodes):  # tested in C: most graphs hold none
            for index, node in enumerate(nodes):
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.outputs:
                    put(node.outputs[0], constant_type(graph.node[index]), "constant")
        declared = scope.declared  # put, inlined, keeping what each name is declared (the first declaration)
        for values, source in ((read.outputs, "output"), (read.value_info, "value_info")):
            for value in values:
                name = value.name
                if not name or name in declared:
                    continue
                proto = value.type
                text = type_string(proto)
                if text is None:
                    continue
                declared[name] = text
                if name not in own_types:
                    own_types[name], own_protos[name], own_sources[name] = text, proto, source
        # put(name, proto, "inferred") for every value inference typed, in bulk: one store per value and map. A main
        # graph without subgraphs whose every node output its own sources typed asks no inference: what it typed
        # takes precedence, so inference could add nothing (a one-node model's output, declared, is the common case)
        declared_all = outer is None and not any(map(itemgetter(4), nodes)) and all(
            map(own_types.__contains__, filter(None, chain.from_iterable(map(itemgetter(3), nodes)))))
        if not declared_all:
            texts = self.type_texts
            inferred = self.inferred.types(path)
            fresh = {name: raw for name, raw in inferred.items() if name and name not in own_types}
            typed = {name: text for name, raw in fresh.items() if (text := texts[raw]) is not None}
            own_types.update(typed)
            own_protos.update(fresh if len(typed) == len(fresh) else {name: fresh[name] for name in typed})
            own_sources.update(dict.fromkeys(typed, "inferred"))

        self.scopes[path] = scope
        if declared_all:
            return scope  # every node output typed, no node holding a subgraph: nothing below to do
        type_maps = types.maps
        nested = len(type_maps) > 1
        typed_here = own_types.__contains__
        for index, node in enumerate(nodes):
            if not nested and not node.bodies and all(map(typed_here, node.outputs)):
                continue  # every output typed: the common case, tested in C
            branches = self._build_subgraphs(node, index, scope) if node.bodies else {}
            for out in node.outputs:  # any output untyped? (scope.type_of(out) is None, inlined: runs for every node)
                if out and (not any(out in types for types in type_maps) if nested else out not in own_types):
                    for name, proto in self._fallback(graph.node[index], scope, branches).items():
                        put(name, proto, "propagated")
                    break
        return scope

    def _build_subgraphs(self, node: Node, index: int, scope: Scope) -> dict[str, Scope]:
        proto = scope.graph.node[index]
        return {
            body.attribute: self.build(body.read, scope, self._body_inputs(proto, body.attribute, scope))
            for body in node.bodies
        }

    def _body_inputs(self, node: onnx.NodeProto, attribute: str, scope: Scope) -> list[onnx.TypeProto | None]:
        """The types a Loop's or Scan's body receives from the node's own inputs (a body may leave its inputs'
        types undeclared); element types only, since a carried value's shape may change between iterations."""
        if node.domain not in ("", "ai.onnx") or attribute != "body":
            return []
        if node.op_type == "Loop":
            carried = [scope.proto(name) if name else None for name in node.input[2:]]
            counters = [tensor_type(onnx.TensorProto.INT64, []), tensor_type(onnx.TensorProto.BOOL, [])]
            return [*counters, *map(_unshaped, carried)]
        if node.op_type == "Scan" and self.opsets.get("", 0) >= 9:  # state variables, then one slice per scan input
            return [_unshaped(scope.proto(name)) if name else None for name in node.input]
        return []

    def _fallback(
        self, node: onnx.NodeProto, scope: Scope, branches: dict[str, Scope]
    ) -> dict[str, onnx.TypeProto]:
        """Types for a node's outputs that graph-level inference left untyped."""
        if node.op_type == "If" and "then_branch" in branches:
            branch = branches["then_branch"]
            outputs = [branch.proto(v.name) for v in branch.graph.output]
            return {o: t for o, t in zip(node.output, outputs, strict=False) if o and t is not None}
        sig = signature_for(node, self.opsets)
        if sig is None:
            return {}
        present = [name for name in node.input if name]
        schema = op_schema(sig.op_type, sig.domain, self.opsets[sig.domain])  # None for ONNX Runtime's own ops
        if schema is not None and all(name in scope.protos for name in present):
            try:
                return dict(
                    onnx.shape_inference.infer_node_outputs(
                        schema,
                        node,
                        {name: scope.proto(name) for name in present},
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
            bound.setdefault(formal.type_str, scope.proto(name))
    result: dict[str, onnx.TypeProto] = {}
    for _, name, formal in formal_pairs(list(node.output), sig.outputs):
        choices = sig.allowed(formal.type_str)
        if formal.type_str in bound:
            result[name] = bound[formal.type_str]
        elif len(choices) == 1 and choices[0].startswith("tensor("):
            result[name] = tensor_type(elem_type_of(choices[0]))
    return result


def model_types(source: ModelLike, path: Path | None = None, shapes: bool = True) -> ModelTypes:
    """The type of every value in every graph of a model, weights never loaded; without `shapes`, element types
    only (the TypeProtos in `Scope.protos` may then lack shapes; see the module's docstring).

    `path` names an in-memory model in errors; MalformedModelError when onnx's shape inference fails on it or a type
    in it names an element type the installed onnx does not define.
    """
    opened = open_model(source, path)
    return types_of_loaded(opened.model, opened.path or path, opened.graphs, shapes)


def types_of_loaded(
    model: onnx.ModelProto, path: Path | None = None, graphs: list[ReadGraph] | None = None, shapes: bool = True
) -> ModelTypes:
    """`model_types` of a model that `load_model` or `open_model` has just returned, without running its guards a
    second time (they are a walk over every node: a large graph pays for it once); `graphs` are its graphs as
    `open_model` read them (read here when not given)."""
    main = (graphs or read_graphs(model.graph))[0]
    builder = _Builder(model, path, shapes, main)
    try:
        builder.build(main, None)
    except UnknownElementTypeError as error:
        raise UnknownElementTypeError(f"{path or '<model>'}: {error}") from error
    opsets = {"opsets": builder.opsets, "declared_opsets": builder.declared}
    return ModelTypes(scopes=builder.scopes, notes=builder.notes, **opsets)
