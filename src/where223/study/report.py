"""The reviewer write-up, generated from the recorded JSON: every number quoted, none typed by hand.

`where223 report` (run by `make run` after the notebooks) writes outputs/REPORT.md, Markdown that renders
on GitHub and offline; each figure links the executed notebook that drew it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from where223.pipeline.paths import OUTPUTS
from where223.pipeline.records import read_json, write_atomic

RUNS = ("ort_trainer", "ortmodule", "onnx_export")
SOURCE_RUN = "tiny-cpu-bf16-onnx_export"
FIX = f"{SOURCE_RUN}/fix-4.26"


class Report:
    """Markdown lines built against one outputs folder; links are relative to it."""

    def __init__(self, outputs: Path) -> None:
        self.outputs = outputs
        self.lines: list[str] = []

    def json(self, relative: str) -> dict[str, Any]:
        return read_json(self.outputs / relative)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def figure(self, stem: str, caption: str, notebook: str) -> None:
        """An image with its caption and links to the notebook that drew it (ipynb renders on GitHub)."""
        if not (self.outputs / f"{stem}.png").is_file():
            raise FileNotFoundError(f"{stem}.png is missing from {self.outputs}: run `make run`")
        self.add(
            f"![{caption}]({stem}.png)",
            "",
            f"*{caption}.* Drawn by [`{notebook}`](notebooks/{notebook}.ipynb) "
            f"([HTML](notebooks/{notebook}.html), [SVG]({stem}.svg)).",
            "",
        )

    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"


def _stack(record: dict[str, Any]) -> str:
    packages = record["environment"]["packages"]
    ort = packages.get("onnxruntime-training-cpu") or packages.get("onnxruntime-training")
    return (
        f"Python {record['environment']['python']}, torch {packages['torch']}, transformers "
        f"{packages['transformers']}, onnx {packages['onnx']}, onnxruntime-training {ort}, optimum "
        f"{packages['optimum']}; device: {record['environment']['device_name']}"
    )


def failure(report: Report) -> None:
    """Section 1: the failure, on each path."""
    records = {path: report.json(f"tiny-cpu-bf16-{path}/reproduce.json") for path in RUNS}
    first = records["onnx_export"]
    params = first["parameters"]
    report.add(
        "## 1. The failure",
        "",
        f"GPT-2 (`{params['preset']}` preset, random weights) under {params['amp_dtype']} autocast on "
        f"{params['device']}, opset {params['opset']}. Stack: {_stack(first)}.",
        "",
        "| path | status | node ONNX Runtime names | bound types | raised from |",
        "|---|---|---|---|---|",
    )
    for path, record in records.items():
        binding = (record["error"] or {}).get("type_binding") or {}
        raised = record["call_stack"][-1] if record["call_stack"] else ""
        report.add(
            f"| `{path}` | {record['status']} | `{binding.get('node', '')}` | "
            f"{' vs '.join(binding.get('bound_types', []))} | `{raised}` |"
        )
    trainer = records["ort_trainer"]
    report.add(
        "",
        "ONNX Runtime's words on the `ort_trainer` path (optimum's ORTTrainer, as in the original report):",
        "",
        "```",
        trainer["error"]["ort_message"] if trainer["error"] else "(no error)",
        "```",
        "",
        "Call stack of the exception, outermost first:",
        "",
        "```",
        *trainer["call_stack"],
        "```",
        "",
        "Records: " + ", ".join(f"[`{p}`](tiny-cpu-bf16-{p}/reproduce.json)" for p in RUNS) + ". "
        "Notebook: [`01_reproduce`](notebooks/01_reproduce__path=onnx_export.ipynb).",
        "",
    )


def cause(report: Report) -> None:
    """Section 2: every violation, the source line, and where precision first departs."""
    lint = report.json(f"{SOURCE_RUN}/graph/lint.json")
    blame = report.json(f"{SOURCE_RUN}/graph/blame.json")
    found = report.json(f"{SOURCE_RUN}/graph/divergence.json")
    conflicts = [v for v in lint["violations"] if v["kind"] == "type_binding_conflict"]
    others = [v for v in lint["violations"] if v["kind"] != "type_binding_conflict"]
    top = blame["model_frames"][0]
    first = found["first"]
    notebook = f"02_graph__source_run={SOURCE_RUN}"
    report.add(
        "## 2. The cause",
        "",
        f"**Lint.** `where223 lint` checks all {lint['nodes_checked']} nodes against ONNX's own schemas and "
        f"finds {len(conflicts)} type-binding conflict(s), one per layer, where ONNX Runtime reported only the "
        f"first, plus {len(others)} other finding(s):",
        "",
        *[f"- `{v['node']}` ({v['op_type']}, {v['kind']}, parameter {v['type_param']}): "
          + ", ".join(f"{b['io']} {b['position']} {b['type']}" for b in v["bindings"]) for v in lint["violations"]],
        "",
        f"**Blame.** `where223 blame` reads the exporter's stack from the node: `{top['file']}:{top['line']}` in "
        f"`{top['function']}`:",
        "",
        "```python",
        top["code"] or "",
        "```",
        "",
        f"**Divergence.** Running the model eagerly under the same autocast and joining each op's dtype with the "
        f"graph by source line, {found['count']} line result(s) out of {found['joined']} joined have another "
        f"dtype in the graph than in PyTorch. The first is not the `Where` but `{first['file']}:{first['line']}` "
        f"(node `{first['graph_node']}`): eager {first['eager_dtype']}, graph {first['graph_dtype']}.",
        "",
        "```python",
        first["code"] or "",
        "```",
        "",
    )
    if first["graph_node"].endswith("/Div"):
        report.add(
            "The scale line divides by a `torch.full` whose fill value is traced from the size of `value`; the "
            "exporter builds it in float, promotes the scores to float for the `Div`, and hands the `Where` "
            "float scores beside a reduced-precision mask constant.",
            "",
        )
    report.figure(f"{SOURCE_RUN}/graph/neighbourhood", "The rejected Where and its neighbours, edges labelled "
                  "by dtype, the conflicting edge in red", notebook)
    report.figure(f"{SOURCE_RUN}/graph/divergence", "Attention block per layer: graph dtype against eager "
                  "dtype, by source line", notebook)
    report.figure(f"{SOURCE_RUN}/graph/precision", "Attention tensors by precision in the exported graph",
                  notebook)


def fix(report: Report) -> None:
    """Section 3: the fix and its verification."""
    verification = report.json(f"{FIX}/verification.json")
    notebook = f"03_fix_and_verify__source_run={SOURCE_RUN}__variant={verification['variant']}"
    report.add(
        "## 3. The fix, verified",
        "",
        f"`where223.gpt2.variants.patched_attention(\"{verification['variant']}\")` swaps our implementation of "
        "the fixed attention into transformers 4.25.1 and restores the original on exit. Overall verdict: "
        f"**{verification['verdict']}**.",
        "",
        "| check | question | measured | tolerance | verdict |",
        "|---|---|---|---|---|",
        *[f"| `{c['name']}` | {c['question']} | {_value(c['value'])} | {c['tolerance']} | {c['verdict']} |"
          for c in verification["checks"]],
        "",
        *[f"- `{c['name']}`: {c['detail']}" for c in verification["checks"] if c["detail"]],
        "",
        f"Record: [`verification.json`]({FIX}/verification.json).",
        "",
    )
    report.figure(f"{FIX}/before_after", "The Where before and after the source-level fix", notebook)
    report.figure(f"{FIX}/repaired_vs_patched", "Graph repair (a Cast inserted into the exported model) beside "
                  "the source-level fix", notebook)
    report.figure(f"{FIX}/losses", "fp32 training losses, ORTModule with the fix against PyTorch eager", notebook)


def variants(report: Report) -> None:
    """Section 4: one line that is trace-correct under autocast and free of host copies?"""
    from where223.study.bench import COLUMNS, table_rows

    record = report.json("variants/variants-cpu.json")
    environment = record["environment"]
    best = record["recommendation"]
    report.add(
        "## 4. Tracing correctness against host-device synchronisation: every way to write the two lines",
        "",
        f"Measured in one run on {environment['device_name']} ({environment['device']}, torch "
        f"{environment['packages']['torch']}), {record['settings']['amp_dtype']} autocast; step times are "
        f"medians of {record['settings']['steps']} interleaved steps of the `{record['settings']['preset']}` "
        "preset, as ratios to the 4.25 variant. CUDA synchronisation and copy counts need a GPU: "
        "`host tensors` counts the tensors each forward makes on the host, each a host-to-device copy there.",
        "",
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *["| " + " | ".join(_value(row[key]) for key, _ in COLUMNS) + " |" for row in table_rows(record)],
        "",
        f"**Recommended: `{best['variant']}`.**",
        "",
        *[f"- {reason}" for reason in best["reasons"]],
        "",
        "Not measured, and why: " + "; ".join(f"`{name}`: {why}" for name, why in record["skipped"].items()) + ".",
        "",
        "Record: [`variants/variants-cpu.json`](variants/variants-cpu.json).",
        "",
    )
    report.figure("variants/variants-cpu", "Tracing validity against host-made tensors per forward, step-time "
                  "ratio to 4.25 shown per variant", "04_variants")


def matrix(report: Report) -> None:
    """Section 5: which stacks have the bug."""
    from where223.study import matrix_figure

    data = report.json("matrix/matrix.json")
    axes = data["axes"]
    report.add(
        "## 5. Which stacks have the bug",
        "",
        f"The tiny model exported under CPU bf16 autocast with every combination of transformers "
        f"{', '.join(axes['transformers'])} × torch {', '.join(axes['torch'])} × exporter "
        f"{', '.join(axes['exporter'])}: {len(data['cells'])} cells, each in its own environment. Outcomes: "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(data["counts"].items())) + ".",
        "",
        *[f"- {line}" for line in matrix_figure.conclusions(data)],
        "",
        "Data: [`matrix/matrix.json`](matrix/matrix.json) and one JSON per cell under `matrix/cells/`; "
        "notes in [`matrix/NOTES.md`](matrix/NOTES.md).",
        "",
    )
    report.figure("matrix/heatmap", "Outcome of every transformers × torch × exporter cell", "05_matrix")


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


SECTIONS: list[Callable[[Report], None]] = [failure, cause, fix, variants, matrix]


def build(outputs: Path = OUTPUTS) -> str:
    """The whole write-up as Markdown."""
    report = Report(outputs)
    report.add(
        "# where223: GPT-2's `Where` type error under mixed precision, reproduced, explained and fixed",
        "",
        "Generated by `make run` from the JSON records under `outputs/`; every number below is read from them.",
        "",
    )
    for section in SECTIONS:
        section(report)
    return report.text()


def write_report(outputs: Path = OUTPUTS) -> Path:
    """Write outputs/REPORT.md atomically."""
    return write_atomic(outputs / "REPORT.md", build(outputs))


def cli_main(args: argparse.Namespace) -> int:
    """`where223 report`: regenerate outputs/REPORT.md from the records."""
    print(write_report(Path(args.outputs) if args.outputs else OUTPUTS))
    return 0
