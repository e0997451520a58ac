"""What a model may make the graph tools do: checks run on every model before onnx's own C++ code walks it.

A model someone downloaded is hostile input. onnx's function inliner and shape inference recurse without a
limit (a model-local function that calls itself crashes the process), inlining is exponential in a chain of
functions that each call the next twice, a graph with a cycle has no order to check it in, an opset version past
a C++ int breaks onnx's schema lookup, a name whose UTF-8 is broken comes back from protobuf as bytes (every reader
of names expects text), onnx 1.16's shape inference crashes on a Scan without `num_scan_inputs`, and onnx's loader
and ONNX Runtime follow an external-data location out of the model's folder (`../secret.bin`, or a symlink).
`check_structure` refuses all but the last with a one-line
`MalformedModelError` (exit 2 on the command line); `check_external_locations` refuses external data outside the
model's folder, and `check_external_data` also data that is missing or past the end of its file, for every tensor
`model_tensors` finds (our own walk: function bodies and sparse tensors included, whatever onnx is installed).
They read the protobuf only: no weights, no onnx C++ calls.

Limits (README's "Limits"): MAX_INLINED_NODES nodes after inlining every model-local function.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import chain, filterfalse
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import NamedTuple

import onnx

from where223.errors import printable
from where223.graph.nodes import PLAIN_ATTRIBUTES, ReadGraph, node_label, read_graphs, reads, subgraph_path

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


def check_acyclic(model: onnx.ModelProto, graphs: list[ReadGraph] | None = None) -> list[ReadGraph]:
    """Refuse a model any of whose graphs, subgraphs or function bodies has a cycle; the main graph's graphs
    (`graphs`, else read here by `nodes.read_graphs`)."""
    graphs = read_graphs(model.graph) if graphs is None else graphs
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


def check_defined(graphs: list[ReadGraph]) -> None:
    """Refuse a main graph whose node reads a value nothing defines: no graph input, initializer or node output
    (ONNX Runtime refuses such a model too; onnx's inference of some operators, as ai.onnx.ml's LabelEncoder,
    dereferences the missing type and crashes the process). The main graph's own nodes' inputs only: subgraphs may
    read their outer scopes' values and are left to inference."""
    main = next((read for read in graphs if not read.path), None)
    if main is None:
        return
    produced: set[str] = set()
    read: set[str] = set()
    for node in main.nodes:
        read.update(node.inputs)
        produced.update(node.outputs)
    read.discard("")
    undefined = read - produced
    if not undefined:
        return
    graph = main.graph
    undefined.difference_update(map(_NAME, main.inputs))
    if undefined:
        undefined.difference_update(map(_NAME, graph.initializer))
    if undefined:
        undefined.difference_update(sparse.values.name for sparse in graph.sparse_initializer)
    if undefined:
        name = min(undefined)
        user = next(node for node in main.nodes if name in node.inputs)
        raise StructureError(
            f"value {printable(name, 200)} is read by a {printable(user.op_type, 100)} node but is no graph input, "
            f"initializer or node output of the main graph ({len(undefined)} such value(s)): refused, as ONNX "
            "Runtime refuses it"
        )


def check_opsets(model: onnx.ModelProto, imports: Sequence[onnx.OperatorSetIdProto] | None = None) -> None:
    """Refuse an opset version (the model's or a model-local function's, in any domain) that onnx's schema registry
    cannot take: a C++ int, so below 0 or at 2**31 and past (onnx's `get_schema` raises TypeError on it, ONNX Runtime
    reads it wrapped around). `imports`: the model's `opset_import`, if read already."""
    versions = list(map(_VERSION, model.opset_import if imports is None else imports))
    if not model.functions and (not versions or (min(versions) >= 0 and max(versions) <= _INT32_MAX)):
        return  # the common case, in C
    imports = [("", opset) for opset in model.opset_import]
    imports += [
        (f" of function {printable(f.domain)}.{printable(f.name)}", o) for f in model.functions for o in f.opset_import
    ]
    for where, opset in imports:
        if not 0 <= opset.version <= _INT32_MAX:
            raise StructureError(
                f"opset {opset.version} of {printable(opset.domain or 'ai.onnx')}{where} is not a version onnx can "
                f"look schemas up at (0 to 2**31 - 1): refused"
            )


