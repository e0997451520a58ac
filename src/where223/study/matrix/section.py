"""Section 5 of the write-up: which stacks have the bug, from `matrix.json` (records only)."""

from __future__ import annotations

from where223.study.matrix import analysis as matrix_analysis
from where223.study.report import Report


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
