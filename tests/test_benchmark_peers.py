"""benchmarks/peers.py: its scores on hand-built verdicts (with the flag-everything and flag-nothing controls), its
corpus builders on tiny generated sets, the tools' answers read as the benchmark reads them (nothing timed)."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import benchmark_records
from where223.pipeline.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("peers_benchmark", ROOT / "benchmarks" / "peers.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _row(bench, verdict: str, ort_node: str | None = None, part: str = "conformance", **tools) -> dict:
    return {"id": f"{verdict}-{len(tools)}-{ort_node}", "part": part, "verdict": verdict, "ort_node": ort_node,
            "ort_message": f"ONNX Runtime: {verdict}", "tools": tools}


def _rows(bench, answer) -> list[dict]:
    """Three refusals (two name a node), two accepted, one missing kernel, one other error; `answer(row)` is
    each tool's outcome."""
    specs = [("type_error", "a"), ("where_type_error", "w"), ("type_error", None), ("accepted", None),
             ("accepted", None), ("missing_kernel", "mm"), ("other_error", None)]
    rows = [_row(bench, verdict, node) for verdict, node in specs]
    for row in rows:
        row["tools"]["t"] = answer(row)
    return rows


def test_a_tool_that_flags_everything_finds_every_refusal_and_alarms_on_every_accepted_model(bench):
    rows = _rows(bench, lambda row: bench.outcome(["model", "kernel"], summary="bad", seconds=0.5))
    s = bench.score(rows, "t")
    assert (s["type_refusals"], s["refusals_found"]) == (3, 3)  # full recall
    assert (s["accepted"], s["false_alarms"]) == (2, 2)  # and as many false alarms as accepted models
    assert (s["missing_kernel_verdicts"], s["kernels_found"], s["kernel_false_alarms"]) == (1, 1, 2)
    assert s["names_ort_node"] == 0 and s["refusals_with_ort_node"] == 2  # it names no node
    assert (s["other_refusals"], s["flags_on_other_refusals"]) == (1, 1)
    assert s["errors"] == 0 and s["median_s"] == 0.5 and s["timed"] == 7


def test_a_tool_that_flags_nothing_scores_zero(bench):
    s = bench.score(_rows(bench, lambda row: bench.outcome(seconds=0.1)), "t")
    assert s["type_refusals"] == 3 and s["accepted"] == 2
    found = ("refusals_found", "names_ort_node", "false_alarms", "kernels_found", "kernels_name_ort_node",
             "kernel_false_alarms", "flags_on_missing_kernel_models", "flags_on_other_refusals", "errors")
    assert {key: s[key] for key in found} == dict.fromkeys(found, 0)


def test_a_tool_that_names_onnx_runtimes_node_is_credited_with_it_and_errors_count_as_no_answer(bench):
    def answer(row):
        if row["verdict"] == "where_type_error":
            return bench.outcome(error="RuntimeError: boom", seconds=None)
        if row["verdict"] == "missing_kernel":
            return bench.outcome(["kernel"], kernel_nodes=["mm"], seconds=0.3)
        if row["verdict"] in bench.TYPE_REFUSALS:
            return bench.outcome(["model"], nodes=["x", row["ort_node"] or "y"], seconds=0.2)
        return bench.outcome(seconds=0.1)

    s = bench.score(_rows(bench, answer), "t")
    assert (s["refusals_found"], s["names_ort_node"]) == (2, 1)  # the crash found nothing; `a` named, None not
    assert (s["kernels_found"], s["kernels_name_ort_node"], s["kernel_false_alarms"]) == (1, 1, 0)
    assert s["false_alarms"] == 0 and s["errors"] == 1 and s["error_examples"] == ["RuntimeError: boom"]
    assert s["timed"] == 6 and s["median_s"] == 0.15  # the crash has no time: 0.1 x3, 0.2 x2, 0.3


def test_a_function_node_inlined_by_onnx_is_the_node_it_came_from(bench):
    assert bench.same_node("Where_223", ["other", "Where_223__2"])
    assert bench.same_node("Where_223", ["Where_223"])
    assert not bench.same_node("Where_223", ["Where_2234", "xWhere_223"])  # the control: other names
    assert not bench.same_node(None, ["Where_223"])


