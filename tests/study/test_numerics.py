"""Reduced-precision numerics measured on small hand-built bf16 graphs: the `repaired_outputs` check passes for
two graphs rounding differently, fails on its control (the Where's inputs swapped), and says "not measured",
never pass, for a graph that fails the type check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from where223.eager.numerics import NOT_MEASURED, logits_difference, numerics_record, swapped_where
from where223.study.fix.run import (
    FAIL,
    PASS,
    RepairPair,
    coverage,
    measure_repaired_outputs,
    repaired_outputs_check,
    repaired_outputs_tolerance,
    swapped_repairs,
)

F32, BF16, I64, BOOL = TensorProto.FLOAT, TensorProto.BFLOAT16, TensorProto.INT64, TensorProto.BOOL
WHERE = "/transformer/h.0/attn/Where"
WEIGHTS = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)


def _graph(where_in_float: bool, unfixed: bool = False) -> onnx.ModelProto:
    """logits = Where(mask, ids * 0.37, -100) @ W in bf16; the scores' Where in bf16 (the source fix), in
    float with its inputs cast (the repair), or fed float and bf16 (unfixed: ONNX Runtime refuses it)."""
    scores = "scores32" if where_in_float or unfixed else "scores"
    fill = "fill32" if where_in_float else "fill"
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids32"], to=F32),
        helper.make_node("Mul", ["ids32", "scale32"], ["scores32"]),
        helper.make_node("Cast", ["scores32"], ["scores"], to=BF16),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=BOOL),
        helper.make_node("Cast", ["fill"], ["fill32"], to=F32),
        helper.make_node("Where", ["mask", scores, fill], ["masked"], name=WHERE),
        helper.make_node("Cast", ["masked"], ["masked16"], to=BF16),
        helper.make_node("MatMul", ["masked16", "weights"], ["logits"]),
    ]
    initializers = [
        helper.make_tensor("scale32", F32, [], [0.37]),
        helper.make_tensor("fill", BF16, [], [-100.0]),
        helper.make_tensor("weights", BF16, [4, 3], WEIGHTS.ravel().tolist()),
    ]
    graph = helper.make_graph(
        nodes, "numerics_test",
        [helper.make_tensor_value_info("input_ids", I64, [2, 4]),
         helper.make_tensor_value_info("attention_mask", I64, [2, 4])],
        [helper.make_tensor_value_info("logits", BF16, [2, 3])],
        initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


BATCH = {
    "input_ids": torch.tensor([[3, 7, 11, 2], [5, 1, 9, 4]]),
    "attention_mask": torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1]]),
}


def test_repaired_outputs_passes_within_tolerance_and_fails_on_its_control():
    fixed, repaired = _graph(where_in_float=False), _graph(where_in_float=True)
    pairs = [RepairPair("a toy", repaired, fixed, BATCH, 1)]  # one Where: one block
    measured = measure_repaired_outputs(pairs, "cpu", "bf16")
    swapped = measure_repaired_outputs(swapped_repairs(pairs), "cpu", "bf16")
    check = repaired_outputs_check(measured, "bf16", control=swapped)
    assert check.verdict == PASS and check.value["a toy"] <= check.tolerance["a toy"] == repaired_outputs_tolerance(1)
    assert "emulated bf16" in check.detail and "a toy (1 block(s)): " in check.detail
    assert check.per_model["dropped"] == {} and check.per_model["models"]["a toy"]["control_verdict"] == FAIL
    control = repaired_outputs_check(swapped, "bf16", control=swapped)
    assert control.verdict == FAIL and control.value["a toy"] > control.tolerance["a toy"]


def test_repaired_outputs_is_not_measured_never_pass_when_a_graph_fails_the_type_check():
    pair = RepairPair("a toy", _graph(False, unfixed=True), _graph(False), BATCH, 1)
    check = repaired_outputs_check(measure_repaired_outputs([pair], "cpu", "bf16"), "bf16")
    assert check.value == NOT_MEASURED and check.verdict == NOT_MEASURED != PASS
    assert "the repaired graph of a toy was not run" in check.detail and "where_type_error" in check.detail
    assert coverage([check]) and coverage([check])[0].startswith("repaired_outputs")


def test_numerics_record_measures_against_a_reference_in_spacings():
    fixed = _graph(False)
    ids, mask = BATCH["input_ids"].numpy(), BATCH["attention_mask"].numpy()
    scores = np.where(mask.astype(bool), ids.astype(np.float32) * np.float32(0.37), -100.0)
    reference = scores @ WEIGHTS  # float32 throughout: what bf16 rounding departs from
    record = numerics_record(fixed, BATCH, torch.from_numpy(reference), "cpu", "bf16")
    assert record["status"] == "measured" and record["execution"] == "emulated bf16"
    assert 0 < record["max_abs_diff"] and record["spacings"] == record["max_abs_diff"] / record["spacing"]
    assert record["spacing"] == 2.0 ** (np.floor(np.log2(np.abs(reference).max())) - 7)
    refused = numerics_record(_graph(False, unfixed=True), BATCH, torch.from_numpy(reference), "cpu", "bf16")
    assert refused["status"] == NOT_MEASURED and "where_type_error" in refused["reason"]


def test_logits_difference_in_spacings():
    measured = logits_difference(np.array([1.0 + 2**-7, -0.5]), np.array([1.0, -0.5]), "bf16")
    assert measured == {"max_abs_diff": 2**-7, "magnitude": 1.0, "spacing": 2**-7, "spacings": 1.0}
    assert logits_difference(np.array([1.0 + 2**-10]), np.array([1.0]), "fp16")["spacings"] == 1.0


def test_swapped_where_needs_an_attention_where():
    model = _graph(False)
    model.graph.node[5].name = "Where_elsewhere"
    with pytest.raises(ValueError, match="no attention Where"):
        swapped_where(model)
