"""The architecture x outcome figure drawn from the sweep's records (`where223.study.architectures.analysis`).

One row per model type, one column per transformers release; the colour is the outcome, the label the operator
ONNX Runtime refused (or the stage that failed). Many rows make a tall figure, never a smaller font.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.patches import Patch, Rectangle

from where223.figures import HEADING_SIZE, LABEL_SIZE, OUTCOME_COLOURS, TEXT_SIZE, new_figure, save_figure
from where223.graph.ort import INVALID_TYPE
from where223.outcomes import Outcome
from where223.study.architectures.analysis import refused_operator

DARK = frozenset({"#e41a1c"})
ROW_INCHES = 0.19
LABEL_CHARS = 34


def cell_label(record: dict[str, Any]) -> str:
    """The refused operator and its types, the missing kernel's operator, or the failed stage's exception type."""
    binding = (record.get("ort") or {}).get("type_binding")
    if binding:
        types = "/".join(t.removeprefix("tensor(").removesuffix(")") for t in binding.get("bound_types", []))
        return f"{binding['op_type']} {types}"[:LABEL_CHARS]
    message = (record.get("ort") or {}).get("message") or ""
    operator = refused_operator(record)
    if record.get("outcome") == Outcome.MISSING_KERNEL and operator:
        return f"no kernel: {operator}"[:LABEL_CHARS]
    refused_type = INVALID_TYPE.search(message)
    if operator and refused_type:  # a type outside the operator's allowed set
        return f"{operator}: no {refused_type['type']}"[:LABEL_CHARS]
    error = record.get("error") or {}
    if error:
        return str(error.get("type", "")).rsplit(".", 1)[-1][:LABEL_CHARS]
    return ""


def draw(rows: Sequence[dict[str, Any]], out_stem: Path) -> list[Path]:
    """Draw architecture x release, coloured by outcome, and save `<out_stem>.png` and `.svg`."""
    releases = sorted({r["release"] for r in rows})
    types = sorted({r["model_type"] for r in rows})
    by_key = {(r["model_type"], r["release"]): r for r in rows}
    present = [o for o in OUTCOME_COLOURS if any(r.get("outcome") == o for r in rows)]
    fig = new_figure(figsize=(2.3 * len(releases) + 1.8, ROW_INCHES * len(types) + 1.6))
    ax = fig.subplots()
    for row, model_type in enumerate(types):
        for col, release in enumerate(releases):
            record = by_key.get((model_type, release))
            outcome = record.get("outcome") if record else None
            colour = OUTCOME_COLOURS.get(str(outcome), "#ffffff")
            ax.add_patch(Rectangle((col, row), 1, 1, facecolor=colour, edgecolor="#777777", lw=0.4))
            label = cell_label(record) if record else "not run"
            ax.text(
                col + 0.5, row + 0.5, label, ha="center", va="center", fontsize=LABEL_SIZE,
                color="white" if colour in DARK else "black",
            )  # fmt: skip
    ax.set_xlim(0, len(releases))
    ax.set_ylim(len(types), 0)
    ax.set_xticks([i + 0.5 for i in range(len(releases))], [f"transformers {r}" for r in releases], fontsize=TEXT_SIZE)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(types))], types, fontsize=TEXT_SIZE)
    ax.tick_params(length=0)
    handles = [Patch(facecolor=OUTCOME_COLOURS[o], edgecolor="#555555", label=str(o)) for o in present]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=TEXT_SIZE, frameon=False)
    fig.suptitle(
        f"{len(types)} architectures exported under CPU bf16 autocast (training, opset 17),\n"
        "judged by ONNX Runtime (CPU): outcome and refused operator",
        fontsize=HEADING_SIZE,
    )
    height = fig.get_figheight()
    legend_rows = -(-len(handles) // 3)
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.1) / height, 1, 1 - 0.5 / height))
    return save_figure(fig, out_stem)
