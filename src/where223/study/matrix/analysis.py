"""What the version matrix's cells say: `matrix.json` from the cell records, a short label of each cell's first
error, and the conclusions.

`spaces/matrix.yaml` is the sweep (`where223 sweep --space spaces/matrix.yaml`, `make sweep`): one stack per torch
environment and transformers release (`spaces/stacks.yaml`), the tiny GPT-2 of `where223.study.matrix.run` in
each, both exporters. Each cell's record lands at `outputs/matrix/cells/<torch>-<transformers>-<exporter>.json`;
`aggregate` writes `outputs/matrix/matrix.json` from them (and refreshes the figures of `NOTES.md` beside it).
Reads the recorded cells only (no matplotlib, no torch), so the report states its findings with the same words
the heatmap (`where223.study.matrix.figure`) shows.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from where223 import files, markdown
from where223.graph.ort import (
    INFERENCE,
    INVALID_TYPE,
    NO_KERNEL,
    ORT_PREFIX,
    UNSUPPORTED,
    first_message_line,
    named_nodes,
)
from where223.outcomes import Outcome
from where223.pipeline import environment, paths, publish, records
from where223.sweep.worker import now

DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float": "fp32", "double": "fp64"}


def _short_type(name: str) -> str:
    return DTYPE_SHORT.get(name, name)


def version_key(version: str) -> tuple[int, ...]:
    """A version string as a sortable tuple of its numeric parts ('4.25.1' -> (4, 25, 1))."""
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


first_error_line = first_message_line  # one parser of ONNX Runtime's messages: where223.graph.ort


def cell_label(cell: dict[str, Any], width: int = 22) -> str:
    """A two-line label of a cell's first error (empty for accepted cells)."""
    outcome = cell.get("outcome")
    if outcome == Outcome.ACCEPTED:
        return "runs"
    if outcome == Outcome.WHERE_TYPE_ERROR:
        first, second = (_short_type(t) for t in cell["where_error"]["types"])
        return f"Where\n{first} vs {second}"
    if outcome == Outcome.NOT_RUN:
        return "not run"
    if outcome == Outcome.NOT_APPLICABLE:
        reason = cell.get("reason", "")
        if "no dynamo" in reason:
            return "n/a\nno dynamo exporter"
        return "n/a\n" + _clip(reason, width)
    if outcome == Outcome.NOT_BUILT:
        error = cell.get("error") or {}
        return "not built\n" + _clip(error.get("type", "").rsplit(".", 1)[-1] or cell.get("reason", ""), width)
    if outcome in (Outcome.TIMEOUT, Outcome.CRASHED):
        return f"{outcome}\n" + _clip((cell.get("error") or {}).get("stage", ""), width)
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
            (Outcome.WHERE_TYPE_ERROR, "fail with the Where type error"),
            (Outcome.ACCEPTED, "are accepted (exported, loaded and run)"),
        ):
            stacks = by_outcome(matrix, exporter, outcome)
            where = "; ".join(f"torch {t} with transformers {r}" for t, r in stacks.items()) or "none"
            lines.append(f"[{exporter}] stacks that {verb}: {where}.")
        bindings = {
            (c["where_error"]["node"], *c["where_error"]["types"])
            for c in matrix["cells"]
            if c["exporter"] == exporter and c["outcome"] == Outcome.WHERE_TYPE_ERROR
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
            if cell["exporter"] == exporter and cell["outcome"] == Outcome.MISSING_KERNEL and found:
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
            {tf for (tf, _), c in cells.items() if c["outcome"] == Outcome.WHERE_TYPE_ERROR}, key=version_key
        )
        if not failing_tf:
            continue
        instead: dict[str, set[str]] = defaultdict(set)
        for (tf, tv), cell in cells.items():
            if tf in failing_tf and cell["outcome"] != Outcome.WHERE_TYPE_ERROR:
                instead[tv].add(cell_label(cell, width=80).replace("\n", " "))
        failing = _ranges(failing_tf, matrix["axes"]["transformers"])
        for tv in sorted(instead, key=version_key):
            labels = "; ".join(sorted(instead[tv]))
            lines.append(f"[{exporter}] torch {tv}, transformers {failing} (Where error on other torch): {labels}.")
    return lines


# outputs/matrix/NOTES.md: the prose is written by hand, the figures between these markers come from the cells.
NOTES_BEGIN = "<!-- begin: generated from matrix.json by where223.study.matrix.analysis.notes_section -->"
NOTES_END = "<!-- end: generated -->"
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:home|root|tmp|work|usr|opt|Users|var)/")


