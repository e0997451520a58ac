"""The reviewer write-up, generated from the recorded JSON: every number quoted, none typed by hand.

`where223 report` (run by `make run` after the notebooks) writes outputs/REPORT.md, Markdown that renders
on GitHub and offline; each figure links the executed notebook that drew it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from where223 import markdown
from where223.files import write_atomic
from where223.gpt2 import runs
from where223.pipeline.params import EMULATED_CUDA_FP16 as EMULATED
from where223.pipeline.paths import OUTPUTS
from where223.pipeline.publish import outputs_lock
from where223.pipeline.records import read_json
from where223.pipeline.run import DEFAULT_PLAN, load_plan
from where223.study._glance import Glance
from where223.study._page import GRAPH, REPRODUCE, Report, find_run


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
    )
    rows = _path_rows(records)
    report.add(*markdown.table(["path", "status", "node ONNX Runtime names", "bound types"], rows))
    # where each path raised, below the table rather than in a column: the frames are too long for a page's width
    report.add("", "Raised from:", "")
    report.add(*[f"- `{path}`: `{rec['call_stack'][-1]}`" for path, rec in records.items() if rec["call_stack"]])
    emulated_failure(report)
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


def _path_rows(records: Mapping[str, dict[str, Any]]) -> list[list[str]]:
    """Section 1's table rows: per path, its status, the node ONNX Runtime names and the types bound."""
    rows = []
    for path, record in records.items():
        binding = (record["error"] or {}).get("type_binding") or {}
        rows.append([f"`{path}`", record["status"], f"`{binding.get('node', '')}`",
                     " vs ".join(binding.get("bound_types", []))])
    return rows


def emulated_failure(report: Report) -> None:
    """Section 1's second table: the three paths under CUDA's fp16 autocast policy emulated on CPU, where the plan
    runs them (`amp_dtype: fp16_cuda_emulated`), labelled emulated."""
    planned = [run for run in report.plan if run.notebook == REPRODUCE and run.parameters.get("amp_dtype") == EMULATED]
    if not planned:
        return
    folders = {run.parameters["path"]: find_run(report.outputs, run.parameters) for run in planned}
    records = {path: report.json(f"{folder}/reproduce.json") for path, folder in folders.items()}
    rows = _path_rows(records)
    report.add(
        "",
        "**Emulated CUDA fp16.** The seed met the failure on a GPU in fp16; the table above is CPU bf16, because CPU "
        "autocast in torch 2.1.2 has only bf16, and CPU and CUDA autocast cast different ops. The same three paths "
        "under CUDA's fp16 autocast policy of torch 2.1.2 applied to CPU tensors (`where223.cuda_autocast`: "
        "CUDA's op lists, checked against the lists the installed binary registers; ops without a float16 CPU kernel "
        "computed in float32 below the tracer and rounded). Emulated, not run on a GPU: "
        + cuda_check_sentence(report) + ".",
        "",
        *markdown.table(["path (emulated CUDA fp16)", "status", "node ONNX Runtime names", "bound types"], rows),
        "",
        "ONNX Runtime's words on the emulated `ort_trainer` path — the seed's own types:",
        "",
        "```",
        (records.get("ort_trainer") or next(iter(records.values())))["error"]["ort_message"],
        "```",
        "",
        "Records: " + ", ".join(f"[`{p}`]({folder}/reproduce.json)" for p, folder in folders.items()) + ".",
        "",
    )


