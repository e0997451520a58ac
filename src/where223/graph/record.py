"""The graph tools' records as notebooks 02 and 03 keep them: `lint --json` and `blame --json` (standard library
only)."""

from __future__ import annotations

from typing import Any, TypedDict


class _Violation(TypedDict):
    node: str
    node_index: int
    op_type: str
    domain: str
    subgraph: str
    kind: str
    type_param: str
    bindings: list[dict[str, Any]]
    offending: list[dict[str, Any]]
    expected: str | None
    allowed: list[str]
    root: Any
    caused_by: Any


# Optional keys as a `total=False` class: this module's annotations are strings (`from __future__`), which
# TypedDict cannot read `NotRequired` from, so the validator would take them as required.
class ViolationRecord(_Violation, total=False):
    computed_by: str  # a declared type's finding: how the node's own type was found
    function_call: dict[str, Any]  # a finding inside a function body: the node that runs it


class _Lint(TypedDict):
    model_path: str
    outcome: str
    clean: bool
    complete: bool
    nodes_checked: int
    inlined_functions: int
    opset: int
    opset_imports: dict[str, int]
    violations: list[ViolationRecord]
    unchecked: dict[str, Any]
    untyped_values: int
    untyped_examples: list[Any]


class LintRecord(_Lint, total=False):
    notes: list[str]  # what lint could not check with the installed runtime, and why
    kernels: dict[str, Any]  # `lint --kernels`: the provider's kernel listing checked


class BlameRecord(TypedDict):
    node: str
    op_type: str
    subgraph: str
    source: str
    model_frames: list[dict[str, Any]]


RECORDS: dict[str, type] = {"*/graph/lint.json": LintRecord, "*/graph/blame.json": BlameRecord,
                            "*/fix-*/lint.json": LintRecord}
