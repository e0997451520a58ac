"""The torch.fx study's figure, drawn from its record (`where223.study.fx.analysis`): one row per transformers
release and GPT-2 configuration (and the autocast-region probe, once: the same module in every release), one
column per comparison and autocast policy (forward logits in eval mode, then training), each cell the traced
module's outcome against eager (bitwise eager's, other values, another dtype, a failed run, not traced, not judged
or not measured); the probe computes no loss, so it has no training cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, TEXT_SIZE, new_figure, save_figure
from where223.study.fx.analysis import (
    AGREES,
    DTYPES_DIFFER,
    FAILED,
    FORWARD,
    NOT_JUDGED,
    NOT_MEASURED,
    NOT_TRACED,
    POLICY_NAMES,
    VALUES_DIFFER,
    cells,
    training_cells,  # fmt: skip
)
from where223.study.fx.record import PROBE

COLOURS = {AGREES: "#b7dfb9", VALUES_DIFFER: "#f6d68a", DTYPES_DIFFER: "#ee9a8f", FAILED: "#c9c9c9",
           NOT_TRACED: "#e6e6e6", NOT_JUDGED: "#d5d9ef", NOT_MEASURED: "#eeeeee"}  # fmt: skip


def draw(record: dict[str, Any], out_stem: Path) -> list[Path]:
    """Draw rows x (comparison, policy) and save `<out_stem>.png` and `.svg`."""
    first = record["settings"]["releases"][0]
    rows = [row for row in cells(record) + training_cells(record) if row["model"] != PROBE or row["release"] == first]
    for row in rows:
        gpt2 = f"transformers {row['release']}, GPT-2 {row['model']}"
        row["label"] = row["model"] if row["model"] == PROBE else gpt2
    labels = sorted(dict.fromkeys(row["label"] for row in rows), key=lambda label: label == PROBE)  # probe last
    columns = list(dict.fromkeys((row["kind"], row["policy"]) for row in rows))
    fig = new_figure(figsize=(3.4 + 1.6 * len(columns), 1.2 + 0.46 * len(labels)))  # at most 10.9 in: legible
    ax = fig.subplots()
    for row in rows:
        r = labels.index(row["label"])
        c = columns.index((row["kind"], row["policy"]))
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=COLOURS[row["outcome"]], edgecolor="#999999", lw=0.5))
        detail = "" if row["max_abs_diff"] in (None, 0.0) else f"\nmax |Δ| {row['max_abs_diff']:.2g}"
        ax.text(c + 0.5, r + 0.5, row["outcome"] + detail, ha="center", va="center", fontsize=LABEL_SIZE)
    drawn = {(labels.index(row["label"]), columns.index((row["kind"], row["policy"]))) for row in rows}
    for r in range(len(labels)):
        for c in range(len(columns)):
            if (r, c) not in drawn:  # the probe computes no loss: nothing trained
                ax.text(c + 0.5, r + 0.5, "no loss: not trained", ha="center", va="center", fontsize=LABEL_SIZE,
                        color="#777777")  # fmt: skip
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(labels), 0)
    names = [("forward, eval: " if kind == FORWARD else "training: ") + POLICY_NAMES.get(policy, policy)
             for kind, policy in columns]  # fmt: skip
    ax.set_xticks([i + 0.5 for i in range(len(columns))], [name.replace(" (", "\n(").replace(": ", ":\n", 1)
                                                            for name in names], fontsize=TEXT_SIZE)  # fmt: skip
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(labels))], labels, fontsize=TEXT_SIZE)
    ax.tick_params(length=0)
    fig.suptitle("Traced by torch.fx (GPT-2: transformers' tracer), run and trained beside eager",
                 fontsize=HEADING_SIZE)  # fmt: skip
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / height))
    return save_figure(fig, out_stem)
