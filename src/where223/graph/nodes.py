"""A model's graphs with their nodes read once into plain Python, for the walks that visit every node.

Reading a field of a protobuf message builds a new Python object each time (a node's `input` is a container made
anew at every access), so on a graph of 100,000 nodes one walk over the protobuf costs a fraction of a second, and
lint makes many (the guards' order, text and external-data checks, typing, the constraint check, the consequence
walk). `read_graphs` reads each node's op, domain, inputs, outputs, name and attributes once, in one walk per graph;
those walks go over what it read. The protobuf stays the model: a walk that needs more of a node (its attributes'
values) takes `graph.node[index]`, for the nodes in `ReadGraph.holding` only where it needs what an attribute holds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, count, repeat
from operator import attrgetter, itemgetter
from typing import NamedTuple

import onnx

_A = onnx.AttributeProto
_GRAPH, _GRAPHS = _A.GRAPH, _A.GRAPHS
# attributes declared a number, a string or a type: every reader (ONNX Runtime, onnx-ir, our loader) takes them as
# that, so a tensor or graph field set beside the declaration is never read; every other attribute (a tensor, a
# sparse tensor, a graph, their lists, or no declared type) may hold a tensor or a graph
PLAIN_ATTRIBUTES = frozenset(
    {_A.FLOAT, _A.INT, _A.STRING, _A.FLOATS, _A.INTS, _A.STRINGS, _A.TYPE_PROTO, _A.TYPE_PROTOS}
)
_TYPE, _NAME = attrgetter("type"), attrgetter("name")


@dataclass
class ReadGraph:
    """One graph (the main graph or a subgraph at `path`) and its nodes, read (`read_graphs` fills every list)."""

    path: str
    graph: onnx.GraphProto
    nodes: list[Node] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # each node's name, as protobuf hands it back (bytes: not UTF-8)
    attribute_names: list[str] = field(default_factory=list)  # every attribute's name, node by node, in order
    holding: list[int] = field(default_factory=list)  # the nodes with an attribute not in PLAIN_ATTRIBUTES, in order
    # the graph's inputs, outputs, value_info and initializers, each container read once: the guards read their
    # names, typing their types; protobuf makes a message's Python object anew whenever none is alive, so these lists
    # keep them alive from one reader to the next
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    value_info: list[onnx.ValueInfoProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)


class Body(NamedTuple):
    """A subgraph held by a node's attribute, read."""

    attribute: str  # the attribute's name; an item of a GRAPHS attribute as `name[k]`
    read: ReadGraph


class Node(NamedTuple):
    """The fields of one node that every walk reads."""

    op_type: str
    domain: str
    inputs: list[str]  # lists: a protobuf container's slice is the quickest copy of it
    outputs: list[str]
    bodies: tuple[Body, ...]  # its subgraphs, in attribute order: () for almost every node


_NO_BODIES: tuple[Body, ...] = ()


def node_label(node: onnx.NodeProto, index: int) -> str:
    """A node's name, or `<OpType #index>` for a nameless node."""
    return node.name or f"<{node.op_type} #{index}>"


def subgraph_path(parent: str, node: onnx.NodeProto, index: int, attribute: str) -> str:
    """The path of a subgraph held in `attribute` of `node`, e.g. `If_3/then_branch`."""
    own = f"{node_label(node, index)}/{attribute}"
    return f"{parent}/{own}" if parent else own


def _bodies(node: onnx.NodeProto, index: int, path: str) -> tuple[Body, ...]:
    found = []
    for attr in node.attribute:
        if attr.type == _GRAPH:
            found.append(Body(attr.name, ReadGraph(subgraph_path(path, node, index, attr.name), attr.g)))
        elif attr.type == _GRAPHS:
            for k, sub in enumerate(attr.graphs):
                name = f"{attr.name}[{k}]"
                found.append(Body(name, ReadGraph(subgraph_path(path, node, index, name), sub)))
    return tuple(found)


# graphs of at most this many nodes are read by a plain loop: the C iterators' set-up costs more than it saves there
_SMALL_GRAPH = 16


