"""Section 5 of the write-up: which stacks have the bug, from `matrix.json` (records only)."""

from __future__ import annotations

from where223.study._glance import Glance
from where223.study._page import Report
from where223.study.matrix import analysis as matrix_analysis


def section(report: Report) -> None:
    """Section 5: which stacks have the bug."""
    data = report.json("matrix/matrix.json")
    axes = data["axes"]
    with_plain = {c["torch_requested"] for c in data["cells"] if "plain_export" in c}
    plain_torch = sorted(with_plain, key=matrix_analysis.version_key)
    report.add(
        "## 5. Which stacks have the bug",
        "",
        f"The tiny model exported under CPU bf16 autocast with every combination of transformers "
        f"{', '.join(axes['transformers'])} × torch {', '.join(axes['torch'])} × exporter "
        f"{', '.join(axes['exporter'])}: {len(data['cells'])} cells, each in its own environment. Outcomes: "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(data["counts"].items())) + ".",
        "",
        *[f"- {line}" for line in matrix_analysis.conclusions(data)],
        "",
        f"Node names: why the seed's message names `{matrix_analysis.SEED_NODE}` where exports with a newer torch "
        "name a scope such as `/transformer/h.0/attn/Where` (the torchscript cells of torch "
        f"{', '.join(plain_torch) or 'none'} also record torch.onnx.export with its defaults: the plain export):",
        "",
        *[f"- {line}" for line in matrix_analysis.node_naming(data)],
        "",
        "Data: [`matrix/matrix.json`](matrix/matrix.json) and one JSON per cell under `matrix/cells/`, each cell "
        "run by the sweep engine in its own locked stack (`make sweep`, `spaces/matrix.yaml`); notes in "
        "[`matrix/NOTES.md`](matrix/NOTES.md).",
        "",
    )
    report.figure("matrix/heatmap", "Outcome of every transformers × torch × exporter cell", "05_matrix")


def glance(report: Report) -> Glance:
    """Section 5's line for "At a glance": in how many cells of the matrix the seed's error appears, on which
    stacks, and how the other cells fail."""
    path = "matrix/matrix.json"
    data = report.json(path)
    glance = Glance(5, "Which stacks")
    counts = data["counts"]
    seed = [cell for cell in data["cells"] if cell["outcome"] == "where_type_error"]
    stacks = "; ".join(
        f"transformers {release} with torch "
        + ", ".join(sorted({cell["torch_requested"] for cell in seed if cell["transformers_requested"] == release},
                           key=matrix_analysis.version_key))
        + f" ({', '.join(sorted({cell['exporter'] for cell in seed if cell['transformers_requested'] == release}))})"
        for release in sorted({cell["transformers_requested"] for cell in seed}, key=matrix_analysis.version_key))
    others = [f"{glance.quote(counts[outcome], path, f'counts.{outcome}')} {what}"
              for outcome, what in (("type_error", "refuse another type"),
                                    ("missing_kernel", "pass the type check but lack a CPU kernel"))
              if outcome in counts]
    return glance.says(
        f"the seed's `Where` error in {glance.quote(len(seed), path, 'cells.*.outcome', equal='where_type_error')} of "
        f"{glance.quote(len(data['cells']), path, 'cells', reduce='len')} transformers × torch × exporter cells"
        + (f", {stacks}" if stacks else "") + (f"; of the others, {' and '.join(others)}" if others else "") + ".")
