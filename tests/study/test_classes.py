"""The class study: its eager comparison and its judge's tolerance, each with a control that breaks it, and its
explanations read from committed records of today's sweep, one member per class at least."""

from __future__ import annotations

import json

import numpy as np
import pytest

from where223.pipeline.paths import OUTPUTS
from where223.study._cell.numerics import compare_outputs, tolerance
from where223.study.classes import analysis, refusals, section

RECORDS = OUTPUTS / "classes" / "5.24.0"


def test_the_tolerance_is_eight_spacings_of_the_type():
    assert tolerance("bf16") == 8 * 2.0**-7 and tolerance("fp16") == 8 * 2.0**-10


def test_outputs_within_tolerance_pass_and_the_controls_fail():
    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((2, 8)).astype(np.float32)]
    close = [reference[0] * (1 + 0.5 * tolerance("fp16"))]
    assert compare_outputs(close, reference, "fp16", "x")["within_tolerance"] is True
    far = [reference[0] + 2 * tolerance("fp16") * np.abs(reference[0]).max()]  # control: twice the tolerance off
    judged = compare_outputs(far, reference, "fp16", "x")
    assert judged["within_tolerance"] is False and judged["relative"] == pytest.approx(2 * tolerance("fp16"))
    infinite = [np.where(np.arange(16).reshape(2, 8) == 3, np.inf, reference[0])]  # control: a non-finite output
    assert compare_outputs(infinite, reference, "fp16", "x")["within_tolerance"] is False
    assert compare_outputs([reference[0][:1]], reference, "fp16", "x")["status"] == "not measured"
    assert compare_outputs(close * 2, reference, "fp16", "x")["status"] == "not measured"


def _record(column: str, model: str) -> dict:
    path = RECORDS / column / f"{model}.json"
    if not path.is_file():
        pytest.skip(f"{path} is not committed yet")
    return json.loads(path.read_text())


def test_a_layer_norm_binding_conflict_is_explained_under_autocast_by_dynamo():
    """ALBERT under CPU bf16 autocast, dynamo: LayerNormalization's T bound to bf16 and float; eager's
    native_layer_norm was handed bf16 activations and float weights; torchlib's aten_layer_norm emitted it."""
    record = _record("cpu_bf16_autocast-dynamo", "albert")
    item = refusals.evidence(record)
    assert refusals.group_key(record) == ("LayerNormalization", "type_binding_conflict", "dynamo",
                                          "cpu_bf16_autocast", "today")
    assert item["types"] == ["tensor(bfloat16)", "tensor(float)"] and item["constraint"]["type_param"] == "T"
    assert item["source"].startswith("transformers/models/albert/modeling_albert.py:")
    kernel = next(k for k in item["eager_kernels"] if k["op"] == "native_layer_norm")
    assert kernel["inputs"][:3] == ["bfloat16", "float", "float"] and kernel["mixed"]
    assert item["emitter"]["function"].endswith("aten_layer_norm")


def test_a_wrong_cast_target_is_explained_for_torchscript():
    """ALBERT in bf16, TorchScript: ONNX Runtime's graph check refuses a complex128 input of Mul, made by a Cast
    whose `to` is torch's number for bfloat16 (15), complex128 in ONNX's."""
    record = _record("bf16_model-torchscript", "albert")
    found = refusals.refusal(record)
    assert found["kind"] == "invalid_type" and found["operator"] == "Mul" and found["types"] == ["tensor(complex128)"]
    item = refusals.evidence(record)
    assert "complex128" in {b["type"].removeprefix("tensor(").removesuffix(")") for b in item["bindings"]}
    assert item["emitter"]["aten"] and item["source"]


def test_a_record_that_was_not_refused_has_no_group():
    """Control: an accepted record and an unexported one fall in no group."""
    accepted = _record("fp16_model-dynamo", "albert")
    assert accepted["outcome"] == "accepted" and refusals.group_key(accepted) is None
    assert refusals.group_key({"outcome": "not_exported", "key": {"stack": "today"}}) is None


