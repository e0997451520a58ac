"""Figures: dtype-labelled neighbourhoods with conflicts marked, per-layer precision, before/after."""

from __future__ import annotations

import time

import onnx
import pytest
from onnx import TensorProto, helper

from tests.graph import hostile
from where223.cli import main
from where223.cli._graph import Draw
from where223.graph.draw import (
    draw_before_after,
    draw_neighbourhood,
    draw_precision_summary,
    layered_layout,
    neighbourhood,
    precision_table,
)
from where223.graph.lint import lint_types
from where223.graph.repair import repair
from where223.graph.types import model_types


def _edges(graph):
    return {(u, v): (d["dtypes"], d["conflict"]) for u, v, d in graph.edges(data=True)}


def _assert_figures(paths, stem):
    assert [p.name for p in paths] == [f"{stem.name}.png", f"{stem.name}.svg"]
    png, svg = paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert b"<svg" in svg.read_bytes()[:500] and svg.stat().st_size > 5000


def test_neighbourhood_labels_and_conflicts(repairable_model):
    types = model_types(repairable_model)
    graph = neighbourhood(types, "Where_223", 1, lint_types(types).violations)
    assert _edges(graph) == {
        ("input:cond", "Where_223"): (["bool"], False),
        ("input:x", "Where_223"): (["float"], False),
        ("input:y", "Where_223"): (["float16"], True),
        ("Where_223", "Clip_7"): (["float"], False),
    }
    # Clip_7 has its own conflict (on `hi`), so it is marked, but the float edge into it is not
    assert graph.nodes["Where_223"]["violation"] and graph.nodes["Clip_7"]["violation"]
    assert not graph.nodes["input:x"].get("violation")
    positions = layered_layout(graph)
    assert all(positions[u][0] < positions[v][0] for u, v in graph.edges)


def test_neighbourhood_inside_a_subgraph(repairable_model):
    types = model_types(repairable_model)
    graph = neighbourhood(types, "then_add", 2, lint_types(types).violations)
    assert graph.graph["subgraph"] == "If_3/then_branch"
    assert _edges(graph) == {
        ("outer:x", "then_add"): (["float"], False),
        ("outer:y", "then_add"): (["float16"], True),
        ("then_add", "output:then_out"): (["float"], False),
    }


def test_draw_neighbourhood_and_before_after(repairable_model, tmp_path):
    stem = tmp_path / "figs" / "where"
    _assert_figures(draw_neighbourhood(repairable_model, "Where_223", 2, stem), stem)
    repaired, _ = repair(repairable_model)
    stem = tmp_path / "before_after"
    paths = draw_before_after(
        repairable_model, repaired, "Where_223", "Where_223", stem, ("broken", "repaired")
    )
    _assert_figures(paths, stem)


