"""benchmarks/lint_speed.py: its record on a small model, and NOTES.md quoting the committed record."""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import benchmark_records, benchmark_scripts
from where223.graph import lint as lint_module
from where223.graph.lint import FindingKind, lint_model
from where223.graph.ort import OrtVerdict, judge_message, parse_type_binding
from where223.pipeline import environment, records
from where223.pipeline.paths import OUTPUTS, ROOT


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("lint_speed")


def test_measure_records_both_tools_on_a_model_with_external_weights(bench, tmp_path):
    weight = numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    path = tmp_path / "small.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(path), save_as_external_data=True, location="small.onnx.data", size_threshold=0)
    record = bench.measure(path, repeats=2)
    assert record["lint_result"] == {"nodes_checked": 1, "violations": 0, "unchecked": 0, "untyped_values": 0}
    assert len(record["lint_s"]["runs"]) == len(record["checker_s"]["runs"]) == 2
    assert record["lint_s"]["min"] <= record["lint_s"]["median"] and record["model"]["weights_mib"] == 0
    # lint's phases come from the same two timed calls as its total: a median each, every round kept
    phases = record["lint_phases_s"]
    assert phases["explains"] == "lint_s" and list(phases["median"]) == list(bench.LINT_PHASES)
    assert all(len(runs) == 2 for runs in phases["runs"].values())
    assert benchmark_records.phase_problems(record, "lint_phases_s", "") == []


def test_the_phases_are_timed_inside_the_lint_calls_that_make_the_total(bench, tmp_path):
    path = tmp_path / "g.onnx"
    bench.write_large_graph(path, 150, violation_at=None)
    originals = {name: getattr(lint_module, name) for names in bench.LINT_PHASES.values() for name in names}
    clock = bench.PhaseClock(path)
    times = bench.timed(clock, 3)
    assert all(getattr(lint_module, name) is function for name, function in originals.items())  # put back
    assert len(clock.rounds) == 3 and all(r["load"] > 0 and r["types"] > 0 and r["constraint_check"] > 0
                                          for r in clock.rounds)
    assert all(sum(r.values()) <= total for r, total in zip(clock.rounds, times, strict=True))
    # the control: a lint_model call outside the clock adds no round
    lint_model(path)
    assert len(clock.rounds) == 3


def test_notes_quote_the_committed_lint_speed_record(bench):
    record = records.read_json(OUTPUTS / "benchmarks" / "lint_speed.json")
    assert record["environment"]["packages"]["onnx"] == record["versions"]["onnx"]
    notes = (ROOT / "NOTES.md").read_text()
    assert bench.notes_line(record) in notes.splitlines()
    # the control: a record with another median is not what NOTES.md quotes
    other = copy.deepcopy(record)
    other["lint_s"]["median"] += 0.1
    assert bench.notes_line(other) not in notes.splitlines()


def test_the_generator_makes_exactly_the_nodes_asked_for_the_same_bytes_each_time(bench):
    model = bench.build_large_graph(1_000)
    assert len(model.graph.node) == 1_000
    assert len(bench.build_large_graph(1_007).graph.node) == 1_007  # blocks, then a tail of Relus
    assert model.SerializeToString() == bench.build_large_graph(1_000).SerializeToString()
    assert model.SerializeToString() != bench.build_large_graph(1_000, seed=1).SerializeToString()  # control
    ops = {node.op_type for node in model.graph.node}
    assert {"MatMul", "Add", "LayerNormalization", "Softmax", "Where", "Cast"} <= ops
    with pytest.raises(ValueError, match="no block -1 in 14 nodes"):
        bench.build_large_graph(len(bench.BLOCK_OPS) - 1)  # no block to put it in


@pytest.mark.parametrize("block", [0, -1])
def test_the_generated_violation_is_found_by_lint_and_refused_by_onnx_runtime(bench, tmp_path, block):
    refused, accepted = tmp_path / "refused.onnx", tmp_path / "accepted.onnx"
    described = bench.write_large_graph(refused, 1_000, violation_at=block)
    bench.write_large_graph(accepted, 1_000, violation_at=None)
    assert described["nodes"] == 1_000 and described["sha256"] == hashlib.sha256(refused.read_bytes()).hexdigest()
    report = lint_model(refused)
    assert [(v.op_type, v.kind, v.root) for v in report.violations] == [("Where", FindingKind.BINDING_CONFLICT, True)]
    assert "tensor(float) and tensor(float16)" in report.violations[0].message()
    blocks = 1_000 // len(bench.BLOCK_OPS)
    assert report.violations[0].node == f"/blocks.{block % blocks}/attn/Where"
    error = bench.ort_session(refused)
    assert isinstance(error, Exception)
    assert judge_message(str(error)).verdict == OrtVerdict.WHERE_TYPE_ERROR
    assert parse_type_binding(str(error)).node == report.violations[0].node  # the node lint names
    # the control: without the violation lint is clean and ONNX Runtime creates its session
    assert lint_model(accepted).clean
    assert not isinstance(bench.ort_session(accepted), Exception)


def _variant(lint_s: float, ort_s: float, verdict: str = "where_type_error") -> dict:
    return {"lint_s": {"median": lint_s}, "ort_session_s": {"median": ort_s}, "ort": {"verdict": verdict}}


