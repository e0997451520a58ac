"""Each check of `where223.study.fix.run` driven to pass and to fail on small synthetic inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from where223.gpt2 import reproduce, training
from where223.graph.lint import Binding, FindingKind, LintReport, Violation
from where223.graph.repair import repair
from where223.study import judging
from where223.study.fix import analysis as fix_analysis
from where223.study.fix import run as verify
from where223.study.fix.run import Check, RepairedOutputs
from where223.verdicts import FAIL, NOT_JUDGED, NOT_MEASURED, PASS

EXECUTED = {"fallback_policy": "FALLBACK_DISABLE", "fallback_pending": False, "execution_agent": "TrainingAgent",
            "inference_session": "InferenceSession"}


def lint_report(conflicts: int = 0, untyped: int = 0, unchecked: int = 0, not_allowed: int = 0) -> LintReport:
    binding = Binding("input", 1, "x", "tensor(float)")
    violation = Violation("Where_1", 0, "Where", "", "T", FindingKind.BINDING_CONFLICT, [binding], [binding],
                          ["tensor(float)"], "")
    bf16 = Binding("output", 0, "y", "tensor(bfloat16)")
    outside = Violation("ConstantOfShape_1", 1, "ConstantOfShape", "", "T2", FindingKind.NOT_ALLOWED, [bf16], [bf16],
                        ["tensor(float)"], "")
    return LintReport(None, 17, {"": 17}, 5, {"custom:Op": unchecked} if unchecked else {}, untyped,
                      [violation] * conflicts + [outside] * not_allowed)


def test_lint_check_passes_clean_and_fails_on_conflicts():
    assert verify.lint_check(lint_report()).verdict == PASS
    failed = verify.lint_check(lint_report(conflicts=2))
    assert failed.verdict == FAIL and failed.value["binding_conflicts"] == 2


@pytest.mark.parametrize("field", ["untyped_values", "unchecked_nodes"])
def test_lint_check_fails_on_unexplained_untyped_or_unchecked_values(field):
    report = lint_report(untyped=3) if field == "untyped_values" else lint_report(unchecked=1)
    failed = verify.lint_check(report)
    assert failed.verdict == FAIL and f"{field} not explained" in failed.detail
    accepted = verify.lint_check(report, {field: "a custom op ONNX Runtime implements"})
    assert accepted.verdict == PASS and "a custom op ONNX Runtime implements" in accepted.not_judged
    assert accepted.value["lint_clean"] is False  # accepted is not clean


def test_lint_check_says_in_its_verdict_which_findings_it_did_not_judge():
    """The fixed export keeps type_not_allowed findings: the check passes on binding conflicts alone, and its
    verdict, the overall verdict and the table say what it left out; "lint clean" is the linter's definition."""
    report = lint_report(not_allowed=2)
    check = verify.lint_check(report)
    assert check.verdict == PASS and check.value["type_not_allowed"] == 2
    assert check.value["lint_clean"] is report.clean is False  # one definition: what the variant table shows
    assert check.not_judged == "2 type_not_allowed finding(s) (ConstantOfShape:T2)"
    statement = verify.summary([check], "cpu")["verdict_statement"]
    assert statement == ("pass — 1 of 1 checks pass; lint did not judge 2 type_not_allowed finding(s) "
                         "(ConstantOfShape:T2); nothing asked went unmeasured")
    assert fix_analysis.verdict_cell(check.to_dict()) == (
        "pass (not judged: 2 type_not_allowed finding(s) (ConstantOfShape:T2))")
    # control: a clean report leaves nothing unjudged, and is clean by the same definition
    clean = verify.lint_check(lint_report())
    assert clean.not_judged == "" and clean.value["lint_clean"] is True and fix_analysis.verdict_cell(
        clean.to_dict()) == "pass"