def _label_table(matrix: dict[str, Any], exporter: str) -> list[str]:
    """One markdown table of cell labels (transformers rows x torch columns); rows alike are merged."""
    torch_axis, tf_axis = matrix["axes"]["torch"], matrix["axes"]["transformers"]
    cells = grid(matrix, exporter)
    rows: list[tuple[list[str], list[str]]] = []
    for tf in tf_axis:
        labels = [
            cell_label(cells[(tf, tv)], width=40).replace("\n", " ") if (tf, tv) in cells else "—" for tv in torch_axis
        ]
        labels = [f"**{label}**" if label.startswith("Where") else label for label in labels]
        if rows and rows[-1][1] == labels:
            rows[-1][0].append(tf)
        else:
            rows.append(([tf], labels))
    named = [[versions[0] if len(versions) == 1 else f"{versions[0]} … {versions[-1]} ({len(versions)} alike)",
              *labels] for versions, labels in rows]
    return markdown.table(["transformers \\ torch", *torch_axis], named)


def _lint_lines(matrix: dict[str, Any]) -> list[str]:
    """Per exporter and torch version: nodes the lint checked, functions it inlined, what it flagged."""
    lines = []
    for exporter in matrix["axes"]["exporter"]:
        for tv in matrix["axes"]["torch"]:
            reports = [
                c["lint"]["report"]
                for c in matrix["cells"]
                if c["exporter"] == exporter and c["torch_requested"] == tv and c.get("lint", {}).get("report")
            ]
            if not reports:
                continue
            checked = sorted(r["nodes_checked"] for r in reports)
            inlined = sorted({r.get("inlined_functions", 0) for r in reports})
            flagged = sorted({v["op_type"] for r in reports for v in r["violations"]})
            unchecked = sum(bool(r["unchecked"]) for r in reports)
            span = str(checked[0]) if checked[0] == checked[-1] else f"{checked[0]}–{checked[-1]}"
            lines.append(
                f"- {exporter}, torch {tv}: lint checked {span} nodes per graph ({len(reports)} graphs with a "
                f"lint report; model-local functions inlined: {', '.join(map(str, inlined))}), "
                f"{unchecked} graph(s) with unchecked nodes; flagged: {', '.join(flagged) or 'nothing'}."
            )
    return lines


def notes_section(matrix: dict[str, Any]) -> str:
    """The quantitative part of outputs/matrix/NOTES.md, computed from the cells (between NOTES_BEGIN/END)."""
    cells = matrix["cells"]
    counts = dict(matrix["counts"])
    outcomes = list(Outcome)
    # ONNX Runtime's verdicts are counted, zero or not; every other outcome only where it occurs
    always = [outcome for outcome in Outcome if outcome.judged]
    summary = ", ".join(f"{counts.get(str(o), 0)} {o}" for o in outcomes if counts.get(str(o)) or o in always)
    walls = sorted(c["wall_s"] for c in cells if c.get("wall_s") is not None)
    slowest = max((c for c in cells if c.get("wall_s") is not None), key=lambda c: c["wall_s"])
    absolute = sum(bool(_ABSOLUTE_PATH.search(json_text(c))) for c in cells)
    lines = [NOTES_BEGIN, "", f"### Results ({len(cells)} cells: {summary})", ""]
    for exporter in matrix["axes"]["exporter"]:
        lines += [f"{exporter}:", "", *_label_table(matrix, exporter), ""]
    lines += ["### Lint in each cell", "", *_lint_lines(matrix), ""]
    lines += ["### Node names", "", *[f"- {line}" for line in node_naming(matrix)], ""]
    lines += [
        "### Timing and paths",
        "",
        f"- Cell wall time (subprocess, import to run): median {statistics.median(walls):.1f} s, slowest "
        f"{walls[-1]:.1f} s ({slowest['cell']}), {sum(walls) / 60:.1f} min for all {len(walls)} cells.",
        f"- Cell records holding an absolute path of the recording machine: {absolute}.",
        "",
        "### Environments (versions each cell imported)",
        "",
    ]
    packages = sorted({name for env in matrix["cell_environments"].values() for name in env if name != "torch"})
    environments = [[tv, *(str(matrix["cell_environments"].get(tv, {}).get(name) or "none") for name in packages)]
                    for tv in matrix["axes"]["torch"]]
    lines += markdown.table(["torch", *packages], environments)
    return "\n".join([*lines, "", NOTES_END])


def json_text(record: dict[str, Any]) -> str:
    """A record as one string, to search."""
    return json.dumps(record, sort_keys=True)


