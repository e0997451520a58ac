"""The class study's figure, drawn from its summary (`where223.study.classes.analysis`): refusal classes (rows) by
stack, recipe and exporter (columns), each cell the number of model types refused for that class there.

A class is an operator and what was broken (two types bound to one parameter, a type its schema does not allow,
a type ONNX Runtime's graph check refuses). The columns' headers carry how many model types ONNX Runtime judged
there, so a count reads against its denominator. Rows past `ROWS` are summed into one "other classes" row; the
appendix lists every group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, TEXT_SIZE, new_figure, save_figure
from where223.study.classes.analysis import column_name

ROWS = 16
ROW_INCHES = 0.26
COLUMN_INCHES = 0.78
KIND_SHORT = {"type_binding_conflict": "two types bound", "type_not_allowed": "type not allowed",
              "invalid_type": "type refused", "type_error": "type error"}  # fmt: skip
RECIPE_SHORT = {"cpu_bf16_autocast": "autocast bf16", "bf16_model": "model bf16", "fp16_model": "model fp16"}


def class_name(group: dict[str, Any]) -> str:
    """A group's class: operator and what was broken (for a refused type, which: `Conv: bfloat16 refused`)."""
    if group["kind"] in ("invalid_type", "type_not_allowed") and group.get("types"):
        shown = "/".join(t.removeprefix("tensor(").removesuffix(")") for t in group["types"])
        return f"{group['operator']}: {shown} {'refused' if group['kind'] == 'invalid_type' else 'not allowed'}"
    return f"{group['operator']}: {KIND_SHORT.get(group['kind'], group['kind'])}"


def class_table(summary: dict[str, Any]) -> tuple[list[str], list[str], dict[tuple[str, str], int]]:
    """(classes largest first, columns, {(class, column): model types}) from a summary."""
    columns = [column_name((c["stack"], c["recipe"], c["exporter"])) for c in summary["columns"]]
    cells: dict[tuple[str, str], int] = {}
    for group in summary["groups"]:
        where = column_name((group["stack"], group["recipe"], group["exporter"]))
        key = (class_name(group), where)
        cells[key] = cells.get(key, 0) + group["size"]
    totals: dict[str, int] = {}
    for (name, _), count in cells.items():
        totals[name] = totals.get(name, 0) + count
    classes = sorted(totals, key=lambda name: (-totals[name], name))
    return classes, columns, cells


def draw(summary: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw classes x columns with counts and save `<out_stem>.png` and `.svg`."""
    classes, columns, cells = class_table(summary)
    shown = classes[:ROWS]
    rest = classes[ROWS:]
    rows = shown + (["other classes"] if rest else [])
    fig = new_figure(figsize=(3.2 + COLUMN_INCHES * len(columns), 2.2 + ROW_INCHES * len(rows)))
    ax = fig.subplots()
    peak = max(cells.values(), default=1)
    for r, name in enumerate(rows):
        for c, where in enumerate(columns):
            names = rest if name == "other classes" else [name]
            count = sum(cells.get((n, where), 0) for n in names)
            shade = 0.15 + 0.85 * count / peak if count else 0.0
            colour = (1 - 0.75 * shade, 1 - 0.55 * shade, 1 - 0.25 * shade) if count else (1, 1, 1)
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colour, edgecolor="#999999", lw=0.4))
            if count:
                ax.text(c + 0.5, r + 0.5, str(count), ha="center", va="center", fontsize=LABEL_SIZE,
                        color="white" if shade > 0.6 else "black")  # fmt: skip
    judged = {column_name((c["stack"], c["recipe"], c["exporter"])): summary["counts"][
        column_name((c["stack"], c["recipe"], c["exporter"]))]["judged"] for c in summary["columns"]}
    labels = []
    for where in columns:
        stack, recipe, exporter = where.split("/")
        labels.append(f"{stack}\n{RECIPE_SHORT.get(recipe, recipe)}\n{exporter}\n{judged[where]} judged")
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([i + 0.5 for i in range(len(columns))], labels, fontsize=TEXT_SIZE)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(rows))], rows, fontsize=TEXT_SIZE)
    ax.tick_params(length=0)
    fig.suptitle("Model types ONNX Runtime (CPU) refuses for their types, by class (operator: what was broken)",
                 fontsize=HEADING_SIZE)  # fmt: skip
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / height), h_pad=0.2)
    return save_figure(fig, out_stem)