def reproduction(status: str, message: str | None, path: str = "ortmodule", stack=("x.py:1:_create_execution_agent",)):
    return {"status": status, "path": path, "error": {"message": message} if message else None,
            "call_stack": list(stack), "parameters": {"amp_dtype": "bf16", "device": "cpu"}}


WHERE_ERROR = ("Type Error: Type parameter (T) of Optype (Where) bound to different types (tensor(float) and "
               "tensor(bfloat16) in node (/transformer/h.0/attn/Where).")
MISSING_KERNEL = "NOT_IMPLEMENTED : Could not find an implementation for Gemm(13) node with name 'Gemm'"


def test_path_check_passes_past_the_type_check_and_names_what_it_could_not_run():
    passed = verify.path_check(reproduction("reproduced", MISSING_KERNEL))
    assert passed.verdict == PASS
    assert passed.not_measured == "bf16 training through ONNX Runtime on cpu, no kernel (ortmodule)"
    trained = verify.path_check(reproduction("not reproduced", None))
    assert trained.verdict == PASS and trained.not_measured == ""


def test_path_check_fails_on_the_where_type_error_and_on_other_errors():
    assert verify.path_check(reproduction("reproduced", WHERE_ERROR)).value == "where type error"
    assert verify.path_check(reproduction("reproduced", WHERE_ERROR)).verdict == FAIL
    # a missing kernel before ORTModule's session stage is not past the graph build
    assert verify.path_check(reproduction("reproduced", MISSING_KERNEL, stack=("x.py:1:forward",))).verdict == FAIL


def test_bitwise_check_passes_equal_and_fails_one_ulp_apart():
    logits = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert verify.bitwise_check("eager_bitwise", "m", [logits], [logits.clone()], "bf16").verdict == PASS
    nudged = logits.clone()
    nudged[1] = 2.015625  # the next bf16 number after 2.0
    failed = verify.bitwise_check("eager_bitwise", "m", [logits], [nudged], "bf16")
    assert failed.verdict == FAIL and failed.value == 0.015625
    assert verify.bitwise_check("eager_bitwise", "m", [logits], [logits[:1]], "bf16").verdict == FAIL


def test_root_is_exact_separates_the_preset_from_the_probe():
    assert verify.root_is_exact(16, "bf16") and verify.root_is_exact(64, "fp16")
    assert not verify.root_is_exact(20, "bf16") and not verify.root_is_exact(20, "fp16")


def test_close_check_within_and_beyond_tolerance():
    assert verify.close_check("x", "q", [1.0, 2.0], [1.0, 2.0 + 1e-6], 1e-5).verdict == PASS
    assert verify.close_check("x", "q", [1.0, 2.0], [1.0, 2.1], 1e-5).verdict == FAIL


def gradients(**scales: float) -> dict[str, torch.Tensor]:
    base = {"a.weight": torch.linspace(-1, 1, 6), "b.bias": torch.linspace(0, 1e-3, 3)}
    return {name: value * scales.get(name.replace(".", "_"), 1.0) for name, value in base.items()}


def test_gradient_check_passes_equal_gradients_that_onnx_runtime_executed():
    check = verify.gradient_check(gradients(), gradients(), 1e-4, EXECUTED)
    assert check.verdict == PASS and check.value == 0.0 and "ONNX Runtime executed: TrainingAgent" in check.detail


def test_gradient_check_fails_on_a_scaled_gradient_and_names_the_worst_parameter():
    # a constant factor on one small gradient: AdamW's update would not see it, the comparison does
    check = verify.gradient_check(gradients(), gradients(b_bias=2.0), 1e-4, EXECUTED)
    assert check.verdict == FAIL and check.value == pytest.approx(1.0) and "worst: b.bias" in check.detail
    rows = verify.gradient_differences(gradients(), gradients(b_bias=2.0))
    assert [row["parameter"] for row in rows] == ["b.bias", "a.weight"]


