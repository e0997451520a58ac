"""Notebook 03 with tiny parameters: every check passes, every passing check fails on a control, and the
record agrees with the committed verification."""

import pytest

from tests.conftest import TINY, load_json, run_name, run_notebook
from where223.gpt2.runs import fix_name
from where223.pipeline.paths import OUTPUTS
from where223.study.report import control_matrix, uncontrolled_checks

pytestmark = pytest.mark.slow
PATH, VARIANT = "onnx_export", "4.26"


@pytest.fixture(scope="module")
def executed(reproduced, session_outputs):
    reproduced("onnx_export")
    notebook = run_notebook("03_fix_and_verify", session_outputs, path=PATH, **TINY, variant=VARIANT, fp32_steps=2,
                            hops=1)
    record = load_json(session_outputs / run_name(PATH, **TINY) / fix_name(VARIANT) / "verification.json")
    return notebook, record


@pytest.fixture(scope="module")
def verification(executed):
    return executed[1]


def by_name(checks: list[dict]) -> dict[str, dict]:
    return {check["name"]: check for check in checks}


def controls(record: dict) -> dict[str, dict[str, dict]]:
    return {control["name"]: by_name(control["checks"]) for control in record["controls"]}


def test_every_check_passes(verification):
    checks = by_name(verification["checks"])
    assert verification["verdict"] == "pass"
    assert checks["lint"]["value"] == {"binding_conflicts": 0, "untyped_values": 0, "unchecked_nodes": 0}
    assert checks["eager_bitwise"]["value"] == checks["eager_bitwise_probe"]["value"] == 0.0
    assert "head size 20, sqrt inexact in bf16" in checks["eager_bitwise_probe"]["question"]
    assert checks["fp32_gradients"]["value"] <= checks["fp32_gradients"]["tolerance"] == 1e-4
    assert "ONNX Runtime executed: TrainingAgent" in checks["fp32_gradients"]["detail"]
    assert checks["fp32_training"]["value"] <= checks["fp32_training"]["tolerance"] == 1e-5
    assert checks["fp32_inference"]["value"] <= 1e-5
    assert checks["matches_release"]["value"] == 0 and "2 layer(s)" in checks["matches_release"]["detail"]
    assert checks["graph_repair"]["value"] == {"repaired": "missing_kernel", "fixed": "missing_kernel"}
    assert len(verification["losses"]["eager"]) == 2
    assert verification["ortmodule_execution"]["fallback_policy"] == "FALLBACK_DISABLE"
    assert len(verification["gradients"]) == 29  # every parameter of the tiny model, worst first


def test_the_verdict_names_what_was_not_measured_on_cpu(verification):
    statement = verification["verdict_statement"]
    assert statement.startswith("pass — ") and "; not measured on cpu: " in statement
    assert "bf16 training through ONNX Runtime on cpu, no kernel (ort_trainer, ortmodule)" in verification[
        "not_measured"]


def test_every_passing_check_fails_on_a_control(verification):
    assert uncontrolled_checks(verification) == []
    found = controls(verification)
    assert {name: c["verdict"] for name, c in found["4.25"].items()} == {
        "lint": "fail", "path:ort_trainer": "fail", "path:ortmodule": "fail", "path:onnx_export": "fail",
        "matches_release": "fail"}
    # a Python-float scale: equal on the preset (sqrt 16 is exact in bf16), different on the probe
    assert found["float+masked_fill"]["eager_bitwise"]["verdict"] == "pass"
    assert found["float+masked_fill"]["eager_bitwise_probe"]["verdict"] == "fail"
    assert {c["verdict"] for c in found["control-wrong-scale"].values()} == {"fail"}
    assert found["dropout on"]["fp32_training"]["verdict"] == "fail"
    assert found["repair cast to double"]["graph_repair"]["value"]["repaired"] == "where_type_error"
    for perturbed in ("release: swap_where", "release: mask_constant"):
        assert "first difference: layer 1" in found[perturbed]["matches_release"]["detail"]


def test_the_notebook_shows_the_controls_table(executed):
    notebook, record = executed
    text = notebook.read_text()
    header, _ = control_matrix(record)
    labels = [f"c{number}" for number in range(1, len(header) - 1)]
    assert "| " + " | ".join([*header[:2], *labels]) + " |" in text  # the controls are columns c1, c2, ...
    assert all(f"- c{number} `{name}`" in text for number, name in enumerate(header[2:], start=1))
    assert "Every check that passed for the fix failed on at least one control." in text


def test_paths_stop_at_the_cpu_bf16_kernel_gap_not_the_where(verification):
    checks = by_name(verification["checks"])
    assert checks["path:ortmodule"]["value"] == "graph build passed, bf16 execution unsupported on CPU"
    assert checks["path:ort_trainer"]["value"] == "graph build passed, bf16 execution unsupported on CPU"
    assert checks["path:onnx_export"]["value"] == "type check passed, bf16 execution unsupported on CPU"


def test_fix_removes_the_where_divergence_and_leaves_the_scale(verification):
    divergence = by_name(verification["checks"])["divergence"]
    assert divergence["value"] == {"before": 4, "after": 2}
    assert "/transformer/h.0/attn/Div" in divergence["detail"] and "Where" not in divergence["detail"]


def test_committed_verification_agrees_with_the_code(verification):
    committed = load_json(OUTPUTS / run_name(PATH) / fix_name(VARIANT) / "verification.json")
    assert {n: c["verdict"] for n, c in by_name(committed["checks"]).items()} == {
        n: c["verdict"] for n, c in by_name(verification["checks"]).items()}
    assert {n: c["value"] for n, c in by_name(committed["checks"]).items() if n.startswith("path:")} == {
        n: c["value"] for n, c in by_name(verification["checks"]).items() if n.startswith("path:")}
    assert {name: {n: c["verdict"] for n, c in checks.items()} for name, checks in controls(committed).items()} == {
        name: {n: c["verdict"] for n, c in checks.items()} for name, checks in controls(verification).items()}


def test_repaired_outputs_is_measured_in_emulated_bf16_and_fails_on_its_control(verification):
    check = by_name(verification["checks"])["repaired_outputs"]
    assert check["verdict"] == "pass" and check["value"] <= check["tolerance"]
    assert "emulated bf16" in check["detail"] and check["tolerance"] == 4
    assert "the tiny preset: " in check["detail"] and "the probe: " in check["detail"]
    control = controls(verification)["repair: Where inputs swapped"]["repaired_outputs"]
    assert control["verdict"] == "fail" and control["value"] > control["tolerance"] == check["tolerance"]
    numerics = verification["numerics"]
    assert {record["execution"] for record in numerics.values()} == {"emulated bf16"}
    assert all(record["spacings"] >= 0 for record in numerics.values())
