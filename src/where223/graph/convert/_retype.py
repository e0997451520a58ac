"""Pass: apply a plan (`_plan.Choice` per node) to a model's main graph, on onnx-ir. Each converted node's switched
inputs and outputs take the reduced type; a value crosses between the reduced type and float32 only through one Cast
per value and type, at the boundary between a converted node and a node, graph output or input that keeps its type
(shared by every consumer on that side). A float32 initializer read only in the reduced type is rounded in place
(its name kept); one read in both types gets a rounded copy beside it (`_initializers`, with what rounding cost).
Cast's `to` and the attributes that type an output (ConstantOfShape's `value`, ...) follow their node. Without
`keep_io_types`, float32 graph inputs and outputs become the reduced type (a Cast at the boundary where the node
beside them keeps float32; an input a subgraph reads stays float32, as does one the search keeps: `kept_inputs`);
with it they stay float32. Every main-graph value is declared with its type.

`origins` says, for the search, which converted nodes each value of the result belongs to: a node's output, the
Cast into or out of the reduced type beside it, or an initializer it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx_ir as ir

from where223.graph.convert._initializers import InitializerConversion, convert_tensor
from where223.graph.convert._plan import OUTPUT_TYPING, Choice
from where223.graph.dtypes import elem_type_of, short_type
from where223.graph.loading import FreshNames
from where223.graph.types import ModelTypes

__all__ = ["Origin", "RetypePass"]


@dataclass(frozen=True)
class Origin:
    """What a value of the converted model is: `node` (a converted node's output), `cast_in` / `cast_out` (a Cast into
    / out of the reduced type), `initializer` (rounded) or `input`; `nodes`: the converted nodes concerned."""

    kind: str
    nodes: tuple[int, ...] = ()


class RetypePass(ir.passes.InPlacePass):
    """Apply `choices` (one per main-graph node, in order) with the reduced type `to_type`."""

    def __init__(self, choices: Sequence[Choice], to_type: str, keep_io_types: bool, types: ModelTypes,
                 names: FreshNames, smallest_normal: float, kept_inputs: frozenset[str] = frozenset()
                 ) -> None:  # fmt: skip
        super().__init__()
        self.choices = list(choices)
        self.kept_inputs = kept_inputs  # graph inputs that stay float32 without keep_io_types (the search's)
        self.reduced = ir.DataType(elem_type_of(to_type))
        self.short = short_type(to_type)
        self.keep_io_types = keep_io_types
        self.types = types
        self.names = names
        self.smallest_normal = smallest_normal
        self.origins: dict[str, Origin] = {}
        self.initializers: list[InitializerConversion] = []
        self.casts = 0
        self._shared: dict[tuple[int, ir.DataType], ir.Value] = {}
        self._index: dict[int, int] = {}

    # --- the steps ------------------------------------------------------------------------------------------

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        nodes = list(graph)
        if len(nodes) != len(self.choices):
            raise ValueError(f"the plan has {len(self.choices)} nodes, the graph {len(nodes)}")
        self._index = {id(node): choice.index for node, choice in zip(nodes, self.choices, strict=True)}
        original = self._declare(graph, nodes)
        self._inputs(graph)
        for node, choice in zip(nodes, self.choices, strict=True):
            if choice.converted:
                self._switch(node, choice)
        self._consumers(graph, nodes, original)
        self._outputs(graph, original)
        return ir.passes.PassResult(model, modified=True)

    def _declare(self, graph: ir.Graph, nodes: list[ir.Node]) -> dict[int, ir.DataType | None]:
        """Every main-graph value typed as lint types it; the types before the conversion, by value."""
        values = [*graph.inputs, *graph.initializers.values()]
        values += [v for node in nodes for v in (*node.inputs, *node.outputs) if v is not None]
        original: dict[int, ir.DataType | None] = {}
        for value in values:
            if id(value) in original:
                continue
            if value.type is None and value.name:
                found = self.types.type_of(value.name)
                if found and found.startswith("tensor("):
                    value.type = ir.TensorType(ir.DataType(elem_type_of(found)))
            original[id(value)] = value.dtype if isinstance(value.type, ir.TensorType) else None
        return original

    def _retype(self, value: ir.Value, dtype: ir.DataType) -> None:
        value.type = ir.TensorType(dtype)  # a new type object: a deserialized one may be shared

    def _inputs(self, graph: ir.Graph) -> None:
        if self.keep_io_types:
            return
        for value in graph.inputs:
            read_inside = any(use.node.graph is not graph for use in value.uses())  # a subgraph reads it: float32
            kept = value.name in self.kept_inputs
            if value.dtype == ir.DataType.FLOAT and not value.is_initializer() and not read_inside and not kept:
                self._retype(value, self.reduced)
                self.origins[value.name] = Origin("input")

    def _switch(self, node: ir.Node, choice: Choice) -> None:
        for position in choice.outputs:
            out = node.outputs[position]
            self._retype(out, self.reduced)
            self.origins[out.name] = Origin("node", (choice.index,))
        attribute = OUTPUT_TYPING.get(node.op_type)
        if not choice.outputs or attribute is None or attribute not in node.attributes:
            return
        current = node.attributes[attribute]
        if current.type == ir.AttributeType.INT:
            node.attributes[attribute] = ir.AttrInt64(attribute, int(self.reduced))
        elif current.type == ir.AttributeType.TENSOR:
            array = current.value.numpy().astype(self.reduced.numpy())
            node.attributes[attribute] = ir.AttrTensor(attribute, ir.tensor(array, dtype=self.reduced,
                                                                            name=current.value.name))  # fmt: skip

    def _consumers(self, graph: ir.Graph, nodes: list[ir.Node], original: dict[int, ir.DataType | None]) -> None:
        """Each node input whose value's type is not the one the node reads it in: through a Cast, or a rounded
        initializer."""
        needs: dict[int, tuple[ir.Value, list[tuple[ir.Node, int, ir.DataType, Choice]]]] = {}
        for node, choice in zip(nodes, self.choices, strict=True):
            for position, value in enumerate(node.inputs):
                if value is None:
                    continue
                need = self.reduced if choice.converted and position in choice.inputs else original.get(id(value))
                if need is None or value.dtype == need:
                    continue
                needs.setdefault(id(value), (value, []))[1].append((node, position, need, choice))
        for value, uses in needs.values():
            readers = tuple(sorted({choice.index for *_, choice in uses if choice.converted}))
            if (value.is_initializer() and not value.is_graph_input() and not value.is_graph_output()
                    and all(need == self.reduced for _, _, need, _ in uses) and len(value.uses()) == len(uses)
                    and value.const_value is not None):  # fmt: skip
                tensor, cost = convert_tensor(value.const_value, self.reduced, value.name, value.name,
                                              self.smallest_normal)  # fmt: skip
                value.const_value = tensor
                self._retype(value, self.reduced)
                self.initializers.append(cost)
                self.origins[value.name] = Origin("initializer", readers)
                continue
            for node, position, need, _ in uses:
                node.replace_input_with(position, self._replacement(graph, value, need, readers))

    def _outputs(self, graph: ir.Graph, original: dict[int, ir.DataType | None]) -> None:
        """Each graph output in the type asked for (the reduced type without keep_io_types, where it was float32):
        where its value has another, the value is renamed and cast back under the output's name."""
        for k, value in enumerate(list(graph.outputs)):
            was = original.get(id(value))
            want = self.reduced if was == ir.DataType.FLOAT and not self.keep_io_types else was
            if want is None or value.dtype == want or value.is_initializer() or value.is_graph_input():
                continue
            old = value.name
            value.name = self.names.fresh(f"{old}_where223_{short_type(_type_name(value.dtype))}")
            if old in self.origins:
                self.origins[value.name] = self.origins.pop(old)
            cast = self._cast(graph, value, want, old)
            graph.outputs[k] = cast.outputs[0]
            self.origins[old] = self._cast_origin(value, want, ())

    # --- Casts and rounded copies ---------------------------------------------------------------------------

    def _cast_origin(self, value: ir.Value, dtype: ir.DataType, readers: tuple[int, ...]) -> Origin:
        if dtype == self.reduced:
            return Origin("cast_in", readers)
        producer = value.producer()
        index = self._index.get(id(producer)) if producer is not None else None
        converted = index is not None and self.choices[index].converted
        return Origin("cast_out", (index,) if converted else ())

    def _cast(self, graph: ir.Graph, value: ir.Value, dtype: ir.DataType, name: str | None = None) -> ir.Node:
        """A Cast of `value` to `dtype` (its output named `name`, else a fresh name), placed right after the value's
        producer (first in the graph for an input or initializer)."""
        base = f"{value.name}_where223_{_type_name(dtype)}"
        out_name = name or self.names.fresh(base)
        cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", int(dtype))], name=self.names.fresh(f"{out_name}/Cast"))
        cast.outputs[0].name = out_name
        cast.outputs[0].type = ir.TensorType(dtype)
        cast.outputs[0].shape = value.shape
        producer = value.producer()
        if producer is not None and producer.graph is graph:
            graph.insert_after(producer, cast)
        elif len(graph):
            graph.insert_before(next(iter(graph)), cast)
        else:
            graph.append(cast)
        self.casts += 1
        return cast

    def _replacement(self, graph: ir.Graph, value: ir.Value, dtype: ir.DataType, readers: tuple[int, ...]) -> ir.Value:
        """`value` in `dtype`, made once and shared: a rounded copy of a float32 initializer, else a Cast."""
        key = (id(value), dtype)
        if key in self._shared:
            return self._shared[key]
        if value.is_initializer() and value.const_value is not None and dtype == self.reduced \
                and value.dtype == ir.DataType.FLOAT:  # fmt: skip
            name = self.names.fresh(f"{value.name}_where223_{self.short}")
            tensor, cost = convert_tensor(value.const_value, dtype, name, value.name, self.smallest_normal)
            copy = ir.Value(name=name, type=ir.TensorType(dtype), shape=value.shape, const_value=tensor)
            graph.register_initializer(copy)
            self.initializers.append(cost)
            self.origins[name] = Origin("initializer", readers)
            self._shared[key] = copy
            return copy
        cast = self._cast(graph, value, dtype)
        self.origins[cast.outputs[0].name] = self._cast_origin(value, dtype, readers)
        self._shared[key] = cast.outputs[0]
        return cast.outputs[0]


def _type_name(dtype: ir.DataType | None) -> str:
    """'float16' for DataType.FLOAT16 (ONNX's lower-case names)."""
    from where223.graph.dtypes import elem_type_name

    return elem_type_name(int(dtype)) if dtype is not None else "unknown"
