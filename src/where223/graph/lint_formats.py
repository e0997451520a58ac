"""A lint report as CI annotations: SARIF 2.1.0 (code scanning) and GitHub workflow commands.

One result, or one command, per finding: every type violation (level `error`: a binding conflict, a type not
allowed, a declared type its node contradicts) and, when kernels were checked, every missing kernel (level
`warning`); nothing for a model without findings. Rule indexes stay as first published (a new kind is appended).
Node names come from untrusted models: every text shown passes through `where223.errors.printable` (one line,
cut), and a workflow command's text is escaped as GitHub documents (`%`, CR and LF in its message; also `:` and
`,` in its properties), so no name can end a command or start another.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import where223
from where223.errors import printable
from where223.graph.lint import FindingKind, LintReport, MissingKernel, Violation

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME = "where223 lint"
# rule id -> (level, short description)
RULES: dict[FindingKind, tuple[str, str]] = {
    FindingKind.BINDING_CONFLICT: ("error", "A type parameter of an operator is bound to two types"),
    FindingKind.NOT_ALLOWED: ("error", "A type the operator's schema does not allow for a type parameter"),
    FindingKind.MISSING_KERNEL: ("warning", "No kernel for the node's types in the execution provider"),
    FindingKind.DECLARED_TYPE: ("error", "A declared type that contradicts the type its node computes"),
}


def findings(report: LintReport) -> list[Violation | MissingKernel]:
    """Every finding of a report, type violations (roots first) then missing kernels."""
    return [*report.violations, *(report.kernels.missing if report.kernels else [])]


def _artifact_uri(model_path: str | None) -> str:
    """The model file as a URI reference: relative paths stay relative (as code scanning wants them)."""
    if not model_path:
        return "model.onnx"
    path = Path(model_path)
    return path.as_uri() if path.is_absolute() else quote(path.as_posix())


def _sarif_result(finding: Violation | MissingKernel, uri: str) -> dict[str, Any]:
    level, _ = RULES[finding.kind]
    properties: dict[str, Any] = {"opType": finding.op_type}
    if isinstance(finding, Violation):
        properties.update(typeParameter=finding.type_param, root=finding.root,
                          causedBy=[printable(label) for label in finding.caused_by])
        if finding.expected is not None and finding.kind == FindingKind.DECLARED_TYPE:
            properties.update(computed=finding.expected, computedBy=printable(finding.computed_by or ""))
        if finding.function_call is not None:
            properties["inFunctionBodyOf"] = printable(finding.function_call["node"])
    else:
        properties.update(sinceVersion=finding.since_version, binding=finding.binding, provider=finding.provider,
                          onnxruntime=finding.onnxruntime)
    return {
        "ruleId": str(finding.kind),
        "ruleIndex": list(RULES).index(finding.kind),
        "level": level,
        "message": {"text": finding.message()},
        "locations": [{
            "physicalLocation": {"artifactLocation": {"uri": uri}},
            "logicalLocations": [{
                "name": printable(finding.node),
                "fullyQualifiedName": printable(finding.label),
                "kind": "function",
                "properties": {"opType": finding.op_type},
            }],
        }],
        "properties": properties,
    }  # fmt: skip


def sarif(report: LintReport) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log: one run, one result per finding."""
    uri = _artifact_uri(report.model_path)
    rules = [
        {"id": str(kind), "name": str(kind), "shortDescription": {"text": text},
         "defaultConfiguration": {"level": level}}
        for kind, (level, text) in RULES.items()
    ]  # fmt: skip
    driver = {"name": TOOL_NAME, "version": where223.__version__, "rules": rules}
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "artifacts": [{"location": {"uri": uri}}],
        "results": [_sarif_result(finding, uri) for finding in findings(report)],
        "properties": {"outcome": str(report.outcome), "complete": report.complete},
    }
    if report.kernels is not None:
        run["properties"]["kernels"] = {"provider": report.kernels.provider,
                                        "onnxruntime": report.kernels.onnxruntime}
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does: %, CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message's escapes, and `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_commands(report: LintReport) -> str:
    """The report as GitHub workflow commands, `::error file=...,title=...::message`, one line per finding
    (`::warning` for a missing kernel); empty for a model without findings."""
    file = os.fspath(report.model_path) if report.model_path else "model.onnx"
    lines = []
    for finding in findings(report):
        level, _ = RULES[finding.kind]
        title = f"{finding.kind} in {printable(finding.op_type)} node {printable(finding.label)}"
        properties = f"file={escape_property(printable(file, None))},title={escape_property(title)}"
        lines.append(f"::{level} {properties}::{escape_data(finding.message())}")
    return "\n".join(lines)
