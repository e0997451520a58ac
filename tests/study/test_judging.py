"""The one rule for numeric checks (`where223.study.judging`): a comparison whose reference does not distinguish (all
zero, or constant) or whose control did not fail could not have failed, and is `not judged`, never `pass`; the
control of each case, a reference that distinguishes with a control that failed, passes. The same rule where each
study computes its checks (the class and remedies cells' `compare_outputs`, the fix verification's checks and
controls) and where it reads committed records (records made before the rule included)."""

from __future__ import annotations

import numpy as np

from where223.study import judging
from where223.study._cell.numerics import compare_outputs
from where223.study.classes import analysis as classes
from where223.study.remedies import analysis as remedies
from where223.verdicts import FAIL, NOT_JUDGED, NOT_MEASURED, PASS

MOVING = np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)


def checked(reference, graph=None, control_fails=None):
    """A remedies-style comparison of `graph` (default: `reference` itself) against `reference`, with a control."""
    result = compare_outputs([reference if graph is None else graph], [reference], "bf16", "emulated bf16")
    if control_fails is not None:
        result["control"] = {"built": "inputs rolled", "fails_as_built": control_fails}
        result = judging.numeric_verdict(result)
        return result
    return result["verdict"], result["not_judged"]


def test_a_reference_that_distinguishes_passes_and_one_that_cannot_fail_is_not_judged():
    assert checked(MOVING) == (PASS, "")  # the control of every case below
    assert checked(MOVING, control_fails=True) == (PASS, "")
    assert checked(np.zeros((2, 3), np.float32)) == (NOT_JUDGED, judging.ALL_ZERO)
    assert checked(np.full((2, 3), 0.5, np.float32)) == (NOT_JUDGED, judging.CONSTANT)
    said, why = checked(MOVING, control_fails=False)
    assert said == NOT_JUDGED and why == judging.CONTROL_DID_NOT_FAIL
    # a check that failed could fail: it stays a failure whatever its reference
    assert checked(np.zeros((2, 3), np.float32), graph=np.ones((2, 3), np.float32)) == (FAIL, "")
    # one element is not "constant"; nor are outputs of which one moves
    assert checked(np.array([0.7], np.float32)) == (PASS, "")
    two = compare_outputs([np.zeros(3), MOVING], [np.zeros(3), MOVING], "bf16", "x")
    assert two["verdict"] == PASS and [o["reference_size"] for o in two["outputs"]] == [3, 4]


def test_the_rule_judges_records_made_before_it_from_the_fields_they_kept():
    """A record of before the rule: no verdict, each output's `max_abs_reference` only, its control's
    `fails_as_built`."""
    old = {"status": "measured", "within_tolerance": True, "execution": "emulated bf16", "relative": 0.0,
           "outputs": [{"max_abs_reference": 0.0}, {"max_abs_reference": 0.0}],
           "control": {"fails_as_built": True}}  # fmt: skip
    assert judging.numeric_verdict(old) == (NOT_JUDGED, judging.ALL_ZERO)
    moving = {**old, "outputs": [{"max_abs_reference": 2.6875}]}
    assert judging.numeric_verdict(moving) == (PASS, "")  # spread unknown: not taken for constant
    assert judging.numeric_verdict({**moving, "control": {"fails_as_built": False}})[0] == NOT_JUDGED
    assert judging.numeric_verdict({"status": NOT_MEASURED, "reason": "refused"}) == (NOT_MEASURED, "refused")
    assert judging.numeric_verdict(None)[0] == NOT_MEASURED


def test_the_kept_outputs_hold_the_worst_and_one_that_distinguishes():
    """Many outputs: the record keeps the first few, plus the worst and the first that distinguishes, so the
    rule read from the record says what the cell said."""
    zeros = [np.zeros(2)] * 9
    found = compare_outputs([*zeros, MOVING], [*zeros, MOVING], "bf16", "x")
    assert found["verdict"] == PASS and found["outputs"][-1]["output"] == 9
    assert judging.numeric_verdict(found) == (PASS, "")
    flat = compare_outputs(zeros * 2, zeros * 2, "bf16", "x")  # control: nothing distinguishes anywhere
    assert flat["verdict"] == NOT_JUDGED and len(flat["outputs"]) == 8


