"""Figures on matplotlib's object API only: one byte-stable `save_figure` and the shared style.

Every figure is a `matplotlib.figure.Figure()` drawn on its own Agg canvas: no pyplot, no global figure
manager, and the backend of the process (a Jupyter kernel's inline backend, say) is never switched.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PNG_DPI = 150
# Font sizes in points, smallest first.
LABEL_SIZE = 6  # labels inside a drawing, such as heatmap cells
TEXT_SIZE = 8  # annotations, legends, axis ticks of study figures
TITLE_SIZE = 9  # the title of one axes
HEADING_SIZE = 10  # the title of a whole study figure
# svg ids are derived from this salt rather than from a random one, so the same figure gives the same bytes
_SVG_HASH_SALT = "where223"


def new_figure(figsize: tuple[float, float]) -> Figure:
    """An empty figure on its own Agg canvas, so that layout (tight_layout) measures text as it is saved."""
    figure = Figure(figsize=figsize)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path_stem: str | os.PathLike[str]) -> list[Path]:
    """Write `figure` as PATH_STEM.png and PATH_STEM.svg, byte-stable across runs (no date, fixed ids)."""
    FigureCanvasAgg(figure)
    paths = [Path(f"{os.fspath(path_stem)}.png"), Path(f"{os.fspath(path_stem)}.svg")]
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.hashsalt": _SVG_HASH_SALT}):
        figure.savefig(paths[0], dpi=PNG_DPI, bbox_inches="tight")
        figure.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})
    return paths


def loss_curves(series: dict[str, list[float]], path_stem: str | os.PathLike[str], title: str) -> list[Path]:
    """Training loss per step, one line per run; markers so that coinciding curves stay visible."""
    figure = new_figure(figsize=(5.5, 3.5))
    ax = figure.add_subplot(1, 1, 1)
    for (label, losses), marker, style in zip(series.items(), "os^D", ["-", "--", ":", "-."], strict=False):
        ax.plot(range(1, len(losses) + 1), losses, marker=marker, linestyle=style, label=label, fillstyle="none")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(title, fontsize=TITLE_SIZE)
    ax.legend(fontsize=TEXT_SIZE)
    return save_figure(figure, path_stem)