def test_the_class_space_is_every_model_type_by_three_recipes_and_two_exporters():
    """README's counts: today's list holds 625 model types, its space 3750 cells; the 2022 space 143 x 3."""
    from where223.sweep.space import load_space

    today = load_space(analysis.paths.ROOT / "spaces" / "classes-today.yaml")
    assert len({cell.model for cell in today.cells}) == 625 and len(today.cells) == 3750
    assert analysis.space_sizes() == {"today": 3750, "2022": 429}


def test_bert_in_fp16_departs_from_eager_before_its_layer_norm():
    """README's second example: the graph's first LayerNormalization gets float and float16 while eager computed
    that line in float16 throughout (no mixed kernel)."""
    record = _record("fp16_model-torchscript", "bert")
    item = refusals.evidence(record)
    assert item["operator"] == "LayerNormalization" and item["types"] == ["tensor(float)", "tensor(float16)"]
    norm = next(k for k in item["eager_kernels"] if k["op"] == "native_layer_norm")
    assert set(norm["inputs"]) == {"float16"} and not norm["mixed"]


def test_electra_under_autocast_is_explained_as_readme_says():
    """README's first example: ELECTRA, CPU bf16 autocast, dynamo: LayerNormalization's T bound to bfloat16 and
    float, eager's native_layer_norm handed bfloat16/float/float, torchlib's aten_layer_norm the emitter."""
    record = _record("cpu_bf16_autocast-dynamo", "electra")
    item = refusals.evidence(record)
    assert (item["operator"], item["node"]) == ("LayerNormalization", "node_layer_norm_1")
    assert item["types"] == ["tensor(bfloat16)", "tensor(float)"]
    assert item["source"].startswith("transformers/models/electra/modeling_electra.py:")
    assert "self.LayerNorm(hidden_states + input_tensor)" in item["code"]
    norm = next(k for k in item["eager_kernels"] if k["op"] == "native_layer_norm")
    assert norm["inputs"][:3] == ["bfloat16", "float", "float"] and norm["mixed"]
    assert item["emitter"]["function"].endswith("aten_layer_norm")


def _scanned(model: str, opset: int, outcome: str, message: str | None = None, exported: int | None = None) -> dict:
    return {"model_type": model, "key": {"stack": "today", "recipe": "bf16_model", "exporter": "dynamo",
                                         "opset": opset}, "outcome": outcome, "ort": {"message": message},
            "onnx_opset": opset if exported is None else exported}


def test_an_opset_span_says_where_the_group_holds_and_what_else_happens():
    """A group refused alike at 14-16 and 18, accepted at 17 and refused for another class at 19; the control, a
    representative that was not scanned, has no span."""
    conv = ("Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Conv) in node (n) is invalid")
    group = {"representative": {"model_type": "m"}, "stack": "today", "recipe": "bf16_model", "exporter": "dynamo",
             "operator": "Conv", "kind": "invalid_type", "members": ["m"]}
    other = "Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Mul) in node (k) is invalid"
    scanned = [_scanned("m", o, "type_error", conv) for o in (14, 15, 16, 18)]
    scanned += [_scanned("m", 17, "missing_kernel"), _scanned("m", 19, "type_error", other)]
    span = analysis.opset_span(group, scanned)
    assert span["alike_text"] == "14-16, 18" and span["other"] == {"17": "missing_kernel", "19": "Mul invalid_type"}
    # the control: asked for 15, the exporter kept opset 18; refused alike there, but not at 15
    scanned[1] = _scanned("m", 15, "type_error", conv, exported=18)
    span = analysis.opset_span(group, scanned)
    assert span["alike_text"] == "14, 16, 18" and span["other"]["15"] == "exported at opset 18"
    assert analysis.opset_span({**group, "representative": {"model_type": "unscanned"}}, scanned) is None


