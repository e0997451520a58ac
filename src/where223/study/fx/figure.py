"""The torch.fx study's figure, drawn from its record (`where223.study.fx.analysis`): one row per transformers
release and GPT-2 configuration (and the autocast-region probe, once: the same module in every release), one
column per autocast policy, each cell the traced module's outcome against eager (bitwise eager's logits, other
values, another dtype, a failed run, or not traced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, TEXT_SIZE, new_figure, save_figure
from where223.study.fx.analysis import (
    AGREES,
    DTYPES_DIFFER,
    FAILED,
    NOT_TRACED,
    POLICY_NAMES,
    VALUES_DIFFER,
    cells,  # fmt: skip
)
from where223.study.fx.record import PROBE

COLOURS = {AGREES: "#b7dfb9", VALUES_DIFFER: "#f6d68a", DTYPES_DIFFER: "#ee9a8f", FAILED: "#c9c9c9",
           NOT_TRACED: "#e6e6e6"}  # fmt: skip


def draw(record: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw releases x policies and save `<out_stem>.png` and `.svg`."""
    first = record["settings"]["releases"][0]
    rows = [row for row in cells(record) if row["model"] != PROBE or row["release"] == first]
    for row in rows:
        gpt2 = f"transformers {row['release']}, GPT-2 {row['model']}"
        row["label"] = row["model"] if row["model"] == PROBE else gpt2
    labels = sorted(dict.fromkeys(row["label"] for row in rows), key=lambda label: label == PROBE)  # probe last
    policies = list(record["settings"]["policies"])
    fig = new_figure(figsize=(4.2 + 2.6 * len(policies), 1.1 + 0.42 * len(labels)))
    ax = fig.subplots()
    for row in rows:
        r = labels.index(row["label"])
        c = policies.index(row["policy"])
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=COLOURS[row["outcome"]], edgecolor="#999999", lw=0.5))
        detail = "" if row["max_abs_diff"] in (None, 0.0) else f"\nmax |Δ| {row['max_abs_diff']:.2g}"
        ax.text(c + 0.5, r + 0.5, row["outcome"] + detail, ha="center", va="center", fontsize=LABEL_SIZE)
    ax.set_xlim(0, len(policies))
    ax.set_ylim(len(labels), 0)
    ax.set_xticks([i + 0.5 for i in range(len(policies))],
                  [POLICY_NAMES.get(policy, policy).replace(" (", "\n(") for policy in policies], fontsize=TEXT_SIZE)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(labels))], labels, fontsize=TEXT_SIZE)
    ax.tick_params(length=0)
    fig.suptitle("Traced by torch.fx (GPT-2: transformers' tracer), run beside eager", fontsize=HEADING_SIZE)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / height))
    return save_figure(fig, out_stem)
