"""Notebook 02 on notebook 01's tiny export: lint, blame, figures and divergence, in step with outputs/."""

import pytest

from tests.conftest import TINY, load_json, run_name, run_notebook
from where223.graph.lint import FindingKind
from where223.pipeline.paths import OUTPUTS

pytestmark = pytest.mark.slow
PATH = "onnx_export"


@pytest.fixture(scope="module")
def graph_dir(reproduced, session_outputs):
    reproduced("onnx_export")
    run_notebook("02_graph", session_outputs, path=PATH, **TINY, hops=1)
    return session_outputs / run_name(PATH, **TINY) / "graph"


def conflicts(lint: dict) -> list[tuple]:
    return [(v["node"], v["type_param"], tuple(b["type"] for b in v["offending"]))
            for v in lint["violations"] if v["kind"] == FindingKind.BINDING_CONFLICT]


def test_lint_flags_every_where_including_the_one_ort_named(graph_dir, reproduced):
    lint = load_json(graph_dir / "lint.json")
    nodes = [node for node, _, _ in conflicts(lint)]
    assert nodes == ["/transformer/h.0/attn/Where", "/transformer/h.1/attn/Where"]
    assert reproduced("onnx_export")[1]["error"]["type_binding"]["node"] in nodes
    assert conflicts(lint)[0][1:] == ("T", ("tensor(bfloat16)",))


def test_blame_names_the_torch_where_line(graph_dir):
    blame = load_json(graph_dir / "blame.json")
    first = blame["model_frames"][0]
    assert (first["file"], first["line"]) == ("transformers/models/gpt2/modeling_gpt2.py", 201)
    assert first["code"] == "attn_weights = torch.where(causal_mask, attn_weights, mask_value)"


def test_divergence_starts_at_the_scale_line_not_the_where(graph_dir):
    found = load_json(graph_dir / "divergence.json")
    first = found["first"]
    assert (first["file"], first["line"]) == ("transformers/models/gpt2/modeling_gpt2.py", 185)
    assert (first["graph_node"], first["graph_dtype"], first["eager_dtype"]) == (
        "/transformer/h.0/attn/Div", "float", "bfloat16")
    lines = sorted({(d["line"], d["graph_node"].split("/")[-1]) for d in found["divergences"]})
    assert lines == [(185, "Div"), (201, "Where")]


def test_figures_are_drawn(graph_dir):
    for stem in ("neighbourhood", "precision", "divergence"):
        for suffix in (".png", ".svg"):
            assert (graph_dir / f"{stem}{suffix}").stat().st_size > 5_000, stem


def test_committed_graph_records_agree_with_the_code(graph_dir):
    committed = OUTPUTS / run_name(PATH) / "graph"
    assert conflicts(load_json(committed / "lint.json")) == conflicts(load_json(graph_dir / "lint.json"))
    fresh, kept = load_json(graph_dir / "divergence.json"), load_json(committed / "divergence.json")
    assert [(d["line"], d["graph_node"]) for d in kept["divergences"]] == [
        (d["line"], d["graph_node"]) for d in fresh["divergences"]]


def test_netron_is_embedded_from_loopback_and_stopped(reproduced, session_outputs):
    import re
    import socket

    reproduced("onnx_export")
    executed = run_notebook("02_graph", session_outputs, path=PATH, **TINY, hops=1, show_netron=True)
    urls = set(re.findall(r"http://127\.0\.0\.1:(\d+)", executed.read_text()))
    assert len(urls) == 1, urls
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(urls.pop())), timeout=2).close()


VOLATILE = {"timing", "environment"}


def stable(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in VOLATILE}


def test_a_rerun_of_02_records_the_same_json(graph_dir, session_outputs):
    """Notebook 02 again with the same parameters, over the session's runs: every JSON record (lint, blame,
    divergence, and 01's reproduce, which 02 reads) is the same but for its timing and environment (a rerun of 01
    alone: tests/notebooks/test_01_reproduce.py)."""
    folder = session_outputs / run_name(PATH, **TINY)

    def records() -> dict:
        written = sorted(folder.glob("*.json")) + sorted(graph_dir.glob("*.json"))
        return {path.relative_to(folder): stable(load_json(path)) for path in written}

    first = records()
    assert {path.name for path in first} == {"reproduce.json", "lint.json", "blame.json", "divergence.json"}
    run_notebook("02_graph", session_outputs, path=PATH, **TINY, hops=1)
    assert records() == first
    assert stable({"timing": 1, "verdict": "x"}) == {"verdict": "x"}  # control: only the volatile keys are left out
