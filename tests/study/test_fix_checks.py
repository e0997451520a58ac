"""The fix verification's checks at their edges, and its wiring: which checks and controls `verify_fix` and
`run_controls` run, on what, with which tolerances (the heavy stages faked, their arguments recorded).

Written for the mutation run's survivors in `where223.study.fix.run` (benchmarks/mutation.py): each test names
the edge it holds (a boundary that passes, a parameter that is left out, a wrong default).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from where223.eager.numerics import NotMeasured
from where223.graph.ort import OrtVerdict
from where223.study import judging
from where223.study.fix import run as verify
from where223.study.fix.run import Check, Control, RepairedOutputs
from where223.verdicts import FAIL, INFO, NOT_JUDGED, NOT_MEASURED, PASS

from .test_verify import EXECUTED, MISSING_KERNEL, attention_model, lint_report, reproduction


# --- the record's small pieces ---------------------------------------------------------------------------------
def test_a_check_s_record_drops_empty_per_model_and_reference_and_keeps_them_when_filled():
    empty = Check("x", "q", 1, 0, PASS).to_dict()
    assert "per_model" not in empty and "reference" not in empty and empty["not_judged"] == ""
    full = Check("x", "q", 1, 0, PASS, per_model={"m": 1}, reference=[{"max_abs_reference": 1.0}]).to_dict()
    assert full["per_model"] == {"m": 1} and full["reference"] == [{"max_abs_reference": 1.0}]


@pytest.mark.parametrize(("message", "last"), [
    (None, ""), ("", ""), ("  \n ", ""), ("first\nsecond  \n", "second"), ("x" * 300, "x" * 200),
])
def test_last_line_is_the_message_s_last_line_cut_at_200(message, last):
    assert verify._last_line(message) == last


def test_lint_check_says_when_there_are_no_other_findings():
    assert "no other findings" in verify.lint_check(lint_report()).detail
    assert "no other findings" not in verify.lint_check(lint_report(not_allowed=1)).detail


# --- (b) where a reproduction ended ------------------------------------------------------------------------------
def test_stage_outcome_tells_a_trained_path_from_an_exported_one():
    assert verify.stage_outcome(reproduction("not reproduced", None)) == "trained"
    assert verify.stage_outcome(reproduction("not reproduced", None, path="onnx_export")) == "exported and loaded"


def test_a_missing_kernel_counts_as_past_the_type_check_only_for_bf16_on_a_cpu():
    assert verify.stage_outcome(reproduction("reproduced", MISSING_KERNEL, path="onnx_export")) == (
        "type check passed, bf16 execution unsupported on CPU")
    for amp_dtype, device in (("fp16", "cpu"), ("bf16", "cuda")):
        record = reproduction("reproduced", MISSING_KERNEL)
        record["parameters"] = {"amp_dtype": amp_dtype, "device": device}
        assert verify.stage_outcome(record).startswith("other error: NOT_IMPLEMENTED")
    # bf16 on a CPU, but not a missing kernel: another error
    assert verify.stage_outcome(reproduction("reproduced", "Segfault\nboom")) == "other error: boom"


def test_another_error_is_its_message_s_last_line_cut_at_200():
    said = verify.stage_outcome(reproduction("reproduced", "first\n" + "y" * 300 + "\n"))
    assert said == "other error: " + "y" * 200


# --- (c) eager numbers -------------------------------------------------------------------------------------------
def test_bitwise_check_fails_on_a_missing_output_without_raising_and_its_tolerance_is_zero():
    logits = torch.tensor([1.0, 2.0])
    check = verify.bitwise_check("eager_bitwise", "m", [logits, logits], [logits], "bf16")
    assert check.verdict == FAIL and check.tolerance == 0.0 and check.value == 0.0
    shaped = verify.bitwise_check("eager_bitwise", "m", [logits], [logits[:1]], "bf16")
    assert shaped.verdict == FAIL and shaped.value == math.inf  # no output of the same shape to compare


def test_eager_logits_are_the_first_output_as_float32(monkeypatch):
    first, second = torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([2.0])
    monkeypatch.setattr(verify, "eager_outputs", lambda *args: [first, second])
    got = verify.eager_logits_of(None, {}, "cpu", "bf16")
    assert got.dtype == torch.float32 and torch.equal(got, first.float())


class Recorder:
    """Fakes of the heavy stages: each call's arguments kept by name, in order."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.variant = None  # the attention variant patched in at the moment

    def record(self, name, *args, **kwargs):
        self.calls.append((name, args, {**kwargs, "variant": self.variant}))

    def named(self, name):
        return [(args, kwargs) for called, args, kwargs in self.calls if called == name]

    @contextlib.contextmanager
    def patched(self, name="4.26"):
        before, self.variant = self.variant, name
        try:
            yield name
        finally:
            self.variant = before


def fake_model(n_embd: int, n_head: int, n_layer: int = 2):
    return SimpleNamespace(config=SimpleNamespace(n_embd=n_embd, n_head=n_head, n_layer=n_layer))


