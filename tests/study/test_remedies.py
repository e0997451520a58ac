"""The remedies study: its plan drawn from the class records, its counts, its regressions and its section, from
records built here (each count shown failing on a record built to break it), then one cell end to end on today's
stack (BERT in fp16 with the TorchScript exporter: refused plainly, accepted after the repair and with the fixes,
each within its tolerance of eager, each control failing)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.stacks import today_python
from where223.pipeline.paths import ROOT
from where223.study.remedies import analysis

LN = (
    "Type Error: Type parameter (T) of Optype (LayerNormalization) bound to different types (tensor(float) and "
    "tensor(float16) in node (n)."
)


def class_record(model, outcome, recipe="fp16_model", exporter="torchscript", stack="today", message=LN):
    binding = {"op_type": "LayerNormalization", "node": "n", "bound_types": ["tensor(float)", "tensor(float16)"]}
    return {
        "model_type": model,
        "outcome": outcome,
        "key": {"stack": stack, "recipe": recipe, "exporter": exporter},
        "ort": {
            "message": message if outcome == "type_error" else None,
            "type_binding": binding if outcome == "type_error" else None,
        },
    }


def numerics(within, control_fails=True):
    return {
        "status": "measured",
        "reduced": "fp16",
        "tolerance": 0.0078125,
        "relative": 1e-3 if within else 0.5,
        "within_tolerance": within,
        "execution": "ONNX Runtime CPU",
        "control": {"relative": 0.9, "fails_as_built": control_fails},
    }


def remedy_record(model, plain="type_error", repaired="accepted", fixed="accepted", within=True, control=True):
    base = class_record(model, plain)
    return {
        **base,
        "plain": {"outcome": plain, "ort": base["ort"]},
        "repair": {"status": "repaired", "outcome": repaired, "numerics": numerics(within, control)},
        "fixed": {"outcome": fixed, "numerics": numerics(within, control), "export": {"fixes": ["sdpa_in_query_type"]}},
        "pair": {"status": "measured", "within_tolerance": within, "reduced": "fp16", "tolerance": 0.015625},
    }


def test_plan_takes_samples_blind_to_results_then_each_class_in_turn():
    rows = [class_record(m, "type_error") for m in ("a", "b", "c")]
    rows += [
        class_record(
            "d",
            "type_error",
            recipe="bf16_model",
            message="Type Error: Type 'tensor(bfloat16)' of "
            "input parameter (x) of operator (Conv) in node (c) is invalid.",
        )
    ]
    rows[-1]["ort"]["type_binding"] = None
    rows += [class_record(m, "accepted") for m in ("p", "q", "r", "s")]
    lines = analysis.plan_lines(rows, "today")
    samples = lines[: analysis.SAMPLES_PER_COLUMN]  # the accepted samples first: few, so a short sweep has them
    assert all(" fp16_model " in s and s.split()[0] in "pqrs" for s in samples)
    members = lines[analysis.SAMPLES_PER_COLUMN :]
    assert members[:2] == ["a fp16_model torchscript auto", "d bf16_model torchscript auto"]  # each class in turn
    assert members[2:] == ["b fp16_model torchscript auto", "c fp16_model torchscript auto"]
    assert analysis.plan_lines(rows, "2022") == []  # the other stack's records give no cell


def test_tally_counts_and_each_count_fails_on_its_broken_record():
    good = [remedy_record("a"), remedy_record("b")]
    counted = analysis.tally(good)
    assert counted["refused_before"] == 2 and counted["repair_accepted"] == 2 and counted["fix_accepted"] == 2
    assert (
        counted["repair_within_tolerance"] == counted["fix_within_tolerance"] == counted["pair_within_tolerance"] == 2
    )
    assert counted["controls_run"] == counted["controls_failed_as_built"] == 4
    broken = analysis.tally([remedy_record("a", repaired="type_error", fixed="type_error", within=False,
                                           control=False)])  # fmt: skip
    assert broken["repair_accepted"] == broken["fix_accepted"] == 0
    assert broken["repair_within_tolerance"] == broken["pair_within_tolerance"] == 0
    assert broken["controls_failed_as_built"] == 0 and broken["controls_run"] == 2


def test_summary_joins_classes_and_finds_a_regressed_sample():
    class_rows = [class_record("a", "type_error"), class_record("s", "accepted"), class_record("t", "accepted")]
    regressed = remedy_record("t", plain="accepted", fixed="type_error")
    rows = [remedy_record("a"), remedy_record("s", plain="accepted"), regressed]
    found = analysis.summary(rows, class_rows)
    entry = found["classes"][0]
    assert (entry["operator"], entry["members"], entry["rerun"], entry["refused_alike"]) == (
        "LayerNormalization",
        1,
        1,
        1,
    )
    assert found["samples"]["today/fp16_model/torchscript"]["regressed"] == ["t"]  # the control: its fix is refused
    assert found["tolerances"]["against_eager"] == {"fp16": [0.0078125]}


SHAPE = "[ONNXRuntimeError] : 1 : FAIL : Node (/m/MatMul) Op (MatMul) [ShapeInferenceError] Incompatible dimensions"


def test_a_refusal_left_is_the_exporters_when_float32_is_refused_alike():
    from where223.study.remedies import baseline

    left = remedy_record("canine", fixed="other_error")
    left["fixed"]["ort"] = {"message": SHAPE}
    float32 = {**class_record("canine", "other_error", recipe="fp32_model"), "ort": {"message": SHAPE}}
    assert baseline.plan_lines([left, remedy_record("a")], "today") == ["canine fp32_model torchscript auto"]
    found = analysis.summary([left], [class_record("canine", "type_error")], float32_rows=[float32])
    (entry,) = found["classes"][0]["not_remedied"]
    assert entry["float32"] == baseline.ALIKE_IN_FLOAT32 and "Incompatible dimensions" in entry["fix_message"]
    other = {**float32, "ort": {"message": SHAPE.replace("Op (MatMul)", "Op (Mul)")}}  # controls: another op,
    accepted = {**float32, "outcome": "accepted", "ort": {"message": None}}  # accepted in float32, no record
    for rows, said in (([other], baseline.NOT_ALIKE), ([accepted], baseline.NOT_ALIKE), ([], baseline.NOT_RUN)):
        found = analysis.summary([left], [class_record("canine", "type_error")], float32_rows=rows)
        assert found["classes"][0]["not_remedied"][0]["float32"] == said


def test_a_member_eager_pytorch_itself_refuses_is_said_so_and_one_it_ran_is_not():
    from where223.study.remedies import section

    refused = remedy_record("mra", fixed="type_error")
    refused["eager"] = {"error": {"message": "mat1 and mat2 must have the same dtype, but got Float and Half\nmore",
                                  "stage": "eager"}}  # fmt: skip
    ran = remedy_record("bert", fixed="type_error")  # the control: eager ran (no error)
    ran["eager"] = {"outputs": {}}
    found = analysis.summary([refused, ran], [class_record("mra", "type_error"), class_record("bert", "type_error")])
    said = {entry["model_type"]: entry["eager"] for entry in found["classes"][0]["not_remedied"]}
    assert said == {"mra": "refused: mat1 and mat2 must have the same dtype, but got Float and Half", "bert": "ran"}
    text = "\n".join(section.not_remedied_lines(found))
    assert "Eager PyTorch itself refuses `mra`" in text and "itself refuses `bert`" not in text
    assert "| `mra` |" in text and text.count("| refused |") == 1 and text.count("| ran |") == 1


@pytest.mark.slow
def test_bert_fp16_torchscript_cell_on_today_s_stack(tmp_path):
    python = today_python()
    key = {"model": "bert", "recipe": "fp16_model", "exporter": "torchscript", "opset": "auto", "mode": "eval"}
    out = tmp_path / "record.json"
    command = [str(python), "-m", "where223.sweep.cell", "--cell", json.dumps(key), "--stack",
               json.dumps({"torch": "2.14.1", "transformers": "5.24.0"}), "--onnx", str(tmp_path / "model.onnx"),
               "--out", str(out), "--runner", "where223.study.remedies.run"]  # fmt: skip
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "src"),
        "HOME": str(tmp_path),
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["plain"]["outcome"] == "type_error"  # the control: refused as the class sweep found
    for part in ("repair", "fixed"):
        assert record[part]["outcome"] == "accepted", part
        checked = record[part]["numerics"]
        assert checked["within_tolerance"] is True and checked["control"]["fails_as_built"] is True, part
    assert record["pair"]["within_tolerance"] is True


def test_the_pair_check_fails_on_graphs_that_differ():
    """The repaired-against-fixed check on outputs built here: the same outputs within twice the type's tolerance
    pass; the control, one output off by a fifth of its magnitude, fails; a graph that did not run is not measured."""
    import numpy as np

    from where223.study.remedies.run import _pair, rolled

    left = [np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)]
    same = {"outputs_for_pair": left}
    assert _pair(same, {"outputs_for_pair": [left[0] * (1 + 2**-9)]}, "bf16")["within_tolerance"] is True
    off = _pair(same, {"outputs_for_pair": [left[0] + np.float32(0.8)]}, "bf16")
    assert off["within_tolerance"] is False and off["tolerance"] == 2 * 8 * 2.0**-7
    assert _pair(same, {}, "bf16")["status"] == "not measured"
    feeds = rolled({"ids": np.array([[1, 2, 3]]), "scalar": np.float32(2.0)})
    assert feeds["ids"].tolist() == [[3, 1, 2]] and float(feeds["scalar"]) == 2.0


def test_notebook_08_is_clean_with_parameters_after_imports():
    import nbformat

    from where223.pipeline import paths
    from where223.pipeline.notebooks import is_clean

    notebook = nbformat.read(paths.NOTEBOOKS / "08_remedies.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert is_clean(notebook)
    assert "import" in code[0].source and "parameters" in code[1].metadata.get("tags", [])


RECORDS = ROOT / "outputs" / "remedies"


@pytest.mark.slow
def test_notebook_08_counts_and_draws_from_records(tmp_path):
    """The notebook on a copy of one committed record (BERT in fp16, TorchScript), the ORTModule route read from the
    committed record: the class's counts printed, the figure drawn."""
    import shutil

    from tests.conftest import run_notebook

    source = RECORDS / "5.24.0" / "fp16_model-torchscript" / "bert.json"
    if not source.is_file():
        pytest.skip(f"{source} is not committed yet")
    target = tmp_path / "records" / "5.24.0" / "fp16_model-torchscript" / "bert.json"
    target.parent.mkdir(parents=True)
    shutil.copy(source, target)
    executed = run_notebook("08_remedies", tmp_path / "out", records_dir=str(tmp_path / "records"),
                            run_ortmodule=False)  # fmt: skip
    assert (tmp_path / "out" / "remedies" / "remedies.png").stat().st_size > 5_000
    text = executed.read_text()
    assert "LayerNormalization: two types bound" in text and "today fp16_model torchscript" in text


