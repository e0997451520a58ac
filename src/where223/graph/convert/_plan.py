"""Rule: which nodes compute in the reduced type. A node of the main graph does so only where onnx's schema allows the
type at the model's opset for each type parameter it switches, and the provider lists a kernel for the op at its
schema version with those types; everything else keeps float32, with its reason.

A node's float32 type parameters (those its values bind to tensor(float)) are the candidates; one bound only by
outputs switches only where an attribute types it and the conversion retypes that attribute (Cast's `to`,
ConstantOfShape's `value`, ...: `OUTPUT_TYPING`), so LayerNormalization's statistics (U, typed by `stash_type`)
stay float32 while its data (T) switches. Of the candidates, the largest set the listing has a kernel for is
switched. Kept in float32: nodes of another domain (no onnx schema), nodes holding subgraphs and nodes whose
outputs a subgraph reads (their bodies are not converted), nodes whose float32 initializers hold values beyond
the reduced type's range, and the nodes `convert`'s search keeps (`forced`).

A node that only moves data (`MOVES`: Transpose, Reshape, Gather, Concat, ...) computes in the reduced type only
where every value it switches comes from and goes to the reduced type (a converted node, a graph input or output
in the reduced type); beside a float32 node it moves float32 data, and the Cast sits beside the node that computes.
The values are the same either way (moving data is exact, rounding monotonic), a region of movement between two
float32 nodes is not rounded for nothing, and ONNX Runtime (1.19 and 1.32 alike) crashes with a segmentation fault
creating a session, at its default optimisation level, for a float16 Transpose (perm [1, 0, 2]) cast to float32
into a MatMul: what a MatMul the CPU provider computes in float32 after a converted Transpose would be.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from where223.errors import printable
from where223.graph.convert._listing import KernelListing
from where223.graph.dtypes import short_type
from where223.graph.loading import subgraphs
from where223.graph.nodes import node_label
from where223.graph.repair._edit import TYPING_ATTRIBUTES
from where223.graph.schema import Signature, formal_pairs, signature
from where223.graph.types import ModelTypes, model_types

__all__ = ["Choice", "plan", "computed_in_reduced", "OUTPUT_TYPING", "FLOAT", "MOVES", "NO_ARITHMETIC"]

FLOAT = "tensor(float)"
# ops whose outputs take their type from an attribute, which the conversion retypes with them
OUTPUT_TYPING = {"Cast": "to", **TYPING_ATTRIBUTES}
_MAX_SWITCHABLE = 6  # type parameters tried in every combination (no operator has more)
# operators that move or select data without arithmetic (their outputs' values are their inputs')
MOVES = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Expand", "Gather",
                   "GatherElements", "GatherND", "Slice", "Split", "Concat", "Tile", "DepthToSpace", "SpaceToDepth",
                   "Shape", "Size", "Compress", "ReverseSequence"})  # fmt: skip
# operators that compute nothing themselves: MOVES, control flow (their bodies' nodes compute) and Constant
NO_ARITHMETIC = MOVES | {"If", "Loop", "Scan", "Constant"}


@dataclass(frozen=True)
class Choice:
    """What the conversion does with one node of the main graph: the type parameters it switches to the reduced
    type and the input and output positions bound to them, or why it keeps float32 (`kept`). A node that computes
    no float32 value has neither."""

    index: int
    node: str
    op_type: str
    params: tuple[str, ...] = ()
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    kept: str | None = None
    since: int | None = None

    @property
    def converted(self) -> bool:
        return bool(self.params)

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "node": self.node, "op_type": self.op_type, "params": list(self.params),
                "kept": self.kept}  # fmt: skip


def read_in_subgraphs(model: onnx.ModelProto) -> set[str]:
    """Every name a subgraph reads or returns (a superset of the outer values it captures)."""
    names: set[str] = set()
    for path, graph in subgraphs(model.graph):
        if path:
            names.update(name for node in graph.node for name in node.input if name)
            names.update(value.name for value in graph.output)
    return names


def _beyond_range(tensor: onnx.TensorProto, max_finite: float) -> int:
    """How many finite values of a float32 initializer lie beyond `max_finite`."""
    array = numpy_helper.to_array(tensor).astype(np.float64)
    return int(np.count_nonzero(np.isfinite(array) & (np.abs(array) > max_finite)))


def _bound(node: onnx.NodeProto, sig: Signature,
           type_of) -> tuple[dict[str, set[str]], dict[str, list[tuple[str, int]]]]:
    """The types each type parameter and formal name of the node binds, and the (io, position) of each value bound
    to each type parameter."""
    bound: dict[str, set[str]] = {}
    where: dict[str, list[tuple[str, int]]] = {}
    for io, actual, formals in (("input", node.input, sig.inputs), ("output", node.output, sig.outputs)):
        for position, name, formal in formal_pairs(list(actual), formals):
            value_type = type_of(name)
            if value_type is None:
                continue
            for key in (formal.type_str, formal.name):
                bound.setdefault(key, set()).add(value_type)
            where.setdefault(formal.type_str, []).append((io, position))
    return bound, where


def _choose(node: onnx.NodeProto, index: int, sig: Signature, opset: int, to_type: str, listing: KernelListing,
            type_of) -> Choice:  # fmt: skip
    label = node_label(node, index)
    bound, where = _bound(node, sig, type_of)
    constrained = dict(sig.constraints)
    floats = [p for p in constrained if bound.get(p) == {FLOAT}]
    if not floats:
        return Choice(index, label, node.op_type, kept=f"its float32 values are typed float32 by the schema of "
                      f"{node.op_type} itself" if any(t == {FLOAT} for t in bound.values()) else None,
                      since=sig.since_version)  # fmt: skip
    heterogeneous = {f.type_str for f in (*sig.inputs, *sig.outputs) if not f.homogeneous}
    switchable = [p for p in floats if to_type in constrained[p] and p not in heterogeneous
                  and (any(io == "input" for io, _ in where[p]) or node.op_type in OUTPUT_TYPING)]  # fmt: skip
    short = short_type(to_type)
    if not switchable:
        return Choice(index, label, node.op_type, since=sig.since_version,
                      kept=f"the schema of {node.op_type}({sig.since_version}) at opset {opset} does not allow {short}"
                           f" for {', '.join(floats)}")  # fmt: skip
    for size in range(min(len(switchable), _MAX_SWITCHABLE), 0, -1):
        for subset in itertools.combinations(switchable[:_MAX_SWITCHABLE], size):
            trial = dict(bound)
            for param in subset:
                trial[param] = {to_type}
                for formal in (*sig.inputs, *sig.outputs):
                    if formal.type_str == param:
                        trial[formal.name] = {to_type}
            if listing.has_kernel(node.op_type, node.domain, sig.since_version, trial):
                inputs = tuple(sorted(pos for p in subset for io, pos in where[p] if io == "input"))
                outputs = tuple(sorted(pos for p in subset for io, pos in where[p] if io == "output"))
                return Choice(index, label, node.op_type, subset, inputs, outputs, since=sig.since_version)
    return Choice(index, label, node.op_type, since=sig.since_version,
                  kept=f"{listing.provider} lists no {short} kernel for {node.op_type}({sig.since_version}) "
                       f"(onnxruntime {listing.onnxruntime_version})")  # fmt: skip


def plan(model: onnx.ModelProto, types: ModelTypes, to_type: str, listing: KernelListing,
         forced: Mapping[int, str] | None = None, max_finite: float = 65504.0,
         keep_io_types: bool = False, kept_inputs: frozenset[str] = frozenset()) -> list[Choice]:  # fmt: skip
    """A Choice for every node of the main graph, in graph order (see the module's docstring). `forced`: node index
    -> the reason the search keeps it in float32; `keep_io_types`: the graph's inputs and outputs stay float32;
    `kept_inputs`: graph inputs that stay float32 without it (the search keeps them)."""
    forced = forced or {}
    opsets = types.opsets
    opset = opsets.get("", 1)
    scope = types.scopes[""]
    captured = read_in_subgraphs(model)
    initializers = {t.name: t for t in model.graph.initializer}
    choices = []
    for index, node in enumerate(model.graph.node):
        label = node_label(node, index)
        floats = [n for n in (*node.input, *node.output) if n and scope.type_of(n) == FLOAT]
        if not floats:
            choices.append(Choice(index, label, node.op_type))
            continue
        domain = "" if node.domain == "ai.onnx" else node.domain
        reason = None
        if domain != "":
            reason = f"no onnx schema: domain {printable(domain)} is not converted"
        elif any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            reason = "it holds subgraphs, which are not converted"
        elif any(out in captured for out in node.output if out):
            shown = next(out for out in node.output if out in captured)
            reason = f"a subgraph reads its output '{printable(shown)}'"
        elif index in forced:
            reason = forced[index]
        sig = signature(node.op_type, domain, opsets.get(domain, opset)) if reason is None else None
        if reason is None and sig is None:
            reason = f"onnx has no schema for {node.op_type} at opset {opset}"
        if reason is not None:
            choices.append(Choice(index, label, node.op_type, kept=reason))
            continue
        choice = _choose(node, index, sig, opset, to_type, listing, scope.type_of)
        for position in choice.inputs:
            tensor = initializers.get(node.input[position])
            if tensor is not None and tensor.data_type == onnx.TensorProto.FLOAT:
                beyond = _beyond_range(tensor, max_finite)
                if beyond:
                    choice = Choice(index, label, node.op_type, since=choice.since,
                                    kept=f"its initializer '{printable(tensor.name)}' holds {beyond} value(s) beyond "
                                         f"{short_type(to_type)}'s largest finite value {max_finite:g}")  # fmt: skip
                    break
        choices.append(choice)
    return _settle_moves(model, choices, scope.type_of, keep_io_types, short_type(to_type), kept_inputs)


def _settle_moves(model: onnx.ModelProto, choices: list[Choice], type_of, keep_io_types: bool,
                  short: str, kept_inputs: frozenset[str] = frozenset()) -> list[Choice]:  # fmt: skip
    """Keep in float32 every converted node of MOVES that reads or feeds a value outside the reduced type, until
    none is left (see the module's docstring)."""
    nodes = model.graph.node
    initializers = {t.name for t in model.graph.initializer}
    reduced_io = set() if keep_io_types else {v.name for v in (*model.graph.input, *model.graph.output)
                                              if type_of(v.name) == FLOAT} - initializers - kept_inputs  # fmt: skip
    readers: dict[str, list[tuple[int, int]]] = {}
    for index, node in enumerate(nodes):
        for position, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((index, position))
    choices = list(choices)
    changed = True
    while changed:
        changed = False
        reduced = set(reduced_io) | {nodes[c.index].output[p] for c in choices if c.converted for p in c.outputs}
        for c in choices:
            if not c.converted or c.op_type not in MOVES:
                continue
            node = nodes[c.index]
            comes = all(node.input[p] in reduced or node.input[p] in initializers for p in c.inputs)
            goes = all((name in reduced_io) or all(choices[i].converted and p in choices[i].inputs
                                                   for i, p in readers.get(name, []))
                       for name in (node.output[p] for p in c.outputs))  # fmt: skip
            if comes and goes:
                continue
            choices[c.index] = Choice(c.index, c.node, c.op_type, since=c.since,
                                      kept=f"it only moves data, beside a float32 value: moved in float32 (the same "
                                           f"values), the Cast to {short} beside the node that computes")  # fmt: skip
            changed = True
    return choices


def computed_in_reduced(model: onnx.ModelProto, listing: KernelListing,
                        reduced: frozenset[str] = frozenset({"tensor(float16)", "tensor(bfloat16)"}),
                        arithmetic: bool = False) -> tuple[int, int, int]:  # fmt: skip
    """How many main-graph nodes (Casts left out; with `arithmetic`, the nodes that move data and control flow too:
    `NO_ARITHMETIC`) bind a value of a reduced type, how many of those the provider lists a kernel for at the types
    they bind, and how many could not be looked up (no onnx schema: another domain, or an opset onnx does not
    know). A node declared float16 that the provider has no kernel for does not compute in float16 there: ONNX
    Runtime's CPU provider loads it and computes it in float between Casts it inserts itself (see `_listing`)."""
    types = model_types(model, shapes=False)
    scope, opsets = types.scopes[""], types.opsets
    declared = listed = unknown = 0
    for node in model.graph.node:
        if node.op_type == "Cast" or (arithmetic and node.op_type in NO_ARITHMETIC):
            continue
        values = [scope.type_of(name) for name in (*node.input, *node.output) if name]
        if not any(value in reduced for value in values):
            continue
        declared += 1
        domain = "" if node.domain == "ai.onnx" else node.domain
        sig = signature(node.op_type, domain, opsets.get(domain, opsets.get("", 1)))
        if sig is None:
            unknown += 1
            continue
        bound, _ = _bound(node, sig, scope.type_of)
        listed += listing.has_kernel(node.op_type, domain, sig.since_version, bound)
    return declared, listed, unknown
