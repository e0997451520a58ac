"""The public API of where223.graph: every name resolves, nothing loads before it is used, README's snippet runs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import where223.graph
from where223.pipeline.paths import ROOT


def test_every_public_name_resolves_to_its_submodule():
    assert where223.graph.__all__ == [
        "load_model", "UnreadableModelError", "NodeNotFoundError", "MalformedModelError",
        "lint_model", "LintReport", "Violation", "FindingKind", "LintOutcome", "MissingKernel",
        "lint_sarif", "lint_github_commands",
        "kernel_table", "KernelTable", "KernelStatus",
        "judge", "OrtVerdict", "OrtJudgement", "load_session",
        "blame_node", "blame_all", "BlameResult",
        "repair_model", "RepairError", "Change", "save_model",
        "diff_models", "DiffReport",
        "convert_model", "ConversionRecord", "ConvertError",
        "draw_neighbourhood", "draw_before_after", "draw_precision_summary", "draw_node_marks",
        "extract_neighbourhood", "start_netron", "stop_netron",
    ]  # fmt: skip
    for name in where223.graph.__all__:
        value = getattr(where223.graph, name)
        assert value.__module__.startswith("where223.graph."), name
    assert set(where223.graph.__all__) <= set(dir(where223.graph))
    assert where223.graph.repair_model.__name__ == "repair" and where223.graph.blame_node.__name__ == "blame"
    assert where223.graph.diff_models.__name__ == "diff" and where223.graph.convert_model.__name__ == "convert"
    assert where223.graph.start_netron.__name__ == "start" and where223.graph.stop_netron.__name__ == "stop"
    with pytest.raises(AttributeError, match="no attribute 'formal_pairs'"):
        where223.graph.formal_pairs  # noqa: B018 - internal, not exported


def _loaded(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(done.stdout.split())


def test_importing_the_ort_module_loads_no_other_submodule():
    """The matrix's cells import where223.graph.ort inside other environments: the package must stay lazy."""
    loaded = _loaded("import where223.graph.ort")
    assert not {name for name in loaded if name.startswith("where223.graph.") and name != "where223.graph.ort"}
    assert "onnx" not in loaded
    # the control: asking for an exported name loads its submodule, which the check above would see
    assert "where223.graph.lint" in _loaded("from where223.graph import lint_model")


def _readme_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"### From Python\n\n```python\n(?P<code>.*?)```", readme, re.DOTALL)
    assert found, "README has no 'From Python' snippet"
    return found["code"]


def test_readme_snippet_runs_against_a_committed_model():
    snippet = _readme_snippet()
    assert len(snippet.strip().splitlines()) == 3
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "type_binding_conflict" in done.stdout and "/transformer/h.0/attn/Where" in done.stdout
    # the control: the same snippet on a model that is not there fails
    broken = re.sub(r'lint_model\("[^"]+"\)', 'lint_model("outputs/absent/model.onnx")', snippet)
    assert broken != snippet
    assert subprocess.run([sys.executable, "-c", broken], capture_output=True, cwd=ROOT).returncode != 0
