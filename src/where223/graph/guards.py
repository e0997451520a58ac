"""What a model may make the graph tools do: checks run on every model before onnx's own C++ code walks it.

A model someone downloaded is hostile input. onnx's function inliner and shape inference recurse without a
limit (a model-local function that calls itself crashes the process), inlining is exponential in a chain of
functions that each call the next twice, a graph with a cycle has no order to check it in, and onnx's loader
follows an external-data location that is a symlink out of the model's folder. `check_structure` refuses the
first three with a one-line `MalformedModelError` (exit 2 on the command line); `check_external_data` refuses
weights that lie outside the model's folder or past the end of their file. Both read the protobuf only: no
weights, no onnx C++ calls.

Limits (README's "Limits"): MAX_INLINED_NODES nodes after inlining every model-local function.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from itertools import filterfalse
from pathlib import Path

import onnx

from where223.graph.nodes import ReadGraph, node_label, read_graphs, reads

MAX_INLINED_NODES = 1_000_000  # nodes the model would have once every model-local function is inlined
_INT32_MAX = 2**31 - 1  # onnx's schema registry takes opset versions as C++ ints

FunctionKey = tuple[str, str, str]  # (domain, name, overload)


class StructureError(ValueError):
    """Raised by the checks with the reason only; `loading` adds the model's path and makes it a one-line error."""


def _key(node: onnx.NodeProto) -> FunctionKey:
    return (node.domain, node.op_type, getattr(node, "overload", ""))


def _function_key(function: onnx.FunctionProto) -> FunctionKey:
    return (function.domain, function.name, getattr(function, "overload", ""))


