"""The committed write-up is exactly what the code makes of the committed records."""

import json
import re

import pytest

from tests.conftest import load_json
from where223.gpt2 import runs
from where223.pipeline.paths import OUTPUTS
from where223.pipeline.run import PlannedRun, load_plan
from where223.study import report

DEFAULT = {**runs.DEFAULTS, "device": "cpu", "amp_dtype": "bf16"}


def test_committed_report_is_regenerated_from_the_records():
    assert (OUTPUTS / "REPORT.md").read_text() == report.build(OUTPUTS)


def test_every_linked_file_exists():
    text = (OUTPUTS / "REPORT.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert len(links) > 20
    missing = [link for link in links if not (OUTPUTS / link).exists()]
    assert missing == []


def test_quotes_recorded_numbers():
    text = report.build(OUTPUTS)
    fix = report.Report(OUTPUTS, load_plan()).fix_run()
    source = report.find_run(OUTPUTS, fix.parameters)
    verification = load_json(OUTPUTS / source / runs.fix_name(fix.parameters["variant"]) / "verification.json")
    assert f"Overall verdict: **{verification['verdict']}**" in text
    assert "| `ort_trainer` | reproduced | `/_original_module/transformer/h.0/attn/Where` |" in text


def record_run(outputs, parameters: dict, folder: str | None = None) -> str:
    """Write a reproduce.json with `parameters` into its run folder (or `folder`); the folder's name."""
    name = folder or runs.run_name(parameters)
    (outputs / name).mkdir(parents=True)
    (outputs / name / "reproduce.json").write_text(json.dumps({"parameters": parameters}))
    return name


def test_the_default_run_is_found_beside_its_variations(tmp_path):
    variation = record_run(tmp_path, {**DEFAULT, "opset": 14})
    default = record_run(tmp_path, DEFAULT)
    assert variation != default
    assert report.find_run(tmp_path, {"path": "onnx_export"}) == default
    assert report.find_run(tmp_path, {"path": "onnx_export", "opset": 14}) == variation


def test_control_no_default_run_among_variations(tmp_path):
    record_run(tmp_path, {**DEFAULT, "opset": 14})
    record_run(tmp_path, DEFAULT, folder="copied-by-hand")  # a folder that is not named by its parameters
    with pytest.raises(FileNotFoundError, match="no run under .* was made with"):
        report.find_run(tmp_path, {"path": "onnx_export"})


def test_notebook_links_come_from_the_plan():
    plan = [PlannedRun("02_graph", {"path": "ortmodule"}), PlannedRun("02_graph", {"path": "onnx_export"})]
    written = report.Report(OUTPUTS, plan)
    assert written.planned("02_graph", DEFAULT).name == "02_graph__path=onnx_export"
    with pytest.raises(ValueError, match="the plan runs no 02_graph for tiny-cpu-bf16-onnx_export-opset14"):
        written.planned("02_graph", {**DEFAULT, "opset": 14})


def torch_loaded_by(code: str) -> bool:
    """Whether running `code` in a fresh interpreter imports torch."""
    import subprocess
    import sys

    probe = f"import sys\n{code}\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return result.stdout.strip() == "True"


RUN_SECTIONS = """
from where223.pipeline.run import load_plan
from where223.study import report
written = report.Report(report.OUTPUTS, load_plan())
for section in (report.failure, report.cause, report.fix):
    section(written)
"""


def test_finding_the_runs_imports_no_torch():
    assert not torch_loaded_by(RUN_SECTIONS)
    assert torch_loaded_by(RUN_SECTIONS + "from where223.gpt2 import reproduce")  # control: the probe sees torch
