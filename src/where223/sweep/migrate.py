"""Migrate the records of the two drivers before the sweep engine (`where223 matrix`, `where223 architectures`,
up to commit 0a088fe) to the engine's schema, in place (`migrate`; run once, on the commit that introduced the engine).

Each record gains the cell's `key` and its stack's facts; a matrix record that ONNX Runtime judged gains the
`ort` entry the architecture records already had (its verdict, its message, the binding parsed from it), and its
outcome is restated in the one vocabulary (`where223.outcomes`): the old matrix's `not_applicable` for a torch
without a dynamo exporter stays `not_applicable`; one for a stack that could not import or build the model
becomes `not_built`; its timeouts (`other_error` with reason `timeout`) become `timeout`, and a cell process that
died becomes `crashed`. A record that has a key already is left as it is, so migrating twice changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from where223.graph.ort import judge_message
from where223.outcomes import Outcome
from where223.pipeline import paths, records
from where223.sweep.stacks import describe, load_stacks

MIGRATED_FROM = "0a088fe"


def matrix_record(record: dict[str, Any]) -> dict[str, Any]:
    """A matrix cell of the old driver in the engine's schema."""
    torch, transformers = record["torch_requested"], record["transformers_requested"]
    stack = f"torch-{torch}+transformers-{transformers}"
    key = {"stack": stack, "model": "gpt2-tiny", "recipe": "cpu_bf16_autocast", "exporter": record["exporter"],
           "opset": "auto", "mode": "train"}  # fmt: skip
    outcome = record["outcome"]
    error = record.get("error") or {}
    if outcome == "not_applicable" and "no dynamo" not in (record.get("reason") or ""):
        outcome = Outcome.NOT_BUILT
    elif outcome == "other_error" and record.get("reason") == "timeout":
        outcome = Outcome.TIMEOUT
    elif outcome == "other_error" and record.get("reason") == "cell process died":
        outcome = Outcome.CRASHED
    elif error.get("stage") == "export":
        outcome = Outcome.NOT_EXPORTED
    elif error.get("stage") in ("load", "run"):
        judgement = judge_message(error["message"])
        record["ort"] = {
            "verdict": judgement.verdict,
            "message": judgement.message,
            "type_binding": judgement.type_binding.to_dict() if judgement.type_binding else None,
        }
    elif outcome == "accepted":
        record["ort"] = {"verdict": "accepted", "message": None, "type_binding": None}
    return _finish(record, key, stack, outcome)


def architecture_record(record: dict[str, Any]) -> dict[str, Any]:
    """An architecture record of the old driver in the engine's schema."""
    release = record["release"]
    stack = "project" if release == "4.25.1" else f"project+transformers-{release}"
    key = {"stack": stack, "model": record["model_type"], "recipe": "cpu_bf16_autocast", "exporter": "torchscript",
           "opset": 17, "mode": "train"}  # fmt: skip
    return _finish(record, key, stack, record["outcome"])


def _finish(record: dict[str, Any], key: dict[str, Any], stack: str, outcome: str) -> dict[str, Any]:
    record["key"] = key
    record["outcome"] = Outcome(outcome)
    record["stack"] = describe(load_stacks().stack(stack))
    record["migrated_from"] = MIGRATED_FROM
    return record


INDEX = "sweeps/migrated_outcomes.json"  # under the outputs tree: what the old drivers found, cell by cell


def outcome_index(outputs: Path = paths.OUTPUTS) -> dict[str, dict[str, Any]]:
    """Record path (relative to `outputs`) -> the cell's key and outcome, for every sweep record."""
    index = {}
    for pattern in ("matrix/cells/*.json", "architectures/*/*.json"):
        for path in sorted(outputs.glob(pattern)):
            if path.name != "summary.json":
                record = records.read_json(path)
                index[path.relative_to(outputs).as_posix()] = {"key": record["key"], "outcome": record["outcome"]}
    return index


def outcome_changes(index: dict[str, dict[str, Any]], outputs: Path = paths.OUTPUTS) -> list[str]:
    """Where the records under `outputs` differ from an `outcome_index` in key or outcome (or are missing)."""
    now = outcome_index(outputs)
    changes = []
    for path, then in sorted(index.items()):
        found = now.get(path)
        if found is None:
            changes.append(f"{path}: missing")
        elif found != then:
            changes.append(f"{path}: {then['outcome']} then, {found['outcome']} now")
    return changes


def migrate(outputs: Path = paths.OUTPUTS) -> dict[str, int]:
    """Migrate every old record under `outputs` in place; how many of each study were migrated."""
    done = {"matrix": 0, "architectures": 0}
    for study, pattern, convert in (
        ("matrix", "matrix/cells/*.json", matrix_record),
        ("architectures", "architectures/*/*.json", architecture_record),
    ):
        for path in sorted(outputs.glob(pattern)):
            if path.name == "summary.json":
                continue
            record = records.read_json(path)
            if "key" in record:
                continue
            records.write_json(path, convert(record))
            done[study] += 1
    records.write_json(outputs / INDEX, {"migrated_from": MIGRATED_FROM, "cells": outcome_index(outputs)})
    return done

