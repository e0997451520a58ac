"""The linter's reports on the committed exports are exactly those outputs/ holds: a speed-up or a
refactor of the typing must not change a single field. One note depends on the environment, not on the typing: where
the installed onnxruntime lists no kernels (onnxruntime-training 1.19), the report says that the operators onnx
defines by a function body were checked against their own schemas (`lint.NO_KERNEL_LIST`); it is compared apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from where223.graph.lint import NO_KERNEL_LIST, lint_model
from where223.graph.schema import runtime_registry
from where223.graph.types import Scope
from where223.pipeline import portable
from where223.pipeline.paths import OUTPUTS, ROOT

COMMITTED = sorted(p for p in OUTPUTS.rglob("lint.json") if "failed" not in p.relative_to(OUTPUTS).parts)


def _committed(lint_json: Path) -> dict[str, Any]:
    return json.loads(lint_json.read_text())


def _fresh(committed: dict[str, Any]) -> dict[str, Any]:
    """The report on the model a committed report was made from, as `records.write_json` stores it."""
    record = json.loads(json.dumps(lint_model(ROOT / committed["model_path"]).to_dict(), default=str))
    record["model_path"] = portable.path(record["model_path"])
    return record


def test_there_are_committed_reports_with_violations():
    """Every unfixed export's report has violations (the fixed ones may be clean: the emulated fp16 fix's is)."""
    unfixed = [p for p in COMMITTED if not p.parent.name.startswith("fix-")]
    assert len(unfixed) >= 3
    assert all(_committed(p)["violations"] for p in unfixed)


def _apart(record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The record without the note on the runtime's kernel list, and that note (if any)."""
    notes = record.get("notes", [])
    kept = {**record, "notes": [n for n in notes if NO_KERNEL_LIST not in n]}
    if not kept["notes"]:
        del kept["notes"]
    return kept, [n for n in notes if NO_KERNEL_LIST in n]


@pytest.mark.parametrize("lint_json", COMMITTED, ids=lambda p: str(p.parent.relative_to(OUTPUTS)))
def test_report_on_a_committed_export_is_unchanged(lint_json):
    committed = _committed(lint_json)
    fresh, note = _apart(_fresh(committed))
    assert fresh == _apart(committed)[0]
    assert bool(note) == (runtime_registry().kernels is None)  # said exactly where the runtime lists no kernels


def test_a_value_typed_differently_changes_the_report(monkeypatch):
    """Control: forgetting the type of one offending value is a different report."""
    committed = _committed(OUTPUTS / "tiny-cpu-bf16-onnx_export" / "graph" / "lint.json")
    forgotten = committed["violations"][0]["offending"][0]["name"]
    type_of = Scope.type_of
    monkeypatch.setattr(Scope, "type_of", lambda self, name: None if name == forgotten else type_of(self, name))
    fresh = _fresh(committed)
    assert fresh != committed
    assert fresh["untyped_values"] > committed["untyped_values"]
