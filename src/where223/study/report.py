"""The reviewer write-up, generated from the recorded JSON: every number quoted, none typed by hand.

`where223 report` (run by `make run` after the notebooks) writes outputs/REPORT.md, Markdown that renders
on GitHub and offline; each figure links the executed notebook that drew it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from where223.gpt2 import runs
from where223.pipeline.paths import OUTPUTS
from where223.pipeline.records import read_json, write_atomic
from where223.pipeline.run import DEFAULT_PLAN, PlannedRun, load_plan

REPRODUCE, GRAPH, FIX = "01_reproduce", "02_graph", "03_fix_and_verify"


def find_run(outputs: Path, given: Mapping[str, object]) -> str:
    """The folder of the reproduction run that notebook parameters `given` produced, found from the records'
    own parameters (a folder counts only under its own run name); the newest record if several match."""
    found = []
    for record in outputs.glob("*/reproduce.json"):
        parameters = read_json(record)["parameters"]
        if runs.run_name(parameters) == record.parent.name and runs.produced_by(given, parameters):
            found.append((record.stat().st_mtime, record.parent.name))
    if not found:
        raise FileNotFoundError(f"no run under {outputs} was made with {dict(given)}: run `make run`")
    return max(found)[1]


class Report:
    """Markdown lines built against one outputs folder and the plan that filled it; links are relative to it."""

    def __init__(self, outputs: Path, plan: list[PlannedRun]) -> None:
        self.outputs = outputs
        self.plan = plan
        self.lines: list[str] = []

    def json(self, relative: str) -> dict[str, Any]:
        return read_json(self.outputs / relative)

    def planned(self, notebook: str, parameters: Mapping[str, object]) -> PlannedRun:
        """The plan's first run of `notebook` with the reproduction run of `parameters` (its executed copy)."""
        for run in self.plan:
            if run.notebook == notebook and runs.produced_by(run.parameters, parameters):
                return run
        raise ValueError(f"the plan runs no {notebook} for {runs.run_name(parameters)}")

    def fix_run(self) -> PlannedRun:
        """The plan's first run of notebook 03 (it names its variant): the subject of sections 2 and 3."""
        for run in self.plan:
            if run.notebook == FIX and "variant" in run.parameters:
                return run
        raise ValueError(f"the plan runs no {FIX} that names its variant")

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
    folders = {path: find_run(report.outputs, {"path": path}) for path in runs.PATHS}
    records = {path: report.json(f"{folder}/reproduce.json") for path, folder in folders.items()}
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
        "Records: " + ", ".join(f"[`{p}`]({folder}/reproduce.json)" for p, folder in folders.items()) + ". "
        f"Notebook: [`{REPRODUCE}`](notebooks/{report.planned(REPRODUCE, first['parameters']).name}.ipynb).",
        "",
    )


def cause(report: Report) -> None:
    """Section 2: every violation, the source line, and where precision first departs."""
    from where223.graph.lint import FindingKind

    source = find_run(report.outputs, report.fix_run().parameters)
    lint = report.json(f"{source}/graph/lint.json")
    blame = report.json(f"{source}/graph/blame.json")
    found = report.json(f"{source}/graph/divergence.json")
    conflicts = [v for v in lint["violations"] if v["kind"] == FindingKind.BINDING_CONFLICT]
    others = [v for v in lint["violations"] if v["kind"] != FindingKind.BINDING_CONFLICT]
    top = blame["model_frames"][0]
    first = found["first"]
    notebook = report.planned(GRAPH, report.json(f"{source}/reproduce.json")["parameters"]).name
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
    report.figure(f"{source}/graph/neighbourhood", "The rejected Where and its neighbours, edges labelled "
                  "by dtype, the conflicting edge in red", notebook)
    report.figure(f"{source}/graph/divergence", "Attention block per layer: graph dtype against eager "
                  "dtype, by source line", notebook)
    report.figure(f"{source}/graph/precision", "Attention tensors by precision in the exported graph",
                  notebook)


def fix(report: Report) -> None:
    """Section 3: the fix and its verification."""
    planned = report.fix_run()
    source = find_run(report.outputs, planned.parameters)
    fixed = f"{source}/{runs.fix_name(str(planned.parameters['variant']))}"
    verification = report.json(f"{fixed}/verification.json")
    notebook = planned.name
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
        f"Record: [`verification.json`]({fixed}/verification.json).",
        "",
    )
    report.figure(f"{fixed}/before_after", "The Where before and after the source-level fix", notebook)
    report.figure(f"{fixed}/repaired_vs_patched", "Graph repair (a Cast inserted into the exported model) beside "
                  "the source-level fix", notebook)
    report.figure(f"{fixed}/losses", "fp32 training losses, ORTModule with the fix against PyTorch eager", notebook)


def variants(report: Report) -> None:
    """Section 4: one line that is trace-correct under autocast and free of host copies?"""
    from where223.study.ranking import COLUMNS, table_rows

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
    from where223.study import matrix_analysis

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
        *[f"- {line}" for line in matrix_analysis.conclusions(data)],
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


def build(outputs: Path = OUTPUTS, plan: Path = DEFAULT_PLAN) -> str:
    """The whole write-up as Markdown, from the records under `outputs` of the runs of `plan`."""
    report = Report(outputs, load_plan(plan))
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