class FakeSettings:
    """ReproduceSettings' face: a model of head size 16 ('tiny'), its batch, and the models asked for."""

    preset, seed, device, amp_dtype, opset, batch_size, path = "tiny", 7, "cpu", "bf16", 17, 2, "ortmodule"

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def build_model(self, dropout=True):
        self.recorder.record("build_model", dropout=dropout)
        model = fake_model(64, 4)
        model.eval = model.train = lambda: model
        return model

    def build_batch(self):
        return {"input_ids": torch.zeros(2, 8, dtype=torch.int64)}

    def build_dataset(self, size):
        return list(range(size))

    def run_name(self):
        return "tiny-run"


@pytest.fixture
def recorder(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(verify.variants, "patched_attention", recorder.patched)
    return recorder


def test_eager_checks_compare_the_preset_and_the_probe_each_with_the_variant_patched_in(monkeypatch, recorder):
    settings = FakeSettings(recorder)
    probe = fake_model(40, 2)
    monkeypatch.setattr(verify.models, "probe_model", lambda seed, device: (probe, {"input_ids": "probe batch"}))

    def outputs(module, batch, device, amp_dtype):
        recorder.record("eager_outputs", module, device=device, amp_dtype=amp_dtype)
        changed = recorder.variant is not None and module is probe  # the variant changes the probe's numbers only
        return [torch.tensor([1.0, 3.0 if changed else 2.0])]

    monkeypatch.setattr(verify, "eager_outputs", outputs)
    checks = verify.eager_checks(settings, "float+masked_fill")
    assert [c.name for c in checks] == ["eager_bitwise", "eager_bitwise_probe"]
    assert [c.verdict for c in checks] == [PASS, FAIL]
    assert "on the tiny preset (head size 16, sqrt exact in bf16) under bf16" in checks[0].question
    assert "on the probe (head size 20, sqrt inexact in bf16) under bf16" in checks[1].question
    assert [kwargs["dropout"] for _, kwargs in recorder.named("build_model")] == [False]
    calls = recorder.named("eager_outputs")
    assert [kwargs["variant"] for _, kwargs in calls] == [None, None, "float+masked_fill", "float+masked_fill"]
    assert all(kwargs["device"] == "cpu" and kwargs["amp_dtype"] == "bf16" for _, kwargs in calls)


def test_onnxruntime_logits_are_the_graph_s_logits_output(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["logits"], to=TensorProto.FLOAT),
         helper.make_node("Neg", ["logits"], ["negated"])], "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("negated", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    got = verify.onnxruntime_logits(path, {"input_ids": torch.tensor([3, 4]), "unused": torch.tensor([0])})
    assert torch.equal(got, torch.tensor([3.0, 4.0]))


# --- (d) fp32 against unpatched PyTorch --------------------------------------------------------------------------
def test_close_check_passes_a_difference_equal_to_its_tolerance():
    assert verify.close_check("x", "q", [1.0, 2.0], [1.5, 2.0], 0.5).verdict == PASS


def test_gradient_differences_list_every_parameter_missing_or_misshapen_as_infinitely_different():
    reference = {"a": torch.ones(2), "b": torch.ones(3), "c": torch.ones(2)}
    measured = {"a": torch.ones(2), "b": torch.ones(2), "d": torch.ones(2)}
    rows = {row["parameter"]: row["relative"] for row in verify.gradient_differences(reference, measured)}
    assert rows == {"a": 0.0, "b": math.inf, "c": math.inf, "d": math.inf}


def test_a_zero_reference_gradient_is_equal_only_to_zero():
    zero = {"w": torch.zeros(2)}
    assert verify.gradient_differences(zero, {"w": torch.zeros(2)})[0]["relative"] == 0.0
    assert verify.gradient_differences(zero, {"w": torch.tensor([0.0, 1e-9])})[0]["relative"] == math.inf
    # relative to the largest reference gradient: 0.5 / 2
    assert verify.gradient_differences({"w": torch.tensor([2.0, -1.0])},
                                       {"w": torch.tensor([2.5, -1.0])})[0]["relative"] == 0.25


def test_onnx_runtime_is_not_seen_executing_when_its_fallback_is_not_reported():
    without = {key: value for key, value in EXECUTED.items() if key != "fallback_pending"}
    assert verify.ort_executed(EXECUTED) and not verify.ort_executed(without)


def test_gradient_check_passes_a_worst_relative_difference_equal_to_its_tolerance_and_fails_on_nothing():
    reference, measured = {"w": torch.tensor([2.0, -1.0])}, {"w": torch.tensor([2.5, -1.0])}
    assert verify.gradient_check(reference, measured, 0.25, EXECUTED).verdict == PASS
    nothing = verify.gradient_check({}, {}, math.inf, EXECUTED)
    assert nothing.verdict == FAIL and "worst: (none)" in nothing.detail