def numerics(reference, execution="emulated bf16", control_fails=True, within=True):
    return {"status": "measured", "execution": execution, "within_tolerance": within, "relative": 0.0,
            "reduced": "bf16", "tolerance": 0.0625, "outputs": [{"max_abs_reference": reference}],
            "control": {"fails_as_built": control_fails}}  # fmt: skip


def test_the_studies_counts_exclude_what_is_not_judged_and_say_where_the_rest_ran():
    checks = [numerics(1.0, "ONNX Runtime CPU"), numerics(1.0), numerics(0.0), numerics(1.0, control_fails=False),
              numerics(1.0, within=False), {"status": NOT_MEASURED, "reason": "x"}]
    assert classes.judged_counts(checks, "fix") == {"fix_within_tolerance": 2, "fix_within_on_ort_kernels": 1,
                                                    "fix_within_emulated": 1, "fix_not_judged": 2}  # fmt: skip
    rows = [{"model_type": m, "key": {"stack": "today", "recipe": "bf16_model", "exporter": "torchscript"},
             "plain": {"outcome": "type_error"}, "repair": {"status": "repaired", "outcome": "missing_kernel",
                                                             "numerics": check},
             "fixed": {"outcome": "accepted", "numerics": numerics(1.0, "ONNX Runtime CPU")},
             "pair": {**numerics(ref), "control": None}}
            for m, check, ref in (("a", numerics(1.0), 1.0), ("zero", numerics(0.0), 0.0))]  # fmt: skip
    counted = remedies.tally(rows)
    assert counted["repair_within_tolerance"] == 1 and counted["repair_not_judged"] == 1
    assert counted["fix_within_tolerance"] == counted["fix_within_on_ort_kernels"] == 2
    assert counted["pair_within_tolerance"] == counted["pair_not_judged"] == 1
    listed = remedies.not_judged(rows)
    assert [(e["cell"], e["part"], e["reason"]) for e in listed] == [
        ("today/bf16_model/torchscript/zero", "repair", judging.ALL_ZERO),
        ("today/bf16_model/torchscript/zero", "pair", judging.ALL_ZERO)]
    class_rows = [{"outcome": "missing_kernel", "numerics": numerics(0.0)},
                  {"outcome": "accepted", "numerics": numerics(2.0, "ONNX Runtime CPU")}]  # fmt: skip
    said = classes.counts(class_rows)
    assert (said["within_tolerance"], said["within_on_ort_kernels"], said["not_judged"]) == (1, 1, 1)


def test_a_constant_reference_is_one_value_in_more_than_one_element():
    """The rule's edges: two equal elements are constant, one element is not (one value in more than one element);
    a single zero, or an output with no finite element, beside a constant output leaves them undistinguishing; no
    finite element has no spread."""
    CONSTANT, reference_facts, undistinguishing = judging.CONSTANT, judging.reference_facts, judging.undistinguishing
    assert undistinguishing([reference_facts([3.0, 3.0])]) == CONSTANT
    assert undistinguishing([reference_facts([3.0])]) == ""  # control: one element
    assert undistinguishing([reference_facts([3.0, 3.5])]) == ""  # control: two values
    for zero in ([0.0], [float("nan")]):
        assert undistinguishing([reference_facts(zero), reference_facts([5.0] * 4)]) == CONSTANT
    assert undistinguishing([reference_facts([1.0]), reference_facts([5.0] * 4)]) == ""  # control: not zero
    assert reference_facts([float("nan"), float("inf")]) == {"max_abs_reference": 0.0, "reference_spread": 0.0,
                                                            "reference_size": 0}


def test_the_rule_read_back_from_records_of_every_age():
    """Records made before the rule lack sizes, outputs, a reason: an unknown size is not constant, a check without
    outputs is judged on its tolerance, one never run says so; `passed` and `not_judged` say what the verdict is."""
    assert judging.undistinguishing([{"max_abs_reference": 2.0, "reference_spread": 0.0}]) == ""
    assert judging.undistinguishing([{"max_abs_reference": 2.0, "reference_spread": 0.0,
                                      "reference_size": 3}]) == judging.CONSTANT  # control: its size known
    measured = {"status": "measured", "within_tolerance": True}
    assert judging.numeric_verdict(measured) == (PASS, "")
    assert judging.numeric_verdict(None) == (NOT_MEASURED, "not run")
    unjudged = {**measured, "control": {"fails_as_built": False}}
    assert judging.passed(measured) and not judging.passed(unjudged)
    assert judging.not_judged(unjudged) and not judging.not_judged(measured)

