"""A model's graphs with their nodes read once into plain Python, for the walks that visit every node.

Reading a field of a protobuf message builds a new Python object each time (a node's `input` is a container made
anew at every access), so on a graph of 100,000 nodes one walk over the protobuf costs a fraction of a second, and
lint makes four (the guards' order check, typing, the constraint check, the consequence walk). `read_graphs` reads
each node's op, domain, inputs, outputs and subgraphs once; those walks go over its tuples. The protobuf stays the
model: a walk that needs more of a node (its name, its attributes) takes `graph.node[index]`.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple

import onnx

_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


@dataclass
class ReadGraph:
    """One graph (the main graph or a subgraph at `path`) and its nodes, read."""

    path: str
    graph: onnx.GraphProto
    nodes: list[Node] = field(default_factory=list)


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


def _read_nodes(graph: onnx.GraphProto, path: str) -> list[Node]:
    """The nodes of one graph, in order; their subgraphs named in `bodies`, not read yet."""
    none = _NO_BODIES
    fields = [
        (node.op_type, node.domain, node.input[:], node.output[:],
         none if not node.attribute else _bodies(node, index, path))
        for index, node in enumerate(graph.node)
    ]  # fmt: skip
    return list(map(tuple.__new__, repeat(Node), fields))  # Node(*f) without a Python call per node


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was after): a walk that builds a tuple or two per
    node of a large graph otherwise triggers collections that traverse every object built so far, again and again.
    Nothing the block builds is lost: cycles left are
    collected at the next collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_graphs(graph: onnx.GraphProto, path: str = "") -> list[ReadGraph]:
    """Every graph reachable from `graph`, itself first, then depth first, each read once (two subgraphs may share
    a path: nodes may share a name); `loading.subgraphs` lists their graphs and paths."""
    top = ReadGraph(path, graph)
    found: list[ReadGraph] = []
    pending = [top]
    while pending:  # depth first, bodies in order, without recursion (a hostile model may nest deeply)
        read = pending.pop()
        read.nodes = _read_nodes(read.graph, read.path)
        found.append(read)
        pending.extend(reversed([body.read for node in read.nodes for body in node.bodies]))
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