def update_notes(notes: str, matrix: dict[str, Any]) -> str:
    """`notes` (NOTES.md's text) with its generated section replaced by `notes_section(matrix)`."""
    start, end = notes.find(NOTES_BEGIN), notes.find(NOTES_END)
    if start < 0 or end < start:
        raise ValueError(f"the notes have no generated section ({NOTES_BEGIN} ... {NOTES_END})")
    return notes[:start] + notes_section(matrix) + notes[end + len(NOTES_END) :]


# ONNX node names: a scope path (`/model/transformer/h.0/attn/Where`) or an op type and a running number
# (`Where_127`, `node_Gemm_216`). ONNX Runtime's messages quote them as `node (NAME)` or `with name 'NAME'`.
NUMBERED_NAME = re.compile(r"^(?:node_)?(?P<op>[A-Z][A-Za-z]*)_(?P<number>\d+)$")
PLAIN = "torchscript, plain export"  # the cells' second export: torch.onnx.export's defaults (`plain_export`)
SEED_NODE = "Where_223"  # the node the seed's ONNX Runtime message names (GPT-2 trained under ORTModule)


def _named_nodes(cell: dict[str, Any]) -> list[tuple[str, str]]:
    """(export, node name) for every node a cell names: its graph's Where nodes, ONNX Runtime's messages, and
    the same for its plain export."""
    names = [(cell["exporter"], name) for name in cell.get("graph", {}).get("where_node_names", [])]
    for name in named_nodes(cell.get("error", {}).get("message", "")):
        names.append((cell["exporter"], name))
    plain = cell.get("plain_export", {})
    names += [(PLAIN, name) for name in plain.get("where_node_names", [])]
    if plain.get("type_binding"):
        names.append((PLAIN, plain["type_binding"]["node"]))
    return list(dict.fromkeys(names))


def _torch_span(versions: set[str]) -> str:
    ordered = sorted(versions, key=version_key)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}–{ordered[-1]}"


def node_naming(matrix: dict[str, Any]) -> list[str]:
    """Which exporters number their nodes (op type + running number) and which name them by module scope, and
    what the numbers of the Where nodes were, from the node names the cells recorded."""
    numbered: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    scoped: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    where_numbers: dict[tuple[str, str, Any, str], list[str]] = defaultdict(list)
    refused_at: dict[tuple[str, str], set[str]] = defaultdict(set)
    for cell in matrix["cells"]:
        torch_version = cell["torch_requested"]
        for export, name in _named_nodes(cell):
            if name.startswith("/"):
                scoped[export][torch_version].add(name)
            elif NUMBERED_NAME.match(name):
                numbered[export][torch_version].add(name)
        plain = cell.get("plain_export", {})
        for export, opset, graph_names in (
            (cell["exporter"], cell.get("graph", {}).get("opset"), cell.get("graph", {}).get("where_node_names", [])),
            (PLAIN, plain.get("opset_requested"), plain.get("where_node_names", [])),
        ):
            if graph_names and all(NUMBERED_NAME.match(n) for n in graph_names):
                key = (export, torch_version, opset, ", ".join(graph_names))
                where_numbers[key].append(cell["transformers_requested"])
        for export, binding in ((cell["exporter"], cell.get("where_error")), (PLAIN, plain.get("type_binding"))):
            if binding and binding.get("op_type") == "Where" and NUMBERED_NAME.match(binding["node"]):
                refused_at[(export, torch_version)].add(binding["node"])
    lines = []
    for kind, found, how in (
        ("numbered", numbered, "op type and a running number"),
        ("scoped", scoped, "the module scope of the op"),
    ):
        if not found:
            continue
        parts = []
        for export, by_torch in sorted(found.items()):
            examples = sorted({n for names in by_torch.values() for n in names}, key=_name_order)[:4]
            parts.append(f"{export} with torch {', '.join(sorted(by_torch, key=version_key))} ({', '.join(examples)})")
        lines.append(f"Node names {kind} ({how}): " + "; ".join(parts) + ".")
    tf_axis = matrix["axes"]["transformers"]

    def order(item: tuple[tuple[str, str, Any, str], list[str]]) -> tuple[Any, ...]:
        (export, torch_version, _, _), versions = item
        return version_key(torch_version), export, min(version_key(v) for v in versions)

    for (export, torch_version, opset, names), versions in sorted(where_numbers.items(), key=order):
        lines.append(
            f"Where nodes of the {export} graph (opset {opset}), torch {torch_version}, transformers "
            f"{_ranges(versions, tf_axis)}: {names}."
        )
    for (export, torch_version), nodes in sorted(refused_at.items()):
        lines.append(f"ONNX Runtime refuses the {export} graph of torch {torch_version} at {', '.join(sorted(nodes))}.")
    lines.extend(_number_dependence(where_numbers, numbered))
    return lines


