"""Graph surgery for the repair rules, on onnx-ir's in-memory model: a Cast before a node's input (one per value and
type in a graph, shared), a node's output renamed and cast back under its old name, a Cast node retargeted. Nodes
are found as lint names them (subgraph path and index, read before any edit); every Cast inserted is checked
against Cast's own schema at the model's opset, so no repair inserts a Cast from or to a type Cast does not take."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from where223.errors import printable
from where223.graph.dtypes import elem_type_name, elem_type_of, short_type
from where223.graph.lint import Violation
from where223.graph.loading import FreshNames
from where223.graph.nodes import node_label, subgraph_path
from where223.graph.repair._change import Change, RepairError
from where223.graph.schema import signature
from where223.graph.types import ModelTypes

UNKNOWN = "an unknown type"
# operators whose output type is given by an attribute, not by an input: the attribute a repair retypes with it
TYPING_ATTRIBUTES = {"ConstantOfShape": "value", "EyeLike": "dtype", "RandomNormal": "dtype",
                     "RandomUniform": "dtype", "RandomNormalLike": "dtype", "RandomUniformLike": "dtype"}


@contextlib.contextmanager
def _onnx_ir_quiet() -> Iterator[None]:
    """onnx-ir's warnings (its loggers', e.g. "Input 'x' of node 'n' ... cannot be found in any scope" for a model
    that reads a value nothing defines) left out for the block: they would reach stderr through logging's last
    resort as lines of their own; the model's faults are lint's and ONNX Runtime's to tell, in the repair's line."""
    logger = logging.getLogger("onnx_ir")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _graphs(graph: ir.Graph, path: str = "") -> list[tuple[str, ir.Graph]]:
    """Every graph reachable from `graph` with its subgraph path, as graph.loading.subgraphs spells it (its
    node_label and subgraph_path read only a node's name and op_type, which onnx-ir's nodes have too)."""
    found = [(path, graph)]
    for index, node in enumerate(graph):
        for name, attr in node.attributes.items():
            if attr.type == ir.AttributeType.GRAPH:
                found.extend(_graphs(attr.value, subgraph_path(path, node, index, name)))
            elif attr.type == ir.AttributeType.GRAPHS:
                for k, sub in enumerate(attr.value):
                    found.extend(_graphs(sub, subgraph_path(path, node, index, f"{name}[{k}]")))
    return found


def tensor_of(type_str: str) -> ir.TensorType:
    return ir.TensorType(ir.DataType(elem_type_of(type_str)))


def type_of(value: ir.Value) -> str | None:
    """'tensor(float)' for a tensor value of known element type, else None."""
    if isinstance(value.type, ir.TensorType) and value.dtype is not None:
        return f"tensor({elem_type_name(int(value.dtype))})"
    return None


class Editor:
    """One model's edits, on an onnx-ir copy; `result()` serializes it back to a ModelProto."""

    def __init__(self, model: onnx.ModelProto, types: ModelTypes) -> None:
        self.types = types  # what lint saw: each value's type, declared or inferred
        with _onnx_ir_quiet():
            self.model = ir.serde.deserialize_model(model)
        self.graphs = dict(_graphs(self.model.graph))
        self.nodes = {path: list(graph) for path, graph in self.graphs.items()}  # indexes as lint saw them
        self.names = FreshNames(model)
        self.opset = self.model.opset_imports.get("", 1)
        self.shared: dict[tuple[str, str, str], ir.Node] = {}
        self.changes: list[Change] = []

    def type_in(self, path: str, value: ir.Value) -> str:
        """A value's type as lint saw it from the graph at `path` (UNKNOWN when it had none)."""
        return self.types.type_of(value.name, path) or (type_of(value) if value.name else None) or UNKNOWN

    def node(self, path: str, index: int) -> ir.Node:
        return self.nodes[path][index]

    def _check_cast(self, from_type: str, to_type: str, where: str) -> None:
        cast = signature("Cast", "", self.opset)
        takes = set(cast.allowed(cast.inputs[0].type_str)) if cast else set()
        gives = set(cast.allowed(cast.outputs[0].type_str)) if cast else set()
        if from_type not in takes or to_type not in gives:
            raise RepairError(f"{printable(where)}: a Cast from {from_type} to {to_type} is not allowed at opset "
                              f"{self.opset} (Cast takes {', '.join(sorted(takes))}), so no Cast is inserted")

    def _cast_node(self, source: ir.Value, to_type: str, value_name: str, node_name: str) -> ir.Node:
        cast = ir.Node("", "Cast", [source], [ir.AttrInt64("to", elem_type_of(to_type))],
                       name=self.names.fresh(node_name))  # fmt: skip
        cast.outputs[0].name = value_name  # its type follows from `to`: declared only where it is a graph output
        return cast

    def cast_input(self, path: str, index: int, position: int, to_type: str, why: str) -> None:
        """Feed input `position` of the node through a Cast to `to_type` (one Cast per value and type in a
        graph, placed before the first node that needs it)."""
        graph, node = self.graphs[path], self.node(path, index)
        value = node.inputs[position]
        from_type = self.type_in(path, value)
        key = (path, value.name, to_type)
        if key not in self.shared:
            self._check_cast(from_type, to_type, node_label(node, index))
            base = f"{value.name}_where223_{short_type(to_type)}"
            cast = self._cast_node(value, to_type, self.names.fresh(base), f"{base}/Cast")
            graph.insert_before(node, cast)  # the rules go in graph order: this is the value's first such use
            self.shared[key] = cast
        cast = self.shared[key]
        node.replace_input_with(position, cast.outputs[0])
        self.changes.append(Change("cast_input", node_label(node, index), path, value.name, position, from_type,
                                   to_type, cast.name, cast.outputs[0].name, why))  # fmt: skip

    def cast_output(self, path: str, index: int, position: int, compute_type: str, why: str) -> None:
        """Let output `position` of the node be `compute_type` under a fresh name, cast back to its old type
        under its old name, so every consumer (and the graph's outputs) sees what it saw before."""
        graph, node = self.graphs[path], self.node(path, index)
        out = node.outputs[position]
        old_type, old_name = self.type_in(path, out), out.name
        if old_type == UNKNOWN:
            raise RepairError(f"{printable(node_label(node, index))}: output {position} has no known type to cast "
                              "back to")
        self._check_cast(compute_type, old_type, node_label(node, index))
        renamed = self.names.fresh(f"{old_name}_where223_{short_type(compute_type)}")
        uses, shape = list(out.uses()), out.shape
        outputs = [k for k, value in enumerate(graph.outputs) if value is out]
        out.name, out.type, out.shape = renamed, None, None  # the node's output: inference types it anew
        cast = self._cast_node(out, old_type, old_name, f"{old_name}/Cast")
        graph.insert_after(node, cast)
        for use in uses:
            use.node.replace_input_with(use.idx, cast.outputs[0])
        for k in outputs:
            graph.outputs[k] = cast.outputs[0]
            cast.outputs[0].type, cast.outputs[0].shape = tensor_of(old_type), shape
        self.changes.append(Change("cast_output", node_label(node, index), path, old_name, position, compute_type,
                                   old_type, cast.name, renamed, why))  # fmt: skip

    def retarget(self, path: str, index: int, to_type: str, why: str) -> None:
        """Make a Cast node cast to `to_type`; values downstream that carried its old type lose their declared
        type (inference gives them theirs again), except graph outputs, which take the new one."""
        node = self.node(path, index)
        out = node.outputs[0]
        old_type, source = self.type_in(path, out), self.type_in(path, node.inputs[0])
        self._check_cast(source, to_type, node_label(node, index))
        node.attributes["to"] = ir.AttrInt64("to", elem_type_of(to_type))
        old_dtype, out.type = out.dtype, tensor_of(to_type)
        seen, frontier = {id(out)}, [out]
        while frontier:
            for use in frontier.pop().uses():
                for downstream in use.node.outputs:
                    if id(downstream) in seen or downstream.dtype != old_dtype:
                        continue
                    seen.add(id(downstream))
                    downstream.type = tensor_of(to_type) if downstream.is_graph_output() else None
                    frontier.append(downstream)
        self.changes.append(Change("retarget_cast", node_label(node, index), path, out.name, 0, old_type, to_type,
                                   node_label(node, index), out.name, why))  # fmt: skip

    def set_cast_to(self, path: str, index: int, to_type: str, why: str) -> None:
        """Make a Cast node cast to `to_type`, the type its output is declared (nothing downstream changes: every
        consumer was judged at the declared type)."""
        node = self.node(path, index)
        out = node.outputs[0]
        source = self.type_in(path, node.inputs[0])
        to = node.attributes.get("to")
        old_type = f"tensor({elem_type_name(to.value)})" if to is not None else UNKNOWN
        self._check_cast(source, to_type, node_label(node, index))
        node.attributes["to"] = ir.AttrInt64("to", elem_type_of(to_type))
        self.changes.append(Change("retarget_cast", node_label(node, index), path, out.name, 0, old_type, to_type,
                                   node_label(node, index), out.name, why))  # fmt: skip

    def redeclare(self, path: str, index: int, position: int, to_type: str, why: str) -> None:
        """Declare output `position` of the node as `to_type`, the type the node computes (its shape kept)."""
        node = self.node(path, index)
        out = node.outputs[position]
        old_type = self.type_in(path, out)
        out.type = tensor_of(to_type)
        self.changes.append(Change("redeclare", node_label(node, index), path, out.name, position, old_type, to_type,
                                   "", out.name, why))  # fmt: skip

    def locate(self, node: ir.Node) -> tuple[str, int] | None:
        """The subgraph path and index lint gives `node`, None for a node added since."""
        for path, nodes in self.nodes.items():
            for index, candidate in enumerate(nodes):
                if candidate is node:
                    return path, index
        return None

    def compute_in(self, violation: Violation, to_type: str, why: str) -> None:
        """Have the violation's node compute its type parameter in `to_type`: each value bound to it of another
        type is cast to `to_type` on the way in, and back to its own type on the way out; where an attribute gives
        the parameter its type (ConstantOfShape's `value`, EyeLike's `dtype`), that attribute is retyped too."""
        for binding in violation.bindings:
            if binding.type == to_type:
                continue
            cast = self.cast_input if binding.io == "input" else self.cast_output
            cast(violation.subgraph, violation.node_index, binding.position, to_type, why)
        if not any(b.io == "input" for b in violation.bindings):
            self.retype_attribute(violation, to_type)

    def retype_attribute(self, violation: Violation, to_type: str) -> None:
        """The attribute that types an output-only parameter, converted to `to_type` (its values kept exactly: the
        rules only choose a type that holds the old one)."""
        node = self.node(violation.subgraph, violation.node_index)
        name = TYPING_ATTRIBUTES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        attribute = node.attributes.get(name) if name else None
        if attribute is None:
            return
        if attribute.type == ir.AttributeType.TENSOR:
            array = attribute.value.numpy().astype(ir.DataType(elem_type_of(to_type)).numpy())
            node.attributes[name] = ir.AttrTensor(name, ir.tensor(array, name=attribute.value.name))
        elif attribute.type == ir.AttributeType.INT:
            node.attributes[name] = ir.AttrInt64(name, elem_type_of(to_type))

    def result(self) -> onnx.ModelProto:
        with _onnx_ir_quiet():
            return ir.serde.serialize_model(self.model)
