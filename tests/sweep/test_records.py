"""Every committed sweep record through the one reader, its outcome checked against its own ONNX Runtime message;
and the migration: the old drivers' outcomes, kept in outputs/sweeps/migrated_outcomes.json, against today's."""

from __future__ import annotations

import copy
import json

import pytest

from where223.pipeline.paths import OUTPUTS
from where223.sweep import migrate
from where223.sweep.record import RecordError, outcome_problems, read_record

COMMITTED = sorted(OUTPUTS.glob("matrix/cells/*.json")) + sorted(
    p for p in OUTPUTS.glob("architectures/*/*.json") if p.name != "summary.json"
)
ORT_WHERE = (
    "[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:Type Error: Type parameter (T) of Optype (Where) "
    "bound to different types (tensor(float) and tensor(bfloat16) in node (/h.0/attn/Where)."
)


def test_there_are_the_144_matrix_cells_and_286_architecture_records():
    assert len(COMMITTED) == 144 + 286


def test_every_committed_record_reads_and_its_outcome_is_what_its_message_says():
    problems = {}
    for path in COMMITTED:
        found = outcome_problems(read_record(path))
        if found:
            problems[path.name] = found
    assert problems == {}


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda r: r.update(outcome="type_error"), "its ONNX Runtime message says where_type_error"),
        (lambda r: r.pop("ort"), "without ONNX Runtime's verdict"),
        (lambda r: r["ort"].update(message=None), "message says accepted"),
        (lambda r: r["ort"].update(verdict="missing_kernel"), "its recorded verdict is missing_kernel"),
    ],
)
def test_control_a_misfiled_record_is_caught(change, says):
    record = {"key": {}, "outcome": "where_type_error", "ort": {"verdict": "where_type_error", "message": ORT_WHERE}}
    assert outcome_problems(record) == []
    broken = copy.deepcopy(record)
    change(broken)
    assert any(says in problem for problem in outcome_problems(broken))


def test_the_reader_refuses_what_is_not_a_sweep_record(tmp_path):
    path = tmp_path / "r.json"
    for text, says in [("[]", "not a JSON object"), ('{"outcome": "accepted"}', "its key is not"),
                       (json.dumps({"key": dict.fromkeys(["stack", "model", "recipe", "exporter", "opset", "mode"]),
                                    "outcome": "fine"}), "unknown outcome"), ("{", "unreadable")]:  # fmt: skip
        path.write_text(text)
        with pytest.raises(RecordError, match=says):
            read_record(path)


def test_the_rebuild_found_what_the_old_drivers_found():
    """The 430 cells rerun on the engine: each with the old drivers' outcome (outputs/sweeps/migrated_outcomes.json,
    written when their records were migrated, before the rebuild)."""
    index = json.loads((OUTPUTS / migrate.INDEX).read_text())
    assert index["migrated_from"] == migrate.MIGRATED_FROM and len(index["cells"]) == 430
    assert migrate.outcome_changes(index["cells"]) == []


def test_control_a_changed_outcome_or_a_missing_record_is_a_change(tmp_path):
    outputs = tmp_path / "outputs"
    (outputs / "matrix" / "cells").mkdir(parents=True)
    key = {"stack": "s", "model": "m", "recipe": "r", "exporter": "e", "opset": 17, "mode": "train"}
    (outputs / "matrix" / "cells" / "a.json").write_text(json.dumps({"key": key, "outcome": "accepted"}))
    index = {"matrix/cells/a.json": {"key": key, "outcome": "type_error"},
             "matrix/cells/b.json": {"key": key, "outcome": "accepted"}}  # fmt: skip
    assert migrate.outcome_changes(index, outputs) == [
        "matrix/cells/a.json: type_error then, accepted now", "matrix/cells/b.json: missing"
    ]  # fmt: skip


def test_migration_restates_the_old_vocabulary_and_is_idempotent(tmp_path):
    outputs = tmp_path / "outputs"
    cells = outputs / "matrix" / "cells"
    cells.mkdir(parents=True)
    old = {
        "2.1.2-4.25.1-torchscript": {"outcome": "where_type_error", "error": {"stage": "load", "message": ORT_WHERE}},
        "2.1.2-4.25.1-dynamo": {"outcome": "other_error", "reason": "timeout", "error": {"stage": "export"}},
        "1.13.1-4.25.1-dynamo": {"outcome": "not_applicable", "reason": "torch 1.13.1 has no dynamo-based exporter"},
        "1.13.1-4.30.2-torchscript": {"outcome": "not_applicable", "reason": "cannot be imported with torch 1.13.1"},
        "2.2.2-4.25.1-torchscript": {"outcome": "other_error", "reason": "cell process died"},
    }
    for name, record in old.items():
        torch, transformers, exporter = name.split("-")
        record.update(torch_requested=torch, transformers_requested=transformers, exporter=exporter)
        (cells / f"{name}.json").write_text(json.dumps(record))
    assert migrate.migrate(outputs) == {"matrix": 5, "architectures": 0}
    new = {p.stem: json.loads(p.read_text()) for p in cells.glob("*.json")}
    assert {name: r["outcome"] for name, r in new.items()} == {
        "2.1.2-4.25.1-torchscript": "where_type_error", "2.1.2-4.25.1-dynamo": "timeout",
        "1.13.1-4.25.1-dynamo": "not_applicable", "1.13.1-4.30.2-torchscript": "not_built",
        "2.2.2-4.25.1-torchscript": "crashed",
    }  # fmt: skip
    where = new["2.1.2-4.25.1-torchscript"]
    assert where["key"]["stack"] == "torch-2.1.2+transformers-4.25.1" and outcome_problems(where) == []
    assert where["ort"]["type_binding"]["node"] == "/h.0/attn/Where"
    assert migrate.migrate(outputs) == {"matrix": 0, "architectures": 0}  # a second migration changes nothing