def test_gradient_check_fails_when_a_parameter_is_missing():
    measured = gradients()
    del measured["a.weight"]
    assert verify.gradient_check(gradients(), measured, 1e-4, EXECUTED).verdict == FAIL


@pytest.mark.parametrize("execution", [
    {},  # nothing observed
    {**EXECUTED, "execution_agent": None},  # ONNX Runtime never built an agent
    {**EXECUTED, "fallback_pending": True},  # ORTModule fell back to PyTorch
    {**EXECUTED, "fallback_policy": "FALLBACK_UNSUPPORTED_DEVICE"},  # fallback allowed
])
def test_gradient_check_fails_when_onnx_runtime_was_not_seen_executing(execution):
    check = verify.gradient_check(gradients(), gradients(), 1e-4, execution)
    assert check.verdict == FAIL and "not seen executing" in check.detail


def attention_model(layers: int = 2, fill: float = -1e4, axis: int = -1, divisor: float = 2.0) -> onnx.ModelProto:
    """Per layer /transformer/h.<i>/attn/: MatMul -> Div by a Constant -> Where(mask, scores, fill) -> Softmax."""
    nodes, inputs, initializers = [], [], [numpy_helper.from_array(np.array(fill, np.float32), "fill")]
    for layer in range(layers):
        p = f"/transformer/h.{layer}/attn/"
        q, k, mask = f"q{layer}", f"k{layer}", f"mask{layer}"
        inputs += [helper.make_tensor_value_info(q, TensorProto.FLOAT, [2, 4, 3]),
                   helper.make_tensor_value_info(k, TensorProto.FLOAT, [2, 3, 4]),
                   helper.make_tensor_value_info(mask, TensorProto.BOOL, [2, 4, 4])]
        nodes += [
            helper.make_node("MatMul", [q, k], [p + "MatMul_output_0"], name=p + "MatMul"),
            helper.make_node("Constant", [], [p + "Constant_output_0"], name=p + "Constant",
                             value=numpy_helper.from_array(np.array(divisor, np.float32))),
            helper.make_node("Div", [p + "MatMul_output_0", p + "Constant_output_0"], [p + "Div_output_0"],
                             name=p + "Div"),
            helper.make_node("Where", [mask, p + "Div_output_0", "fill"], [p + "Where_output_0"], name=p + "Where"),
            helper.make_node("Softmax", [p + "Where_output_0"], [f"probs{layer}"], name=p + "Softmax", axis=axis),
        ]
    outputs = [helper.make_tensor_value_info(f"probs{layer}", TensorProto.FLOAT, [2, 4, 4]) for layer in range(layers)]
    graph = helper.make_graph(nodes, "attention", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_release_check_passes_on_the_same_block():
    check = verify.release_check(attention_model(), attention_model(), "release")
    assert check.verdict == PASS and check.value == 0 and "2 layer(s), 10 nodes vs 10" in check.detail


SOFTMAX, CONSTANT = "/transformer/h.0/attn/Softmax", "/transformer/h.0/attn/Constant"


@pytest.mark.parametrize(("theirs", "first"), [
    (verify.perturbed_release(attention_model(), "swap_where"), "layer 1, node 3 `/transformer/h.1/attn/Where`"),
    (verify.perturbed_release(attention_model(), "mask_constant"), "layer 1, node 3 `/transformer/h.1/attn/Where`"),
    (attention_model(axis=1), f"layer 0, node 4 `{SOFTMAX}` vs `{SOFTMAX}`: attributes"),
    (attention_model(divisor=3.0), f"layer 0, node 1 `{CONSTANT}` vs `{CONSTANT}`: attributes"),
    (attention_model(layers=1), "layer 1: 5 nodes vs 0"),
])
def test_release_check_fails_on_wiring_constants_attributes_and_layers_and_names_the_first_difference(theirs, first):
    check = verify.release_check(attention_model(), theirs, "release")
    assert check.verdict == FAIL and check.value >= 1
    assert f"first difference: {first}" in check.detail


def test_release_check_compares_dtypes_of_constants():
    theirs = attention_model()
    theirs.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(-1e4, np.float64), "fill"))
    check = verify.release_check(attention_model(), theirs, "release")
    assert check.verdict == FAIL and "DOUBLE" in check.detail


