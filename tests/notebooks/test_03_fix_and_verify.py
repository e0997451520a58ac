"""Notebook 03 with tiny parameters: every check passes and agrees with the committed verification."""

import pytest

from tests.conftest import TINY, load_json, run_name, run_notebook
from where223.gpt2.runs import fix_name
from where223.pipeline.paths import OUTPUTS

pytestmark = pytest.mark.slow
PATH, VARIANT = "onnx_export", "4.26"


@pytest.fixture(scope="module")
def verification(reproduced, session_outputs):
    reproduced("onnx_export")
    run_notebook("03_fix_and_verify", session_outputs, path=PATH, **TINY, variant=VARIANT, fp32_steps=2, hops=1)
    return load_json(session_outputs / run_name(PATH, **TINY) / fix_name(VARIANT) / "verification.json")


def by_name(record: dict) -> dict[str, dict]:
    return {check["name"]: check for check in record["checks"]}


def test_every_check_passes(verification):
    checks = by_name(verification)
    assert verification["verdict"] == "pass"
    assert checks["lint"]["value"] == 0
    assert checks["eager_bitwise"]["value"] == 0.0
    assert checks["fp32_training"]["value"] <= checks["fp32_training"]["tolerance"] == 1e-5
    assert checks["fp32_inference"]["value"] <= 1e-5
    assert checks["matches_release"]["value"] == 0
    assert checks["graph_repair"]["value"] == 0
    assert len(verification["losses"]["eager"]) == 2


def test_paths_stop_at_the_cpu_bf16_kernel_gap_not_the_where(verification):
    checks = by_name(verification)
    assert checks["path:ortmodule"]["value"] == "graph build passed, bf16 execution unsupported on CPU"
    assert checks["path:ort_trainer"]["value"] == "graph build passed, bf16 execution unsupported on CPU"
    assert checks["path:onnx_export"]["value"] == "type check passed, bf16 execution unsupported on CPU"


def test_fix_removes_the_where_divergence_and_leaves_the_scale(verification):
    divergence = by_name(verification)["divergence"]
    assert divergence["value"] == {"before": 4, "after": 2}
    assert "/transformer/h.0/attn/Div" in divergence["detail"] and "Where" not in divergence["detail"]


def test_committed_verification_agrees_with_the_code(verification):
    committed = load_json(OUTPUTS / run_name(PATH) / fix_name(VARIANT) / "verification.json")
    assert {n: c["verdict"] for n, c in by_name(committed).items()} == {
        n: c["verdict"] for n, c in by_name(verification).items()}
    assert {n: c["value"] for n, c in by_name(committed).items() if n.startswith("path:")} == {
        n: c["value"] for n, c in by_name(verification).items() if n.startswith("path:")}