def test_fp32_reference_and_inference_use_the_model_without_dropout(monkeypatch, recorder, tmp_path):
    settings = FakeSettings(recorder)
    monkeypatch.setattr(verify, "eager_logits_of", lambda model, batch, device, amp: torch.tensor([1.0, 2.0]))
    monkeypatch.setattr(verify.training, "batches", lambda data, size, steps: ["batch"] * steps)
    monkeypatch.setattr(verify.training, "eager_training", lambda *args, **kwargs: recorder.record(
        "eager_training", *args, **kwargs) or verify.training.TrainingRun([1.0], {}))
    reference = verify.fp32_reference(settings, steps=2)
    assert reference.data == ["batch", "batch"] and reference.training.losses == [1.0]
    assert recorder.named("eager_training")[0][1].get("dropout") is None  # the default: off
    monkeypatch.setattr(verify.export, "export_onnx", lambda model, batch, out, *args: out)
    monkeypatch.setattr(verify, "onnxruntime_logits", lambda path, batch: torch.tensor([1.0, 2.5]))
    check = verify.fp32_inference_check(settings, "4.26", reference, tmp_path / "m.onnx", 0.5)
    assert check.name == "fp32_inference" and check.verdict == PASS
    assert [kwargs["dropout"] for _, kwargs in recorder.named("build_model")] == [False, False]


def test_fp32_training_checks_train_without_dropout_unless_asked(monkeypatch, recorder, tmp_path):
    settings = FakeSettings(recorder)
    gradients = {"w": torch.tensor([1.0, 2.0])}
    reference = verify.Fp32Reference({}, torch.zeros(1), ["d"], verify.training.TrainingRun([3.0, 2.0], gradients))

    def ortmodule(*args, dropout=False):
        recorder.record("ortmodule_training", *args, dropout=dropout)
        return verify.training.TrainingRun([3.0, 2.0], gradients, dict(EXECUTED))

    monkeypatch.setattr(verify.training, "ortmodule_training", ortmodule)
    checks, run = verify.fp32_training_checks(settings, "4.26", reference, tmp_path, loss_tolerance=0.0,
                                              gradient_tolerance=0.0)
    assert [c.name for c in checks] == ["fp32_gradients", "fp32_training"] and run.losses == [3.0, 2.0]
    assert [c.verdict for c in checks] == [PASS, PASS]
    verify.fp32_training_checks(settings, "4.26", reference, tmp_path, loss_tolerance=0.0, gradient_tolerance=0.0,
                                dropout=True)
    assert [(kwargs["dropout"], kwargs["variant"]) for _, kwargs in recorder.named("ortmodule_training")] == [
        (False, "4.26"), (True, "4.26")]


# --- (e) the release's graph -------------------------------------------------------------------------------------
def test_a_constant_s_values_are_kept_up_to_64_float_elements_and_always_for_integers():
    kept = verify._tensor_description(numpy_helper.from_array(np.zeros(64, np.float32)))
    assert kept[:3] == ("tensor", "FLOAT", (64,)) and kept[3] == (0.0,) * 64
    assert verify._tensor_description(numpy_helper.from_array(np.zeros(65, np.float32)))[3] is None
    assert verify._tensor_description(numpy_helper.from_array(np.arange(100, dtype=np.int64)))[3] == tuple(range(100))


def test_attributes_are_described_by_kind():
    tensor = numpy_helper.from_array(np.array([1.5], np.float32))
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [], [])
    described = {a.name: verify._attribute_description(a) for a in (
        helper.make_attribute("t", tensor), helper.make_attribute("g", graph), helper.make_attribute("s", b"ab"),
        helper.make_attribute("ts", [tensor, tensor]), helper.make_attribute("ints", [1, 2]),
        helper.make_attribute("f", 2.0))}
    one = ("tensor", "FLOAT", (1,), (1.5,))
    assert described == {"t": one, "g": ("graph", ("Neg",)), "s": "ab", "ts": (one, one), "ints": (1, 2), "f": 2.0}


def test_an_input_s_source_is_its_wiring_not_its_name():
    inside = helper.make_node("Neg", ["x"], ["a", "a2"])
    outside = helper.make_node("Abs", ["x"], ["b", "b2"])
    constant = helper.make_node("Constant", [], ["c"], value_float=2.0)
    pair = helper.make_node("Constant", [], ["d"], value_float=1.0)
    pair.attribute.append(helper.make_attribute("value_int", 3))  # not a valid Constant: every value kept
    producers = {"a2": (inside, 1), "b2": (outside, 1), "c": (constant, 0), "d": (pair, 0)}
    initializers = {"w": numpy_helper.from_array(np.array([2], np.int64), "w")}

    def source(name):
        return verify._input_source(name, {id(inside): 4}, producers, initializers)

    assert source("") == ("none",) and source("x") == ("input", "x")
    assert source("w") == ("constant", ("tensor", "INT64", (1,), (2,)))
    assert source("c") == ("constant", 2.0) and source("d") == ("constant", (1.0, 3))
    assert source("a2") == ("node", 4, 1) and source("b2") == ("outside", "Abs", 1)


def test_attention_blocks_are_the_nodes_named_transformer_h_layer_attn():
    model = attention_model(layers=1)
    extra = [helper.make_node("Identity", ["probs0"], [f"o{i}"], name=name) for i, name in enumerate((
        "/transformer/h.0/mlp/Identity", "/model/h.0/attn/Identity", "/transformer/x.0/attn/Identity",
        "/transformer/h.0", "transformer/h.0/attn/Identity"))]
    extra.append(helper.make_node("Identity", ["probs0"], ["o8"], name="/transformer/h.1/attn"))  # the block itself
    contrib = helper.make_node("Identity", ["probs0"], ["o9"], name="/transformer/h.0/attn/Contrib", domain="ms")
    model.graph.node.extend([*extra, contrib])
    model.opset_import.append(helper.make_opsetid("ms", 1))
    blocks = verify.attention_blocks(model)
    assert list(blocks) == [0, 1] and [n["name"] for n in blocks[1]] == ["/transformer/h.1/attn"]
    assert [n["name"] for n in blocks[0]][-1] == "/transformer/h.0/attn/Contrib"
    assert [n["op_type"] for n in blocks[0]] == ["MatMul", "Constant", "Div", "Where", "Softmax", "ms:Identity"]
    assert blocks[0][2]["inputs"] == (("node", 0, 0), ("constant", ("tensor", "FLOAT", (), (2.0,))))