def test_the_opset_plan_lists_each_representative_at_every_opset_of_its_exporter():
    groups_ = [{"stack": "today", "recipe": "bf16_model", "exporter": "torchscript",
                "representative": {"model_type": "albert"}},
               {"stack": "2022", "recipe": "bf16_model", "exporter": "torchscript",
                "representative": {"model_type": "bert"}}]
    plan = analysis.opset_plan(groups_, "today")
    assert plan == [f"albert bf16_model torchscript {o}" for o in range(14, 21)]  # the 2022 group is not today's
    assert analysis.opset_plan(groups_, "2022") == [f"bert bf16_model torchscript {o}" for o in range(14, 20)]
    assert (plan[0], plan[-1]) == ("albert bf16_model torchscript 14", "albert bf16_model torchscript 20")
    assert analysis.OPSETS[("today", "dynamo")][0] == 14 and analysis.OPSETS[("today", "dynamo")][-1] == 23
    assert analysis.OPSETS[("2022", "torchscript")][-1] == 19  # torch 2.1.2's newest


def test_boundaries_are_the_opsets_either_side_of_a_change():
    assert analysis.boundaries(list(range(14, 21)), list(range(15, 21))) == [14, 15]
    assert analysis.boundaries(list(range(14, 24)), list(range(14, 22))) == [21, 22]
    assert analysis.boundaries([14, 15, 16, 17], [14, 16]) == [14, 15, 16, 17]  # the control: it comes and goes
    assert analysis.boundaries(list(range(14, 21)), list(range(14, 21))) == []  # refused everywhere: no edge


def test_every_member_is_judged_at_the_boundaries_and_the_unscanned_are_named():
    """The representative m is refused alike at 15-17 and at 14 for Pow; member a is alike at 15 and at 14 for
    Pow, member b is accepted at 15 (the control: a member that does not follow its representative), member c was
    not scanned at 14."""
    mul = "Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Mul) in node (n) is invalid"
    pow_ = "Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Pow) in node (n) is invalid"
    group = {"representative": {"model_type": "m"}, "stack": "today", "recipe": "bf16_model", "exporter": "dynamo",
             "operator": "Mul", "kind": "invalid_type", "members": ["a", "b", "c", "m"]}
    scanned = [_scanned("m", 14, "type_error", pow_)] + [_scanned("m", o, "type_error", mul) for o in (15, 16, 17)]
    scanned += [_scanned("a", 14, "type_error", pow_), _scanned("a", 15, "type_error", mul),
                _scanned("b", 14, "type_error", pow_), _scanned("b", 15, "accepted"),
                _scanned("c", 15, "type_error", mul)]
    span = analysis.opset_span(group, scanned)
    assert span["alike_text"] == "15-17" and list(span["boundaries"]) == ["14", "15"]
    at_14, at_15 = span["boundaries"]["14"], span["boundaries"]["15"]
    assert at_14["alike"] == [] and at_14["differ"] == {"a": "Pow invalid_type", "b": "Pow invalid_type",
                                                         "m": "Pow invalid_type"}
    assert at_14["not_scanned"] == ["c"]
    assert at_15["alike"] == ["a", "c", "m"] and at_15["differ"] == {"b": "accepted"} and at_15["not_scanned"] == []
    plan = analysis.opset_plan([{**group, "opset_span": span}], "today")
    assert plan[:4] == [f"m bf16_model dynamo {o}" for o in (14, 15, 16, 17)]
    assert set(plan[10:]) == {f"{x} bf16_model dynamo {o}" for x in "abc" for o in (14, 15)}
    assert len(plan) == len(set(plan)) == 10 + 6  # m at 14-23 once, a, b and c at the two boundaries
    other = {**group, "recipe": "fp16_model", "representative": {"model_type": "z"}, "opset_span": None}
    plan = analysis.opset_plan([{**group, "opset_span": span}, other], "today")
    assert plan[10:20] == [f"z fp16_model dynamo {o}" for o in range(14, 24)]  # every representative first
    text = section.span_text(span)
    assert "at 14 0 of 4 members alike, 3 Pow invalid_type, 1 not scanned" in text
    assert "at 15 3 of 4 members alike, 1 accepted" in text
    assert section.span_text({**span, "boundaries": {}}).endswith("so no opset scanned is a boundary")