def _numbers(names: str) -> list[int]:
    return [int(m["number"]) for m in map(NUMBERED_NAME.match, names.split(", ")) if m]


def _number_dependence(
    where_numbers: dict[tuple[str, str, Any, str], list[str]], numbered: dict[str, dict[str, set[str]]]
) -> list[str]:
    """What the recorded Where numbers vary with: the position along one graph, the export call, the model code."""
    lines = []
    steps: dict[str, set[int]] = defaultdict(set)
    for export, _, _, names in where_numbers:
        steps[export] |= {b - a for a, b in pairwise(_numbers(names))}
    if any(steps.values()):
        lines.append(
            "Within one numbered graph the Where numbers grow along the export: from the first GPT-2 block's Where "
            "to the next block's the number rises by "
            + "; ".join(f"{', '.join(map(str, sorted(found)))} ({export})" for export, found in sorted(steps.items()))
            + "."
        )
    firsts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for export, torch_version, _, names in where_numbers:
        firsts[(torch_version, export)].add(names.split(", ")[0])
    by_torch: dict[str, list[str]] = defaultdict(list)
    distinct: dict[str, set[str]] = defaultdict(set)
    for (torch_version, export), names in sorted(firsts.items()):
        by_torch[torch_version].append(f"{', '.join(sorted(names, key=_name_order))} ({export})")
        distinct[torch_version] |= names
    for torch_version, parts in by_torch.items():
        if len(distinct[torch_version]) > 1:
            lines.append(
                f"The same first Where node of the tiny model gets different numbers with torch {torch_version}, "
                f"by export call and transformers version: {'; '.join(parts)}."
            )
    if numbered:
        seen = any(SEED_NODE in names for by_torch_names in numbered.values() for names in by_torch_names.values())
        lines.append(
            f"The seed's {SEED_NODE} is a numbered name, the scheme of the exporters above that number nodes; "
            + (
                f"a cell records {SEED_NODE} too."
                if seen
                else "no cell records that number: it belongs to the seed's own export (its model, export call "
                "and torch), which no cell repeats."
            )
        )
    return lines


def _name_order(name: str) -> tuple[str, int]:
    match = NUMBERED_NAME.match(name)
    return (match["op"], int(match["number"])) if match else (name, 0)

EXPORTERS: tuple[str, ...] = ("torchscript", "dynamo")
MATRIX_OUT: Path = paths.OUTPUTS / "matrix"
SUMMARY = "matrix.json"  # what `summarize` writes in the matrix's folder


def load_cells(out_dir: Path = MATRIX_OUT) -> list[dict[str, Any]]:
    """Every cell record under `out_dir/cells`, sorted by name."""
    return [records.read_json(p) for p in sorted((out_dir / "cells").glob("*.json"))]


def aggregate(out_dir: Path = MATRIX_OUT) -> dict[str, Any]:
    """Build and write `matrix.json` from the cell records (axes, counts, per-env versions, cells); refresh the
    figures of `NOTES.md` beside it (`matrix_analysis.update_notes`)."""
    cells = load_cells(out_dir)
    envs: dict[str, dict[str, Any]] = {}
    for cell in cells:
        versions = cell.get("versions")
        if versions:
            envs.setdefault(cell["torch_requested"], {k: v for k, v in versions.items() if k != "transformers"})
    torch_axis = sorted({c["torch_requested"] for c in cells}, key=version_key)
    tf_axis = sorted({c["transformers_requested"] for c in cells}, key=version_key)
    exporters = [e for e in EXPORTERS if any(c["exporter"] == e for c in cells)]
    matrix = {
        "description": (
            "Tiny GPT-2 (random weights) exported to ONNX under torch.autocast('cpu', torch.bfloat16), "
            "then loaded and run with onnxruntime's CPU provider"
        ),
        "axes": {"torch": torch_axis, "transformers": tf_axis, "exporter": exporters},
        "counts": dict(Counter(c["outcome"] for c in cells)),
        "driver_environment": environment.describe(),
        "cell_environments": envs,
        "updated_at": now(),
        "cells": cells,
    }
    publish.write_record(out_dir / "matrix.json", matrix, out_dir.parent)
    notes = out_dir / "NOTES.md"
    with publish.outputs_lock(out_dir.parent, wait=True):
        if notes.is_file():  # its figures follow the cells
            files.write_atomic(notes, update_notes(notes.read_text(), matrix))
    return matrix


def summarize(out_dir: Path = MATRIX_OUT) -> dict[str, Any] | None:
    """`aggregate` when `out_dir` holds cell records (the sweep's `summary` step), else None."""
    return aggregate(out_dir) if (out_dir / "cells").is_dir() else None
