"""The remedies study's figure, drawn from its summary (`where223.study.remedies.analysis`): refusal classes (rows,
each with its stack, recipe and exporter) by what happened to the members rerun (columns): refused again as in the
class sweep, accepted by ONNX Runtime after `where223 repair`, matching eager after it, accepted after the
export-time fixes, matching eager after them. Each cell is a count of model types; its shade is that count's share
of the members rerun, so a full column reads at a glance. A count matching eager leaves out the comparisons that could
not have failed (`not judged`, `where223.study.judging`) and says in brackets how many of it ran on ONNX Runtime's own
kernels (the rest were emulated: `missing_kernel`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, TEXT_SIZE, new_figure, save_figure
from where223.study.classes.figure import RECIPE_SHORT, class_name

COLUMNS = (("rerun", "rerun"), ("refused_before", "refused\nagain"), ("repair_accepted", "repair\naccepted"),
           ("repair_within_tolerance", "repair\n≈ eager"), ("fix_accepted", "fix\naccepted"),
           ("fix_within_tolerance", "fix\n≈ eager"), ("pair_within_tolerance", "repair\n≈ fix"))  # fmt: skip
ROWS = 18
ROW_INCHES = 0.26
COLUMN_INCHES = 0.72


def row_label(entry: dict[str, Any]) -> str:
    """`Conv: bfloat16 refused — today, model bf16, dynamo (39)`."""
    return (f"{class_name(entry)} — {entry['stack']}, {RECIPE_SHORT.get(entry['recipe'], entry['recipe'])}, "
            f"{entry['exporter']} ({entry['members']})")


def rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The classes with members rerun, the most rerun first (at most ROWS)."""
    found = [entry for entry in summary["classes"] if entry["rerun"]]
    return sorted(found, key=lambda e: (-e["rerun"], -e["members"], row_label(e)))[:ROWS]


def label(entry: dict[str, Any], key: str) -> str:
    """A cell's text: the count, and for a count matching eager how many of it ran on ONNX Runtime's own kernels."""
    prefix = key.removesuffix("_within_tolerance")
    ort = entry.get(f"{prefix}_within_on_ort_kernels") if key in ("repair_within_tolerance",
                                                                  "fix_within_tolerance") else None
    return f"{entry[key]} ({ort})" if ort is not None and entry[key] else str(entry[key])


def draw(summary: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw classes x outcomes with counts and save `<out_stem>.png` and `.svg`."""
    shown = rows(summary)
    fig = new_figure(figsize=(4.6 + COLUMN_INCHES * len(COLUMNS), 1.9 + ROW_INCHES * max(len(shown), 1)))
    ax = fig.subplots()
    for r, entry in enumerate(shown):
        for c, (key, _) in enumerate(COLUMNS):
            count = entry[key]
            share = count / entry["rerun"] if entry["rerun"] else 0.0
            colour = (1 - 0.7 * share, 1 - 0.35 * share, 1 - 0.6 * share) if c else (0.93, 0.93, 0.93)
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colour, edgecolor="#999999", lw=0.4))
            ax.text(c + 0.5, r + 0.5, label(entry, key), ha="center", va="center", fontsize=LABEL_SIZE,
                    color="white" if c and share > 0.7 else "black")  # fmt: skip
    ax.set_xlim(0, len(COLUMNS))
    ax.set_ylim(max(len(shown), 1), 0)
    ax.set_xticks([i + 0.5 for i in range(len(COLUMNS))], [label for _, label in COLUMNS], fontsize=TEXT_SIZE)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(shown))], [row_label(e) for e in shown], fontsize=TEXT_SIZE)
    ax.tick_params(length=0)
    fig.suptitle("Refused model types rerun with `where223 repair` and with the export-time fixes (ONNX Runtime CPU)",
                 fontsize=HEADING_SIZE)  # fmt: skip
    height = fig.get_figheight()
    fig.text(0.01, 0.01, "≈ eager: within tolerance, not-judged comparisons (constant eager outputs, a control that "
             "did not fail) left out; (n): of those, on ONNX Runtime's own kernels, the rest emulated",
             fontsize=TEXT_SIZE, ha="left", va="bottom")  # fmt: skip
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1 - 0.3 / height), h_pad=0.2)
    return save_figure(fig, out_stem)
