"""The conversions study's figure, drawn from its record (`where223.study.conversions.analysis`): one row per model of
the corpus, one column per converter, each cell the conversion's outcome (within or beyond tolerance of float32,
refused by ONNX Runtime, the converter failed) and its error against float32 in spacings of the reduced type (the
worst output's); a refused cell says what `where223 repair` made of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.patches import Patch, Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, TEXT_SIZE, new_figure, save_figure
from where223.study.conversions.analysis import (
    BEYOND,
    FAILED,
    NO_KERNEL,
    NOT_COMPARED,
    OTHER,
    OUTCOMES,
    REFUSED,
    TIMEOUT,
    WITHIN,
    cells,
    converters,
    models,
)

COLOURS = {WITHIN: "#b7dfb9", BEYOND: "#f6b26b", NOT_COMPARED: "#d5d9ef", REFUSED: "#ee9a8f", NO_KERNEL: "#f4cccc",
           OTHER: "#e6b8af", FAILED: "#c9c9c9", TIMEOUT: "#e6e6e6"}  # fmt: skip
SHORT = {"refused: types": "refused", "refused: no kernel": "no kernel", "refused: other": "refused (other)",
         "converter failed": "failed", "timed out": "timed out", "accepted, not compared": "not compared"}
REPAIRED = {"repaired, within": "repair: within", "repaired, beyond": "repair: beyond",
            "still refused": "repair: refused", "repair failed": "repair failed",
            "repaired, not compared": "repair: not compared"}  # fmt: skip


def _spacings(value: float | None) -> str:
    if value is None:
        return ""
    if value == float("inf"):
        return "inf sp."
    return f"{value:.2g} sp." if value < 100 else f"{value:.0f} sp."


def label(cell: dict[str, Any]) -> str:
    """A cell's text: the worst output's spacings, or the outcome (and repair's)."""
    if cell["outcome"] in (WITHIN, BEYOND):
        return _spacings(cell["spacings"])
    text = SHORT.get(cell["outcome"], cell["outcome"])
    if cell["repair"]:
        text += "\n" + REPAIRED.get(cell["repair"], cell["repair"])
        if cell["repair"] in ("repaired, within", "repaired, beyond"):
            text += f" {_spacings(cell['repair_spacings'])}"
    return text


def draw(record: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw models x converters and save `<out_stem>.png` and `.svg`."""
    rows, columns = models(record), converters(record)
    fig = new_figure(figsize=(2.6 + 1.35 * len(columns), 1.7 + 0.34 * len(rows)))
    ax = fig.subplots()
    for cell in cells(record):
        if cell["model"] not in rows or cell["converter"] not in columns:
            continue
        r, c = rows.index(cell["model"]), columns.index(cell["converter"])
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=COLOURS[cell["outcome"]], edgecolor="#999999", lw=0.5))
        ax.text(c + 0.5, r + 0.5, label(cell), ha="center", va="center", fontsize=LABEL_SIZE, linespacing=0.95)
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([i + 0.5 for i in range(len(columns))],
                  [name.replace(" ", "\n", 1) if len(name) > 12 else name for name in columns], fontsize=TEXT_SIZE)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(rows))], rows, fontsize=TEXT_SIZE)
    ax.tick_params(length=0)
    shown = {cell["outcome"] for cell in cells(record)}
    handles = [Patch(facecolor=COLOURS[o], edgecolor="#999999", label=o) for o in OUTCOMES if o in shown]
    k = record["tolerance"]["spacings"]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=min(4, len(handles)),
              fontsize=TEXT_SIZE, frameon=False)
    fig.suptitle(f"float32 models converted to float16 / bfloat16: ONNX Runtime's verdict and the worst output's "
                 f"error\nagainst float32 in spacings of the reduced type (tolerance {k})", fontsize=HEADING_SIZE)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))
    return save_figure(fig, out_stem)