def _not_text(texts: Callable[[], Iterable[object]]) -> object | None:
    """The first of `texts()` that is not a str (protobuf hands back a `string` field whose bytes are not UTF-8 as
    bytes), or None: the common case in C, by one `str.join` (which refuses anything but str) over C iterators."""
    try:
        "".join(texts())  # type: ignore[arg-type]
    except TypeError:
        return next(text for text in texts() if not isinstance(text, str))
    return None


def _graph_texts(read: ReadGraph) -> Iterator[object]:
    """The names of one graph: its own, its values', its nodes' (name, op type, domain, inputs, outputs, attributes)."""
    graph, nodes = read.graph, read.nodes
    name = attrgetter("name")
    return chain(
        (graph.name,), map(name, chain(read.inputs, read.outputs, read.value_info, read.initializers)),
        map(_SPARSE_NAME, graph.sparse_initializer), read.names,
        map(itemgetter(0), nodes), map(itemgetter(1), nodes), chain.from_iterable(map(itemgetter(2), nodes)),
        chain.from_iterable(map(itemgetter(3), nodes)), read.attribute_names,
    )


def _function_texts(function: onnx.FunctionProto) -> Iterator[object]:
    """The names of a model-local function: its own, its inputs', outputs', attributes' and nodes' (at any depth)."""
    texts: list[object] = [function.name, function.domain, *function.input, *function.output, *function.attribute]
    for node in _nodes_within(list(function.node)):
        texts += (node.name, node.op_type, node.domain, *node.input, *node.output,
                  *(attr.name for attr in node.attribute))
    return iter(texts)


def check_text(model: onnx.ModelProto, graphs: list[ReadGraph]) -> None:
    """Refuse a model any of whose names (the graphs', values', nodes', op types, domains, attributes', functions')
    is not UTF-8: protobuf requires a `string` to be, hands such a field back as bytes, not text, and ONNX Runtime
    refuses the model; every reader of names expects text. `graphs`: the main graph's, as `nodes.read_graphs` read
    them (its nodes' names and attributes' names among them)."""
    domains = attrgetter("domain")
    if not model.functions and _not_text(lambda: chain(map(domains, model.opset_import),
                                                       *map(_graph_texts, graphs))) is None:
        return  # every name text: the common case, one join in C over every graph (which one fails is asked below)
    scopes: list[tuple[str, Callable[[], Iterable[object]]]] = [
        ("the model's opset imports", lambda: map(domains, model.opset_import))]
    for read in graphs:
        scopes.append((f"subgraph {read.path}" if read.path else "the main graph", partial(_graph_texts, read)))
    for function in model.functions:
        scopes.append(("a model-local function", partial(_function_texts, function)))
    for where, texts in scopes:
        found = _not_text(texts)
        if found is not None:
            raise StructureError(f"a name in {where} is not UTF-8 text ({printable(repr(found), 100)}), as protobuf "
                                 "and ONNX Runtime require: refused")


# required attributes that onnx's shape inference reads without checking they are there, by op (ai.onnx): onnx 1.16's
# Scan inference crashes the process (SIGSEGV) on a Scan without `num_scan_inputs`. A sweep of every schema with a
# required attribute, each op's node given none, found no other (onnx 1.16 and 1.23 alike).
_READ_UNCHECKED = {"Scan": ("num_scan_inputs",)}


