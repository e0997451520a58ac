"""Headless figures of ONNX graphs: dtype-labelled neighbourhoods and per-layer precision summaries.

matplotlib's Agg canvas and networkx only (no graphviz, no pyplot state). Layouts are layered by
longest path, so data flows left to right. A neighbourhood draws at most MAX_DRAWN_EDGES edges, and says how many
it left out.
"""

from __future__ import annotations

import os
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable
from pathlib import Path

import networkx as nx
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from where223.errors import Finding, printable
from where223.figures import TEXT_SIZE, TITLE_SIZE, new_figure, save_figure
from where223.graph.blame import blame
from where223.graph.dtypes import short_type
from where223.graph.lint import Violation, lint_types
from where223.graph.loading import ModelLike, find_node, load_model
from where223.graph.nodes import collector_paused, node_label
from where223.graph.types import ModelTypes, Scope, model_types

CONFLICT_COLOUR = "#d62728"
# torch's scope names for GPT-2 attention: /transformer/h.<layer>/attn/<op>
GPT2_ATTENTION = r"/h\.(?P<layer>\d+)/attn/(?P<op>.+)$"
FLOATING = ("float", "float16", "bfloat16", "double")
PRECISION_CLASSES = (*FLOATING, "other", "untyped")
_PRECISION_COLOURS = ("#4c72b0", "#dd8452", "#c44e52", "#8172b3", "#bbbbbb", "#ffffff")
_REDUCED = ("float16", "bfloat16")


# Longest line of text inside a node's box, in characters: longer scopes are cut in the middle.
_BOX_CHARS = 16
# Characters of a node or subgraph name in a title (a model's names can be a megabyte long).
TITLE_NAME_LIMIT = 80
# Inches per layer of a neighbourhood and per row of a grid: small enough for MIN_TEXT_PX at page width.
_LAYER_WIDTH = 1.75
_ROW_HEIGHT = 0.2
# Edges of a neighbourhood drawn, at most: a figure at its tallest (24 in, `_figure_size`) holds 25 boxes in a layer,
# which 24 edges cannot overfill, and laying out a node's 100,000 inputs took hours. The nodes nearest the centre
# (breadth first) are drawn; the title and `where223 draw` say how many edges were left out. GPT-2's 2- and 3-hop
# neighbourhoods of its Where have 9 and 21.
MAX_DRAWN_EDGES = 24


