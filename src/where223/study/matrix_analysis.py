"""What the version matrix's cells say: a short label of each cell's first error, and the conclusions.

Reads the recorded cells only (no matplotlib, no torch), so the matrix driver labels its progress lines and the
report states its findings with the same words the heatmap (`where223.study.matrix_figure`) shows.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from where223.graph.ort import OrtVerdict
from where223.study.matrix_cell import CellState

ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : (?P<code>\w+) : ")
LOAD_PREFIX = re.compile(r"^Load model from \S+ failed:\s*")
# The innermost "(op_type:X, node name: Y): text" of onnxruntime's nested inference errors.
INFERENCE = re.compile(r"\(op_type:(?P<op>\w+), node name: [^)]*\): (?:\[\w+\] )?")
UNSUPPORTED = re.compile(r"unsupported type: tensor\((?P<type>\w+)\)")
INVALID_TYPE = re.compile(
    r"Type 'tensor\((?P<type>\w+)\)' of (?P<io>input|output) parameter \([^)]*\) of operator \((?P<op>\w+)\)"
)
NO_KERNEL = re.compile(r"Could not find an implementation for (?P<op>\w+\(\d+\)) node")
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float": "fp32", "double": "fp64"}


def _short_type(name: str) -> str:
    return DTYPE_SHORT.get(name, name)


def version_key(version: str) -> tuple[int, ...]:
    """A version string as a sortable tuple of its numeric parts ('4.25.1' -> (4, 25, 1))."""
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def first_error_line(message: str) -> str:
    """The first non-empty line of an error, without onnxruntime's `[ONNXRuntimeError] : n : CODE :`."""
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return LOAD_PREFIX.sub("", ORT_PREFIX.sub("", line))


def cell_label(cell: dict[str, Any], width: int = 22) -> str:
    """A two-line label of a cell's first error (empty for accepted cells)."""
    outcome = cell.get("outcome")
    if outcome == OrtVerdict.ACCEPTED:
        return "runs"
    if outcome == OrtVerdict.WHERE_TYPE_ERROR:
        first, second = (_short_type(t) for t in cell["where_error"]["types"])
        return f"Where\n{first} vs {second}"
    if outcome == CellState.NOT_RUN:
        return "not run"
    if outcome == CellState.NOT_APPLICABLE:
        reason = cell.get("reason", "")
        if "no dynamo" in reason:
            return "n/a\nno dynamo exporter"
        if "pip install" in reason:
            return "n/a\nno install"
        error = cell.get("error", {})
        return "n/a\n" + _clip(error.get("type", "").rsplit(".", 1)[-1] or reason, width)
    error = cell.get("error", {})
    binding = error.get("type_binding")
    if binding:
        first, second = (_short_type(t) for t in binding["types"])
        return f"{error['stage']}: {binding['op_type']}\n{first} vs {second}"
    message = error.get("message", "")
    kernel = NO_KERNEL.search(message)
    if kernel:
        return f"{error['stage']}: no kernel\n{kernel['op']}"
    invalid = INVALID_TYPE.search(message)
    if invalid:
        return f"{error['stage']}: {invalid['op']}\n{_short_type(invalid['type'])} {invalid['io']} invalid"
    match = ORT_PREFIX.match(message)
    line = first_error_line(message)
    inner = list(INFERENCE.finditer(line))
    if match and inner:
        op, text = inner[-1]["op"], line[inner[-1].end() :]
        unsupported = UNSUPPORTED.search(text)
        detail = f"{_short_type(unsupported['type'])} unsupported" if unsupported else text.strip()
        return f"{error['stage']}: {op}\n" + _clip(detail, width)
    if match:
        return f"{error['stage']}: {match['code']}\n" + _clip(first_error_line(message), width)
    kind = error.get("type", "?").rsplit(".", 1)[-1]
    return f"{error.get('stage', '?')}: {_clip(kind, width - 8)}\n" + _clip(first_error_line(message), width)