def _layered_model():
    """Two attention layers: layer 0's MatMul runs in float16; layer 1 computes in float, then int32."""
    nodes = [helper.make_node("Cast", ["q"], ["q32"], name="/transformer/Cast", to=TensorProto.FLOAT)]
    for layer, source in ((0, "q"), (1, "q32")):
        prefix = f"/transformer/h.{layer}/attn"
        nodes += [
            helper.make_node("MatMul", [source, source], [f"mm{layer}"], name=f"{prefix}/MatMul"),
            helper.make_node(
                "Cast",
                [f"mm{layer}"],
                [f"c{layer}"],
                name=f"{prefix}/Cast",
                to=(TensorProto.FLOAT, TensorProto.INT32)[layer],
            ),
            helper.make_node("Shape", [f"c{layer}"], [f"s{layer}"], name=f"{prefix}/Shape"),
            helper.make_node(
                "Where", ["cond", f"c{layer}", f"c{layer}"], [f"w{layer}"], name=f"{prefix}/Where"
            ),
        ]
    graph = helper.make_graph(
        nodes,
        "layers",
        [
            helper.make_tensor_value_info("q", TensorProto.FLOAT16, [2, 2]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, [2, 2]),
        ],
        [helper.make_tensor_value_info("w1", TensorProto.INT32, [2, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_precision_summary(tmp_path):
    model = _layered_model()
    assert precision_table(model) == {
        0: {"MatMul": "float16", "Cast": "float", "Where": "float"},
        1: {"MatMul": "float", "Cast": "other", "Where": "other"},
    }
    stem = tmp_path / "precision"
    _assert_figures(draw_precision_summary(model, stem), stem)
    with pytest.raises(ValueError, match="no node name matches"):
        precision_table(model, pattern=r"/layers\.(?P<layer>\d+)/(?P<op>.+)$")


def test_cli(repairable_model, clean_model, save, tmp_path, capsys):
    stem = tmp_path / "cli"
    assert main(["draw", str(save(repairable_model)), "--stem", str(stem), "--hops", "1"]) == 0
    assert capsys.readouterr().out.split() == [f"{stem}.png", f"{stem}.svg"]
    assert main(["draw", str(save(clean_model, "clean.onnx")), "--stem", str(stem)]) == 1
    assert "no violations; name a node" in capsys.readouterr().err
    assert main(["draw", str(save(clean_model, "clean.onnx")), "Where_224", "--stem", str(stem)]) == 2
    assert "close names: Where_223" in capsys.readouterr().err
    assert main(["draw", str(tmp_path / "absent.onnx")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_node_with_100000_inputs_is_drawn_capped_within_seconds(tmp_path, capsys, monkeypatch):
    """A node with 100,000 inputs: every edge was laid out (past 120 s). At most MAX_DRAWN_EDGES are drawn, the
    nodes nearest the centre first, and the figure's title and the command's output line say how many were left
    out; the control, a neighbourhood under the cap, draws every edge and says nothing of the kind."""
    from where223.graph import draw

    cap = draw.MAX_DRAWN_EDGES
    assert f"At most {cap} edges are drawn" in " ".join(Draw.__doc__.split())  # the command's help says the cap
    small = model_types(hostile.wide_node(cap + 41))
    graph = neighbourhood(small, "wide", 2, [])
    assert graph.number_of_edges() == cap and graph.graph["edges_within"] == cap + 42  # + the edge to output y
    assert graph.graph["left_out"] == 42 and set(graph.nodes) == {"wide", *(f"input:x{k}" for k in range(cap))}
    at_cap = neighbourhood(model_types(hostile.wide_node(cap - 1)), "wide", 2, [])  # cap - 1 inputs and y: the cap
    assert at_cap.number_of_edges() == cap and at_cap.graph["left_out"] == 0 and "output:y" in at_cap
    titles = []
    monkeypatch.setattr(draw, "_draw_on", lambda ax, graph, title, real=draw._draw_on: titles.append(title)
                        or real(ax, graph, title))  # fmt: skip
    path = tmp_path / "wide.onnx"
    onnx.save(hostile.wide_node(100_000), str(path))
    started = time.monotonic()
    assert main(["draw", str(path), "wide", "--stem", str(tmp_path / "wide")]) == 0
    assert time.monotonic() - started < 30
    note = f"{cap} of 100,001 edges drawn, {100_001 - cap:,} left out (at most {cap} are drawn)"
    stem = tmp_path / "wide"
    assert capsys.readouterr().out.splitlines() == [f"wide, 2-hop neighbourhood: {note}", f"{stem}.png", f"{stem}.svg"]
    assert titles == [f"wide: 2-hop neighbourhood\n{note}"]
    onnx.save(hostile.wide_node(3), str(path))  # the control: under the cap, every edge drawn and nothing said
    assert main(["draw", str(path), "wide", "--stem", str(stem)]) == 0
    assert capsys.readouterr().out.split() == [f"{stem}.png", f"{stem}.svg"]
    assert titles[1:] == ["wide: 2-hop neighbourhood"]
