"""The remedies' numeric checks and their control at their edges (`where223.study.remedies.run`): what is not
measured and why, a control whose graph gives NaN, the reference rule's reading of eager's outputs, the repair
stage's four ends, the pair's tolerance. Graph runs are faked where the question is the check, not ONNX Runtime.

Written for the mutation run (benchmarks/mutation.py, module `study/remedies/run`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from where223.study import judging
from where223.study.remedies import run as remedies
from where223.sweep import exporters
from where223.verdicts import NOT_JUDGED, NOT_MEASURED, PASS

FP32 = remedies.RECIPES["fp32_model"]
INPUTS = {"x": torch.tensor([[0.1, 0.5, 0.9]])}
REFERENCE = [INPUTS["x"].numpy().copy()]


def test_the_fixed_exporters_are_registered_beside_the_sweep_s():
    assert exporters.EXPORTERS["torchscript+fixes"] is remedies._torchscript_fixed
    assert exporters.EXPORTERS["dynamo+fixes"] is remedies._dynamo_fixed


def test_rolled_moves_every_input_by_one_along_its_last_axis_and_leaves_a_scalar():
    feeds = remedies.rolled({"ids": np.array([[[1, 2, 3], [4, 5, 6]]]), "scalar": np.float32(2.0)})
    assert feeds["ids"].tolist() == [[[3, 1, 2], [6, 4, 5]]] and float(feeds["scalar"]) == 2.0


@pytest.mark.parametrize(("outcome", "reference", "why"), [
    ("type_error", REFERENCE, "ONNX Runtime's verdict is type_error: nothing to run"),
    ("accepted", None, "eager PyTorch did not run the model under the recipe"),
])
def test_a_graph_onnx_runtime_refused_or_without_eager_outputs_is_not_measured(monkeypatch, tmp_path, outcome,
                                                                             reference, why):
    monkeypatch.setattr(remedies, "run_graph", lambda *args: pytest.fail("nothing should run"))
    checked = remedies.check_numerics(tmp_path / "m.onnx", outcome, INPUTS, reference, FP32)
    assert checked == {"status": NOT_MEASURED, "reason": why}


def test_a_missing_kernel_is_run_and_a_graph_that_cannot_run_is_not_measured_with_why(monkeypatch, tmp_path):
    seen = []

    def run_graph(path, fed, outcome):
        seen.append(outcome)
        return [np.asarray(fed["x"])], "emulated"

    monkeypatch.setattr(remedies, "run_graph", run_graph)
    assert remedies.check_numerics(tmp_path / "m.onnx", "missing_kernel", INPUTS, REFERENCE, FP32)["verdict"] == PASS
    assert seen == ["missing_kernel", "missing_kernel"]  # the graph, then its control

    def broken(path, fed, outcome):
        raise RuntimeError("x" * 500)

    monkeypatch.setattr(remedies, "run_graph", broken)
    checked = remedies.check_numerics(tmp_path / "m.onnx", "accepted", INPUTS, REFERENCE, FP32)
    assert checked == {"status": NOT_MEASURED, "reason": "RuntimeError: " + "x" * 400}


def test_a_control_whose_graph_gives_nan_fails_as_built_with_no_number(monkeypatch, tmp_path):
    def run_graph(path, fed, outcome):
        rolled = not np.array_equal(np.asarray(fed["x"]), INPUTS["x"].numpy())
        return [np.full((1, 3), np.nan, np.float32) if rolled else np.asarray(fed["x"])], "ONNX Runtime CPU"

    monkeypatch.setattr(remedies, "run_graph", run_graph)
    checked = remedies.check_numerics(tmp_path / "m.onnx", "accepted", INPUTS, REFERENCE, FP32)
    assert checked["control"] == {"built": "inputs rolled by one along their last axis", "relative": None,
                                  "nonfinite": True, "fails_as_built": True}
    assert checked["verdict"] == PASS and checked["outputs_for_pair"][0].tolist() == REFERENCE[0].tolist()


def test_a_control_that_cannot_be_joined_did_not_fail(monkeypatch, tmp_path):
    """The control's outputs not measured (another count of outputs): `within_tolerance` absent, so not failed."""
    def run_graph(path, fed, outcome):
        rolled = not np.array_equal(np.asarray(fed["x"]), INPUTS["x"].numpy())
        return ([np.asarray(fed["x"])] * (2 if rolled else 1)), "ONNX Runtime CPU"

    monkeypatch.setattr(remedies, "run_graph", run_graph)
    checked = remedies.check_numerics(tmp_path / "m.onnx", "accepted", INPUTS, REFERENCE, FP32)
    assert checked["control"]["fails_as_built"] is False and checked["control"]["nonfinite"] is False
    assert checked["verdict"] == NOT_JUDGED