def check_required_attributes(model: onnx.ModelProto, graphs: list[ReadGraph]) -> None:
    """Refuse a node (in any graph or model-local function) of an ai.onnx op in `_READ_UNCHECKED` without the
    attributes listed there: onnx's shape inference would crash on it; ONNX Runtime refuses it too."""
    scopes = [(f"subgraph {read.path}" if read.path else "the main graph", read.graph.node,
               list(map(itemgetter(0, 1), read.nodes))) for read in graphs
              if not _READ_UNCHECKED.keys().isdisjoint(map(itemgetter(0), read.nodes))]  # a pass in C, most graphs
    for function in model.functions:
        protos = list(_nodes_within(list(function.node)))
        ops = [(node.op_type, node.domain) for node in protos]
        scopes.append((f"function {printable(function.domain)}.{printable(function.name)}", protos, ops))
    for where, protos, ops in scopes:
        for index, (op, domain) in enumerate(ops):
            if op in _READ_UNCHECKED and domain in ("", "ai.onnx"):
                node = protos[index]
                present = {attr.name for attr in node.attribute}
                missing = [name for name in _READ_UNCHECKED[op] if name not in present]
                if missing:
                    raise StructureError(
                        f"node {printable(node_label(node, index))!r} ({op}) in {where} lacks its required attribute "
                        f"{missing[0]!r}, which onnx's shape inference would crash on: refused")


def check_structure(model: onnx.ModelProto) -> list[ReadGraph]:
    """Every check that must pass before onnx's inliner, shape inference or ONNX Runtime sees the model; the main
    graph's graphs, read on the way (`nodes.read_graphs`), for the walks that follow."""
    graphs = read_graphs(model.graph)
    imports = list(model.opset_import)  # kept alive while the checks below read them (see `nodes.ReadGraph`)
    check_text(model, graphs)  # first: the other checks' messages show names
    check_opsets(model, imports)
    check_functions(model)
    check_acyclic(model, graphs)
    check_defined(graphs)
    check_required_attributes(model, graphs)
    return graphs


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
    force at that version); one onnx's C++ registry cannot even hold is refused before (`check_opsets`).
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


class ExternalData(NamedTuple):
    """One tensor's external data, as the guards allow it to be read: where the tensor lies (for messages), the
    tensor, its file (symlinks resolved, inside the model's folder), and the byte range (length None: to the end)."""

    where: str
    tensor: onnx.TensorProto
    file: Path
    offset: int
    length: int | None


# ONNX Runtime's location for data already in memory (`*/_ORT_MEM_ADDR_/*`, its offset an address): 1.19 honours it in
# a model file too, and 1.32 refuses it there ("not allowed in a model protobuf"); no file may be named after it
ORT_MEMORY_MARKER = "_ORT_MEM_ADDR_"

# attributes declared a number, a string or a type: every reader (ONNX Runtime, onnx-ir, our loader) takes them as
# that, so a tensor or graph field set beside the declaration is never read (skipping them keeps the walk quick)
_PLAIN = PLAIN_ATTRIBUTES
_LOCATION = attrgetter("data_location")
_NAME = attrgetter("name")
_SPARSE_NAME = attrgetter("values.name")
_VERSION = attrgetter("version")


def _attribute_tensors(attr: onnx.AttributeProto) -> Iterator[tuple[str, onnx.TensorProto]]:
    """The tensors an attribute (not `_PLAIN`) holds, whichever of its fields holds them: a reader may go by its
    declared type or by what is set (an attribute without a type)."""
    if attr.HasField("t"):
        yield "", attr.t
    for k, tensor in enumerate(attr.tensors):
        yield f"[{k}]", tensor
    sparse = [("", attr.sparse_tensor)] if attr.HasField("sparse_tensor") else []
    for own, tensor in (*sparse, *((f"[{k}]", s) for k, s in enumerate(attr.sparse_tensors))):
        yield f"{own} values", tensor.values
        yield f"{own} indices", tensor.indices


def model_tensors(model: onnx.ModelProto, graphs: Iterable[ReadGraph] = ()) -> Iterator[tuple[str, onnx.TensorProto]]:
    """Every tensor of the model a runtime or onnx may read, with where it lies: the initializers and sparse
    initializers (their values and indices) of the main graph, its subgraphs and the training graphs, and every
    tensor, tensor list and sparse tensor held by a node attribute there (but one declared a number, a string or a
    type: `_PLAIN`), in model-local function bodies (their subgraphs included) and among the functions' default
    attribute values. Our own walk, without recursion: onnx's private `_get_all_tensors` skips function bodies in
    onnx 1.16, and sparse tensors in 1.16 and 1.23 alike.

    `graphs`: the main graph's graphs as `nodes.read_graphs` read them, if at hand: in those graphs only the nodes
    they found holding an attribute outside `_PLAIN` (`ReadGraph.holding`) are visited; the same tensors either way.
    """
    return _tensors(model, graphs, external=False)