def test_what_a_peer_finds_that_lint_does_not_is_listed_and_the_reverse_counted(bench):
    rows = [_row(bench, "type_error", "a"), _row(bench, "type_error", "b"), _row(bench, "missing_kernel", "k")]
    rows[0]["tools"] = {"lint": bench.outcome(), "lint --kernels": bench.outcome(),
                        "peer": bench.outcome(["model"], summary="found it")}
    rows[1]["tools"] = {"lint": bench.outcome(["model"]), "lint --kernels": bench.outcome(["model"]),
                        "peer": bench.outcome()}
    rows[2]["tools"] = {"lint": bench.outcome(), "lint --kernels": bench.outcome(["kernel"]),
                        "peer": bench.outcome(["model"])}  # a model flag is not a kernel found
    result = bench.comparison(rows, ["lint", "lint --kernels", "peer"])
    assert list(result) == ["peer"]
    assert result["peer"]["refusals_it_finds_lint_does_not"] == [
        {"id": rows[0]["id"], "ort": "ONNX Runtime: type_error", "peer": "found it"}]
    assert result["peer"]["refusals_lint_finds_it_does_not"] == 1
    assert result["peer"]["kernels_it_finds_lint_does_not"] == []
    assert result["peer"]["kernels_lint_finds_it_does_not"] == 1


def _tiny_models(folder):
    """Two conformance-like models under `folder/node/`: an Add of two inputs, a MatMul with an initializer."""
    value = helper.make_tensor_value_info
    add = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add",
                            [value("x", TensorProto.FLOAT, [2]), value("y", TensorProto.FLOAT, [2])],
                            [value("z", TensorProto.FLOAT, [2])])
    weight = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "w")
    matmul = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["z"])], "matmul",
                               [value("x", TensorProto.FLOAT, [1, 2])], [value("z", TensorProto.FLOAT, [1, 2])],
                               [weight])
    paths = []
    for name, graph in (("test_add", add), ("test_matmul", matmul)):
        path = folder / "node" / name / "model.onnx"
        path.parent.mkdir(parents=True)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        paths.append(path)
    return paths


def test_the_conformance_corpus_is_each_model_with_its_mutants_up_to_the_limit_and_the_same_each_time(bench,
                                                                                                    tmp_path):
    models = _tiny_models(tmp_path / "conformance")
    roots = [tmp_path / "conformance"]
    corpus, described = bench.build_conformance(tmp_path / "out", 100, models, roots)
    assert described["conformance_models"] == 2 and described["models_mutated"] == 2
    mutants = [m for m in corpus if m.kind != "original"]
    assert described["mutants"] == len(mutants) >= 4 and described["by_kind"]["original"] == 2
    assert sum(described["by_kind"].values()) == len(corpus)
    assert {m.source for m in corpus} == {"node/test_add", "node/test_matmul"}
    assert len({m.id for m in corpus}) == len(corpus) and all(m.part == "conformance" for m in corpus)
    for model in corpus:  # each written where it says, nameless nodes named
        assert model.path.is_file() and model.path.is_relative_to(tmp_path / "out")
        assert all(node.name for node in onnx.load(str(model.path)).graph.node)
    original = next(m for m in corpus if m.kind == "original" and m.source == "node/test_add")
    graph = onnx.load(str(original.path)).graph  # the original as it was, but for its node names
    assert [(n.op_type, list(n.input)) for n in graph.node] == [("Add", ["x", "y"])]
    again, _ = bench.build_conformance(tmp_path / "again", 100, models, roots)
    assert [m.path.read_bytes() for m in again] == [m.path.read_bytes() for m in corpus]
    limited, described = bench.build_conformance(tmp_path / "limited", 3, models, roots)  # the control: the limit
    assert described["mutants"] == 3 and described["limit"] == 3
    assert sum(1 for m in limited if m.kind != "original") == 3
    assert [m.id for m in limited] == [m.id for m in corpus[: len(limited)]]