def test_the_reference_verdict_reads_only_floating_outputs_with_a_finite_value():
    assert remedies.reference_verdict(None) == ""
    ids = np.array([5, 5, 5])  # integers: not compared, so they cannot distinguish either
    nan = np.full(3, np.nan)
    empty = np.zeros(0, np.float32)
    assert remedies.reference_verdict([np.zeros(3), ids, nan, empty]) == judging.ALL_ZERO
    assert remedies.reference_verdict([np.ones(3), nan]) == judging.CONSTANT
    assert remedies.reference_verdict([np.zeros(3), np.arange(3.0)]) == ""
    assert remedies.reference_verdict([ids]) == ""  # nothing floating: nothing said
    assert remedies.reference_verdict([nan]) == ""  # no finite value: nothing said, not "all zero"


def test_reseeded_keeps_the_mode_and_draws_one_element_inputs_around_their_value():
    class Built(torch.nn.Linear):
        def __init__(self, config):
            super().__init__(2, 2)
            self.config = config

    built = Built(None).train()
    inputs = {"one": torch.tensor([3.0]), "empty": torch.zeros(0, dtype=torch.long),
              "half": torch.tensor([1.0, 2.0], dtype=torch.float16)}
    fresh, drawn = remedies.reseeded(built, inputs, 2)
    assert fresh.training is True and type(fresh) is Built
    assert drawn["empty"] is inputs["empty"] and drawn["half"].dtype == torch.float16
    generator = torch.Generator().manual_seed(2)
    torch.randn((1,), generator=generator)  # "one" draws first
    spread = float(torch.tensor([1.0, 2.0]).std())  # two elements: their own spread
    expected = (torch.randn((2,), generator=generator) * spread + 1.5).to(torch.float16)
    assert torch.equal(drawn["half"], expected)
    again = torch.randn(1, generator=torch.Generator().manual_seed(2))
    assert drawn["one"].item() == pytest.approx(again.item() * 1.0 + 3.0)  # spread 1 for a single element
    _, same = remedies.reseeded(built, inputs, 2)
    assert torch.equal(same["half"], drawn["half"])  # seeded: the same draw again


def where_graph(path):
    """Where(cond, float input, float16 initializer): a type conflict `where223 repair` mends with a Cast."""
    graph = helper.make_graph(
        [helper.make_node("Where", ["cond", "x", "y"], ["w"], name="Where_223")], "where",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [2]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.float16), "y")])
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_repair_stage_repairs_judges_and_lints_a_conflict(tmp_path):
    record = {}
    remedies.repair_stage(record, {"blame": []}, where_graph(tmp_path / "plain.onnx"), tmp_path / "repaired.onnx")
    stage = record["repair"]
    assert stage["status"] == "repaired" and stage["change_count"] == len(stage["changes"]) >= 1
    assert stage["eager_consulted"] is True and stage["outcome"] == "accepted"
    assert (tmp_path / "repaired.onnx").is_file() and "lint" in stage and "error" not in stage["lint"]
    assert {"repair", "lint"} <= set(stage["timings_s"])


def test_the_repair_stage_says_when_there_is_nothing_to_repair_or_the_tool_refused_or_failed(monkeypatch, tmp_path):
    from where223.graph import repair as repair_module

    clean = tmp_path / "clean.onnx"
    record = {}
    monkeypatch.setattr(repair_module, "repair", lambda source, eager: ("model", []))
    remedies.repair_stage(record, {}, clean, tmp_path / "r.onnx")
    assert record["repair"]["status"] == "nothing_to_repair" and record["repair"]["changes"] == []
    assert not (tmp_path / "r.onnx").exists()

    def refuse(source, eager):
        raise repair_module.RepairError("r" * 1200)

    monkeypatch.setattr(repair_module, "repair", refuse)
    remedies.repair_stage(record, {}, clean, tmp_path / "r.onnx")
    assert record["repair"]["status"] == "refused" and record["repair"]["reason"] == "r" * 1000

    def fail(source, eager):
        raise KeyError("boom")

    monkeypatch.setattr(repair_module, "repair", fail)
    remedies.repair_stage(record, {}, clean, tmp_path / "r.onnx")
    assert record["repair"]["status"] == "failed" and "KeyError" in str(record["repair"]["error"])


