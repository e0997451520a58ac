"""Every write-up figure reads at page width: its smallest text, shown at most 900 px wide, is at least 8 px tall.

The height comes from the font size `save_figure` records in each PNG, its dpi and the PNG's pixel width. The
control is the divergence strip as it was drawn before (one column per tensor, 2193 px wide, 6 pt tick labels):
at 900 px its labels were about 5 px tall.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from matplotlib.colors import ListedColormap
from PIL import Image

from where223.figures import MIN_TEXT_PX, displayed_text_px, new_figure, save_figure
from where223.pipeline.paths import OUTPUTS

# Forty tensor names of an attention block, on two layers: the divergence strip's shape, on synthetic marks.
OPS = [f"attn/Op_{k}" for k in range(40)]
MARKS = [[(layer + k) % 3 for k in range(len(OPS))] for layer in range(2)]
RUN = OUTPUTS / "tiny-cpu-bf16-onnx_export"


def _strip_as_drawn_before(path_stem: Path) -> Path:
    """The pre-fix divergence figure: layers as rows, one 0.35 in column per tensor, 6 pt rotated names."""
    figure = new_figure((2.0 + 0.35 * len(OPS), 1.5 + 0.35 * len(MARKS)))
    ax = figure.add_subplot(1, 1, 1)
    ax.imshow(MARKS, cmap=ListedColormap(["#55a868", "#d62728", "#dddddd"]), vmin=0, vmax=2)
    ax.set_xticks(range(len(OPS)), OPS, rotation=90, fontsize=6)
    ax.set_yticks(range(len(MARKS)), ["layer 0", "layer 1"], fontsize=7)
    ax.set_title("attention block: graph dtype vs eager dtype, by source line", fontsize=9)
    save_figure(figure, path_stem)
    return path_stem.with_suffix(".png")


def test_the_old_divergence_strip_is_the_failing_control(tmp_path):
    png = _strip_as_drawn_before(tmp_path / "divergence")
    assert Image.open(png).width > 1800  # 2193 px with its legend
    assert displayed_text_px(png) < MIN_TEXT_PX


def test_the_same_marks_drawn_as_now_are_legible(tmp_path):
    from where223.graph.draw import MARK_COLOURS, _draw_grid

    transposed = [list(row) for row in zip(*MARKS, strict=True)]
    png = _draw_grid(transposed, OPS, [0, 1], MARK_COLOURS, "synthetic marks", tmp_path / "divergence")[0]
    assert displayed_text_px(png) >= MIN_TEXT_PX


def test_a_png_not_saved_by_save_figure_is_refused(tmp_path):
    Image.new("RGB", (100, 50)).save(tmp_path / "plain.png")
    with pytest.raises(ValueError, match="no where223:smallest-text-pt recorded"):
        displayed_text_px(tmp_path / "plain.png")


def test_figures_drawn_by_the_current_code_from_the_committed_records_are_legible(tmp_path):
    """What `make run` will publish: every write-up figure redrawn from the committed models and records."""
    from where223.graph import draw
    from where223.study.matrix import figure as matrix_figure
    from where223.study.variants import figure as variant_figure

    where = "/transformer/h.0/attn/Where"
    model, fixed, repaired = RUN / "model.onnx", RUN / "fix-4.26" / "model.onnx", RUN / "fix-4.26" / "repaired.onnx"
    found = json.loads((RUN / "graph" / "divergence.json").read_text())
    drawn = [
        *draw.draw_neighbourhood(model, None, 2, tmp_path / "neighbourhood"),
        *draw.draw_node_marks(model, {d["graph_node"]: "diverges" for d in found["divergences"]},
                              tmp_path / "divergence", title="graph dtype vs eager dtype, by source line"),
        *draw.draw_precision_summary(model, tmp_path / "precision"),
        *draw.draw_before_after(model, fixed, where, where, tmp_path / "before_after"),
        *draw.draw_before_after(repaired, fixed, where, where, tmp_path / "repaired_vs_patched"),
        *variant_figure.draw(json.loads((OUTPUTS / "variants" / "variants-cpu.json").read_text()), tmp_path / "v"),
        *matrix_figure.draw(json.loads((OUTPUTS / "matrix" / "matrix.json").read_text()), tmp_path / "heatmap"),
    ]
    sizes = {png.name: round(displayed_text_px(png), 1) for png in drawn if png.suffix == ".png"}
    assert len(sizes) == 7
    assert {name: px for name, px in sizes.items() if px < MIN_TEXT_PX} == {}


def write_up_figures(report: Path = OUTPUTS / "REPORT.md") -> list[Path]:
    """The PNGs the write-up shows."""
    return [report.parent / link for link in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report.read_text())]


def test_the_committed_write_up_figures_are_legible():
    figures = write_up_figures()
    assert len(figures) >= 8
    sizes = {str(png.relative_to(OUTPUTS)): round(displayed_text_px(png), 1) for png in figures}
    assert {name: px for name, px in sizes.items() if px < MIN_TEXT_PX} == {}