def test_release_check_fails_without_an_attention_block():
    empty = helper.make_model(helper.make_graph([], "empty", [], []), opset_imports=[helper.make_opsetid("", 17)])
    assert verify.release_check(empty, empty, "release").verdict == FAIL


def where_model() -> onnx.ModelProto:
    """Where(cond, float input, float16 initializer): ONNX Runtime's type error in small."""
    graph = helper.make_graph(
        [helper.make_node("Where", ["cond", "x", "y"], ["w"], name="Where_223")], "where",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [2]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.float16), "y")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_repair_check_is_judged_by_onnx_runtime_and_names_the_graph_it_refused():
    broken = where_model()
    repaired, changes = repair(broken)
    passed = verify.repair_check(repaired, repaired, changes)
    assert passed.verdict == PASS and passed.value == {"repaired": "accepted", "fixed": "accepted"}
    miscast = verify.repair_check(verify.miscast_repair(repaired, changes), repaired, changes)
    assert miscast.verdict == FAIL and miscast.value["repaired"] == "where_type_error"
    assert "repaired graph refused" in miscast.detail and "fixed graph refused" not in miscast.detail
    fixed_broken = verify.repair_check(repaired, broken, changes)
    assert fixed_broken.verdict == FAIL and "fixed graph refused" in fixed_broken.detail
    assert verify.repair_check(repaired, repaired, []).verdict == FAIL  # nothing repaired


def test_verdict_statement_says_what_was_not_measured_and_what_failed():
    checks = [
        Check("lint", "q", 0, 0, PASS),
        Check("path:ortmodule", "q", "x", "y", PASS, not_measured="bf16 training on cpu, no kernel (ortmodule)"),
        Check("path:ort_trainer", "q", "x", "y", PASS, not_measured="bf16 training on cpu, no kernel (ort_trainer)"),
        Check("repaired_outputs", "q", verify.NOT_MEASURED, 1e-5, "info", "onnxruntime cannot run these graphs"),
        Check("divergence", "q", {}, "informational", "info"),
    ]
    record = verify.summary(checks, "cpu")
    assert record["verdict"] == PASS
    assert record["verdict_statement"] == (
        "pass — 3 of 3 checks pass; not measured on cpu: bf16 training on cpu, no kernel (ortmodule, ort_trainer); "
        "repaired_outputs (onnxruntime cannot run these graphs)")
    failed = verify.summary([*checks, Check("matches_release", "q", 1, 0, FAIL)], "cpu")
    assert failed["verdict"] == FAIL and failed["verdict_statement"].startswith("fail — 3 of 4 checks pass; failed: "
                                                                             "matches_release; not measured")
    assert verify.summary(checks[:1], "cuda")["verdict_statement"] == (
        "pass — 1 of 1 checks pass; nothing asked went unmeasured")


def test_the_dropout_control_is_compared_with_pytorch_trained_with_dropout_on():
    """The control claims that only ONNX Runtime's random numbers differ: its reference is PyTorch with dropout
    on, from the same seed and data, not the dropout-off run the fix is compared with."""
    settings = reproduce.ReproduceSettings.resolve(path="ortmodule", preset="tiny", device="cpu", amp_dtype="bf16",
                                                   batch_size=1, seq_len=8, opset=17, seed=0)
    reference = verify.fp32_reference(settings, steps=2)
    with_dropout = verify.dropout_reference(settings, reference)
    assert with_dropout.data is reference.data and with_dropout.logits is reference.logits
    again = training.eager_training("tiny", 0, reference.data, "cpu", "fp32", dropout=True)
    assert with_dropout.training.losses == again.losses  # deterministic: the same seed draws the same masks
    # control: dropout changes PyTorch's own numbers, so the dropout-off run was another function altogether
    assert with_dropout.training.losses != reference.training.losses