def _cut(text: str, limit: int = _BOX_CHARS) -> str:
    """`text` cut in the middle to at most `limit` characters: onnx::Where_178_where223_float -> onnx::W…23_float."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return f"{text[:head]}…{text[-(limit - 1 - head):]}"


def _short_name(name: str) -> str:
    """The last three scopes of a node name, broken in two lines when long: /transformer/h.0/attn/Where ->
    h.0/attn/Where."""
    parts = [_cut(p) for p in name.split("/") if p][-3:]
    if not parts:
        return name
    joined = "/".join(parts)
    return joined if len(joined) <= _BOX_CHARS else f"{'/'.join(parts[:-1])}/\n{parts[-1]}"


def neighbourhood(types: ModelTypes, node_name: str, hops: int, violations: list[Violation]) -> nx.DiGraph:
    """The nodes within `hops` edges of `node_name` as a DiGraph whose edges carry value names and dtypes.

    Graph inputs, initializers, values from outer scopes and graph outputs appear as their own nodes.
    Sources (those, and nodes without inputs such as Constant) end the walk: a constant shared by
    every layer does not pull every layer in.
    An edge is `conflict` when it carries an offending value of a violation at either end.

    At most MAX_DRAWN_EDGES edges are drawn (a node with 100,000 inputs would take hours to lay out): the nodes
    are taken in breadth-first order from the centre while their edges fit. The graph's attributes say how many
    edges lie within `hops` (`edges_within`) and how many of them were left out (`left_out`).
    """
    with collector_paused():  # a dict and two lists per edge: collections would traverse them again and again
        return _neighbourhood(types, node_name, hops, violations)


def _neighbourhood(types: ModelTypes, node_name: str, hops: int, violations: list[Violation]) -> nx.DiGraph:
    path, centre_index, _ = find_node(types.scopes[""].graph, node_name)
    scope: Scope = types.scopes[path]
    nodes = list(scope.graph.node)
    producer: dict[str, str] = {}
    # the whole graph in plain dicts (networkx only for what is drawn): a node's attributes, its out-edges' data (in
    # the order they were made), its neighbours either way (one entry per edge), and the nodes with an in-edge
    attributes: dict[str, dict[str, object]] = {}
    out_edges: dict[str, dict[str, dict[str, object]]] = {}
    adjacent: dict[str, list[str]] = {}
    has_input: set[str] = set()
    # one key per drawn node: a node's label, made unique when two nodes share a name (or a name looks like a
    # source's key), so that a model cannot merge two nodes into one (and make a cycle of them)
    keys: list[str] = []

    def add(key: str, data: dict[str, object]) -> str:
        candidate, k = key, 1
        while candidate in attributes:
            k += 1
            candidate = f"{key} #{k}"
        attributes[candidate], out_edges[candidate], adjacent[candidate] = data, {}, []
        return candidate

    for index, node in enumerate(nodes):
        label = add(node_label(node, index), {"kind": "op", "op_type": node.op_type, "name": node.name})
        keys.append(label)
        producer.update({out: label for out in node.output if out})
    graph_outputs = {v.name for v in scope.graph.output}
    graph_inputs = {v.name for v in scope.graph.input}
    initializers = {t.name for t in scope.graph.initializer}
    here = [v for v in violations if v.subgraph == path and v.node_index < len(nodes)]
    offending = {(keys[v.node_index], b.io, b.name) for v in here for b in v.offending}
    bad_nodes = {keys[v.node_index] for v in here}
    sources: dict[tuple[str, str], str] = {}

    def connect(source: str, target: str, value: str, conflict: bool) -> None:
        data = out_edges[source].get(target)
        if data is None:
            data = out_edges[source][target] = {"values": [], "conflict": False}  # dtypes: once drawn
            adjacent[source].append(target)
            adjacent[target].append(source)
            has_input.add(target)
        data["values"].append(value)
        data["conflict"] = data["conflict"] or conflict

    for index, node in enumerate(nodes):
        label = keys[index]
        for value in (v for v in node.input if v):
            source = producer.get(value)
            if source is None:
                if value in initializers:
                    kind = "initializer"
                else:
                    kind = "input" if value in graph_inputs else "outer"
                if (kind, value) not in sources:
                    sources[(kind, value)] = add(f"{kind}:{value}", {"kind": kind, "op_type": kind, "name": value})
                source = sources[(kind, value)]
            conflict = bool(offending) and (
                (label, "input", value) in offending or (source, "output", value) in offending
            )
            connect(source, label, value, conflict)
        for value in (v for v in node.output if v in graph_outputs):
            if ("output", value) not in sources:
                sources[("output", value)] = add(
                    f"output:{value}", {"kind": "output", "op_type": "output", "name": value}
                )
            connect(label, sources[("output", value)], value, (label, "output", value) in offending)
    for label in bad_nodes:
        attributes[label]["violation"] = True

    centre = keys[centre_index]
    seen = {centre: 0}  # node -> hops from the centre, in breadth-first order
    queue = deque([centre])
    while queue:
        current = queue.popleft()
        is_source = current not in has_input or attributes[current]["kind"] != "op"
        if seen[current] == hops or (is_source and current != centre):
            continue
        for other in adjacent[current]:
            if other not in seen:
                seen[other] = seen[current] + 1
                queue.append(other)
    # the longest breadth-first prefix whose edges (each counted at its later end) fit under the cap
    position = {node: k for k, node in enumerate(seen)}
    within = drawn = 0
    kept: set[str] = set()
    for node, k in position.items():
        own = sum(1 for other in adjacent[node] if position.get(other, k) < k)
        within += own
        if within <= MAX_DRAWN_EDGES and len(kept) == k:
            drawn = within
            kept.add(node)
    # built in the model's order, as networkx would list the whole graph's nodes and edges
    sub = nx.DiGraph(centre=centre, subgraph=path, edges_within=within, left_out=within - drawn)
    sub.add_nodes_from((node, data) for node, data in attributes.items() if node in kept)
    drawn_edges = [(u, v, d) for u, targets in out_edges.items() if u in kept for v, d in targets.items() if v in kept]
    sub.add_edges_from(
        (u, v, {"values": d["values"], "dtypes": [short_type(scope.type_of(value) or "?") for value in d["values"]],
                "conflict": d["conflict"]})
        for u, v, d in drawn_edges
    )  # fmt: skip
    return sub


def left_out_note(graph: nx.DiGraph) -> str:
    """What a capped neighbourhood left out ('' when nothing): `120 of 100,001 edges drawn, 99,881 left out`."""
    left_out = graph.graph.get("left_out", 0)
    if not left_out:
        return ""
    within = graph.graph["edges_within"]
    return (
        f"{within - left_out:,} of {within:,} edges drawn, {left_out:,} left out (at most {MAX_DRAWN_EDGES} are drawn)"
    )


def _layers(graph: nx.DiGraph) -> dict[str, int]:
    """Longest-path layers, with sources pulled right up to just before their first consumer."""
    layer: dict[str, int] = {}
    for node in nx.topological_sort(graph):
        layer[node] = max((layer[p] + 1 for p in graph.predecessors(node)), default=0)
    for node in graph.nodes:
        if graph.in_degree(node) == 0 and graph.out_degree(node):
            layer[node] = min(layer[s] for s in graph.successors(node)) - 1
    low = min(layer.values(), default=0)
    return {node: value - low for node, value in layer.items()}


def layered_layout(graph: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """Left-to-right positions: x by layer, y ordered within a layer by the mean y of its neighbours
    (a forward then a backward barycentre sweep, which removes most crossings in small graphs)."""
    layers = _layers(graph)
    columns: dict[int, list[str]] = {}
    for node in graph.nodes:
        columns.setdefault(layers[node], []).append(node)
    rank = {node: i - (len(col) - 1) / 2 for col in columns.values() for i, node in enumerate(col)}

    def sweep(order: list[int], neighbours: Callable[[str], Iterable[str]]) -> None:
        for x in order:

            def centre(node: str) -> float:
                ys = [rank[n] for n in neighbours(node)]
                return sum(ys) / len(ys) if ys else rank[node]

            columns[x].sort(key=centre)
            rank.update({node: float(i) - (len(columns[x]) - 1) / 2 for i, node in enumerate(columns[x])})

    sweep(sorted(columns)[1:], graph.predecessors)
    sweep(sorted(columns, reverse=True)[1:], graph.successors)
    return {node: (float(layers[node]), -rank[node]) for node in graph.nodes}


def _draw_on(ax: Axes, graph: nx.DiGraph, title: str) -> None:
    """Draw a neighbourhood on one axes: a box sized to its text per op, grey for sources and sinks, red conflicts.

    Each box is its label's own frame, so a long name widens its box instead of spilling out of it.
    """
    positions = layered_layout(graph)
    for n, d in graph.nodes(data=True):
        # names and op types come from the model: escaped (no control characters reach the SVG) and cut
        name = _short_name(printable(d["name"] or n)) if d["kind"] == "op" else _cut(printable(d["name"]))
        label = f"{_cut(printable(d['op_type'])) if d['kind'] == 'op' else d['kind']}\n{name}"
        fill = "#fbd5d5" if d.get("violation") else ("#e8eef7" if d["kind"] == "op" else "#eeeeee")
        border = CONFLICT_COLOUR if d.get("violation") else ("#1f3b73" if n == graph.graph.get("centre") else "#888888")
        ax.text(
            *positions[n],
            label,
            fontsize=TEXT_SIZE,
            ha="center",
            va="center",
            zorder=3,
            parse_math=False,  # a `$` in a model's name is text, not mathtext to parse
            bbox={"boxstyle": "square,pad=0.4", "fc": fill, "ec": border, "lw": 1.5},
        )
    edge_colours = [CONFLICT_COLOUR if d["conflict"] else "#555555" for _, _, d in graph.edges(data=True)]
    widths = [2.5 if d["conflict"] else 1.0 for _, _, d in graph.edges(data=True)]
    nx.draw_networkx_edges(
        graph,
        positions,
        ax=ax,
        edge_color=edge_colours,
        width=widths,
        arrows=True,
        arrowsize=12,
        node_size=0,
        min_source_margin=36,
        min_target_margin=36,
    )
    texts = nx.draw_networkx_edge_labels(
        graph,
        positions,
        edge_labels={(u, v): ", ".join(d["dtypes"]) for u, v, d in graph.edges(data=True)},
        ax=ax,
        font_size=TEXT_SIZE,
        rotate=False,
        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9},
    )
    for (u, v), text in texts.items():
        text.set_zorder(4)
        if graph.edges[u, v]["conflict"]:
            text.set_color(CONFLICT_COLOUR)
    ax.set_title(title, fontsize=TITLE_SIZE, parse_math=False)
    ax.set_axis_off()
    ax.margins(0.12, 0.15)


def _figure_size(graph: nx.DiGraph) -> tuple[float, float]:
    """Width from the number of layers, height from the most crowded layer."""
    counts = Counter(_layers(graph).values())
    return min(0.8 + _LAYER_WIDTH * len(counts), 40.0), min(1.0 + 0.9 * max(counts.values(), default=1), 24.0)


def _typed(model: ModelLike) -> tuple[ModelTypes, list[Violation]]:
    loaded, path = load_model(model)
    types = model_types(loaded, path)
    return types, lint_types(types).violations


class NothingToDrawError(Finding, ValueError):
    """No node was named and the model has no violation to centre the drawing on."""


def draw_neighbourhood(
    model: ModelLike,
    node_name: str | None,
    hops: int,
    path_stem: str | os.PathLike[str],
    highlight: list[Violation] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[Path]:
    """PNG and SVG of the nodes within `hops` of `node_name`, every edge labelled by its dtype.

    `highlight` defaults to the model's own lint violations; their offending edges are drawn red. Without
    `node_name` the drawing centres on the first of them (NothingToDrawError when there is none). When more than
    MAX_DRAWN_EDGES edges lie within `hops`, the title says how many were left out, and so does `say` (given).
    """
    types, violations = _typed(model)
    shown = violations if highlight is None else highlight
    if node_name is None:
        if not shown:
            raise NothingToDrawError("the model has no violations; name a node to draw")
        first = shown[0]  # a finding inside a function body is drawn at the node that runs the body
        node_name = first.function_call["node"] if first.function_call else first.node
    return _render(types, shown, node_name, hops, path_stem, say)


def _render(
    types: ModelTypes,
    violations: list[Violation],
    node_name: str,
    hops: int,
    path_stem: str | os.PathLike[str],
    say: Callable[[str], None] | None = None,
) -> list[Path]:
    graph = neighbourhood(types, node_name, hops, violations)
    figure = new_figure(_figure_size(graph))
    name = printable(node_name, TITLE_NAME_LIMIT)
    where = f" in {printable(graph.graph['subgraph'], TITLE_NAME_LIMIT)}" if graph.graph["subgraph"] else ""
    title = f"{name}{where}: {hops}-hop neighbourhood"
    note = left_out_note(graph)
    if note and say is not None:
        say(f"{name}{where}, {hops}-hop neighbourhood: {note}")
    _draw_on(figure.add_subplot(1, 1, 1), graph, f"{title}\n{note}" if note else title)
    return save_figure(figure, path_stem)


def draw_before_after(
    model_a: ModelLike,
    model_b: ModelLike,
    node_a: str,
    node_b: str,
    path_stem: str | os.PathLike[str],
    titles: tuple[str, str] = ("before", "after"),
    hops: int = 2,
) -> list[Path]:
    """The neighbourhoods of `node_a` in `model_a` and `node_b` in `model_b`, one above the other (side by side
    they would be shrunk to half the page width)."""
    graphs = []
    for model, node in ((model_a, node_a), (model_b, node_b)):
        types, violations = _typed(model)
        graphs.append(neighbourhood(types, node, hops, violations))
    sizes = [_figure_size(graph) for graph in graphs]
    figure = new_figure((max(w for w, _ in sizes), sum(h for _, h in sizes)))
    axes = figure.subplots(2, 1, gridspec_kw={"height_ratios": [h for _, h in sizes]})
    for ax, graph, title in zip(axes, graphs, titles, strict=True):
        note = left_out_note(graph)
        _draw_on(ax, graph, f"{title}\n{note}" if note else title)
    figure.tight_layout()
    return save_figure(figure, path_stem)


def precision_table(model: ModelLike, pattern: str = GPT2_ATTENTION) -> dict[int, dict[str, str]]:
    """Per layer, the precision class of each floating-point tensor produced in the matched block.

    `pattern` must name groups `layer` and `op` in node names. Values are one of PRECISION_CLASSES
    ('other' for a non-floating type); columns whose tensors are never floating point (shapes, masks,
    indices) are left out.
    """
    types, _ = _typed(model)
    scope = types.scopes[""]
    regex = re.compile(pattern)
    table: dict[int, dict[str, str]] = {}
    floating: set[str] = set()
    for node in scope.graph.node:
        match = regex.search(node.name)
        if not match:
            continue
        for position, value in enumerate(node.output):
            if not value:
                continue
            column = match["op"] if position == 0 else f"{match['op']}:{position}"
            value_type = scope.type_of(value)
            dtype = short_type(value_type) if value_type else "untyped"
            if dtype in FLOATING:
                floating.add(column)
            elif dtype != "untyped":
                dtype = "other"
            table.setdefault(int(match["layer"]), {})[column] = dtype
    if not table:
        raise ValueError(f"no node name matches {pattern!r}: the model has no layer-structured names")
    return {
        layer: {column: dtype for column, dtype in row.items() if column in floating}
        for layer, row in sorted(table.items())
    }


def _draw_grid(
    grid: list[list[int]],
    rows: list[str],
    layers: list[int],
    legend: dict[str, str],
    title: str,
    path_stem: str | os.PathLike[str],
) -> list[Path]:
    """A tensor x layer grid of class indices into `legend` (name -> colour): one row per tensor, so that the
    names read horizontally and the figure stays narrow however many tensors the block has."""
    figure = new_figure((4.6 + 0.45 * len(layers), 1.3 + _ROW_HEIGHT * len(rows)))
    ax = figure.add_subplot(1, 1, 1)
    ax.imshow(grid, cmap=ListedColormap(list(legend.values())), vmin=0, vmax=len(legend) - 1, aspect="auto")
    ax.set_yticks(range(len(rows)), rows, fontsize=TEXT_SIZE)
    ax.set_xticks(range(len(layers)), [f"layer {n}" for n in layers], fontsize=TEXT_SIZE)
    ax.xaxis.tick_top()
    ax.set_xticks([x - 0.5 for x in range(1, len(layers))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(rows))], minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="minor", length=0)
    ax.set_title(title, fontsize=TITLE_SIZE, loc="left")
    handles = [Patch(facecolor=colour, edgecolor="#888888", label=name) for name, colour in legend.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=TEXT_SIZE, frameon=False)
    figure.tight_layout()
    return save_figure(figure, path_stem)


def _source_line(model: ModelLike, node_name: str) -> str:
    """`file.py:LINE` of the innermost model frame the exporter recorded for a node, or '' when none was."""
    frames = blame(model, node_name).model_frames
    return f"{Path(frames[0].file).name}:{frames[0].line}" if frames else ""


def draw_precision_summary(
    model: ModelLike, path_stem: str | os.PathLike[str], pattern: str = GPT2_ATTENTION
) -> list[Path]:
    """A tensor x layer grid of the attention block's float tensors: float, float16, bfloat16, double."""
    table = precision_table(model, pattern)
    columns = list(dict.fromkeys(c for row in table.values() for c in row))
    layers = list(table)
    grid = [[PRECISION_CLASSES.index(table[layer].get(c, "untyped")) for layer in layers] for c in columns]
    reduced = sum(1 for row in table.values() for d in row.values() if d in _REDUCED)
    total = sum(len(row) for row in table.values())
    return _draw_grid(
        grid,
        columns,
        layers,
        dict(zip(PRECISION_CLASSES, _PRECISION_COLOURS, strict=True)),
        f"attention tensors by precision:\n{reduced} of {total} reduced (float16/bfloat16)",
        path_stem,
    )


