"""The torch.fx study (notebook 09, section 9): what its runner finds fixed at trace time, its comparison shown failing
on a module whose autocast region tracing drops, its analysis on records built to give each answer, and the notebook
clean and parameterised."""

from __future__ import annotations

import json

import pytest
import torch

from where223.pipeline.paths import OUTPUTS
from where223.study.fx import analysis
from where223.study.fx.record import FX_RECORD, PROBE


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


def _record(seed_outcome: str) -> dict:
    def run(policy: str, equal: bool, dtypes: bool = True) -> dict:
        return {"policy": policy, "eager_dtype": "torch.bfloat16", "traced_dtype": "torch.bfloat16" if dtypes else
                "torch.float32", "dtypes_agree": dtypes, "max_abs_diff": 0.0 if equal else 0.5, "equal": equal,
                "error": None}  # fmt: skip

    seed_runs = {analysis.AGREES: [run("bf16", True), run("fp16_cuda_emulated", True)],
                 analysis.DTYPES_DIFFER: [run("bf16", False, dtypes=False), run("fp16_cuda_emulated", True)]}
    base = {"release": "4.25.1", "config_changes": {}, "error": None, "nodes": 1, "fixed_at_trace_time": [],
            "autocast_regions_in_source": [], "autocast_nodes_in_graph": 0}  # fmt: skip
    return {"settings": {"releases": ["4.25.1"], "policies": ["bf16", "fp16_cuda_emulated"]}, "traces": [
        {**base, "model": "as configured", "traced": True, "runs": seed_runs[seed_outcome]},
        {**base, "model": "reorder_and_upcast_attn", "traced": False, "error": "TypeError: x", "runs": []},
        {**base, "model": PROBE, "traced": True, "runs": [run("bf16", True), run("fp16_cuda_emulated", False)]},
    ]}  # fmt: skip


def test_the_answer_follows_the_records():
    agreeing, differing = _record(analysis.AGREES), _record(analysis.DTYPES_DIFFER)
    assert analysis.verdict(agreeing).startswith("For GPT-2 as configured, no:")
    assert "does not trace GPT-2 at all (4.25.1)" in analysis.verdict(agreeing)
    assert "the probe computes other values" in analysis.verdict(agreeing)
    # the control: a record whose seed configuration differs gets the other answer, with the dtypes named
    assert analysis.verdict(differing).startswith("For GPT-2 as configured, yes:")
    assert "torch.float32 traced, torch.bfloat16 eager" in analysis.verdict(differing)
    assert [row["outcome"] for row in analysis.cells(agreeing)] == [
        analysis.AGREES, analysis.AGREES, analysis.NOT_TRACED, analysis.NOT_TRACED, analysis.AGREES,
        analysis.VALUES_DIFFER]  # fmt: skip


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