@pytest.mark.parametrize(("length", "said"), [(120, None), (121, 117)])
def test_short_keeps_120_characters_and_cuts_longer_text_to_120(length, said):
    text = "x" * (length - 2)  # repr adds two quotes
    short = verify._short(text)
    assert short == repr(text) if said is None else short == repr(text)[:said] + "..."
    assert len(short) <= 120


def test_first_block_difference_counts_each_differing_node_and_names_the_first():
    node = {"name": "n", "op_type": "Add", "attributes": (), "inputs": (), "outputs": ()}
    ours = {0: [node, node, {**node, "op_type": "Mul"}], 1: [node, node]}
    theirs = {0: [node, {**node, "outputs": ("x",), "inputs": ("y",)}, node], 1: [node]}
    differing, first = verify.first_block_difference(ours, theirs)
    assert differing == 3
    assert first == "layer 0, node 1 `n` vs `n`: inputs () vs ('y',)"
    _, only = verify.first_block_difference({0: [node]}, {0: [node, node]})
    assert only == "layer 0: 1 nodes vs 2; node 1 is only in theirs"
    count, ours_only = verify.first_block_difference({0: [node, node, node]}, {0: [node]})
    assert count == 2 and ours_only == "layer 0: 3 nodes vs 1; node 1 is only in ours"
    assert verify.first_block_difference(ours, ours) == (0, "")


def test_release_check_asks_for_zero_differences_and_says_when_there_are_none():
    check = verify.release_check(attention_model(), attention_model(), "release")
    assert check.tolerance == 0 and check.detail.endswith("no difference")
    empty = helper.make_model(helper.make_graph([], "e", [], []))
    assert verify.release_check(empty, empty, "r").detail.endswith("no attention block found")


def where_of(model, layer):
    return next(n for n in model.graph.node if n.name == f"/transformer/h.{layer}/attn/Where")


def test_perturbed_release_swaps_the_last_layer_s_where_inputs_only():
    model = attention_model(layers=3)
    broken = verify.perturbed_release(model, "swap_where")
    assert list(where_of(broken, 2).input) == ["mask2", "fill", "/transformer/h.2/attn/Div_output_0"]
    assert [list(where_of(broken, layer).input) for layer in (0, 1)] == [
        list(where_of(model, layer).input) for layer in (0, 1)]
    assert list(where_of(model, 2).input)[1] == "/transformer/h.2/attn/Div_output_0"  # the original untouched
    with pytest.raises(ValueError, match="unknown perturbation"):
        verify.perturbed_release(model, "other")


@pytest.mark.parametrize("as_constant", [False, True])
def test_perturbed_release_halves_the_last_layer_s_fill_value(as_constant):
    model = attention_model(layers=2, fill=-1e4)
    if as_constant:  # the fill value from a Constant node instead of an initializer
        del model.graph.initializer[:]  # last, after the layers' own Constants (the divisor)
        model.graph.node.append(helper.make_node("Constant", [], ["fill"], name="fill_constant",
                                                 value=numpy_helper.from_array(np.array(-1e4, np.float32), "fill")))
    broken = verify.perturbed_release(model, "mask_constant")
    fill = where_of(broken, 1).input[2]
    halved = next(t for t in broken.graph.initializer if t.name == fill)
    assert fill == "fill_control" and numpy_helper.to_array(halved).tolist() == -5000.0
    assert where_of(broken, 0).input[2] == "fill" and where_of(broken, 1).input[1].endswith("Div_output_0")


def test_perturbed_release_refuses_a_fill_value_that_is_not_a_constant():
    """A fill computed by another node (here a ConstantOfShape, whose attribute is also named `value`): no
    constant to halve, said so, rather than some other node's attribute halved."""
    model = attention_model(layers=1)
    del model.graph.initializer[:]
    model.graph.input.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [1]))
    model.graph.node.append(helper.make_node("ConstantOfShape", ["shape"], ["fill"], name="fill_computed",
                                             value=numpy_helper.from_array(np.array([-1e4], np.float32))))
    with pytest.raises(ValueError, match="'fill' is neither an initializer nor a Constant's value"):
        verify.perturbed_release(model, "mask_constant")


# --- (f) divergence and the graph repair ------------------------------------------------------------------------
def test_the_divergence_check_names_what_the_fix_left_by_file_and_line():
    after = {"count": 1, "divergences": [{"file": "/x/transformers/modeling_gpt2.py", "line": 201,
                                          "graph_node": "Where_223"}]}
    check = verify.divergence_check({"count": 3}, after)
    assert check.verdict == INFO and check.value == {"before": 3, "after": 1}
    assert check.detail == "left in place: modeling_gpt2.py:201 Where_223"
    assert verify.divergence_check({"count": 0}, {"count": 0, "divergences": []}).detail == "left in place: none"
    bare = {"count": 1, "divergences": [{"file": "modeling_gpt2.py", "line": 201, "graph_node": "Where_223"}]}
    assert verify.divergence_check({"count": 1}, bare).detail == "left in place: modeling_gpt2.py:201 Where_223"


