"""The torch.fx study (notebook 09, section 9): what its runner finds fixed at trace time, its comparison shown failing
on a module whose autocast region tracing drops, a tiny traced module trained beside eager with its control (one
line changed) told apart, the not-judged rule (a reference that cannot tell modules apart, a control that was not
told apart), its analysis on records built to give each answer, the committed record's controls, and the notebook
clean and parameterised."""

from __future__ import annotations

import json

import pytest
import torch

from where223.pipeline.paths import OUTPUTS
from where223.study.fx import analysis
from where223.study.fx.record import FX_RECORD, PROBE
from where223.verdicts import NOT_JUDGED, NOT_MEASURED, PASS


class _Literals(torch.nn.Module):
    def forward(self, x):
        return torch.full_like(x, torch.finfo(torch.float32).min).to(torch.float16) + x.to(torch.float16)


class _Plain(torch.nn.Module):
    def forward(self, x):
        return (x * 2).relu()


def test_values_fixed_at_trace_time_are_found_with_their_kind():
    from torch.fx import symbolic_trace

    from where223.study.fx.run import fixed_at_trace_time

    found = fixed_at_trace_time(symbolic_trace(_Literals()))
    literals = [literal for node in found for literal in node["literals"]]
    assert "torch.float16" in literals and any("torch.finfo(torch.float32).min" in item for item in literals)
    assert fixed_at_trace_time(symbolic_trace(_Plain())) == []  # the control: nothing fixed, nothing found


def test_control_the_comparison_sees_a_traced_module_lose_an_autocast_region():
    """The probe: eager honours `autocast(enabled=False)`, the fx graph has no region; under the emulated CUDA policy
    the values differ (the comparison can fail), under CPU bf16 (which a CUDA region does not touch) they agree."""
    from where223.study.fx.run import _probe_entry

    entry = _probe_entry("test", [])
    assert entry["autocast_nodes_in_graph"] == 0
    outcomes = {run["policy"]: analysis.outcome(entry, run) for run in entry["runs"]}
    assert outcomes == {"bf16": analysis.AGREES, "fp16_cuda_emulated": analysis.VALUES_DIFFER}
    # each comparison's own control, the scores line changed, was told apart from eager: both are judged
    assert all(run["control"]["failed"] and run["control"]["changed"] == "matmul" for run in entry["runs"])


def _control(failed: bool = True) -> dict:
    return {"changed": "modeling_gpt2.py:182", "equal": not failed, "max_abs_diff": 0.5 if failed else 0.0,
            "failed": failed, "error": None}  # fmt: skip


def _steps(equal: bool) -> dict:
    return {"losses_equal": equal, "loss_max_abs_diff": 0.0 if equal else 0.25, "first_unequal_step": None if equal
            else 2, "parameters": 4, "gradients_equal": 4 if equal else 1, "gradient_max_abs_diff": 0.0 if equal
            else 0.125, "worst_gradient": "w", "after_equal": 4 if equal else 0, "after_max_abs_diff": 0.0 if equal
            else 0.5, "equal": equal}  # fmt: skip


def _training(policy: str, equal: bool = True, control_failed: bool = True, eager_error: str | None = None,
              traced_error: str | None = None, problems: tuple[str, ...] = ()) -> dict:  # fmt: skip
    ran = eager_error is None and traced_error is None
    return {"policy": policy, "compares": f"{policy} recipe", "steps": 3, "eager_losses": None if eager_error else
            [0.7, 0.6, 0.5], "traced_losses": None if traced_error else [0.7, 0.6, 0.5], "eager_error": eager_error,
            "traced_error": traced_error, "compared": _steps(equal) if ran else None, "zero_reference_gradients": 0,
            "reference_problems": list(problems), "control": _control(control_failed) if eager_error is None else None,
            "control_compared": _steps(not control_failed) if eager_error is None else None}  # fmt: skip


def _record(seed_outcome: str, bf16_control_failed: bool = True, training: list | None = None) -> dict:
    def run(policy: str, equal: bool, dtypes: bool = True, control_failed: bool = True) -> dict:
        return {"policy": policy, "eager_dtype": "torch.bfloat16", "traced_dtype": "torch.bfloat16" if dtypes else
                "torch.float32", "dtypes_agree": dtypes, "max_abs_diff": 0.0 if equal else 0.5, "equal": equal,
                "error": None, "reference_problems": [], "control": _control(control_failed)}  # fmt: skip

    seed_runs = {analysis.AGREES: [run("bf16", True, control_failed=bf16_control_failed),
                                   run("fp16_cuda_emulated", True)],
                 analysis.DTYPES_DIFFER: [run("bf16", False, dtypes=False), run("fp16_cuda_emulated", True)]}
    base = {"release": "4.25.1", "config_changes": {}, "error": None, "nodes": 1, "fixed_at_trace_time": [],
            "autocast_regions_in_source": [], "autocast_nodes_in_graph": 0, "training": []}  # fmt: skip
    trained = [_training("bf16"), _training("fp16_cuda_emulated")] if training is None else training
    return {"settings": {"releases": ["4.25.1"], "policies": ["bf16", "fp16_cuda_emulated"]}, "traces": [
        {**base, "model": "as configured", "traced": True, "runs": seed_runs[seed_outcome], "training": trained},
        {**base, "model": "reorder_and_upcast_attn", "traced": False, "error": "TypeError: x", "runs": []},
        {**base, "model": PROBE, "traced": True, "runs": [run("bf16", True), run("fp16_cuda_emulated", False)]},
    ]}  # fmt: skip