def _tensors(
    model: onnx.ModelProto, graphs: Iterable[ReadGraph], external: bool
) -> Iterator[tuple[str, onnx.TensorProto]]:
    """`model_tensors`; with `external`, a graph's initializers are listed only if one of them is external (checked
    in C), the rest as `model_tensors` lists them."""
    read_of = {id(read.graph): read for read in graphs}
    # pending: (the scope's name, nodes to walk, a graph whose initializers come first or None, attributes to walk)
    pending: list[tuple[str, onnx.GraphProto | None, Sequence[onnx.NodeProto], Iterable[onnx.AttributeProto]]] = []
    pending.append(("main graph", model.graph, model.graph.node, ()))
    for k, training in enumerate(model.training_info):
        for part in ("initialization", "algorithm"):
            graph = getattr(training, part)
            pending.append((f"training_info[{k}].{part}", graph, graph.node, ()))
    for function in model.functions:
        name = f"function {printable(function.domain)}.{printable(function.name)}"
        pending.append((name, None, function.node, function.attribute_proto))
    while pending:
        scope, graph, nodes, defaults = pending.pop()
        read = read_of.get(id(graph))
        holding: Iterable[int] = read.holding if read is not None and read.graph is graph else range(len(nodes))
        if graph is not None:
            initializers = graph.initializer
            if not external or onnx.TensorProto.EXTERNAL in map(_LOCATION, initializers):
                for tensor in initializers:
                    yield f"{scope}, initializer", tensor
            for sparse in graph.sparse_initializer:
                yield f"{scope}, sparse initializer (values)", sparse.values
                yield f"{scope}, sparse initializer (indices)", sparse.indices
        for attr in defaults:
            for part, tensor in _attribute_tensors(attr):
                yield f"{scope}, default of attribute {printable(attr.name)!r}{part}", tensor
        for index in holding:
            node = nodes[index]
            for attr in node.attribute:
                if attr.type in _PLAIN:
                    continue
                for part, tensor in _attribute_tensors(attr):
                    yield (
                        f"{scope}, {printable(node_label(node, index))} attribute {printable(attr.name)!r}{part}",
                        tensor,
                    )
                inner = [(attr.name, attr.g)] if attr.HasField("g") else []
                inner += [(f"{attr.name}[{k}]", sub) for k, sub in enumerate(attr.graphs)]
                for own, sub in inner:
                    where = f"{scope}, subgraph {printable(subgraph_path('', node, index, own))}"
                    pending.append((where, sub, sub.node, ()))


def external_tensors(
    model: onnx.ModelProto, graphs: Iterable[ReadGraph] = ()
) -> Iterator[tuple[str, onnx.TensorProto]]:
    """`model_tensors` whose data the model keeps in an external file (as onnx and ONNX Runtime decide it: the
    tensor's data_location is EXTERNAL)."""
    external = onnx.TensorProto.EXTERNAL
    return ((where, tensor) for where, tensor in _tensors(model, graphs, True) if tensor.data_location == external)


def _refusal(where: str, tensor: onnx.TensorProto, reason: str) -> StructureError:
    return StructureError(f"tensor {printable(tensor.name)!r} ({where}): {reason}")


