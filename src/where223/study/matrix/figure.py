"""The version-matrix heatmap drawn from `outputs/matrix/matrix.json`.

Everything shown is computed from the recorded cells: outcome by colour, a short label of each cell's first error
(`where223.study.matrix.analysis`, which also states the conclusions), one panel per exporter; nothing is typed
by hand.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.patches import Patch, Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, OUTCOME_COLOURS, TEXT_SIZE, new_figure, save_figure
from where223.outcomes import Outcome
from where223.study.matrix.analysis import cell_label, grid

# The other refusals are told apart by shade of orange, one per distinct label (in order of first appearance).
SHADED_OUTCOMES: tuple[str, ...] = (Outcome.TYPE_ERROR, Outcome.MISSING_KERNEL, Outcome.OTHER_ERROR)
ERROR_SHADES: tuple[str, ...] = ("#ff9f40", "#fdd0a2", "#c8a600", "#fdae6b", "#8c510a", "#feedde")
DARK_SHADES = frozenset({"#8c510a", "#e41a1c"})
CELL_CHARS = 17  # the widest line of a cell's label that fits its cell at LABEL_SIZE


def _shade_key(cell: dict[str, Any]) -> str:
    """The legend entry of a cell of a shaded outcome: the outcome and the cell's label."""
    return f"{cell['outcome']}: {cell_label(cell).replace(chr(10), ' ')}"


def colours(matrix: dict[str, Any]) -> dict[str, str]:
    """Legend label -> colour: one per outcome present, one shade per distinct label of the other refusals."""
    present = {c["outcome"] for c in matrix["cells"]}
    shaded = dict.fromkeys(_shade_key(c) for c in matrix["cells"] if c["outcome"] in SHADED_OUTCOMES)
    legend = {o: OUTCOME_COLOURS[o] for o in (Outcome.ACCEPTED, Outcome.WHERE_TYPE_ERROR) if o in present}
    legend.update({key: ERROR_SHADES[i % len(ERROR_SHADES)] for i, key in enumerate(shaded)})
    legend.update({o: OUTCOME_COLOURS[o] for o in Outcome if not o.judged and o in present})
    return legend


def cell_colour(cell: dict[str, Any], legend: dict[str, str]) -> str:
    """The fill of one cell, looked up in `colours()`."""
    if cell["outcome"] in SHADED_OUTCOMES:
        return legend[_shade_key(cell)]
    return legend.get(cell["outcome"], OUTCOME_COLOURS.get(cell["outcome"], "#ffffff"))


def draw(matrix: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw the heatmap (one panel per exporter) and save it as `<out_stem>.png` and `.svg`."""
    torch_axis: Sequence[str] = matrix["axes"]["torch"]
    tf_axis: Sequence[str] = matrix["axes"]["transformers"]
    exporters: Sequence[str] = matrix["axes"]["exporter"]
    # panels stacked, not side by side: side by side the cell labels would shrink below legibility at page width
    legend = colours(matrix)
    legend_rows = -(-len(legend) // 2)
    panel_height = 0.5 * len(tf_axis) + 0.9
    fig = new_figure(figsize=(1.15 * len(torch_axis) + 1.6, panel_height * len(exporters) + 0.25 * legend_rows + 0.6))
    axes = fig.subplots(len(exporters), 1, squeeze=False)
    for ax, exporter in zip(axes[:, 0], exporters, strict=True):
        cells = grid(matrix, exporter)
        for row, tf in enumerate(tf_axis):
            for col, tv in enumerate(torch_axis):
                cell = cells.get((tf, tv), {"outcome": Outcome.NOT_RUN})
                colour = cell_colour(cell, legend)
                ax.add_patch(Rectangle((col, row), 1, 1, facecolor=colour, edgecolor="#555555", lw=0.6))
                text_colour = "white" if colour in DARK_SHADES else "black"
                label = "\n".join(textwrap.fill(line, CELL_CHARS) for line in cell_label(cell).splitlines())
                ax.text(col + 0.5, row + 0.5, label, ha="center", va="center", fontsize=LABEL_SIZE, color=text_colour)
        ax.set_xlim(0, len(torch_axis))
        ax.set_ylim(len(tf_axis), 0)
        ax.set_xticks([i + 0.5 for i in range(len(torch_axis))], list(torch_axis), fontsize=TEXT_SIZE)
        ax.set_yticks([i + 0.5 for i in range(len(tf_axis))], list(tf_axis), fontsize=TEXT_SIZE)
        ax.set_xlabel("torch", fontsize=TEXT_SIZE)
        ax.set_ylabel("transformers", fontsize=TEXT_SIZE)
        ax.set_title(f"exporter: {exporter}", fontsize=HEADING_SIZE)
        ax.tick_params(length=0)
    handles = [Patch(facecolor=c, edgecolor="#555555", label=label) for label, c in legend.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 2), fontsize=TEXT_SIZE, frameon=False)
    title = "Tiny GPT-2 exported under CPU bf16 autocast,\nloaded and run by onnxruntime (CPU)"
    fig.suptitle(title, fontsize=HEADING_SIZE)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.25 * legend_rows + 0.1) / height, 1, 1 - 0.45 / height))
    return save_figure(fig, out_stem)