def cuda_check_sentence(report: Report) -> str:
    """Whether the emulation was compared with real CUDA autocast (`benchmarks/bench_variants_gpu.py
    --compare-emulation`'s record), and what such a check can and cannot say."""
    from where223.study.variants.record import CUDA_EMULATION as CUDA_EMULATION_RECORD

    path = report.outputs / CUDA_EMULATION_RECORD
    scope = ("such a check validates the mechanism for that machine's torch release, not torch 2.1.2's lists, "
             "which are checked against 2.1.2's binary registrations only")
    if not path.is_file():
        return "the emulation is unchecked against real CUDA (no GPU has run the comparison yet); " + scope
    record = read_json(path)
    gpu = record["environment"].get("gpu")
    if not gpu:
        return "the emulation is unchecked against real CUDA (its comparison record has no GPU); " + scope
    compared = [found["equal"] for entry in record["models"].values() for found in entry.values()]
    equal = sum(compared)
    return (f"on {gpu} with torch {record['environment']['torch']}, {equal} of {len(compared)} graph comparisons "
            f"were equal node by node ([`{CUDA_EMULATION_RECORD}`]({CUDA_EMULATION_RECORD})); " + scope)


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
    reproduced = report.json(f"{source}/reproduce.json")
    named = ((reproduced.get("error") or {}).get("type_binding") or {}).get("node")
    notebook = report.planned(GRAPH, reproduced["parameters"]).name
    layers = sorted({int(m[1]) for v in conflicts if (m := re.search(r"/h\.(\d+)/", v["node"]))})
    where_layers = f" in layer(s) {', '.join(map(str, layers))}" if layers else ""
    ort_named = f" (ONNX Runtime's message names `{named}`)" if named else ""
    report.add(
        "## 2. The cause",
        "",
        f"**Lint.** `where223 lint` checks all {lint['nodes_checked']} nodes against ONNX's own schemas and "
        f"finds {len(conflicts)} type-binding conflict(s){where_layers}{ort_named} and {len(others)} other "
        "finding(s):",
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
        f"dtype in the graph than in PyTorch. The first, in graph order, is `{first['file']}:{first['line']}` "
        f"(node `{first['graph_node']}`"
        + (f", not the node ONNX Runtime named, `{named}`" if named and named != first["graph_node"] else "")
        + f"): eager {first['eager_dtype']}, graph {first['graph_dtype']}.",
        "",
        "```python",
        first["code"] or "",
        "```",
        "",
    )
    report.figure(f"{source}/graph/neighbourhood", "The rejected Where and its neighbours, edges labelled "
                  "by dtype, the conflicting edge in red", notebook)
    report.figure(f"{source}/graph/divergence", "Attention block per layer: graph dtype against eager "
                  "dtype, by source line", notebook)
    report.figure(f"{source}/graph/precision", "Attention tensors by precision in the exported graph",
                  notebook)















































def failure_glance(report: Report) -> Glance:
    """Section 1's line: on how many of its paths the seed's error reproduced, and the types ONNX Runtime bound,
    under CPU bf16 autocast and, where the plan runs them, under CUDA's fp16 policy emulated."""
    glance = Glance(1, "The failure")
    policies = [("CPU bf16 autocast", [{"path": path} for path in runs.PATHS])]
    emulated = [run.parameters for run in report.plan
                if run.notebook == REPRODUCE and run.parameters.get("amp_dtype") == EMULATED]
    if emulated:
        policies.append(("CUDA's fp16 policy emulated on CPU", emulated))
    said = []
    for policy, planned in policies:
        paths = [f"{find_run(report.outputs, given)}/reproduce.json" for given in planned]
        records = [report.json(path) for path in paths]
        reproduced = sum(record["status"] == "reproduced" for record in records)
        bound = dict.fromkeys(" vs ".join(binding["bound_types"]).replace("tensor(", "").replace(")", "")
                              for record in records
                              if (binding := (record["error"] or {}).get("type_binding") or {}).get("bound_types"))
        said.append(f"{glance.quote(reproduced, paths, 'status', equal='reproduced')} of "
                    f"{glance.quote(len(records), paths, 'status', reduce='len')} paths under {policy}"
                    + (f" ({'; '.join(bound)})" if bound else ""))
    return glance.says(f"ONNX Runtime refuses the exported attention's `Where`, its inputs bound to two types, on "
                       f"{', and on '.join(said)}: the seed's error, reproduced.")


