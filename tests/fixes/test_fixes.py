"""The export-time fixes on small modules, one per class they are for, on the project's stack (torch 2.1.2) and on
today's (torch 2.14.1), each in a fresh interpreter: exported plain, each case is refused for its types (the
control: without the fix the check fails) or not exported at all; exported with the fixes, ONNX Runtime accepts
the types (`accepted`, or `missing_kernel`: accepted types, no bf16 kernel on this CPU). A case ONNX Runtime
accepts plainly stays accepted with the fixes (no regression)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT

pytestmark = pytest.mark.slow
CASES = Path(__file__).with_name("fix_cases.py")
TYPES_ACCEPTED = {"accepted", "missing_kernel"}
REFUSED = {"type_error", "where_type_error"}
# a Transpose with negative axes in its perm: refused, not for a type (the control), then accepted with the fixes
PERMUTE = {"plain": "other_error", "fixed": "accepted"}


def run_cases(python: Path, tmp_path: Path, *exporters: str) -> dict[str, dict[str, str]]:
    out = tmp_path / "cases.json"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(python), str(CASES), str(out), *exporters], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_fixes_on_the_2022_stack(tmp_path):
    found = run_cases(Path(sys.executable), tmp_path, "torchscript")
    # torch 2.1.2's own SDPA symbolic cannot export a Python-float scale at all; fixed, the types are accepted
    assert found["torchscript/sdpa_bf16"]["plain"].startswith("not_exported")
    for case in ("layer_norm_conv_autocast", "conv_bf16", "einsum_scale_bf16", "where_pool_autocast",
                 "group_norm_topk_bf16", "cross_entropy_bf16"):
        assert found[f"torchscript/{case}"]["plain"] in REFUSED, case  # the control
    assert found["torchscript/where_pool_autocast"]["plain"] == "where_type_error"  # the seed's own error
    for case in ("sdpa_bf16", "layer_norm_conv_autocast", "conv_bf16", "einsum_scale_bf16", "where_pool_autocast",
                 "group_norm_topk_bf16", "cross_entropy_bf16"):
        assert found[f"torchscript/{case}"]["fixed"] in TYPES_ACCEPTED, case
    assert found["torchscript/permute_negative"] == {**found["torchscript/permute_negative"], **PERMUTE}