def test_the_repair_stage_records_a_lint_that_fails(monkeypatch, tmp_path):
    def broken(path):
        raise ValueError("lint broke")

    monkeypatch.setattr(remedies, "lint_findings", broken)
    record = {}
    remedies.repair_stage(record, {"blame": []}, where_graph(tmp_path / "plain.onnx"), tmp_path / "repaired.onnx")
    assert record["repair"]["status"] == "repaired" and "lint broke" in str(record["repair"]["lint"]["error"])


def test_the_pair_is_judged_at_twice_the_type_s_tolerance():
    left = [np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)]
    limit = remedies.PAIR_TOLERANCE_FACTOR * remedies.tolerance("bf16")
    assert remedies.PAIR_TOLERANCE_FACTOR == 2
    at = remedies._pair({"outputs_for_pair": left}, {"outputs_for_pair": [left[0] / (1 - limit)]}, "bf16")
    assert at["tolerance"] == limit and at["execution"] == "both graphs"
    assert remedies._pair({"outputs_for_pair": None}, {"outputs_for_pair": left}, "bf16")["status"] == NOT_MEASURED
    assert remedies._pair({"outputs_for_pair": left}, {"outputs_for_pair": None}, "bf16")["status"] == NOT_MEASURED


def test_the_seeds_are_three_and_start_with_the_class_study_s():
    assert remedies.SEEDS == (0, 1, 2)


def test_the_first_seed_is_the_model_as_built_and_a_model_eager_cannot_run_is_said_so():
    import types

    from tests.study.test_remedies import _Toy

    inputs = {"x": torch.randn(2, 3), "ids": torch.randint(4, 10, (2, 5)), "mask": torch.ones(2, 5, dtype=torch.long),
              "flag": torch.tensor([True, False])}  # fmt: skip
    model = _Toy(types.SimpleNamespace(flat=False)).eval()
    record = {"timings_s": {}}
    stage = remedies.seeded_eager_stage(record, lambda _, f: f(), model, inputs, FP32, "eval")
    assert record["seeds"] == [{"seed": 0, "reference": "distinguishes"}]
    assert torch.equal(stage[1]["x"], inputs["x"]) and torch.equal(stage[1]["ids"], inputs["ids"])  # not drawn again

    class Broken(torch.nn.Module):
        def __init__(self, config=None):
            super().__init__()
            self.config = config

        def forward(self, x, ids, mask, flag):
            raise RuntimeError("eager refuses")

    record = {"timings_s": {}}
    stage = remedies.seeded_eager_stage(record, lambda _, f: f(), Broken(), inputs, FP32, "eval")
    assert stage[2] is None and record["seeds"] == [{"seed": 0, "reference": "eager did not run"}]


def test_the_repair_stage_lists_at_most_40_changes_and_counts_them_all(monkeypatch, tmp_path):
    import onnx

    from where223.graph import repair as repair_module

    model = onnx.load(where_graph(tmp_path / "plain.onnx"))
    monkeypatch.setattr(repair_module, "repair", lambda source, eager: (model, [f"change {k}" for k in range(41)]))
    record = {}
    remedies.repair_stage(record, {"blame": []}, tmp_path / "plain.onnx", tmp_path / "repaired.onnx")
    assert record["repair"]["changes"] == [f"change {k}" for k in range(40)]
    assert record["repair"]["change_count"] == 41


def test_the_ortmodule_route_s_committed_record_was_made_at_the_module_s_opset():
    import json

    from where223.pipeline.paths import OUTPUTS

    path = OUTPUTS / "remedies" / "ortmodule_electra.json"
    if not path.is_file():
        pytest.skip("the route's record is not committed yet")
    runs = json.loads(path.read_text())["runs"]
    assert [run["opset"] for run in runs] == [remedies.ORTMODULE_OPSET] * 2 and remedies.ORTMODULE_OPSET == 17


def test_a_control_that_runs_keeps_its_finite_relative_difference(monkeypatch, tmp_path):
    monkeypatch.setattr(remedies, "run_graph", lambda path, fed, outcome: ([np.asarray(fed["x"])], "ONNX Runtime CPU"))
    checked = remedies.check_numerics(tmp_path / "m.onnx", "accepted", INPUTS, REFERENCE, FP32)
    control = checked["control"]
    assert control["nonfinite"] is False and control["fails_as_built"] is True
    assert control["relative"] == pytest.approx(0.8 / 0.9)  # rolled: 0.9 where 0.1 was, against a largest 0.9