def _located(where: str, tensor: onnx.TensorProto, base: Path) -> tuple[Path, dict[str, str]]:
    """The file a tensor's external data names, resolved (symlinks followed) and inside `base`, with its entries."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    if not all(isinstance(text, str) for entry in info.items() for text in entry):  # protobuf's bytes: not UTF-8
        raise _refusal(where, tensor, "external data entries that are not UTF-8 text: refused")
    location = info.get("location", "")
    shown = printable(location)
    if not location or os.path.isabs(location):
        raise _refusal(where, tensor, f"external data location {shown!r} is not a relative path")
    if ORT_MEMORY_MARKER in location:
        raise _refusal(
            where, tensor, f"external data location {shown!r} names ONNX Runtime's in-memory address marker (ONNX "
            "Runtime 1.19 reads the process's memory at its offset): refused"
        )  # fmt: skip
    try:
        file = (base / location).resolve()
    except (OSError, ValueError, RuntimeError) as error:  # a NUL in it, a symlink loop
        raise _refusal(where, tensor, f"external data location {shown!r} cannot be resolved ({error})") from None
    if not file.is_relative_to(base):
        raise _refusal(where, tensor, f"external data {shown!r} resolves outside the model's folder: refused")
    return file, info


def may_hold_external(model: onnx.ModelProto, graphs: list[ReadGraph]) -> bool:
    """False when no tensor of the model can keep its data externally, decided in C: the main graph (as `graphs`
    read it) holds no subgraph or tensor attribute, no sparse initializer, no initializer kept externally, and the
    model no function or training graph. (True: `check_external_locations` walks its tensors.)"""
    main = model.graph
    read = graphs[0] if graphs and graphs[0].graph is main else next((r for r in graphs if r.graph is main), None)
    return (read is None or bool(read.holding) or bool(model.functions) or bool(model.training_info)
            or bool(main.sparse_initializer) or onnx.TensorProto.EXTERNAL in map(_LOCATION, read.initializers))


def check_external_locations(model: onnx.ModelProto, folder: Path, graphs: Iterable[ReadGraph] = ()) -> None:
    """Refuse a model any of whose tensors (`model_tensors`; `graphs` as it takes them) keeps its data at a location
    that is absolute or resolves outside `folder` (after symlinks): the rule every tool applies to a model it opens,
    though it reads no weights. A missing file is no refusal here: the weights are not needed to read the graph."""
    graphs = graphs if isinstance(graphs, list) else list(graphs)
    if not may_hold_external(model, graphs):
        return
    base = None  # resolved at the first external tensor: most models keep none, and resolving costs a syscall a part
    for where, tensor in external_tensors(model, graphs):
        base = folder.resolve() if base is None else base
        _located(where, tensor, base)


def check_external_data(model: onnx.ModelProto, folder: Path) -> list[ExternalData]:
    """What `check_external_locations` refuses, and external data that is not a regular file or claims bytes past
    the end of its file; the external data of every tensor (`model_tensors`), checked, for a reader to read."""
    base = folder.resolve()
    found = []
    for where, tensor in external_tensors(model):
        file, info = _located(where, tensor, base)
        shown = printable(info.get("location", ""))
        if not file.is_file():
            raise _refusal(where, tensor, f"external data file {shown!r} is missing or not a file")
        try:
            offset, length = int(info.get("offset") or 0), info.get("length")
            wanted = None if length is None else int(length)
        except ValueError:
            raise _refusal(where, tensor, "external data offset or length is not a number") from None
        size = file.stat().st_size
        available = size - offset
        if offset < 0 or available < 0 or (wanted is not None and not 0 <= wanted <= available):
            claimed = f"{wanted:,}" if wanted is not None else "the rest of its"
            raise _refusal(
                where,
                tensor,
                f"external data claims {claimed} bytes at offset {offset:,} of {shown!r}, which holds {size:,}",
            )
        found.append(ExternalData(where, tensor, file, offset, wanted))
    return found


def check_in_memory(model: onnx.ModelProto) -> None:
    """Refuse an in-memory model with external data: it has no folder to keep its weights in, so a runtime would
    look for them relative to whatever directory it runs in."""
    for where, tensor in external_tensors(model):
        location = printable(next((e.value for e in tensor.external_data if e.key == "location"), ""))
        raise _refusal(
            where,
            tensor,
            f"external data {location!r} in a model held in memory (no folder to read it from): "
            "save the model to a file, or load its weights into it first",
        )