MARK_COLOURS = {"agrees": "#55a868", "diverges": CONFLICT_COLOUR, "not joined": "#dddddd"}


def draw_node_marks(
    model: ModelLike,
    marks: dict[str, str],
    path_stem: str | os.PathLike[str],
    title: str,
    pattern: str = GPT2_ATTENTION,
) -> list[Path]:
    """A tensor x layer grid of the block's floating tensors, each cell coloured by its node's mark, each row
    named by its op and the source line the exporter recorded for it (first layer's node; none when not recorded).

    `marks` maps node names to 'agrees' or 'diverges' (e.g. eager-versus-graph dtype agreement);
    nodes without a mark are drawn as 'not joined'.
    """
    loaded, _ = load_model(model)
    table = precision_table(loaded, pattern)
    regex = re.compile(pattern)
    by_cell = {(int(m["layer"]), m["op"]): mark for name, mark in marks.items() if (m := regex.search(name))}
    columns = list(dict.fromkeys(c for row in table.values() for c in row))
    first_node = {}
    for node in loaded.graph.node:
        match = regex.search(node.name)
        if match and match["op"] in columns:
            first_node.setdefault(match["op"], node.name)
    rows = [f"{c}  {_source_line(loaded, first_node[c])}" if c in first_node else c for c in columns]
    classes = list(MARK_COLOURS)
    grid = [[classes.index(by_cell.get((layer, c), "not joined")) for layer in table] for c in columns]
    return _draw_grid(grid, [r.rstrip() for r in rows], list(table), MARK_COLOURS, title, path_stem)