def test_the_answer_follows_the_records():
    agreeing, differing = _record(analysis.AGREES), _record(analysis.DTYPES_DIFFER)
    assert "Forward, GPT-2 as configured (eval mode): the traced module's logits were bitwise" in analysis.verdict(
        agreeing)
    assert "does not trace GPT-2 at all (4.25.1)" in analysis.verdict(agreeing)
    assert "the probe computes other values" in analysis.verdict(agreeing)
    # the control: a record whose seed configuration differs gets the other answer, with the dtypes named
    assert "the traced module departs from eager" in analysis.verdict(differing)
    assert "torch.float32 traced, torch.bfloat16 eager" in analysis.verdict(differing)
    assert [row["outcome"] for row in analysis.cells(agreeing)] == [
        analysis.AGREES, analysis.AGREES, analysis.NOT_TRACED, analysis.NOT_TRACED, analysis.AGREES,
        analysis.VALUES_DIFFER]  # fmt: skip


def test_a_comparison_whose_control_was_not_told_apart_is_not_judged_and_counted_apart():
    record = _record(analysis.AGREES, bf16_control_failed=False)
    rows = [row for row in analysis.cells(record) if row["model"] == "as configured"]
    assert [(row["outcome"], row["verdict"]) for row in rows] == [(NOT_JUDGED, NOT_JUDGED),
                                                                   (analysis.AGREES, PASS)]  # fmt: skip
    assert "not told apart" in rows[0]["reason"]
    assert analysis.counts(rows) == "1 of 1 judged agree; left out: 1 not judged"
    assert "Not judged: 4.25.1 under CPU bf16 autocast: its control" in analysis.verdict(record)
    # the control: its control told apart, the same comparison is judged and counted
    assert analysis.counts([row for row in analysis.cells(_record(analysis.AGREES)) if row["model"] ==
                            "as configured"]) == "2 of 2 judged agree, none left out"  # fmt: skip


def test_training_cells_judge_only_what_could_have_failed():
    def outcome(training: dict) -> str:
        return analysis.training_outcome({"traced": True}, training)

    assert outcome(_training("bf16")) == analysis.AGREES
    assert outcome(_training("bf16", equal=False)) == analysis.VALUES_DIFFER
    assert outcome(_training("bf16", control_failed=False)) == NOT_JUDGED
    assert outcome(_training("bf16", problems=("eager's loss is the same at every step",))) == NOT_JUDGED
    alike = _training("fp16_cuda_emulated", eager_error="RuntimeError: Half", traced_error="RuntimeError: Half")
    assert outcome(alike) == NOT_MEASURED
    assert outcome(_training("bf16", traced_error="RuntimeError: traced only")) == analysis.FAILED
    record = _record(analysis.AGREES, training=[_training("bf16"), alike])
    sentences = analysis.training_answer(record)
    assert sentences[0].startswith("Under CPU bf16 autocast: 1 of 1 judged agree, none left out. 4.25.1: agrees:")
    assert "its control told apart: losses differ from step 2" in sentences[0]
    assert sentences[1].startswith("Under CUDA fp16 autocast (emulated on CPU): none judged; left out: 1 not "
                                   "measured. 4.25.1: not measured: eager and the traced module alike stop")
    assert "under CPU bf16 autocast, no: the traced module trained bitwise as eager did" in analysis.verdict(record)
    # the control: a training run that differs from eager answers yes
    differing = _record(analysis.AGREES, training=[_training("bf16", equal=False), alike])
    assert "under CPU bf16 autocast, yes: 4.25.1 values differ" in analysis.verdict(differing)


class _Scores(torch.nn.Module):
    """Attention in little, with a loss: a traced module the recipe can train."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x, labels):
        hidden = self.embed(x)
        scores = torch.matmul(hidden, hidden.transpose(-1, -2)).softmax(-1)
        logits = self.head(torch.matmul(scores, hidden).mean(1))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class _Flat(torch.nn.Module):
    """A loss the parameters cannot move: the same at every step, all-zero gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2, 2))

    def forward(self, x, labels):
        return {"loss": torch.matmul(self.w, self.w).sum() * 0.0 + x.sum() * 0.0 + 1.0}


def _data() -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    return [{"x": torch.randn(2, 3, 4, generator=generator), "labels": torch.tensor([0, 1])} for _ in range(3)]


def _built(cls: type) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls().train()