def cause_glance(report: Report) -> Glance:
    """Section 2's line: the type-binding conflicts lint finds, the source line blame names, and how many line
    results eager and the graph compute in different dtypes."""
    from where223.graph.lint import FindingKind

    glance = Glance(2, "Its cause")
    source = find_run(report.outputs, report.fix_run().parameters)
    paths = {name: f"{source}/graph/{name}.json" for name in ("lint", "blame", "divergence")}
    lint, blame, found = (report.json(path) for path in paths.values())
    conflicts = [v for v in lint["violations"] if v["kind"] == FindingKind.BINDING_CONFLICT]
    top = blame["model_frames"][0]
    operators = ", ".join(f"`{op}`" for op in dict.fromkeys(v["op_type"] for v in conflicts))
    counted = glance.quote(len(conflicts), paths["lint"], "violations.*.kind", equal=FindingKind.BINDING_CONFLICT.value)
    return glance.says(
        f"`where223 lint` finds {counted} type-binding conflicts ({operators or 'none'}) among the "
        f"{glance.quote(lint['nodes_checked'], paths['lint'], 'nodes_checked')} nodes; `where223 blame` traces the "
        f"node ONNX Runtime refuses to line {glance.quote(top['line'], paths['blame'], 'model_frames[0].line')} of "
        f"`{top['file']}`, {markdown.code(top['code'] or '')}; run eagerly under the same autocast, "
        f"{glance.quote(found['count'], paths['divergence'], 'count')} of "
        f"{glance.quote(found['joined'], paths['divergence'], 'joined')} line results have another dtype in the "
        "graph.")


def sections() -> list[Callable[[Report], None]]:
    """Sections 1-2 (the failure and its cause) from here, then each question's own `section` (3-10), in order, and
    the appendix of question 7's refusal groups."""
    from where223.study.architectures import section as architectures
    from where223.study.classes import section as classes
    from where223.study.conversions import section as conversions
    from where223.study.fix import section as fix
    from where223.study.fx import section as fx
    from where223.study.matrix import section as matrix
    from where223.study.remedies import section as remedies
    from where223.study.variants import section as variants

    return [failure, cause, fix.section, variants.section, matrix.section, architectures.section, classes.section,
            remedies.section, fx.section, conversions.section, classes.appendix]


def glances(report: Report) -> list[Glance]:
    """Each section's line for "At a glance", in the sections' order: sections 1 and 2's from here, every other
    from its module's `glance`, where it offers one (None: nothing to say yet)."""
    own: dict[Callable[[Report], None], Callable[[Report], Glance | None]] = {failure: failure_glance,
                                                                             cause: cause_glance}
    offered: list[Callable[[Report], Glance | None]] = []
    for section in sections():
        offer = own.get(section) or getattr(sys.modules[section.__module__], "glance", None)
        if offer is not None and offer not in offered:
            offered.append(offer)
    return [glance for glance in (offer(report) for offer in offered) if glance is not None]


def at_a_glance(report: Report) -> list[str]:
    """The "At a glance" lines, each linking the heading of its section (the sections already written)."""
    headings = {int(match[1]): line for line in report.lines if (match := re.match(r"## (\d+)\. ", line))}
    return ["## At a glance", "", *[glance.line(markdown.anchor(headings[glance.section]))
                                    for glance in glances(report)], ""]


def build(outputs: Path = OUTPUTS, plan: Path = DEFAULT_PLAN) -> str:
    """The whole write-up as Markdown, from the records under `outputs` of the runs of `plan`: the answers first,
    one line each (`at_a_glance`), then a section per question."""
    report = Report(outputs, load_plan(plan))
    report.add(
        "# where223: GPT-2's `Where` type error under mixed precision, reproduced, explained and fixed",
        "",
        "Generated by `make run` from the JSON records under `outputs/`; every number below is read from them.",
        "",
    )
    opening = len(report.lines)
    for section in sections():
        section(report)
    report.lines[opening:opening] = at_a_glance(report)
    return report.text()


def write_report(outputs: Path = OUTPUTS) -> Path:
    """Write outputs/REPORT.md atomically, under the tree's writers' lock (waiting for a run that publishes)."""
    with outputs_lock(outputs, wait=True):
        return write_atomic(outputs / "REPORT.md", build(outputs))
