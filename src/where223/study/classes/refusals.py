"""The class study's records read as refusals: which stack, recipe and exporter a record is (`column`), what ONNX
Runtime refused in it (`refusal`) with its evidence, and the refusal groups (`groups`); what the study's analysis
(`where223.study.classes.analysis`) and its emulated CUDA fp16 reruns (`where223.study.classes.emulated`) both read,
below both. Records only: no torch.

A refusal group is (operator, what was broken, exporter, recipe, stack): the operator of the node ONNX Runtime
names, and whether its type parameter was bound to two types (`type_binding_conflict`), a type its schema does not
allow was given (`type_not_allowed`), or ONNX Runtime's graph check refused a type (`invalid_type`, which lint
cannot see when it concerns a Cast's target). Each group keeps its members and one representative's evidence: the
node, its types, the schema constraint, the eager kernels of its source line, the source line and the exporter
function that emitted it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from where223.graph import ort
from where223.outcomes import Outcome
from where223.pipeline import paths, portable, records

OUT_DIR: Path = paths.OUTPUTS / "classes"
STACK_LABELS: dict[str, str] = {"project": "2022", "today": "today"}  # in the write-up's order
TYPE_REFUSALS = frozenset({Outcome.TYPE_ERROR, Outcome.WHERE_TYPE_ERROR})


def load_records(out_dir: Path = OUT_DIR) -> list[dict[str, Any]]:
    """Every cell record under `out_dir/<release>/<recipe>-<exporter>/`, in path order."""
    return [records.read_json(path) for path in sorted(Path(out_dir).glob("*/*/*.json"))]


def column(record: dict[str, Any]) -> tuple[str, str, str]:
    """(stack label, recipe, exporter) of a record: the write-up's columns."""
    key = record.get("key") or {}
    stack = str(key.get("stack", ""))
    return STACK_LABELS.get(stack, stack), str(key.get("recipe")), str(key.get("exporter"))


def ort_node(record: dict[str, Any]) -> dict[str, Any] | None:
    """The blamed entry of the node ONNX Runtime names (None when none was blamed)."""
    blamed = record.get("blame") or []
    return next((b for b in blamed if b.get("ort_node")), None)


def refusal(record: dict[str, Any]) -> dict[str, Any] | None:
    """What ONNX Runtime refused in a type-refused record: operator, kind, node and types (None otherwise)."""
    if record.get("outcome") not in TYPE_REFUSALS:
        return None
    message = (record.get("ort") or {}).get("message") or ""
    binding = (record.get("ort") or {}).get("type_binding")
    if binding:
        return {"operator": binding["op_type"], "kind": "type_binding_conflict", "node": binding.get("node"),
                "types": sorted(binding.get("bound_types") or [])}  # fmt: skip
    invalid = ort.INVALID_TYPE.search(message)
    if invalid:
        return {"operator": invalid["op"], "kind": "invalid_type", "node": ort.refused_node(message),
                "types": [f"tensor({invalid['type']})"]}  # fmt: skip
    unsupported, inference = ort.UNSUPPORTED.search(message), ort.INFERENCE.search(message)
    if unsupported and inference:
        return {"operator": inference["op"], "kind": "type_not_allowed", "node": inference["node"],
                "types": [f"tensor({unsupported['type']})"]}  # fmt: skip
    return {"operator": ort.refused_operator(message) or "?", "kind": "type_error", "node": None, "types": []}


def _lint_finding(record: dict[str, Any], node: str | None) -> dict[str, Any] | None:
    findings = (record.get("lint") or {}).get("findings") or []
    return next((f for f in findings if f.get("node") == node), None) if node else None


def _emitter(blamed: dict[str, Any], operator: str | None) -> dict[str, Any] | None:
    """The emitting call of a blamed node: among the TorchScript symbolic calls of its line, the one whose ATen op
    is the node's operator (`aten::layer_norm` for LayerNormalization), else the first; dynamo's as recorded."""
    from where223.graph.blame import same_op

    calls = blamed.get("emitter_calls") or []
    matching = [call for call in calls if operator and same_op(call.get("aten") or "", operator)]
    return (matching or calls or [blamed.get("emitter")])[0]


def evidence(record: dict[str, Any]) -> dict[str, Any]:
    """One refused record's explanation: node, types, schema constraint, eager kernels, source, emitter."""
    found = refusal(record) or {}
    blamed = ort_node(record) or {}
    finding = _lint_finding(record, found.get("node")) or {}
    constraint = None
    if finding:
        constraint = {"type_param": finding.get("type_param"), "allowed": finding.get("allowed"),
                      "lint_kind": finding.get("kind"), "root": finding.get("root")}  # fmt: skip
    return {
        "model_type": record.get("model_type"),
        "node": found.get("node"),
        "operator": found.get("operator"),
        "types": found.get("types"),
        "bindings": finding.get("bindings"),
        "constraint": constraint,
        "source": portable.without_side_folder(blamed.get("source")) if blamed.get("source") else None,
        "code": blamed.get("code"),
        "eager_kernels": blamed.get("eager_kernels") or [],
        "emitter": _emitter(blamed, found.get("operator")),
        "opset": record.get("onnx_opset"),
    }


def group_key(record: dict[str, Any]) -> tuple[str, str, str, str, str] | None:
    """(operator, kind, exporter, recipe, stack) of a type-refused record, else None."""
    found = refusal(record)
    if found is None:
        return None
    stack, recipe, exporter = column(record)
    return found["operator"], found["kind"], exporter, recipe, stack


def groups(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Type refusals grouped by `group_key`, largest first, with members and the first member's evidence."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for record in rows:
        key = group_key(record)
        if key is None:
            continue
        group = found.setdefault(key, {"operator": key[0], "kind": key[1], "exporter": key[2], "recipe": key[3],
                                       "stack": key[4], "members": [], "sources": Counter()})  # fmt: skip
        group["members"].append(record["model_type"])
        group.setdefault("types", refusal(record)["types"])
        item = evidence(record)
        if item["source"]:
            group["sources"][item["source"]] += 1
        group.setdefault("representative", item)
        if not group["representative"]["source"] and item["source"]:
            group["representative"] = item
    ordered = sorted(found.values(), key=lambda g: (-len(g["members"]), g["operator"], g["exporter"], g["recipe"]))
    for group in ordered:
        group["members"] = sorted(group["members"])
        group["size"] = len(group["members"])
        group["sources"] = dict(group["sources"].most_common(5))
    return ordered


def refused_alike(record: dict[str, Any], group: dict[str, Any]) -> bool:
    """Whether a record is refused as the group is (same operator and kind)."""
    key = group_key(record)
    return key is not None and key[:2] == (group["operator"], group["kind"])


def converted(record: dict[str, Any], opset: int) -> bool:
    """Whether a scanned record's model is at the opset asked for (or none was exported): below 18 today's dynamo
    exporter converts its opset-18 graph down, and keeps 18 when the conversion fails."""
    return record.get("onnx_opset") in (None, opset)


def described(record: dict[str, Any], opset: int | None = None) -> str:
    """A record's class (`Mul invalid_type`) or, when it was not type-refused, its outcome; for a scanned record
    whose model is not at the opset asked for, the opset it was exported at."""
    if opset is not None and not converted(record, opset):
        return f"exported at opset {record['onnx_opset']}"
    found = refusal(record)
    return f"{found['operator']} {found['kind']}" if found else str(record.get("outcome"))