def test_a_tiny_traced_module_trains_bitwise_as_eager_and_its_changed_line_is_told_apart():
    from torch.fx import symbolic_trace

    from where223.study.fx.run import TRAINING_TOLERANCE, train_beside_eager

    training = train_beside_eager(lambda: _built(_Scores), symbolic_trace, _data(), "bf16", 0)
    assert training["eager_error"] is None and training["traced_error"] is None
    assert training["compared"]["equal"] and training["compared"]["parameters"] == 4
    assert training["reference_problems"] == [] and len(set(training["eager_losses"])) == 3
    # the control: the scores line multiplied by 1 + 2**-7 is told apart (gradients and parameters differ)
    control = training["control_compared"]
    assert training["control"]["failed"] and training["control"]["changed"] == "matmul"
    assert control["gradients_equal"] < control["parameters"] and not control["equal"]
    assert analysis.training_outcome({"traced": True}, training) == analysis.AGREES
    assert TRAINING_TOLERANCE["kind"] == "bitwise" and TRAINING_TOLERANCE["max_abs_diff"] == 0.0


def test_a_reference_that_cannot_tell_modules_apart_leaves_the_training_comparison_not_judged():
    from torch.fx import symbolic_trace

    from where223.study.fx.run import train_beside_eager

    training = train_beside_eager(lambda: _built(_Flat), symbolic_trace, _data(), "bf16", 0)
    assert training["compared"]["equal"]  # traced and eager agree bitwise, and it shows nothing:
    assert training["reference_problems"] == ["eager's loss is the same at every step",
                                              "eager's gradients are all zero"]  # fmt: skip
    assert training["zero_reference_gradients"] == 1 and not training["control"]["failed"]
    assert analysis.training_outcome({"traced": True}, training) == NOT_JUDGED
    assert "its control (the first scores line changed) was not told apart" in "; ".join(
        analysis.not_judged_reasons(training))


def test_the_control_changes_one_line_and_needs_a_matmul():
    from torch.fx import symbolic_trace

    from where223.study.fx.run import CONTROL_FACTOR, changed_line

    traced = symbolic_trace(_built(_Scores))
    before = len(traced.graph.nodes)
    assert changed_line(traced) == "matmul" and len(traced.graph.nodes) == before + 1
    scaled = next(node for node in traced.graph.nodes if node.args[-1:] == (CONTROL_FACTOR,))
    assert scaled.args[0].name == "matmul" and all(user is not scaled for user in [scaled.args[0]])
    with pytest.raises(ValueError, match="no torch.matmul"):
        changed_line(symbolic_trace(_Plain()))


def test_notebook_09_is_clean_with_parameters_after_imports():
    import nbformat

    from where223.pipeline import paths
    from where223.pipeline.notebooks import is_clean

    notebook = nbformat.read(paths.NOTEBOOKS / "09_fx.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert is_clean(notebook)
    assert "import" in code[0].source and "parameters" in code[1].metadata.get("tags", [])


def test_the_committed_record_traces_every_release_with_both_policies():
    path = OUTPUTS / FX_RECORD
    if not path.is_file():
        pytest.skip(f"{FX_RECORD} is not committed yet")
    record = json.loads(path.read_text())
    assert record["settings"]["releases"] == ["4.24.0", "4.25.1", "4.26.0"]
    seed = [trace for trace in record["traces"] if trace["model"] == "as configured"]
    assert [trace["release"] for trace in seed] == ["4.24.0", "4.25.1", "4.26.0"]
    assert all(trace["traced"] and len(trace["runs"]) == 2 for trace in seed)


def test_the_committed_record_trains_every_release_and_shows_each_judged_control_failing():
    from where223.study.fx.run import TRAINING_TOLERANCE

    path = OUTPUTS / FX_RECORD
    if not path.is_file():
        pytest.skip(f"{FX_RECORD} is not committed yet")
    record = json.loads(path.read_text())
    assert record["tolerance"]["training"] == TRAINING_TOLERANCE
    seed = [trace for trace in record["traces"] if trace["model"] == "as configured"]
    assert [[training["policy"] for training in trace["training"]] for trace in seed] == [
        ["bf16", "fp16_cuda_emulated"]] * 3  # fmt: skip
    bf16 = [training for trace in seed for training in trace["training"] if training["policy"] == "bf16"]
    assert all(training["control"]["failed"] and not training["control_compared"]["equal"] for training in bf16)
    rows = analysis.cells(record) + analysis.training_cells(record)
    judged = [row for row in rows if row["verdict"] in (PASS, "fail")]
    assert judged and all(row["outcome"] != NOT_JUDGED for row in judged)
    for row in judged:  # a judged comparison's control failed in the record
        check = row.get("training") or next(run for trace in record["traces"] for run in trace["runs"]
                                            if trace["release"] == row["release"] and trace["model"] == row["model"]
                                            and run["policy"] == row["policy"])  # fmt: skip
        assert check["control"]["failed"], row