def test_repaired_outputs_tolerance_grows_with_depth_from_a_stated_formula():
    assert [verify.repaired_outputs_tolerance(layers) for layers in (1, 2, 12)] == [4, 6, 26]
    assert "(n_layer + 1) spacings" in verify.REPAIRED_OUTPUTS_FORMULA
    with pytest.raises(ValueError, match="at least one block"):
        verify.repaired_outputs_tolerance(0)


def outputs(**spacings: tuple[float, int]) -> RepairedOutputs:
    """A repaired_outputs measurement: model -> (difference in spacings, blocks), at a spacing of 2**-10."""
    unit = 2.0 ** -10
    return RepairedOutputs(
        {model.replace("_", " "): {"max_abs_diff": value * unit, "magnitude": 0.181, "spacing": unit,
                                   "spacings": value} for model, (value, _) in spacings.items()},
        {model.replace("_", " "): layers for model, (_, layers) in spacings.items()}, "emulated bf16")


def test_repaired_outputs_leaves_out_a_model_its_control_cannot_fail_and_judges_the_rest():
    """The tiny preset's swapped-Where control (1.62 spacings) stays within its tolerance: the check cannot fail
    there, so the tiny preset does not vote; the probe's control fails, and the probe is judged alone."""
    fixed = outputs(tiny=(0.0, 2), probe=(2.25, 1))
    swapped = outputs(tiny=(1.62, 2), probe=(212.75, 1))
    check = verify.repaired_outputs_check(fixed, "bf16", control=swapped)
    assert check.verdict == PASS and check.value == {"probe": 2.25} and check.tolerance == {"probe": 4}
    assert list(check.per_model["dropped"]) == ["tiny"]
    assert "1.62 spacings, within its tolerance of 6" in check.per_model["dropped"]["tiny"]
    assert check.per_model["models"]["tiny"]["control_verdict"] == PASS  # the control passed: a blind spot
    assert check.per_model["models"]["probe"]["control_verdict"] == FAIL
    assert check.per_model["tolerance_formula"].startswith("2 x (n_layer + 1) spacings of bf16")
    assert check.not_judged == "tiny (control within tolerance)"
    assert "repaired_outputs did not judge tiny" in verify.summary([check], "cpu")["verdict_statement"]
    # the control itself, on the same models: it fails on every model left in
    control = verify.repaired_outputs_check(swapped, "bf16", control=swapped)
    assert control.verdict == FAIL and control.value == {"probe": 212.75}
    # and the check fails when the fix differs beyond the probe's tolerance
    beyond = verify.repaired_outputs_check(outputs(tiny=(0.0, 2), probe=(4.5, 1)), "bf16", control=swapped)
    assert beyond.verdict == FAIL and beyond.value == {"probe": 4.5}


def test_repaired_outputs_without_a_model_its_control_fails_is_not_judged_and_does_not_vote():
    check = verify.repaired_outputs_check(outputs(tiny=(0.0, 2)), "bf16", control=outputs(tiny=(1.62, 2)))
    assert check.verdict == NOT_JUDGED and check.value == {"tiny": 0.0}  # measured, but could not have failed
    assert check.detail.startswith("no model on which its control fails")
    assert verify.summary([check], "cpu")["verdict_statement"].startswith("pass — 0 of 0 checks pass")
    # a model whose reference (the source-fixed graph's logits) is all zero is left out too; its control is judged
    flat = outputs(tiny=(0.0, 2), probe=(2.25, 1))
    flat.differences["tiny"].update(max_abs_reference=0.0, reference_spread=0.0, reference_size=6)
    flat.differences["probe"].update(max_abs_reference=5.3, reference_spread=9.0, reference_size=6)
    left = verify.repaired_outputs_check(flat, "bf16", control=outputs(tiny=(16.0, 2), probe=(212.75, 1)))
    assert left.verdict == PASS and left.value == {"probe": 2.25}
    assert left.per_model["dropped"]["tiny"].startswith(judging.ALL_ZERO)
    unrun = verify.repaired_outputs_check(RepairedOutputs({}, {}, not_measured="the fixed graph was not run"), "bf16")
    assert unrun.verdict == NOT_MEASURED and unrun.detail == "the fixed graph was not run"