def test_the_repair_check_names_the_graph_onnx_runtime_could_not_run(monkeypatch):
    said = {"repaired": OrtVerdict.MISSING_KERNEL, "fixed": OrtVerdict.ACCEPTED}
    monkeypatch.setattr(verify, "judge", lambda label: SimpleNamespace(verdict=said[label], message=""))
    check = verify.repair_check("repaired", "fixed", [object()])
    assert check.verdict == PASS and check.not_measured == "execution by ONNX Runtime here, no kernel (repaired graph)"
    said["repaired"] = OrtVerdict.ACCEPTED
    assert verify.repair_check("repaired", "fixed", [object()]).not_measured == ""


def test_the_repaired_outputs_control_swaps_each_pair_s_repaired_graph_only(monkeypatch):
    monkeypatch.setattr(verify, "swapped_where", lambda model: f"swapped {model}")
    pairs = [verify.RepairPair("m", "r", "f", {"x": 1}, 2)]
    assert verify.swapped_repairs(pairs) == [verify.RepairPair("m", "swapped r", "f", {"x": 1}, 2)]


def test_measure_repaired_outputs_runs_both_graphs_of_every_pair_or_says_which_it_could_not(monkeypatch):
    logits = {"fixed-a": [1.0, 2.0], "repaired-a": [1.0, 2.0], "fixed-b": [4.0, 2.0], "repaired-b": [4.0, 3.0]}

    def run(model, batch, device):
        if model == "broken":
            raise NotMeasured("no kernel")
        return np.array(logits[model], np.float32), f"emulated on {device}"

    monkeypatch.setattr(verify, "reduced_precision_logits", run)
    pairs = [verify.RepairPair("a", "repaired-a", "fixed-a", {}, 1), verify.RepairPair("b", "repaired-b", "fixed-b",
                                                                                       {}, 3)]
    measured = verify.measure_repaired_outputs(pairs, "cpu", "bf16")
    assert measured.layers == {"a": 1, "b": 3} and measured.execution == "emulated on cpu"
    assert measured.differences["a"]["max_abs_diff"] == 0.0 and measured.differences["b"]["max_abs_diff"] == 1.0
    assert measured.differences["b"]["max_abs_reference"] == 4.0  # the fixed graph's logits are the reference
    unrun = verify.measure_repaired_outputs([*pairs, verify.RepairPair("c", "broken", "fixed-a", {}, 1)], "cpu", "bf16")
    assert unrun == RepairedOutputs({}, {}, not_measured="the repaired graph of c was not run: no kernel")


def repaired(**spacings: tuple[float, int]) -> RepairedOutputs:
    unit = 2.0 ** -10
    return RepairedOutputs({model: {"max_abs_diff": value * unit, "magnitude": 0.181, "spacing": unit,
                                    "spacings": value} for model, (value, _) in spacings.items()},
                           {model: layers for model, (_, layers) in spacings.items()}, "emulated bf16")


def test_repaired_outputs_passes_at_its_tolerance_and_drops_a_model_whose_control_reaches_it_exactly():
    at = verify.repaired_outputs_check(repaired(probe=(4.0, 1)), "bf16", control=repaired(probe=(40.0, 1)))
    assert at.verdict == PASS and at.per_model["models"]["probe"]["verdict"] == PASS
    assert at.per_model["models"]["probe"]["control_verdict"] == FAIL
    assert at.not_measured.startswith("bf16 logits on ONNX Runtime's own kernels (emulated bf16")
    assert "logits on probe, each within" in at.question and "control not measured" not in at.detail
    control_at = verify.repaired_outputs_check(repaired(probe=(0.0, 1), deep=(0.0, 3)), "bf16",
                                               control=repaired(probe=(4.0, 1), deep=(50.0, 3)))
    assert list(control_at.per_model["dropped"]) == ["probe"] and control_at.per_model["models"]["probe"][
        "control_verdict"] == PASS
    assert "; control 4.00 spacings (pass)" in control_at.detail


def test_repaired_outputs_with_no_control_judges_every_model_and_with_an_unmeasured_control_says_so():
    alone = verify.repaired_outputs_check(repaired(probe=(1.0, 1)), "bf16")
    assert alone.verdict == PASS and alone.per_model["dropped"] == {} and "control" not in alone.detail
    unrun = verify.repaired_outputs_check(repaired(probe=(1.0, 1)), "bf16",
                                          control=RepairedOutputs({}, {}, not_measured="no kernel"))
    assert unrun.verdict == PASS and "control not measured (no kernel): no model shown able to fail" in unrun.detail
    assert "control_spacings" not in unrun.per_model["models"]["probe"]
    on_gpu = verify.repaired_outputs_check(dataclasses.replace(repaired(probe=(1.0, 1)), execution="CUDA"), "bf16")
    assert on_gpu.not_measured == ""
    nothing = verify.repaired_outputs_check(RepairedOutputs({}, {}, "emulated bf16"), "bf16")
    assert "logits on (no model)" in nothing.question