def _read_small(read: ReadGraph, protos: Sequence[onnx.NodeProto]) -> None:
    """`_read` of a graph of a few nodes: one Python loop (the common case of onnx's conformance models)."""
    nodes, names, attribute_names, holding = [], [], [], []
    plain = PLAIN_ATTRIBUTES
    for index, node in enumerate(protos):
        nodes.append(Node(node.op_type, node.domain, node.input[:], node.output[:], _NO_BODIES))
        names.append(node.name)
        held = False
        for attr in node.attribute:
            attribute_names.append(attr.name)
            held = held or attr.type not in plain
        if held:
            holding.append(index)
    read.nodes, read.names, read.attribute_names, read.holding = nodes, names, attribute_names, holding


def _read(read: ReadGraph) -> None:
    """Read the nodes of one graph into `read`, in order, each protobuf field once; their subgraphs named in
    `bodies`, not read yet. The work per node is one comprehension's step; the rest runs in C (map, zip, chain)."""
    protos = read.graph.node
    if len(protos) <= _SMALL_GRAPH:
        _read_small(read, protos)
        _read_bodies(read)
        return
    fields = [
        (node.op_type, node.domain, node.input[:], node.output[:], node.name, node.attribute or None)
        for node in read.graph.node
    ]  # fmt: skip
    read.nodes = list(map(tuple.__new__, repeat(Node), zip(
        map(itemgetter(0), fields), map(itemgetter(1), fields), map(itemgetter(2), fields),
        map(itemgetter(3), fields), repeat(_NO_BODIES))))  # fmt: skip  # Node(*f) without a Python call per node
    read.names = list(map(itemgetter(4), fields))
    containers = list(map(itemgetter(5), fields))  # None for a node without attributes
    attributes = list(chain.from_iterable(compress(containers, containers)))
    read.attribute_names = list(map(_NAME, attributes))
    types = list(map(_TYPE, attributes))
    if PLAIN_ATTRIBUTES.issuperset(types):  # the common case: no attribute anywhere may hold a tensor or a graph
        read.holding = []
        return
    owner = list(chain.from_iterable(map(repeat, compress(count(), containers), map(len, filter(None, containers)))))
    plain = PLAIN_ATTRIBUTES
    read.holding = list(dict.fromkeys(owner[k] for k, kind in enumerate(types) if kind not in plain))  # in order
    _read_bodies(read)


def _read_bodies(read: ReadGraph) -> None:
    """Each node of `read.holding` given the subgraphs its attributes hold (`bodies`)."""
    for index in read.holding:
        bodies = _bodies(read.graph.node[index], index, read.path)
        if bodies:
            read.nodes[index] = read.nodes[index]._replace(bodies=bodies)


class collector_paused:  # noqa: N801 - used as a function is: `with collector_paused():`
    """Python's cyclic garbage collector off for the block (as it was after): a walk that builds a tuple or two per
    node of a large graph otherwise triggers collections that traverse every object built so far, again and again.
    Nothing the block builds is lost: cycles left are collected at the next collection after it. (A class, not a
    generator made a context manager: entered once per model linted, its cost counts on small models.)"""

    __slots__ = ("_enabled",)

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self._enabled:
            gc.enable()


def read_graphs(graph: onnx.GraphProto, path: str = "") -> list[ReadGraph]:
    """Every graph reachable from `graph`, itself first, then depth first, each read once (two subgraphs may share
    a path: nodes may share a name); `loading.subgraphs` lists their graphs and paths."""
    top = ReadGraph(path, graph)
    found: list[ReadGraph] = []
    pending = [top]
    while pending:  # depth first, bodies in order, without recursion (a hostile model may nest deeply)
        read = pending.pop()
        _read(read)
        graph = read.graph
        read.inputs, read.outputs, read.value_info = list(graph.input), list(graph.output), list(graph.value_info)
        read.initializers = list(graph.initializer)
        found.append(read)
        pending.extend(reversed([body.read for index in read.holding for body in read.nodes[index].bodies]))
    return found


def inner_nodes(node: Node) -> Iterator[Node]:
    """Every node of a node's subgraphs, at any depth (no recursion)."""
    stack = [iter(node.bodies)]
    while stack:
        body = next(stack[-1], None)
        if body is None:
            stack.pop()
            continue
        for inner in body.read.nodes:
            yield inner
            if inner.bodies:
                stack.append(iter(inner.bodies))


def reads(node: Node) -> list[str]:
    """The values a node reads: its inputs, then every input of the nodes in its subgraphs (outer-scope reads)."""
    if not node.bodies:
        return node.inputs
    return node.inputs + [name for inner in inner_nodes(node) for name in inner.inputs]
