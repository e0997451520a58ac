"""The version-matrix heatmap and the conclusions drawn from `outputs/matrix/matrix.json`.

Everything shown is computed from the recorded cells: outcome by colour, a short label of each
cell's first error, one panel per exporter; nothing is typed by hand.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUTCOME_COLOURS: dict[str, str] = {
    "accepted": "#4daf4a",
    "where_type_error": "#e41a1c",
    "other_error": "#ff9f40",
    "not_applicable": "#bdbdbd",
    "not_run": "#ffffff",
}
# other_error cells are told apart by shade of orange, one per distinct label (in order of first appearance).
OTHER_ERROR_SHADES: tuple[str, ...] = ("#ff9f40", "#fdd0a2", "#c8a600", "#fdae6b", "#8c510a", "#feedde")
DARK_SHADES = frozenset({"#8c510a", "#e41a1c"})
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


def _version_key(version: str) -> tuple[int, ...]:
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
    if outcome == "accepted":
        return "runs"
    if outcome == "where_type_error":
        first, second = (_short_type(t) for t in cell["where_error"]["types"])
        return f"Where\n{first} vs {second}"
    if outcome == "not_run":
        return "not run"
    if outcome == "not_applicable":
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


def colours(matrix: dict[str, Any]) -> dict[str, str]:
    """Legend label -> colour: one per outcome, and one shade per distinct other_error label."""
    legend: dict[str, str] = {}
    present = {c["outcome"] for c in matrix["cells"]}
    for outcome, colour in OUTCOME_COLOURS.items():
        if outcome == "other_error":
            labels = [cell_label(c).replace("\n", " ") for c in matrix["cells"] if c["outcome"] == outcome]
            for i, label in enumerate(dict.fromkeys(labels)):
                legend[f"other_error: {label}"] = OTHER_ERROR_SHADES[i % len(OTHER_ERROR_SHADES)]
        elif outcome in present:
            legend[outcome] = colour
    return legend


def cell_colour(cell: dict[str, Any], legend: dict[str, str]) -> str:
    """The fill of one cell, looked up in `colours()`."""
    if cell["outcome"] == "other_error":
        return legend[f"other_error: {cell_label(cell).replace(chr(10), ' ')}"]
    return legend.get(cell["outcome"], OUTCOME_COLOURS.get(cell["outcome"], "#ffffff"))


def draw(matrix: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw the heatmap (one panel per exporter) and save it as `<out_stem>.png` and `.svg`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from where223.graph.draw import save_figure

    torch_axis: Sequence[str] = matrix["axes"]["torch"]
    tf_axis: Sequence[str] = matrix["axes"]["transformers"]
    exporters: Sequence[str] = matrix["axes"]["exporter"]
    fig, axes = plt.subplots(
        1,
        len(exporters),
        figsize=(1.25 * len(torch_axis) * len(exporters) + 1.5, 0.62 * len(tf_axis) + 2.2),
        squeeze=False,
    )
    legend = colours(matrix)
    for ax, exporter in zip(axes[0], exporters, strict=True):
        cells = grid(matrix, exporter)
        for row, tf in enumerate(tf_axis):
            for col, tv in enumerate(torch_axis):
                cell = cells.get((tf, tv), {"outcome": "not_run"})
                colour = cell_colour(cell, legend) if cell["outcome"] != "not_run" else OUTCOME_COLOURS["not_run"]
                ax.add_patch(plt.Rectangle((col, row), 1, 1, facecolor=colour, edgecolor="#555555", lw=0.6))
                text_colour = "white" if colour in DARK_SHADES else "black"
                ax.text(col + 0.5, row + 0.5, cell_label(cell), ha="center", va="center", fontsize=6, color=text_colour)
        ax.set_xlim(0, len(torch_axis))
        ax.set_ylim(len(tf_axis), 0)
        ax.set_xticks([i + 0.5 for i in range(len(torch_axis))], list(torch_axis), fontsize=8)
        ax.set_yticks([i + 0.5 for i in range(len(tf_axis))], list(tf_axis), fontsize=8)
        ax.set_xlabel("torch")
        ax.set_ylabel("transformers")
        ax.set_title(f"exporter: {exporter}", fontsize=10)
        ax.tick_params(length=0)
    handles = [Patch(facecolor=c, edgecolor="#555555", label=label) for label, c in legend.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=8, frameon=False)
    fig.suptitle("Tiny GPT-2 exported under CPU bf16 autocast, loaded and run by onnxruntime (CPU)", fontsize=10)
    fig.tight_layout(rect=(0, 0.04 * (1 + len(handles) // 3), 1, 0.96))
    written = save_figure(fig, out_stem)
    plt.close(fig)
    return written


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
    return {t: _ranges(v, tf_axis) for t, v in sorted(found.items(), key=lambda kv: _version_key(kv[0]))}


def conclusions(matrix: dict[str, Any]) -> list[str]:
    """Plain-language findings computed from the cells (one string per finding)."""
    lines: list[str] = []
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(matrix["counts"].items()))
    lines.append(f"{len(matrix['cells'])} cells recorded ({counts}).")
    for exporter in matrix["axes"]["exporter"]:
        for outcome, verb in (
            ("where_type_error", "fail with the Where type error"),
            ("accepted", "are accepted (exported, loaded and run)"),
        ):
            stacks = by_outcome(matrix, exporter, outcome)
            where = "; ".join(f"torch {t} with transformers {r}" for t, r in stacks.items()) or "none"
            lines.append(f"[{exporter}] stacks that {verb}: {where}.")
        bindings = {
            (c["where_error"]["node"], *c["where_error"]["types"])
            for c in matrix["cells"]
            if c["exporter"] == exporter and c["outcome"] == "where_type_error"
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
                for t, v in sorted(stacks.items(), key=lambda kv: _version_key(kv[0]))
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
            if cell["exporter"] == exporter and cell["outcome"] == "other_error" and found:
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
            {tf for (tf, _), c in cells.items() if c["outcome"] == "where_type_error"}, key=_version_key
        )
        if not failing_tf:
            continue
        instead: dict[str, set[str]] = defaultdict(set)
        for (tf, tv), cell in cells.items():
            if tf in failing_tf and cell["outcome"] != "where_type_error":
                instead[tv].add(cell_label(cell, width=80).replace("\n", " "))
        failing = _ranges(failing_tf, matrix["axes"]["transformers"])
        for tv in sorted(instead, key=_version_key):
            labels = "; ".join(sorted(instead[tv]))
            lines.append(f"[{exporter}] torch {tv}, transformers {failing} (Where error on other torch): {labels}.")
    return lines