def test_source_notebook_is_clean_with_parameters_after_imports():
    import nbformat

    from where223.pipeline import paths
    from where223.pipeline.notebooks import is_clean

    notebook = nbformat.read(paths.NOTEBOOKS / "07_classes.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert is_clean(notebook)
    assert "import" in code[0].source and "parameters" in code[1].metadata.get("tags", [])


@pytest.mark.slow
def test_notebook_07_counts_draws_and_explains_from_records(tmp_path):
    """The notebook on a copy of two committed records: a refused ALBERT and an accepted one; the figure is drawn,
    the class and its cause printed."""
    import shutil

    from tests.conftest import run_notebook

    for column, model in (("cpu_bf16_autocast-dynamo", "albert"), ("fp16_model-dynamo", "albert")):
        source = RECORDS / column / f"{model}.json"
        if not source.is_file():
            pytest.skip(f"{source} is not committed yet")
        target = tmp_path / "records" / "5.24.0" / column / f"{model}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    scans = sorted((RECORDS.parent / "opsets" / "5.24.0" / "cpu_bf16_autocast-dynamo").glob("albert-*.json"))
    if len(scans) < 10:
        pytest.skip("the opset scan of albert is not committed yet")
    for source in scans:
        target = tmp_path / "records" / "opsets" / "5.24.0" / "cpu_bf16_autocast-dynamo" / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    executed = run_notebook("07_classes", tmp_path / "out", records_dir=str(tmp_path / "records"))
    assert (tmp_path / "out" / "classes" / "classes.png").stat().st_size > 5_000
    text = executed.read_text()
    assert "LayerNormalization: two types bound" in text and "aten_layer_norm" in text
    assert "refused alike at 17-23 (of 14-23), otherwise 14: exported at opset 18" in text  # the scan's span


def test_the_other_stack_is_compared_member_by_member():
    """A today group of two members: one refused alike on the 2022 stack, one accepted there; the control, a group
    whose members were never run on the other stack, compares nothing."""
    group = {"stack": "today", "recipe": "bf16_model", "exporter": "torchscript", "operator": "Conv",
             "kind": "invalid_type", "members": ["a", "b"]}
    conv = "Type Error: Type 'tensor(bfloat16)' of input parameter (x) of operator (Conv) in node (n) is invalid"

    def row(model, outcome, message=None):
        return {"model_type": model, "outcome": outcome, "ort": {"message": message},
                "key": {"stack": "project", "recipe": "bf16_model", "exporter": "torchscript"}}

    compared = analysis.stacks_compared(group, [row("a", "type_error", conv), row("b", "accepted")])
    assert compared == {"stack": "2022", "compared": 2, "alike": ["a"], "differ": {"b": "accepted"}}
    assert analysis.stacks_compared({**group, "members": ["c"]}, [row("a", "type_error", conv)]) is None


def test_blames_dynamo_advice_holds_on_the_opset_scans_real_exports():
    """graph.blame's advice for a dynamo export without stacks (keep opset 18 or above) against the committed
    exports: every blamed dynamo graph at 18 or above names a source line, every one converted below 18 names none;
    the control is the scan's cells asked for an opset below 18 whose conversion failed (kept at 18): they do. A blame
    that did not find its node in the graph says nothing of stacks either way and is left out: ONNX Runtime can name
    a node as its own fusion renamed it (`node_MatMul_184/MatMulAddFusion`, mra; NOTES)."""
    from where223.graph.blame import NO_SOURCE_ADVICE

    assert "18 or above" in NO_SOURCE_ADVICE and "verbose=True" in NO_SOURCE_ADVICE
    records = [r for r in analysis.load_records() + analysis.load_opset_records() if r["key"]["exporter"] == "dynamo"]
    unfound = [r for r in records if r.get("blame") and all(b.get("error") for b in r["blame"])]
    assert all("no node named" in b["error"] for r in unfound for b in r["blame"])  # only that, not other failures
    blamed = [r for r in records if r.get("blame") and r not in unfound]
    with_source = {id(r) for r in blamed if any(b.get("source") for b in r["blame"])}
    converted = [r for r in blamed if r["onnx_opset"] < 18]
    kept = [r for r in blamed if r["onnx_opset"] >= 18]
    assert converted and all(id(r) not in with_source for r in converted)
    assert kept and all(id(r) in with_source for r in kept)
    assert any(r["key"]["opset"] != "auto" and int(r["key"]["opset"]) < 18 for r in kept)  # asked low, kept 18


def test_the_committed_records_say_where_the_two_stacks_differ_member_by_member():
    """On the committed records: bf16 Conv under autocast with TorchScript is refused alike on both stacks (CLIP is
    a member on each), while the SDPA `Mul` group of today's TorchScript exporter is today's alone: ALBERT, refused
    there today, had no such node in 2022 (no SDPA), where its bf16 graph loaded with missing kernels."""
    summary = analysis.summary(analysis.load_records())
    found = {(g["operator"], g["exporter"], g["recipe"], g["stack"]): g for g in summary["groups"]}
    conv = found[("Conv", "torchscript", "cpu_bf16_autocast", "today")]["other_stack"]
    assert conv["stack"] == "2022" and "clip" in conv["alike"] and "clip" not in conv["differ"]
    mul = found[("Mul", "torchscript", "bf16_model", "today")]["other_stack"]
    assert "albert" not in mul["alike"] and mul["differ"]["albert"] == "missing_kernel"


def test_the_appendix_gives_every_group_its_members_cause_and_opsets(tmp_path):
    """Every group of a summary gets one appendix line with its members, a cause sentence and its opset span (or
    "not measured"); the control, a group whose representative was never scanned, says so rather than a span."""
    from where223.study.report import Report
    from where223.verdicts import NOT_MEASURED

    written = analysis.summary(analysis.load_records(), scanned=analysis.load_opset_records())
    written["groups"][-1]["opset_span"] = None  # the control: as if its representative had not been scanned
    (tmp_path / "classes").mkdir()
    (tmp_path / "classes" / "summary.json").write_text(json.dumps(written))
    report = Report(tmp_path, [])
    section.appendix(report)
    lines = [line for line in report.text().splitlines() if line.startswith("- ")]
    assert len(lines) == len(written["groups"]) and all("Cause (e.g. " in line for line in lines)
    for line, group in zip(lines, written["groups"], strict=True):
        assert f"{group['size']} — {', '.join(group['members'])}. " in line
        assert f"Opsets: {section.span_text(group['opset_span'])}." in line
    assert any(g["opset_span"] for g in written["groups"]) and f"Opsets: {NOT_MEASURED}." in lines[-1]


def test_timing_says_what_a_cell_spends_outside_its_stages():
    """Two cells of 10 s and 20 s with 4 s and 16 s of timed stages: 6 s and 4 s outside, median 5; the control, a
    cell with no stage timings, counts for the wall time only."""
    rows = [{"wall_s": 10.0, "timings_s": {"export": 3.0, "judge": 1.0}}, {"wall_s": 20.0, "timings_s": {"x": 16.0}},
            {"wall_s": 30.0}]
    found = analysis.timing(rows, cells_in_space=6)
    assert found["median_outside_stages_s"] == 5.0 and found["median_wall_s"] == 20.0
    assert found["mean_wall_s"] == 20.0 and found["projected_worker_hours"] == round(20.0 * 6 / 3600, 2)


def test_the_historic_stacks_edges_hold_member_by_member_in_the_committed_scan():
    """The 2022 stack's scan on the committed records: every LayerNormalization (autocast) member is refused alike at
    17 and none at 16 (missing kernels there); every Where (bf16) member alike at 16, refused at 15 for Where's
    own type; bf16 Einsum is the exception, two of its six members refused at 15 for Where instead."""
    written = analysis.summary(analysis.load_records(), scanned=analysis.load_opset_records())
    found = {(g["operator"], g["recipe"], g["stack"]): g["opset_span"] for g in written["groups"]}
    norm = found[("LayerNormalization", "cpu_bf16_autocast", "2022")]["boundaries"]
    assert not norm["16"]["alike"] and set(norm["16"]["differ"].values()) == {"missing_kernel"}
    assert len(norm["17"]["alike"]) == norm["17"]["members"] and not norm["17"]["not_scanned"]
    where = found[("Where", "bf16_model", "2022")]["boundaries"]
    assert set(where["15"]["differ"].values()) == {"Where invalid_type"}
    assert len(where["16"]["alike"]) == where["16"]["members"]
    einsum = found[("Einsum", "bf16_model", "2022")]["boundaries"]
    assert sorted(einsum["15"]["differ"].values()) == ["Where invalid_type"] * 2 and einsum["15"]["members"] == 6


def test_coverage_is_each_column_s_recorded_types_over_the_listed_ones():
    counted = {"today/bf16_model/dynamo": {"attempted": 3}, "today/fp16_model/dynamo": {"attempted": 4},
               "2022/bf16_model/torchscript": {"attempted": 2}}
    found = analysis.coverage(counted, {"today": 8})
    lost = {"lost": 0, "lost_share": 0.0, "lost_under_target": True}
    assert found == {"today/bf16_model/dynamo": {"recorded": 3, "listed": 8, "share": 0.375, **lost},
                     "today/fp16_model/dynamo": {"recorded": 4, "listed": 8, "share": 0.5, **lost}}  # 2022: none listed
    lines = section.coverage_lines(found)
    assert lines[0].endswith("today stack, of 8 listed: bf16 dynamo 3 (38%), fp16 dynamo 4 (50%).")
    assert section.coverage_lines({}) == []  # the control: a summary made before coverage says nothing of it
    # the committed spaces: today's lists every model type of the list file, 2022's its 143
    listed = analysis.listed_types()
    types = [line for line in (OUTPUTS.parent / "spaces" / "model_types-5.24.0.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert listed["today"] == len(types) == 625
    assert listed["2022"] == 143


def test_a_cell_the_engine_lost_counts_against_its_column_and_a_not_run_one_is_no_attempt():
    """`not_run` (a deadline's leftover) is no attempt; it, a timeout and a crash are lost, each column's lost cells
    are set against the target (under 2% of its listed types), and the section says which column is worst and
    whether the target is met. The control: one lost cell of 50 listed (2%) is not under the target."""
    rows = [{"outcome": "accepted", "built": True}, {"outcome": "not_run"}, {"outcome": "timeout"},
            {"outcome": "crashed"}, {"outcome": "type_error"}]
    counted = analysis.counts(rows)
    assert counted["attempted"] == 4 and counted["lost"] == 3
    assert analysis.LOST_TARGET == 0.02
    found = analysis.coverage({"today/bf16_model/dynamo": counted}, {"today": 200})
    assert found["today/bf16_model/dynamo"] == {"recorded": 4, "listed": 200, "share": 0.02, "lost": 3,
                                                "lost_share": 0.015, "lost_under_target": True}
    line = section.coverage_lines(found, analysis.LOST_TARGET)[0]
    assert "bf16 dynamo 4 (2%, 3 lost)" in line
    assert line.endswith("at most 3 of a column's 200 types (bf16 dynamo, 1.5%); the target, under 2% of every "
                         "column, is not yet judged: it holds for the cells run so far, and up to 196 listed types "
                         "of a column have no record of a run.")  # a column not swept whole is no verdict
    whole = analysis.coverage({"today/bf16_model/dynamo": {"attempted": 200, "lost": 3}}, {"today": 200})
    assert section.coverage_lines(whole, analysis.LOST_TARGET)[0].endswith("(bf16 dynamo, 1.5%); the target, "
                                                                           "under 2% of every column, is met.")
    over = analysis.coverage({"today/fp16_model/dynamo": {"attempted": 50, "lost": 1}}, {"today": 50})
    assert over["today/fp16_model/dynamo"]["lost_under_target"] is False  # 2% is not under 2%
    both = {**found, **over}
    line = section.coverage_lines(both, analysis.LOST_TARGET)[0]
    assert "at most 1 of a column's 50 types (fp16 dynamo, 2.0%)" in line
    assert line.endswith("is not met: the counts above lack those cells' verdicts.")
    assert "target" not in section.coverage_lines(found)[0]  # a summary without a target: no verdict said