def test_the_criterion_passes_when_lint_is_no_slower_than_onnx_runtime_and_fails_otherwise(bench):
    assert bench.criterion({"a": _variant(0.5, 0.6), "b": _variant(0.6, 0.6)})["passed"]
    # an accepted variant is not judged: ONNX Runtime reports no error there
    assert bench.criterion({"a": _variant(0.5, 0.6), "ok": _variant(9.0, 0.6, "accepted")})["passed"]
    failed = bench.criterion({"a": _variant(0.5, 0.6), "b": _variant(0.7, 0.6)})  # the control: lint above ORT
    assert not failed["passed"] and failed["statement"] == bench.CRITERION
    assert failed["judged"]["b"] == {"lint_median_s": 0.7, "ort_median_s": 0.6, "passed": False}
    assert failed["judged"]["a"]["passed"]
    assert not bench.criterion({"ok": _variant(0.1, 0.6, "accepted")})["passed"]  # nothing refused, nothing judged


def test_the_graph_section_carries_every_verdict_every_sample_and_the_environment(bench, tmp_path):
    section = bench.measure_graph(tmp_path, repeats=2, nodes=150)
    variants = section["variants"]
    assert list(variants) == list(bench.VARIANTS)
    assert [v["ort"]["verdict"] for v in variants.values()] == ["where_type_error", "where_type_error", "accepted"]
    assert [v["lint_result"]["violations"] for v in variants.values()] == [1, 1, 0]
    assert variants["refused_last"]["ort"]["message"] and variants["accepted"]["ort"]["message"] is None
    for variant in variants.values():
        for tool in ("lint_s", "ort_session_s", "checker_s", "guards_s"):
            assert len(variant[tool]["runs"]) == 2 and variant[tool]["min"] <= variant[tool]["median"]
    assert section["criterion"] == bench.criterion(variants)
    assert list(section["criterion"]["judged"]) == ["refused_first", "refused_last"]
    rounds = "interleaved rounds: refused_first.lint, refused_first.ort, refused_first.checker, refused_first.guards"
    assert section["order"].startswith(rounds)
    environment = section["environment"]
    assert {"onnx", "onnxruntime", "protobuf", "protobuf_backend", "cpu_count"} <= set(environment)
    assert environment["onnx"] == onnx.__version__ and environment["cpu_count"] >= 1
    assert set(section["load_average_1m"]) == {"before", "after"}  # how shared the machine was
    # one run: the section carries it, and its phases explain lint's total from the same rounds
    assert set(section["run"]) == {"commit", "machine", "started_at"}
    assert all(len(v["lint_phases_s"]["runs"]["types"]) == 2 for v in variants.values())
    assert benchmark_records.problems(section) == []


def test_a_partial_run_keeps_the_other_part_with_its_own_run_and_refuses_one_without(bench):
    earlier = {**environment.this_run(), "started_at": "2026-12-01T10:00:00+00:00"}
    record = {"run": earlier, "lint_s": {"median": 0.5}, bench.GRAPH_KEY: {"run": earlier, "nodes": 1}}
    assert bench.kept_part(record, "124m") == {bench.GRAPH_KEY: record[bench.GRAPH_KEY]}
    assert bench.kept_part(record, "100k") == {"run": earlier, "lint_s": {"median": 0.5}}
    assert bench.kept_part(record, "all") == {} and bench.kept_part({}, "124m") == {}
    # the record as it was before parts carried their runs: keeping either part would mix two runs
    unproven = {"lint_s": {"median": 0.5}, bench.GRAPH_KEY: {"nodes": 1}}
    with pytest.raises(SystemExit, match="the graph_100k part of the record has no run"):
        bench.kept_part(unproven, "124m")
    with pytest.raises(SystemExit, match="the 124M part of the record has no run"):
        bench.kept_part(unproven, "100k")


def test_notes_quote_the_committed_100k_section(bench):
    record = records.read_json(OUTPUTS / "benchmarks" / "lint_speed.json")
    section = record[bench.GRAPH_KEY]
    assert section["nodes"] == bench.GRAPH_NODES
    assert all(variant["model"]["nodes"] == bench.GRAPH_NODES for variant in section["variants"].values())
    assert section["criterion"] == bench.criterion(section["variants"])  # the verdict from the numbers
    for variant in section["variants"].values():  # ONNX Runtime's verdict from its own message, by graph/ort.py
        message = variant["ort"]["message"]
        assert variant["ort"]["verdict"] == ("accepted" if message is None else str(judge_message(message).verdict))
    notes = (ROOT / "NOTES.md").read_text()
    assert bench.graph_notes_line(record) in notes.splitlines()
    verdict = "passed" if section["criterion"]["passed"] else "failed"  # README states the record's verdict
    assert f"takes to report its first: {verdict}," in " ".join((ROOT / "README.md").read_text().split())
    other = copy.deepcopy(record)  # the control: another ratio is not what NOTES.md quotes
    other[bench.GRAPH_KEY]["variants"]["refused_last"]["ratio_lint_to_ort"] += 0.01
    assert bench.graph_notes_line(other) not in notes.splitlines()