def grid(matrix: dict[str, Any], exporter: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Cells of one exporter keyed by (transformers, torch)."""
    return {
        (c["transformers_requested"], c["torch_requested"]): c for c in matrix["cells"] if c["exporter"] == exporter
    }


def _ranges(versions: Sequence[str], axis: Sequence[str]) -> str:
    """Compress versions into runs along `axis`, e.g. `4.22.0–4.25.1, 4.28.1`."""
    index = sorted(axis.index(v) for v in versions)
    runs: list[list[int]] = []
    for i in index:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(axis[r[0]] if len(r) == 1 else f"{axis[r[0]]}–{axis[r[-1]]}" for r in runs)


def by_outcome(matrix: dict[str, Any], exporter: str, outcome: str) -> dict[str, str]:
    """torch version -> transformers ranges whose cell has `outcome`, for one exporter."""
    tf_axis = matrix["axes"]["transformers"]
    found: dict[str, list[str]] = defaultdict(list)
    for cell in matrix["cells"]:
        if cell["exporter"] == exporter and cell["outcome"] == outcome:
            found[cell["torch_requested"]].append(cell["transformers_requested"])
    return {t: _ranges(v, tf_axis) for t, v in sorted(found.items(), key=lambda kv: version_key(kv[0]))}


def conclusions(matrix: dict[str, Any]) -> list[str]:
    """Plain-language findings computed from the cells (one string per finding)."""
    lines: list[str] = []
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(matrix["counts"].items()))
    lines.append(f"{len(matrix['cells'])} cells recorded ({counts}).")
    for exporter in matrix["axes"]["exporter"]:
        for outcome, verb in (
            (OrtVerdict.WHERE_TYPE_ERROR, "fail with the Where type error"),
            (OrtVerdict.ACCEPTED, "are accepted (exported, loaded and run)"),
        ):
            stacks = by_outcome(matrix, exporter, outcome)
            where = "; ".join(f"torch {t} with transformers {r}" for t, r in stacks.items()) or "none"
            lines.append(f"[{exporter}] stacks that {verb}: {where}.")
        bindings = {
            (c["where_error"]["node"], *c["where_error"]["types"])
            for c in matrix["cells"]
            if c["exporter"] == exporter and c["outcome"] == OrtVerdict.WHERE_TYPE_ERROR
        }
        for node, first, second in sorted(bindings):
            lines.append(f"[{exporter}] Where error seen at node {node}: {first} vs {second}.")
    lines.extend(replacements(matrix))
    lines.extend(missing_kernels(matrix))
    lines.extend(outcome_kinds(matrix))
    return lines


def outcome_kinds(matrix: dict[str, Any]) -> list[str]:
    """Every distinct cell label per exporter, with the torch versions and transformers ranges it covers."""
    tf_axis = matrix["axes"]["transformers"]
    lines = []
    for exporter in matrix["axes"]["exporter"]:
        kinds: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for cell in matrix["cells"]:
            if cell["exporter"] == exporter:
                label = cell_label(cell, width=80).replace("\n", " ")
                kinds[label][cell["torch_requested"]].append(cell["transformers_requested"])
        for label, stacks in sorted(kinds.items(), key=lambda kv: -sum(len(v) for v in kv[1].values())):
            where = "; ".join(
                f"torch {t}: {_ranges(v, tf_axis)}"
                for t, v in sorted(stacks.items(), key=lambda kv: version_key(kv[0]))
            )
            count = sum(len(v) for v in stacks.values())
            lines.append(f"[{exporter}] {label} ({count} cells): {where}.")
    return lines


def missing_kernels(matrix: dict[str, Any]) -> list[str]:
    """Cells whose graph passed onnxruntime's type check but found no CPU kernel, per exporter and op."""
    lines = []
    for exporter in matrix["axes"]["exporter"]:
        ops: dict[str, int] = defaultdict(int)
        for cell in matrix["cells"]:
            found = NO_KERNEL.search(cell.get("error", {}).get("message", ""))
            if cell["exporter"] == exporter and cell["outcome"] == OrtVerdict.MISSING_KERNEL and found:
                ops[found["op"]] += 1
        if ops:
            listed = ", ".join(f"{op} ({n} cells)" for op, n in sorted(ops.items()))
            lines.append(f"[{exporter}] graphs that pass onnxruntime's type check but have no CPU kernel: {listed}.")
    return lines


def replacements(matrix: dict[str, Any]) -> list[str]:
    """For transformers versions that show the Where error on some torch, what other torch versions show."""
    lines = []
    for exporter in matrix["axes"]["exporter"]:
        cells = grid(matrix, exporter)
        failing_tf = sorted(
            {tf for (tf, _), c in cells.items() if c["outcome"] == OrtVerdict.WHERE_TYPE_ERROR}, key=version_key
        )
        if not failing_tf:
            continue
        instead: dict[str, set[str]] = defaultdict(set)
        for (tf, tv), cell in cells.items():
            if tf in failing_tf and cell["outcome"] != OrtVerdict.WHERE_TYPE_ERROR:
                instead[tv].add(cell_label(cell, width=80).replace("\n", " "))
        failing = _ranges(failing_tf, matrix["axes"]["transformers"])
        for tv in sorted(instead, key=version_key):
            labels = "; ".join(sorted(instead[tv]))
            lines.append(f"[{exporter}] torch {tv}, transformers {failing} (Where error on other torch): {labels}.")
    return lines