# --- the overall verdict -----------------------------------------------------------------------------------------
def test_coverage_merges_only_entries_that_differ_in_their_trailing_parenthesis():
    checks = [Check("a", "q", 0, 0, PASS, not_measured="x (one)"), Check("b", "q", 0, 0, PASS, not_measured="x (two)"),
              Check("c", "q", 0, 0, PASS, not_measured="x (one)"), Check("d", "q", 0, 0, PASS, not_measured="y"),
              Check("e", "q", NOT_MEASURED, 0, NOT_MEASURED, "first\nwhy"), Check("f", "q", "other", 0, PASS)]
    assert verify.coverage(checks) == ["x (one, two)", "y", "e (why)"]


def test_a_pass_a_failing_control_ran_stays_a_pass_and_others_do_not():
    checks = [Check("a", "q", 0, 0, PASS), Check("b", "q", 0, 0, FAIL), Check("c", "q", 0, 0, PASS)]
    controls = [Control("k", "d", ["a"], [Check("a", "q", 1, 0, FAIL), Check("c", "q", 0, 0, PASS)])]
    assert [c.verdict for c in verify.judge_by_controls(checks, controls)] == [PASS, FAIL, NOT_JUDGED]


# --- the wiring: which checks and controls run, on what ----------------------------------------------------------
REPAIRED = helper.make_model(helper.make_graph([], "repaired", [], []))


def passing(name, **kwargs):
    return Check(name, "q", 0, 0, PASS, **kwargs)


@pytest.fixture
def stages(monkeypatch, recorder):
    """Every heavy stage of `verify_fix` and `run_controls` faked: each returns passing checks named as the real
    one's, or a path, and records its arguments."""

    def fake(name, result):
        def stage(*args, **kwargs):
            recorder.record(name, *args, **kwargs)
            return result(*args, **kwargs) if callable(result) else result
        monkeypatch.setattr(verify, name, stage)

    def export_and_lint(settings, variant, out):
        recorder.record("export_and_lint", variant, out=out)
        return out, lint_report()

    monkeypatch.setattr(verify, "export_and_lint", export_and_lint)
    fake("path_checks", lambda settings, variant: [passing(f"path:{p}") for p in ("ortmodule", "ort_trainer")])
    fake("eager_checks", lambda settings, variant: [passing("eager_bitwise"), passing("eager_bitwise_probe")])
    run = verify.training.TrainingRun([3.0, 2.0], {"w": torch.ones(2)}, dict(EXECUTED))
    reference = verify.Fp32Reference({}, torch.zeros(1), [], run)
    fake("fp32_reference", reference)
    fake("dropout_reference", lambda settings, ref: dataclasses.replace(ref, data=["dropout"]))
    fake("fp32_training_checks", lambda *args, **kwargs: ([passing("fp32_gradients"), passing("fp32_training")], run))
    fake("fp32_inference_check", passing("fp32_inference"))
    fake("release_check", passing("matches_release"))
    fake("perturbed_release", lambda model, how: f"perturbed {how}")
    fake("repair_check", passing("graph_repair"))
    fake("probe_repair_pair", lambda settings, variant, out: verify.RepairPair("the probe", "pr", "pf", {}, 1))
    fake("measure_repaired_outputs", lambda pairs, device, amp: RepairedOutputs(
        {p.model: {"spacings": 0.0 if "swapped" not in str(p.repaired) else 99.0, "max_abs_diff": 0.0,
                   "magnitude": 1.0, "spacing": 1.0} for p in pairs}, {p.model: p.layers for p in pairs}, "emulated"))
    fake("swapped_repairs", lambda pairs: [dataclasses.replace(p, repaired=f"swapped {p.repaired}") for p in pairs])
    fake("export_numerics", {"fixed": {}, "repaired": {}})
    monkeypatch.setattr(verify.releases, "export_with_variant", lambda variant, out: out)
    monkeypatch.setattr(verify.releases, "export_with_release", lambda release: Path(f"release-{release}.onnx"))
    monkeypatch.setattr(verify.onnx, "load", lambda path: f"loaded {path}")
    monkeypatch.setattr(verify.reproduce, "read_record", lambda settings, source: recorder.record("read_record",
                                                                                                   source))
    report = SimpleNamespace(to_dict=lambda: {"count": 0, "divergences": []})
    monkeypatch.setattr(verify.divergence, "divergence_report", lambda *args: report)
    monkeypatch.setattr(verify.repair, "repair", lambda path, target: recorder.record("repair", path, target=target)
                        or (REPAIRED, []))
    monkeypatch.setattr(verify.repair, "save_model", lambda model, path: Path(path).write_text("onnx"))
    monkeypatch.setattr(verify.environment, "describe", lambda device: {"device": device})
    return recorder


