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


def verification_record(**verdicts: str) -> dict:
    """A verification record whose fix passes lint and matches_release; `verdicts` gives each control's lint."""
    checks = [{"name": "lint", "verdict": "pass"}, {"name": "matches_release", "verdict": "pass"},
              {"name": "divergence", "verdict": "info"}]
    controls = [{"name": name, "description": "", "breaks": ["lint"], "checks": [{"name": "lint", "verdict": v}]}
                for name, v in verdicts.items()]
    release = {"name": "release: swap_where", "description": "", "breaks": ["matches_release"],
               "checks": [{"name": "matches_release", "verdict": "fail"}]}
    return {"verdict": "pass", "checks": checks, "controls": [*controls, release]}


def test_controls_table_and_the_checks_no_control_broke():
    record = verification_record(**{"4.25": "fail"})
    assert report.control_matrix(record) == (
        ["check", "fix", "4.25", "release: swap_where"],
        [["lint", "pass", "fail", "—"], ["matches_release", "pass", "—", "fail"], ["divergence", "info", "—", "—"]],
    )
    assert report.uncontrolled_checks(record) == []
    # control: a control that no longer breaks the lint check leaves it uncontrolled
    assert report.uncontrolled_checks(verification_record(**{"4.25": "pass"})) == ["lint"]
    assert report.uncontrolled_checks({"checks": record["checks"]}) == ["lint", "matches_release"]


@pytest.fixture
def outputs_copy(tmp_path):
    """A copy of the committed outputs/ that a test may change."""
    import shutil

    copied = tmp_path / "outputs"
    shutil.copytree(OUTPUTS, copied)
    return copied


def section_text(section, outputs) -> str:
    """One section of the write-up, built from the records under `outputs`."""
    written = report.Report(outputs, load_plan())
    section(written)
    return written.text()


def test_the_report_follows_a_changed_record(outputs_copy):
    fix = report.Report(outputs_copy, load_plan()).fix_run()
    source = report.find_run(outputs_copy, fix.parameters)
    record_path = outputs_copy / source / runs.fix_name(fix.parameters["variant"]) / "verification.json"
    before = section_text(report.fix, outputs_copy)
    record = load_json(record_path)
    record["verdict"] = "fail"
    record["verdict_statement"] = "fail — 1 of 2 checks pass; failed: lint; not measured on cpu: a measured gap"
    record["checks"][0]["verdict"] = "fail"
    record["environment"]["packages"]["transformers"] = "9.99.9"
    record["controls"] = [{"name": "control-x", "description": "built to break nothing", "breaks": [],
                           "checks": [{**check, "verdict": "pass"} for check in record["checks"]]}]
    record_path.write_text(json.dumps(record))
    after = section_text(report.fix, outputs_copy)
    assert after != before
    assert "Overall verdict: **fail** — 1 of 2 checks pass; failed: lint; not measured on cpu: a measured gap." in after
    assert "into transformers 9.99.9 and" in after
    assert "| check | fix | c1 |" in after and "- c1 `control-x`: built to break nothing" in after
    assert "Checks that passed for the fix and failed on no control: " in after


def test_the_cause_section_follows_the_records(outputs_copy):
    source = report.find_run(outputs_copy, report.Report(outputs_copy, load_plan()).fix_run().parameters)
    lint_path = outputs_copy / source / "graph" / "lint.json"
    reproduce_path = outputs_copy / source / "reproduce.json"
    lint, reproduced = load_json(lint_path), load_json(reproduce_path)
    conflicts = [v for v in lint["violations"] if v["kind"] == "type_binding_conflict"]
    lint["violations"] = [v for v in lint["violations"] if v not in conflicts[1:]]  # keep the first conflict only
    reproduced["error"]["type_binding"]["node"] = "/transformer/h.7/attn/Where"
    lint_path.write_text(json.dumps(lint))
    reproduce_path.write_text(json.dumps(reproduced))
    text = section_text(report.cause, outputs_copy)
    assert "finds 1 type-binding conflict(s) in layer(s) 0 (ONNX Runtime's message names " in text
    others = len(lint["violations"]) - 1
    assert f"names `/transformer/h.7/attn/Where`) and {others} other finding(s):" in text
    assert "one per layer" not in text and "reported only the first" not in text
    assert ", not the node ONNX Runtime named, `/transformer/h.7/attn/Where`)" in text