def _nodes_within(nodes: Iterator[onnx.NodeProto] | list[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """Every node of `nodes` and of the subgraphs in their attributes, at any depth (no recursion)."""
    stack = [iter(nodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                stack.append(iter(attr.g.node))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                stack.extend(iter(g.node) for g in attr.graphs)


def _name(key: FunctionKey) -> str:
    domain, name, overload = key
    return f"{domain}.{name}" + (f" (overload {overload})" if overload else "")


def check_functions(model: onnx.ModelProto) -> None:
    """Refuse model-local functions that call themselves (directly or through others), and models that would
    have more than MAX_INLINED_NODES nodes once every function is inlined."""
    if not model.functions:
        return
    bodies = {_function_key(f): f for f in model.functions}
    calls: dict[FunctionKey, Counter[FunctionKey]] = {}
    own: dict[FunctionKey, int] = {}  # nodes of a body that are not calls of local functions
    for key, function in bodies.items():
        inner = list(_nodes_within(list(function.node)))
        calls[key] = Counter(_key(n) for n in inner if _key(n) in bodies)
        own[key] = sum(1 for n in inner if _key(n) not in bodies)
    # iterative depth-first search: the order in which every callee comes before its callers, or a cycle
    order: list[FunctionKey] = []
    state: dict[FunctionKey, int] = {}  # 1 on the current path, 2 done
    for start in bodies:
        if start in state:
            continue
        path = [start]
        pending = [iter(calls[start])]
        state[start] = 1
        while pending:
            callee = next(pending[-1], None)
            if callee is None:
                state[path[-1]] = 2
                order.append(path.pop())
                pending.pop()
                continue
            if state.get(callee) == 1:
                loop = [*path[path.index(callee) :], callee]
                raise StructureError(
                    "model-local functions call themselves ("
                    + " -> ".join(map(_name, loop))
                    + "): recursion is refused"
                )
            if callee not in state:
                state[callee] = 1
                path.append(callee)
                pending.append(iter(calls[callee]))
    size: dict[FunctionKey, int] = {}
    for key in order:
        size[key] = own[key] + sum(count * size[callee] for callee, count in calls[key].items())
    main = list(_nodes_within(list(model.graph.node)))
    total = sum(size[_key(n)] if _key(n) in bodies else 1 for n in main)
    if total > MAX_INLINED_NODES:
        raise StructureError(
            f"inlining its model-local functions would make {total:,} nodes, more than the limit of "
            f"{MAX_INLINED_NODES:,}: refused"
        )


def _cycle_in(read: ReadGraph, where: str) -> str | None:
    """A description of a cycle among the nodes of one graph, or None when they have a topological order.

    A node depends on the nodes that produce its inputs and the values its subgraphs read; values produced
    nowhere in this graph (inputs, initializers, outer scope, missing) are no dependency.
    """
    nodes = read.nodes
    # the common case, checked in one pass: listed in a topological order, i.e. no node reads a value that a node
    # listed at or after it produces (values read before any node produces them, then produced, mean out of order)
    available: set[str] = set()
    early: set[str] = set()  # values read where no node listed before has produced them
    produced = available.__contains__
    for node in nodes:
        early.update(filterfalse(produced, node.inputs if not node.bodies else reads(node)))
        available.update(node.outputs)
    early.discard("")
    if early.isdisjoint(available):
        return None
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for out in node.outputs:
            if out:
                producer.setdefault(out, index)
    needs = [{producer[name] for name in reads(node) if name in producer} for node in nodes]
    waiting = [len(deps) for deps in needs]
    users: dict[int, list[int]] = {}
    for index, deps in enumerate(needs):
        for dep in deps:
            users.setdefault(dep, []).append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    while ready:
        done = ready.pop()
        for user in users.get(done, []):
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    stuck = [index for index, count in enumerate(waiting) if count > 0]
    if not stuck:
        return None
    # walk back along unfinished dependencies until a node repeats: that loop is a cycle
    stuck_set, seen, current = set(stuck), {}, stuck[0]  # seen: node -> its place on the walk
    while current not in seen:
        seen[current] = len(seen)
        current = min(dep for dep in needs[current] if dep in stuck_set)
    walk = list(seen)
    loop = [*walk[seen[current] :], current][::-1]
    label = [node_label(read.graph.node[i], i) for i in loop]
    return f"the {where} has a cycle ({' -> '.join(label)}): a graph's nodes must have a topological order"


def check_acyclic(model: onnx.ModelProto) -> list[ReadGraph]:
    """Refuse a model any of whose graphs, subgraphs or function bodies has a cycle; the main graph's graphs, read
    on the way (`nodes.read_graphs`)."""
    from where223.errors import printable

    graphs = read_graphs(model.graph)
    scopes = [(f"subgraph {read.path}" if read.path else "main graph", read) for read in graphs]
    for function in model.functions:
        name = f"function {function.domain}.{function.name}"
        body = read_graphs(onnx.GraphProto(node=function.node))
        scopes.extend((f"{name}, subgraph {read.path}" if read.path else name, read) for read in body)
    for where, read in scopes:
        found = _cycle_in(read, where)
        if found:
            raise StructureError(printable(found, 1000))
    return graphs


def check_structure(model: onnx.ModelProto) -> list[ReadGraph]:
    """Every check that must pass before onnx's inliner, shape inference or ONNX Runtime sees the model; the main
    graph's graphs, read on the way (`nodes.read_graphs`), for the walks that follow."""
    check_functions(model)
    return check_acyclic(model)


@functools.cache
def newest_opsets() -> dict[str, int]:
    """Domain ('' for ai.onnx) -> the newest opset version the installed onnx has schemas for."""
    newest: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        domain = "" if schema.domain == "ai.onnx" else schema.domain
        newest[domain] = max(newest.get(domain, 0), schema.since_version)
    newest[""] = max(newest.get("", 0), onnx.defs.onnx_opset_version())
    return newest


def usable_opsets(declared: dict[str, int]) -> tuple[dict[str, int], list[str]]:
    """The opset versions to look schemas up at, and a note for each declared version beyond what onnx knows.

    A version newer than the installed onnx's schemas is looked up at the newest known one (the schemas in
    force at that version); a version onnx's C++ registry cannot even hold is cut the same way.
    """
    usable, notes = {}, []
    newest = newest_opsets()
    for domain, version in declared.items():
        known = newest.get(domain)
        if known is not None and version > known:
            shown = domain or "ai.onnx"
            notes.append(
                f"opset {version} of {shown} is newer than the installed onnx's schemas (newest {known}): "
                f"the newest known schemas were used"
            )
            usable[domain] = known
        else:
            usable[domain] = min(version, _INT32_MAX)
    return usable, notes


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor whose data the model keeps in an external file (onnx's own list of them)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return (tensor for tensor in _get_all_tensors(model) if uses_external_data(tensor))


def check_external_data(model: onnx.ModelProto, folder: Path) -> None:
    """Refuse external weight data that resolves outside `folder` (after symlinks), is not a regular file, or
    claims bytes past the end of its file."""
    base = folder.resolve()
    for tensor in external_tensors(model):
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if not location or os.path.isabs(location):
            raise StructureError(f"tensor {tensor.name!r}: external data location {location!r} is not a relative path")
        file = (base / location).resolve()
        if not file.is_relative_to(base):
            raise StructureError(
                f"tensor {tensor.name!r}: external data {location!r} resolves outside the model's folder: refused"
            )
        if not file.is_file():
            raise StructureError(f"tensor {tensor.name!r}: external data file {location!r} is missing or not a file")
        try:
            offset, length = int(info.get("offset") or 0), info.get("length")
        except ValueError as error:
            raise StructureError(f"tensor {tensor.name!r}: external data offset is not a number") from error
        available = file.stat().st_size - offset
        try:
            wanted = available if length is None else int(length)
        except ValueError as error:
            raise StructureError(f"tensor {tensor.name!r}: external data length is not a number") from error
        if offset < 0 or wanted < 0 or wanted > available:
            raise StructureError(
                f"tensor {tensor.name!r}: external data claims {wanted:,} bytes at offset {offset:,} of "
                f"{location!r}, which holds {file.stat().st_size:,}"
            )