def test_verify_fix_runs_every_check_in_notebook_03_s_order_and_the_controls_with_its_tolerances(stages, tmp_path):
    settings = FakeSettings(stages)
    fix_dir = tmp_path / "a" / "fix"
    record = verify.verify_fix(settings, "4.26", tmp_path / "source", fix_dir)
    assert [c["name"] for c in record["checks"]] == [
        "lint", "path:ortmodule", "path:ort_trainer", "eager_bitwise", "eager_bitwise_probe", "fp32_gradients",
        "fp32_training", "fp32_inference", "matches_release", "divergence", "graph_repair", "repaired_outputs"]
    assert {p.name for p in fix_dir.iterdir()} == {"lint.json", "divergence.json", verify.REPAIRED_MODEL,
                                                  "verification.json"}
    assert record["variant"] == "4.26" and record["source_run"] == "tiny-run"
    assert record["losses"] == {"eager": [3.0, 2.0], "ortmodule": [3.0, 2.0]}
    assert record["environment"] == {"device": "cpu"} and record["numerics"] == {"fixed": {}, "repaired": {}}
    assert stages.named("read_record")[0][0] == (tmp_path / "source",)
    assert [args[0] for args, _ in stages.named("export_and_lint")][:1] == ["4.26"]
    assert stages.named("export_and_lint")[0][1]["out"] == fix_dir / verify.FIXED_MODEL
    assert stages.named("fp32_reference")[0][0][1] == 3  # fp32 steps
    training = stages.named("fp32_training_checks")
    assert training[0][1]["loss_tolerance"] == 1e-5 and training[0][1]["gradient_tolerance"] == 1e-4
    assert training[0][0][3] == fix_dir
    inference = stages.named("fp32_inference_check")
    assert inference[0][0][3:] == (fix_dir / verify.FP32_MODEL, 1e-5)
    assert stages.named("repair")[0] == ((tmp_path / "source" / verify.reproduce.EXPORTED_MODEL,),
                                         {"target": verify.REPAIR_RULE, "variant": None})
    assert stages.named("repair_check")[0][0][:2] == (fix_dir / verify.REPAIRED_MODEL, fix_dir / verify.FIXED_MODEL)
    release = stages.named("release_check")[0][0]
    assert release[1:] == (Path("release-4.26.0.onnx"), "transformers 4.26.0") and release[0].name == (
        "release-settings.onnx")
    measured = stages.named("measure_repaired_outputs")
    assert [[p.model for p in args[0]] for args, _ in measured] == [["the tiny preset", "the probe"]] * 2
    assert [p.layers for p in measured[1][0][0]] == [2, 1] and measured[1][0][0][0].repaired == (
        fix_dir / verify.REPAIRED_MODEL)
    repaired_outputs = record["checks"][-1]
    assert repaired_outputs["verdict"] == PASS and repaired_outputs["per_model"]["dropped"] == {}
    # every faked control passes, so the fix's passes no control failed are not judged; repaired_outputs' control fails
    assert record["verdict_statement"].startswith("pass — ")
    assert fix_dir.joinpath("verification.json").is_file()
    # again into the same folder, and with another tolerance and no release
    again = verify.verify_fix(settings, "4.26", tmp_path / "source", fix_dir, release="", loss_tolerance=0.5,
                              logits_tolerance=0.25, gradient_tolerance=0.125, fp32_steps=5)
    assert "matches_release" not in [c["name"] for c in again["checks"]]
    assert not [name for name in ("release: swap_where", "release: mask_constant") if name in
                [c["name"] for c in again["controls"]]]
    assert stages.named("fp32_reference")[-1][0][1] == 5
    assert [args[4] for args, _ in stages.named("fp32_inference_check")[-3:]] == [0.25] * 3  # the fix's, 2 controls


