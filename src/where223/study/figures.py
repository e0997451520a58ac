"""Study figures drawn from recorded numbers (PNG and SVG, headless)."""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.figure import Figure

from where223.graph.draw import save_figure


def loss_curves(series: dict[str, list[float]], path_stem: str | os.PathLike[str], title: str) -> list[Path]:
    """Training loss per step, one line per run; markers so that coinciding curves stay visible."""
    figure = Figure(figsize=(5.5, 3.5))
    ax = figure.add_subplot(1, 1, 1)
    for (label, losses), marker, style in zip(series.items(), "os^D", ["-", "--", ":", "-."], strict=False):
        ax.plot(range(1, len(losses) + 1), losses, marker=marker, linestyle=style, label=label, fillstyle="none")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(figure, path_stem)
