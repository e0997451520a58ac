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
from matplotlib.text import Text

from where223.files import atomic_path
from where223.outcomes import Outcome

PNG_DPI = 150
# Font sizes in points, smallest first. A figure is read at most DISPLAY_WIDTH_PX wide (GitHub's Markdown column,
# an HTML export's cell), where its smallest text must stay MIN_TEXT_PX tall: at PNG_DPI a figure may then be
# LABEL_SIZE * 12.5 / 8 inches wide (about 10.9 in) before LABEL_SIZE text gets too small.
LABEL_SIZE = 7  # labels inside a drawing, such as heatmap cells and edge dtypes
TEXT_SIZE = 8  # annotations, legends, axis ticks, node names
TITLE_SIZE = 9  # the title of one axes
HEADING_SIZE = 10  # the title of a whole study figure
DISPLAY_WIDTH_PX = 900
MIN_TEXT_PX = 8.0
# PNG text chunk recording the smallest font size drawn, so a saved figure's legibility can be checked from the file
SMALLEST_TEXT_KEY = "where223:smallest-text-pt"
# The one colour of each sweep outcome (the matrix heatmap shades the other refusals by their label instead).
OUTCOME_COLOURS: dict[str, str] = {
    Outcome.ACCEPTED: "#4daf4a",
    Outcome.WHERE_TYPE_ERROR: "#e41a1c",
    Outcome.TYPE_ERROR: "#ff7f00",
    Outcome.MISSING_KERNEL: "#fdd0a2",
    Outcome.OTHER_ERROR: "#c8a600",
    Outcome.NOT_EXPORTED: "#9e9ac8",
    Outcome.NOT_FED: "#d9d9d9",
    Outcome.NOT_BUILT: "#bdbdbd",
    Outcome.NOT_APPLICABLE: "#bdbdbd",
    Outcome.NOT_RUN: "#ffffff",
    Outcome.TIMEOUT: "#ffffff",
    Outcome.CRASHED: "#ffffff",
}
# svg ids are derived from this salt rather than from a random one, so the same figure gives the same bytes
_SVG_HASH_SALT = "where223"


def new_figure(figsize: tuple[float, float]) -> Figure:
    """An empty figure on its own Agg canvas, so that layout (tight_layout) measures text as it is saved."""
    figure = Figure(figsize=figsize)
    FigureCanvasAgg(figure)
    return figure


def smallest_text_pt(figure: Figure) -> float:
    """The smallest font size, in points, of the visible non-empty text of `figure` (0.0 when it has none)."""
    sizes = [
        text.get_fontsize()
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and (text.axes is None or text.axes.get_visible())
    ]
    return float(min(sizes, default=0.0))


def save_figure(figure: Figure, path_stem: str | os.PathLike[str]) -> list[Path]:
    """Write `figure` as PATH_STEM.png and PATH_STEM.svg, byte-stable across runs (no date, fixed ids).

    The PNG records its smallest font size (SMALLEST_TEXT_KEY), which `displayed_text_px` reads back. Each file
    is written atomically (`where223.files.atomic_path`): a symlink at either path is replaced, never followed.
    """
    FigureCanvasAgg(figure)
    paths = [Path(f"{os.fspath(path_stem)}.png"), Path(f"{os.fspath(path_stem)}.svg")]
    with matplotlib.rc_context({"svg.hashsalt": _SVG_HASH_SALT}):
        with atomic_path(paths[0]) as partial:
            figure.savefig(
                partial,
                format="png",
                dpi=PNG_DPI,
                bbox_inches="tight",
                metadata={SMALLEST_TEXT_KEY: f"{smallest_text_pt(figure):g}"},
            )
        with atomic_path(paths[1]) as partial:
            figure.savefig(partial, format="svg", bbox_inches="tight", metadata={"Date": None})
    return paths


def displayed_text_px(png: str | os.PathLike[str], display_width_px: int = DISPLAY_WIDTH_PX) -> float:
    """How tall, in screen pixels, a saved figure's smallest text is when shown at most `display_width_px` wide.

    Reads the PNG's width and the font size `save_figure` recorded in it; raises ValueError for a PNG without it.
    """
    from PIL import Image

    with Image.open(png) as image:
        recorded = image.info.get(SMALLEST_TEXT_KEY)
        width = image.width
    if recorded is None:
        raise ValueError(f"{png}: no {SMALLEST_TEXT_KEY} recorded; draw it with where223.figures.save_figure")
    return float(recorded) * PNG_DPI / 72 * min(1.0, display_width_px / width)


def loss_curves(series: dict[str, list[float]], path_stem: str | os.PathLike[str], title: str) -> list[Path]:
    """Training loss per step, one line per run; markers so that coinciding curves stay visible."""
    figure = new_figure(figsize=(5.5, 3.5))
    ax = figure.add_subplot(1, 1, 1)
    for (label, losses), marker, style in zip(series.items(), "os^D", ["-", "--", ":", "-."], strict=False):
        ax.plot(range(1, len(losses) + 1), losses, marker=marker, linestyle=style, label=label, fillstyle="none")
    ax.set_xlabel("optimizer step", fontsize=TEXT_SIZE)
    ax.set_ylabel("loss", fontsize=TEXT_SIZE)
    ax.tick_params(labelsize=TEXT_SIZE)
    ax.set_title(title, fontsize=TITLE_SIZE)
    ax.legend(fontsize=TEXT_SIZE)
    return save_figure(figure, path_stem)