def test_run_controls_builds_each_control_from_the_variant_it_names(stages, tmp_path):
    settings = FakeSettings(stages)
    reference = verify.Fp32Reference({}, torch.zeros(1), [], verify.training.TrainingRun([1.0], {}))
    swapped = repaired(probe=(50.0, 1))
    controls = verify.run_controls(
        settings, "4.26", reference, tmp_path, repaired=REPAIRED, changes=[], fixed_path=tmp_path / "f.onnx",
        release_paths=(tmp_path / "ours.onnx", tmp_path / "theirs.onnx"), release_name="transformers 4.26.0",
        tolerances={"loss": 0.5, "logits": 0.25, "gradient": 0.125}, swapped_outputs=swapped)
    names = [c.name for c in controls]
    assert names == ["4.25", "float+masked_fill", "control-head-size-scale", "control-wrong-scale", "dropout on",
                     "repair cast to double", "repair: Where inputs swapped", "release: swap_where",
                     "release: mask_constant"]
    by_name = {c.name: [check.name for check in c.checks] for c in controls}
    assert by_name["4.25"] == ["lint", "path:ortmodule", "path:ort_trainer", "matches_release"]
    assert by_name["control-wrong-scale"] == by_name["control-head-size-scale"] == [
        "eager_bitwise", "eager_bitwise_probe", "fp32_inference", "fp32_gradients", "fp32_training"]
    assert by_name["dropout on"] == ["fp32_gradients", "fp32_training"]
    assert by_name["repair: Where inputs swapped"] == ["repaired_outputs"]
    assert controls[6].checks[0].verdict == FAIL  # the swapped graphs differ by 50 spacings
    assert [args[0] for args, _ in stages.named("export_and_lint")] == ["4.25"]
    assert stages.named("export_and_lint")[0][1]["out"] == tmp_path / "unfixed.onnx"
    assert [args[1] for args, _ in stages.named("eager_checks")] == [
        "float+masked_fill", "control-head-size-scale", "control-wrong-scale"]
    inference = stages.named("fp32_inference_check")
    assert [(args[1], args[3], args[4]) for args, _ in inference] == [
        ("control-head-size-scale", tmp_path / "control-head-size-scale-fp32.onnx", 0.25),
        ("control-wrong-scale", tmp_path / "control-wrong-scale-fp32.onnx", 0.25)]
    training = stages.named("fp32_training_checks")
    assert [(args[1], args[2].data, args[3], kwargs.get("dropout", False), kwargs["loss_tolerance"],
             kwargs["gradient_tolerance"]) for args, kwargs in training] == [
        ("control-head-size-scale", [], tmp_path / "control-head-size-scale", False, 0.5, 0.125),
        ("control-wrong-scale", [], tmp_path / "control-wrong-scale", False, 0.5, 0.125),
        ("4.26", ["dropout"], tmp_path / "dropout", True, 0.5, 0.125)]
    releases = stages.named("release_check")
    assert [args[:2] for args, _ in releases] == [
        (tmp_path / "unfixed-release-settings.onnx", tmp_path / "theirs.onnx"),
        (tmp_path / "ours.onnx", "perturbed swap_where"), (tmp_path / "ours.onnx", "perturbed mask_constant")]
    assert [args[0] for args, _ in stages.named("perturbed_release")] == [f"loaded {tmp_path / 'theirs.onnx'}"] * 2
    miscast = stages.named("repair_check")[0][0]
    assert miscast[1:] == (tmp_path / "f.onnx", []) and miscast[0] == REPAIRED  # no Cast to recast
    without = verify.run_controls(
        settings, "4.26", reference, tmp_path, repaired=REPAIRED, changes=[], fixed_path=tmp_path / "f.onnx",
        release_paths=None, release_name="r", tolerances={"loss": 0.5, "logits": 0.25, "gradient": 0.125},
        swapped_outputs=swapped)
    assert [c.name for c in without] == names[:7] and by_name["4.25"][:3] == [c.name for c in without[0].checks]


def test_path_checks_reproduce_every_path_with_the_variant_patched_in(monkeypatch, recorder):
    seen = []

    def reproduce(settings, scratch):
        seen.append((settings.path, recorder.variant, Path(scratch).is_dir()))
        return reproduction("not reproduced", None, path=settings.path)

    monkeypatch.setattr(verify.reproduce, "reproduce", reproduce)
    settings = verify.reproduce.ReproduceSettings.resolve(path="ortmodule", preset="tiny", device="cpu",
                                                          amp_dtype="bf16", batch_size=1, seq_len=8, opset=17, seed=0)
    checks = verify.path_checks(settings, "4.26")
    assert [c.name for c in checks] == [f"path:{p}" for p in verify.reproduce.PATHS]
    assert seen == [(p, "4.26", True) for p in verify.reproduce.PATHS] and len(seen) >= 2


def test_the_probe_pair_is_the_probe_exported_unfixed_and_repaired_and_exported_fixed(monkeypatch, recorder, tmp_path):
    probe = fake_model(40, 2, n_layer=3)
    monkeypatch.setattr(verify.models, "probe_model", lambda seed, device: (probe, {"input_ids": "b"}))
    monkeypatch.setattr(verify.export, "export_onnx", lambda model, batch, out, *args: recorder.record(
        "export", out) or out)
    monkeypatch.setattr(verify.repair, "repair", lambda path, target: (f"repaired {path.name}", ["change"]))
    pair = verify.probe_repair_pair(FakeSettings(recorder), "4.26", tmp_path)
    assert pair == verify.RepairPair("the probe", "repaired probe-unfixed.onnx", tmp_path / "probe-fixed.onnx",
                                     {"input_ids": "b"}, 3)
    assert [(args[0].name, kwargs["variant"]) for args, kwargs in recorder.named("export")] == [
        ("probe-unfixed.onnx", None), ("probe-fixed.onnx", "4.26")]


def test_export_numerics_compares_the_fixed_graph_with_patched_eager_and_the_repaired_with_unpatched(
        monkeypatch, recorder):
    monkeypatch.setattr(verify, "eager_logits_of", lambda model, batch, device, amp: recorder.variant or "unpatched")
    monkeypatch.setattr(verify, "numerics_record", lambda graph, batch, reference, device, amp: (graph, reference))
    said = verify.export_numerics(FakeSettings(recorder), "4.26", "fixed.onnx", "repaired.onnx")
    assert said == {"fixed": ("fixed.onnx", "4.26"), "repaired": ("repaired.onnx", "unpatched")}
    assert [kwargs["dropout"] for _, kwargs in recorder.named("build_model")] == [False]


def test_judging_reads_the_fixed_graph_s_logits_as_the_reference():
    facts = judging.reference_facts(np.zeros(3))
    flat = repaired(probe=(0.0, 1))
    flat.differences["probe"].update(facts)
    check = verify.repaired_outputs_check(flat, "bf16", control=repaired(probe=(40.0, 1)))
    assert check.verdict == NOT_JUDGED and check.per_model["dropped"]["probe"].startswith(judging.ALL_ZERO)