def test_the_ortmodule_route_is_refused_as_exported_and_passes_the_type_check_fixed():
    """The committed record of notebook 08's ORTModule route on ELECTRA: as exported, ONNX Runtime refuses a
    LayerNormalization bound to bf16 and float; with the fixes, the types pass (a kernel is missing on this CPU)."""
    record_path = RECORDS / "ortmodule_electra.json"
    if not record_path.is_file():
        pytest.skip("the route's record is not committed yet")
    plain, fixed = json.loads(record_path.read_text())["runs"]
    assert plain["fix"] is False and plain["ort_verdict"] == "type_error"
    assert plain["error"]["type_binding"]["op_type"] == "LayerNormalization"
    assert fixed["fix"] is True and fixed["ort_verdict"] in ("accepted", "missing_kernel") and fixed["fixes"]


class _Toy:
    """A model built from a config, as transformers builds one: its outputs all zero (a head that saturates) or
    moving with its inputs (`config.flat`)."""

    def __new__(cls, config):
        import torch

        class Toy(torch.nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.lin = torch.nn.Linear(3, 2)

            def forward(self, x, ids, mask, flag):
                out = self.lin(x) + ids.float().mean() * mask.float().mean() + flag.float().mean()
                return torch.relu(out - 1e6) if self.config.flat else out

        return Toy(config)


def test_a_cell_whose_eager_outputs_are_all_zero_tries_other_seeds_at_most_three():
    """Eager outputs all zero: the model is built again from its config with seeds 1 and 2 (other weights, inputs
    drawn again in each input's range), each try recorded, and no fourth; the control, outputs that move, is run
    once with seed 0."""
    import types

    import torch

    from where223.study.remedies.run import SEEDS, reseeded, seeded_eager_stage
    from where223.sweep.recipes import RECIPES

    inputs = {"x": torch.randn(2, 3), "ids": torch.randint(4, 10, (2, 5)), "mask": torch.ones(2, 5, dtype=torch.long),
              "flag": torch.tensor([True, False])}  # fmt: skip
    for flat, tries in ((True, [(seed, "the reference outputs are all zero") for seed in SEEDS]),
                        (False, [(0, "distinguishes")])):  # fmt: skip
        record: dict = {"timings_s": {}}
        torch.manual_seed(0)
        model = _Toy(types.SimpleNamespace(flat=flat)).eval()
        stage = seeded_eager_stage(record, lambda _, f: f(), model, inputs, RECIPES["fp32_model"], "eval")
        assert [(t["seed"], t["reference"]) for t in record["seeds"]] == tries
        assert stage[2] is not None and (not flat or not stage[2][0].any())
    fresh, drawn = reseeded(model, inputs, 1)
    assert not torch.equal(fresh.lin.weight, model.lin.weight) and fresh.training is False
    assert int(drawn["ids"].min()) >= 4 and int(drawn["ids"].max()) <= 9
    assert not torch.equal(drawn["ids"], inputs["ids"])
    assert torch.equal(drawn["mask"], inputs["mask"]) and drawn["flag"] is inputs["flag"]
    assert not torch.equal(drawn["x"], inputs["x"]) and drawn["x"].dtype == inputs["x"].dtype


def test_the_committed_summary_counts_no_comparison_that_could_not_fail():
    """remedies/summary.json as committed: its counts are the records' judged by the rule, and every comparison it
    lists as not judged is one the rule does not pass (the control: the counts of passes are not zero)."""
    from where223.study import judging

    summary = json.loads((RECORDS / "summary.json").read_text())
    rows = analysis.load_records(RECORDS)
    assert "not_judged" in summary, "remedies/summary.json was written before the rule"
    for stack, counted in summary["counts"].items():
        mine = [r for r in rows if analysis.classes.column(r)[0] == stack]
        assert {k: counted[k] for k in counted} == analysis.tally(mine), stack
    by_cell = {"/".join(analysis.cell_key(r)): r for r in rows}
    assert summary["not_judged"], "the committed records have comparisons that could not fail"
    for entry in summary["not_judged"]:
        record = by_cell[entry["cell"]]
        part = record["pair"] if entry["part"] == "pair" else record[entry["part"]]["numerics"]
        assert judging.numeric_verdict(part)[0] == "not judged", entry
    passes = sum(counted["repair_within_tolerance"] + counted["fix_within_tolerance"]
                 for counted in summary["counts"].values())  # fmt: skip
    excluded = sum(counted["repair_not_judged"] + counted["fix_not_judged"] for counted in summary["counts"].values())
    assert passes > 0 and excluded == sum(e["part"] in ("repair", "fixed") for e in summary["not_judged"])


def test_a_remedy_s_check_whose_control_did_not_fail_is_not_judged(monkeypatch, tmp_path):
    """A check counts only when its control (the inputs rolled by one) fails it: a graph whose outputs do not
    depend on its inputs passes on both, so its control did not fail (`fails_as_built` False) and the check is not
    judged; the control, a graph whose outputs follow its inputs, fails on the rolled inputs and passes."""
    import numpy as np
    import torch

    from where223.study.remedies import run as remedies
    from where223.verdicts import NOT_JUDGED, PASS

    inputs = {"x": torch.tensor([[0.1, 0.5, 0.9]])}
    reference = [inputs["x"].numpy().copy()]
    for follows, fails, verdict in ((False, False, NOT_JUDGED), (True, True, PASS)):
        monkeypatch.setattr(remedies, "run_graph", lambda path, fed, outcome, follows=follows: (
            [np.asarray(fed["x"]) if follows else reference[0]], "ONNX Runtime CPU"))
        checked = remedies.check_numerics(tmp_path / "m.onnx", "accepted", inputs, reference,
                                          remedies.RECIPES["fp32_model"])
        assert checked["control"]["fails_as_built"] is fails and checked["verdict"] == verdict