def test_the_fix_verification_judges_a_pass_no_control_failed_and_a_flat_reference():
    """The rule in the fix verification: a numeric check whose reference is all zero is not judged; once the
    controls have run, a pass no control failed is not judged, and one a control failed stays a pass; the analysis
    applies the same rule to a record made before it, and counts the overall verdict again."""
    moving = verify.close_check("fp32_inference", "q", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), 1e-5)
    flat = verify.close_check("fp32_training", "q", torch.zeros(3), torch.zeros(3), 1e-5)
    assert moving.verdict == PASS and flat.verdict == NOT_JUDGED and flat.not_judged == judging.ALL_ZERO
    uncontrolled = verify.close_check("fp32_gradients", "q", [1.0, 3.0], [1.0, 3.0], 1e-5)
    controls = [verify.Control("wrong", "d", ["fp32_inference"],
                               [verify.close_check("fp32_inference", "q", [1.0, 2.0], [1.5, 2.0], 1e-5)]),
                verify.Control("weak", "d", ["fp32_gradients"],
                               [verify.close_check("fp32_gradients", "q", [1.0, 3.0], [1.0, 3.0], 1e-5)])]
    judged = verify.judge_by_controls([moving, flat, uncontrolled], controls)
    assert [c.verdict for c in judged] == [PASS, NOT_JUDGED, NOT_JUDGED]  # the failing control keeps the pass
    assert judged[2].not_judged.startswith(judging.CONTROL_DID_NOT_FAIL)
    record = verify.summary(judged, "cpu")
    assert record["verdict"] == PASS and "1 of 1 checks pass" in record["verdict_statement"]
    assert "fp32_gradients not judged: its control did not fail" in record["verdict_statement"]
    # the same rule on a record made before it: a pass no control failed, and a pass whose reference is all zero
    old = {"verdict": PASS, "verdict_statement": "pass — 3 of 3 checks pass; nothing asked went unmeasured",
           "checks": [{"name": n, "verdict": PASS, "not_judged": "", "reference": r, "value": 0.0, "tolerance": 1e-5}
                      for n, r in (("fp32_inference", [{"max_abs_reference": 2.0}]),
                                   ("fp32_gradients", []), ("fp32_training", [{"max_abs_reference": 0.0}]))],
           "controls": [{"name": "wrong", "checks": [{"name": n, "verdict": FAIL}
                                                     for n in ("fp32_inference", "fp32_training")]}]}  # fmt: skip
    said = {c["name"]: (c["verdict"], c["not_judged"]) for c in fix_analysis.judged_checks(old)}
    no_control = f"{judging.CONTROL_DID_NOT_FAIL} ({fix_analysis.NO_CONTROL_FAILED})"
    assert said == {"fp32_inference": (PASS, ""), "fp32_gradients": (NOT_JUDGED, no_control),
                    "fp32_training": (NOT_JUDGED, judging.ALL_ZERO)}  # fmt: skip
    assert fix_analysis.overall_verdict(old).startswith("Overall verdict: **pass** — 1 of 1 checks pass; "
                                                        "fp32_gradients not judged")
    assert fix_analysis.verdict_cell({"verdict": NOT_JUDGED, "not_judged": "why"}) == "not judged (why)"
    assert fix_analysis.control_matrix(old)[1][1][:2] == ["fp32_gradients", NOT_JUDGED]