def _export(folder, kind, mib_of_weights=0.0, key=None):
    """A sweep cell's ONNX file, its weights external when it has some, its record beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    value = helper.make_tensor_value_info
    count = max(1, int(mib_of_weights * 2**20 / 4))
    weight = numpy_helper.from_array(np.zeros(count, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["z"], name="add")], "g",
                              [value("x", TensorProto.FLOAT, [count])], [value("z", TensorProto.FLOAT, [count])],
                              [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / f"{kind}.onnx"
    onnx.save_model(model, str(path), save_as_external_data=mib_of_weights > 0, location=f"{kind}.onnx.data",
                    size_threshold=0)
    if key is not None:
        (folder / "record.json").write_text(json.dumps({"key": key}))
    return path


def test_exports_are_found_per_space_and_kind_limited_and_the_large_left_out(bench, tmp_path):
    work = tmp_path / "work"
    key = {"model": "albert", "recipe": "cpu_bf16_autocast", "exporter": "dynamo", "stack": "today"}
    for cell in ("albert-1", "bert-2", "gpt2-3"):
        for kind in ("model", "fixed", "repaired"):
            _export(work / "remedies-today" / cell, kind, key=key)
    _export(work / "remedies-2022" / "deep" / "er" / "x-1", "model")
    _export(work / "remedies-2022" / "big-1", "model", mib_of_weights=2.0)  # over the limit with its weights
    (work / "remedies-2022" / "x-2").mkdir()
    (work / "remedies-2022" / "x-2" / "other.onnx").write_bytes(b"not a sweep file")  # another name: ignored
    corpus, described = bench.find_exports(work, per_source=2, max_mib=1.0)
    assert described["found"] == {"remedies-2022": {"model": 2},
                                  "remedies-today": {"fixed": 3, "model": 3, "repaired": 3}}
    assert described["used"] == {"remedies-2022": {"model": 1}, "remedies-today": {"fixed": 2, "model": 2,
                                                                                  "repaired": 2}}
    assert described["left_out_over_max_mib"] == {"remedies-2022/model": 1} and described["hint"] is None
    assert "export:remedies-2022/deep/er/x-1/model" in {m.id for m in corpus}
    today = [m for m in corpus if m.source == "remedies-today"]
    assert all("recipe=cpu_bf16_autocast" in m.detail for m in today)
    assert all(m.mib <= 1.0 for m in corpus)
    big = work / "remedies-2022" / "big-1" / "model.onnx"
    assert bench.model_mib(big, 10.0) >= 2.0 and bench.model_mib(big, 10.0) > big.stat().st_size / 2**20
    again, _ = bench.find_exports(work, per_source=2, max_mib=1.0)
    assert [m.id for m in again] == [m.id for m in corpus]  # the same choice each time
    none, described = bench.find_exports(tmp_path / "absent", per_source=2, max_mib=1.0)
    assert none == [] and described["found"] == {} and "spaces/remedies-today.yaml" in described["hint"]


def _conflict_model(path):
    """A Where bound to float and float16 (ONNX Runtime refuses it, naming `Where_223`)."""
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "x", "y"], ["z"], name="Where_223")], "g",
        [value("c", TensorProto.BOOL, [2]), value("x", TensorProto.FLOAT, [2]), value("y", TensorProto.FLOAT16, [2])],
        [value("z", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_lint_and_the_checker_answer_with_the_node_they_name(bench, tmp_path):
    path = _conflict_model(tmp_path / "where.onnx")
    lint = bench.run_lint(path, None)
    assert lint["kinds"] == ["model"] and lint["nodes"] == ["Where_223"] and lint["error"] is None
    checker = bench.run_checker(path)
    assert checker["kinds"] == ["model"] and "Where_223" in checker["nodes"]
    judged = bench.run_judge(path)
    assert judged["verdict"] == "where_type_error" and judged["node"] == "Where_223"
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01 not a model")
    assert bench.run_lint(garbage, None)["unreadable"]  # lint's one-line refusal, a flag
    refused = bench.run_in_worker("onnx.checker", garbage, tmp_path)
    assert refused["kinds"] == ["model"] and "ir_version" in refused["summary"] and refused["seconds"] >= 0


def test_polygraphys_report_is_read_as_flags_with_missing_kernels_apart(bench):
    report = {"lint_entries": [
        {"level": "warning", "source": "onnx.checker", "message": "a warning: not a flag", "nodes": ["w"]},
        {"level": "exception", "source": "onnxruntime",
         "message": "Could not find an implementation for MatMul(13) node with name 'mm'", "nodes": ["mm"]},
        {"level": "error", "source": "onnxruntime", "message": "Type Error: Type parameter (T) of Optype (Add) "
         "bound to different types (tensor(float) and tensor(float16) in node (add).", "nodes": ["add"]},
    ]}
    answer = bench.polygraphy_outcome(report)
    assert answer["kinds"] == ["kernel", "model"] and answer["nodes"] == ["add"] and answer["kernel_nodes"] == ["mm"]
    assert bench.polygraphy_outcome({"lint_entries": report["lint_entries"][:1]})["kinds"] == []  # the control


def test_a_worker_answers_and_one_past_its_time_limit_is_stopped_and_restarted(bench, tmp_path):
    path = _conflict_model(tmp_path / "where.onnx")
    worker = bench.Worker("lint", tmp_path / "kernels", tmp_path / "lint.log")
    try:
        late = worker.ask(path, 0.001)  # the control: no worker starts that fast
        assert late["timeout"] and late["error"].startswith("timeout") and worker.process is None
        answer = worker.ask(path, 60)
        assert answer["kinds"] == ["model"] and answer["nodes"] == ["Where_223"] and answer["seconds"] >= 0
    finally:
        worker.stop()


def test_the_peers_lock_keeps_the_graph_locks_pins_and_adds_the_peers():
    """.venv-peers judges with the graph tests' onnxruntime: every package both locks hold has one pin."""

    def pins(name: str) -> dict[str, str]:
        lines = (ROOT / name).read_text().splitlines()
        return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith(("#", " ")))

    graph, peers = pins("requirements-graph.lock"), pins("requirements-peers.lock")
    assert {"onnx", "onnxruntime", "onnx-doctor", "polygraphy", "onnx-graphsurgeon"} <= set(peers)
    assert {name: peers[name] for name in set(graph) & set(peers)} == {
        name: graph[name] for name in set(graph) & set(peers)}
    assert "torch" not in peers and "onnx" in graph  # the control: the graph lock's onnx is among those compared


