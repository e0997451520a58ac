"""The variant study drawn from its JSON record: tracing validity against synchronisation cost.

One point per variant: up the y axis the export's tracing level (refused by ONNX Runtime, accepted with
schema violations, lint clean with a dtype divergence from eager, lint clean with eager's dtypes), along
the x axis the synchronisation cost of a training step (CUDA: cudaStreamSynchronize calls plus
host-to-device copies; elsewhere the host-made tensors per forward, each a copy on a GPU). The colour
and the label give the step time as a ratio to 4.25, the median of same-round ratios (the write-up table's
`paired` column); the colour scale spans at least ±COLOUR_SPAN so that timing noise of a percent or two stays
pale. A hollow marker (explained only when one is drawn) means the eager logits differ from transformers
4.25.1, a † that they differ on the probe model (see `where223.study.variants.analysis`). Nothing is typed by
hand: every mark comes from the record.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize

from where223.figures import HEADING_SIZE, TEXT_SIZE, new_figure, save_figure
from where223.study.variants.analysis import TRACING_LEVELS, sync_cost, tracing_level

# The least half-width of the colour scale around 1.0: a 1.5% difference in step time is noise on a shared CPU
# and must not look strong.
COLOUR_SPAN = 0.10


def sync_axis_label(record: dict[str, Any]) -> str:
    """What the x axis counts, which depends on whether the CUDA counts were measured."""
    rows = list(record["variants"].values())
    if rows and isinstance(rows[0]["syncs_per_step"], (int, float)):
        return "cudaStreamSynchronize + host-to-device copies per training step"
    return "host-made tensors per forward (a host-to-device copy each on a GPU; CUDA syncs not measured)"


def points(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Per exported variant: name, x (sync cost), y (tracing level), step-time ratio, eager equality."""
    return [
        {
            "name": name,
            "x": sync_cost(row),
            "y": tracing_level(row),
            "ratio": row["paired_ratio"],
            "eager_equal": row["eager_equal"],
            "probe_equal": row["eager_equal_probe"],
        }
        for name, row in record["variants"].items()
        if tracing_level(row) is not None
    ]


def draw(record: dict[str, Any], out_stem: str | Path) -> list[Path]:
    """Draw the study into `<out_stem>.png` and `.svg`; the written paths."""
    marks = points(record)
    ratios = [mark["ratio"] for mark in marks]
    spread = max(COLOUR_SPAN, *(abs(r - 1.0) for r in ratios))
    norm = Normalize(vmin=1.0 - spread, vmax=1.0 + spread)
    cmap = matplotlib.colormaps["coolwarm"]
    fig = new_figure(figsize=(9, 5.5))
    ax = fig.subplots()
    in_row: dict[int, int] = defaultdict(int)  # labels already placed in a tracing level's row
    at_point: dict[tuple[float, int], int] = defaultdict(int)  # markers already drawn at one spot
    nudge = (max(mark["x"] for mark in marks) * 1.6 + 2) * 0.012
    for mark in marks:
        colour = cmap(norm(mark["ratio"]))
        x = mark["x"] + nudge * at_point[(mark["x"], mark["y"])]  # side by side, not on top of each other
        at_point[(mark["x"], mark["y"])] += 1
        ax.scatter(
            x,
            mark["y"],
            s=140,
            zorder=3,
            edgecolors=colour if not mark["eager_equal"] else "black",
            facecolors=colour if mark["eager_equal"] else "none",
            linewidths=1.5,
        )
        index = in_row[mark["y"]]
        in_row[mark["y"]] += 1
        ax.annotate(
            f"{mark['name']}{'' if mark['probe_equal'] else ' †'}  (paired x{mark['ratio']:.3f})",
            (x, mark["y"]),
            xytext=(10, (1 if index % 2 == 0 else -1) * 13 * (index // 2 + 1)),
            textcoords="offset points",
            fontsize=TEXT_SIZE,
            va="center",
        )
    ax.set_yticks(range(len(TRACING_LEVELS)), TRACING_LEVELS, fontsize=TEXT_SIZE)
    ax.tick_params(labelsize=TEXT_SIZE)
    ax.set_ylim(-0.6, len(TRACING_LEVELS) - 0.4)
    xmax = max(mark["x"] for mark in marks)
    span = xmax * 1.6 + 2
    ax.set_xlim(-0.04 * span, span)
    ax.set_xlabel(sync_axis_label(record), fontsize=TEXT_SIZE)
    settings, env = record["settings"], record["environment"]
    ax.set_title(
        f"GPT-2 attention variants: tracing validity vs synchronisation\n"
        f"({env['device_name']}, {settings['amp_dtype']}, torch {env['packages']['torch']})",
        fontsize=HEADING_SIZE,
    )
    ax.grid(True, alpha=0.3)
    colourbar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax)
    colourbar.set_label(
        f"paired: step time / {record['baseline']}'s, median of same-round\nratios "
        f"({settings['preset']}, {settings['steps']} rounds; at least ±{COLOUR_SPAN:.0%} shown)",
        fontsize=TEXT_SIZE,
    )
    colourbar.ax.tick_params(labelsize=TEXT_SIZE)
    notes = []  # each only when the figure draws what it explains
    if not all(mark["eager_equal"] for mark in marks):
        notes.append("hollow marker: eager logits differ from transformers 4.25.1 on the preset")
    if not all(mark["probe_equal"] for mark in marks):
        notes.append("†: eager logits differ from 4.25.1 on a probe whose head size has a square root the autocast "
                     "dtype cannot hold")
    fig.text(0.01, 0.01, "\n".join(notes), fontsize=TEXT_SIZE)
    fig.tight_layout(rect=(0, 0.025 * (len(notes) + 1), 1, 1))
    return save_figure(fig, out_stem)