def test_the_record_carries_the_run_it_came_from(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "tool_availability", lambda: dict.fromkeys(bench.TOOLS))
    monkeypatch.setattr(bench, "build_conformance", lambda folder, mutants: ([], {"mutants": 0, "models_mutated": 0}))
    monkeypatch.setattr(bench, "find_exports", lambda work, per_source, max_mib: ([], {"found": {}, "hint": None}))
    monkeypatch.setattr(bench, "judge_and_run", lambda models, options, measured, progress: ([], []))
    options = bench.Options(0, 0, 1.0, 1.0, tools=["lint"], work=tmp_path, cache=tmp_path,
                            converted=tmp_path / "converted")
    record = bench.run(options, progress=lambda line: None)
    assert record["recorded_at"] >= record["run"]["started_at"] and benchmark_records.problems(record) == []


def test_the_converters_benchmarks_conversions_join_the_corpus_and_no_converted_leaves_them_out(bench, tmp_path,
                                                                                                monkeypatch):
    """Issue 39.5: `.cache/converters/converted/<model>/<converter>.onnx` are judged and linted like the rest (their
    repaired copies and records left out, one over --max-mib left out and counted); the controls: an empty folder
    says how to fill it, and `--no-converted` (converted=None) gives none."""
    folder = tmp_path / "converted"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])])
    for name in ("pkg_a/occ.onnx", "pkg_a/occ.repaired.onnx", "pkg_b/ort_float16.onnx"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / name))
    (folder / "pkg_a" / "occ.json").write_text("{}")
    (folder / "pkg_b" / "big.onnx").write_bytes(b"\0" * 2**20)
    models, described = bench.find_converted(folder, max_mib=0.5)
    assert [(m.id, m.part, m.source, m.kind) for m in models] == [
        ("converted:pkg_a/occ", "converted", "pkg_a", "occ"),
        ("converted:pkg_b/ort_float16", "converted", "pkg_b", "ort_float16")]
    assert (described["found"], described["used"], described["left_out_over_max_mib"]) == (3, 2, 1)
    assert described["hint"] is None and bench.find_converted(tmp_path / "none", 0.5)[1]["hint"].startswith("no conv")
    monkeypatch.setattr(bench, "tool_availability", lambda: dict.fromkeys(bench.TOOLS))
    monkeypatch.setattr(bench, "build_conformance", lambda folder, mutants: ([], {"mutants": 0, "models_mutated": 0}))
    monkeypatch.setattr(bench, "find_exports", lambda work, per_source, max_mib: ([], {"found": {}, "hint": None}))
    given = []
    monkeypatch.setattr(bench, "judge_and_run",
                        lambda models, options, measured, progress: (given.append([m.id for m in models]), ([], []))[1])
    for converted in (folder, None):
        options = bench.Options(0, 0, 0.5, 1.0, tools=["lint"], work=tmp_path, cache=tmp_path, converted=converted)
        record = bench.run(options, progress=lambda line: None)
    assert given == [["converted:pkg_a/occ", "converted:pkg_b/ort_float16"], []]
    assert record["corpus"]["converted"] == {"skipped": "--no-converted"} and "converted" in bench.PARTS
