"""The reviewer write-up, generated from the recorded JSON: every number quoted, none typed by hand.

`where223 report` (run by `make run` after the notebooks) writes outputs/REPORT.md, Markdown that renders
on GitHub and offline; each figure links the executed notebook that drew it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from where223.files import write_atomic
from where223.gpt2 import runs
from where223.pipeline.paths import OUTPUTS
from where223.pipeline.publish import outputs_lock
from where223.pipeline.records import read_json
from where223.pipeline.run import DEFAULT_PLAN, PlannedRun, load_plan

REPRODUCE, GRAPH, FIX = "01_reproduce", "02_graph", "03_fix_and_verify"
NOT_RUN = "—"


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
        "| path | status | node ONNX Runtime names | bound types |",
        "|---|---|---|---|",
    )
    for path, record in records.items():
        binding = (record["error"] or {}).get("type_binding") or {}
        report.add(
            f"| `{path}` | {record['status']} | `{binding.get('node', '')}` | "
            f"{' vs '.join(binding.get('bound_types', []))} |"
        )
    # where each path raised, below the table rather than in a column: the frames are too long for a page's width
    report.add("", "Raised from:", "")
    report.add(*[f"- `{path}`: `{rec['call_stack'][-1]}`" for path, rec in records.items() if rec["call_stack"]])
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


def fix(report: Report) -> None:
    """Section 3: the fix and its verification."""
    planned = report.fix_run()
    source = find_run(report.outputs, planned.parameters)
    fixed = f"{source}/{runs.fix_name(str(planned.parameters['variant']))}"
    verification = report.json(f"{fixed}/verification.json")
    notebook = planned.name
    pinned = verification["environment"]["packages"]["transformers"]
    report.add(
        "## 3. The fix and its verification",
        "",
        f"`where223.gpt2.variants.patched_attention(\"{verification['variant']}\")` swaps our implementation of "
        f"the fixed attention into transformers {pinned} and restores the original on exit. "
        f"{overall_verdict(verification)}",
        "",
        "| check | question | measured | tolerance | verdict |",
        "|---|---|---|---|---|",
        *[f"| `{c['name']}` | {c['question']} | {_value(c['value'])} | {_value(c['tolerance'])} | "
          f"{_value(verdict_cell(c))} |" for c in verification["checks"]],
        "",
        *[f"- `{c['name']}`: {c['detail']}" for c in verification["checks"] if c["detail"]],
        "",
        *controls_section(verification),
        f"Record: [`verification.json`]({fixed}/verification.json).",
        "",
    )
    report.figure(f"{fixed}/before_after", "The Where before and after the source-level fix", notebook)
    report.figure(f"{fixed}/repaired_vs_patched", "Graph repair (a Cast inserted into the exported model) beside "
                  "the source-level fix", notebook)
    report.figure(f"{fixed}/losses", "fp32 training losses, ORTModule with the fix against PyTorch eager", notebook)


def verdict_cell(check: Mapping[str, Any]) -> str:
    """A check's verdict as a table shows it: with what the check left out of it, when it left something out."""
    left_out = check.get("not_judged", "")
    return f"{check['verdict']} (not judged: {left_out})" if left_out else str(check["verdict"])


def overall_verdict(verification: Mapping[str, Any]) -> str:
    """'Overall verdict: **pass** — what it covers', from the record's own statement when it has one."""
    verdict, statement = verification["verdict"], verification.get("verdict_statement", "")
    covers = statement[len(verdict):] if statement.startswith(verdict) else ""
    return f"Overall verdict: **{verdict}**{covers}."


def control_matrix(verification: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the table check x (fix, each control): the verdicts, '—' where a control ran no
    such check."""
    controls = verification.get("controls", [])
    header = ["check", "fix", *[control["name"] for control in controls]]
    verdicts = [{check["name"]: check["verdict"] for check in control["checks"]} for control in controls]
    rows = [
        [check["name"], check["verdict"], *[found.get(check["name"], NOT_RUN) for found in verdicts]]
        for check in verification["checks"]
    ]
    return header, rows


def uncontrolled_checks(verification: Mapping[str, Any]) -> list[str]:
    """The checks that pass for the fix and fail on no control: checks not shown able to fail."""
    failing = {check["name"] for control in verification.get("controls", []) for check in control["checks"]
               if check["verdict"] == "fail"}
    return [check["name"] for check in verification["checks"]
            if check["verdict"] == "pass" and check["name"] not in failing]


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table, cells escaped."""
    return ["| " + " | ".join(_value(cell) for cell in header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(_value(cell) for cell in row) + " |" for row in rows]]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def control_margins(verification: Mapping[str, Any]) -> list[str]:
    """One line per check with a numeric value and tolerance (per model, for a check judged model by model): its
    value on the fix and on each control that ran it (c1, c2, ... as in the controls table), with the verdict: how
    far each control is from passing."""
    controls = verification.get("controls", [])
    lines = []
    for check in verification["checks"]:
        value, tolerance = check.get("value"), check.get("tolerance")
        if _number(value) and _number(tolerance):
            keys: list[str | None] = [None]
        elif isinstance(value, dict) and isinstance(tolerance, dict) and value and all(
                _number(value[key]) and _number(tolerance.get(key)) for key in value):
            keys = list(value)
        else:
            continue
        ran = [(number, control["name"], found) for number, control in enumerate(controls, start=1)
               for found in control["checks"] if found["name"] == check["name"]]
        for key in keys if ran else []:
            def at(record: Mapping[str, Any], field: str, key: str | None = key) -> Any:
                found = record.get(field)
                return found if key is None else (found.get(key, NOT_RUN) if isinstance(found, dict) else found)

            label = f"`{check['name']}`" + (f" on {key}" if key else "")
            on_controls = "; ".join(f"c{number} `{name}` {_value(at(found, 'value'))} ({found['verdict']})"
                                    for number, name, found in ran)
            lines.append(f"- {label} (tolerance {_value(at(check, 'tolerance'))}): fix {_value(at(check, 'value'))} "
                         f"({check['verdict']}); {on_controls}")
    return lines


def controls_section(verification: Mapping[str, Any]) -> list[str]:
    """The negative controls of a verification record: what each breaks, the table, each numeric check's value
    on the fix and on the controls, and any check that passed without a failing control."""
    controls = verification.get("controls", [])
    if not controls:
        return ["**Negative controls:** none recorded, so no check here is shown able to fail.", ""]
    uncontrolled = uncontrolled_checks(verification)
    margins = control_margins(verification)
    header, rows = control_matrix(verification)
    labels = [f"c{number}" for number in range(1, len(controls) + 1)]  # short columns: the table fits a page
    return [
        "**Negative controls.** The same checks, run on controls built to break them (columns c1, c2, ... below):",
        "",
        *[f"- c{number} `{control['name']}`: {control['description']}"
          for number, control in enumerate(controls, start=1)],
        "",
        *markdown_table([*header[:2], *labels], rows),
        "",
        *(["Measured values against each tolerance, on the fix and on the controls that ran the check:", "",
           *margins, ""] if margins else []),
        ("Checks that passed for the fix and failed on no control: " + ", ".join(f"`{n}`" for n in uncontrolled)
         if uncontrolled else "Every check that passed for the fix failed on at least one control."),
        "",
    ]


def variants(report: Report) -> None:
    """Section 4: one line that is trace-correct under autocast and free of host copies? The title names the
    cost the record measured: host-device synchronisation only where it counted CUDA syncs."""
    record = report.json("variants/variants-cpu.json")
    environment = record["environment"]
    best = record["recommendation"]
    synced = any(isinstance(row.get("syncs_per_step"), (int, float)) for row in record["variants"].values())
    cost = ("host-device synchronisation" if synced
            else "host-made tensors (host-device synchronisation not measured)")
    counts = ("`syncs/step` and `H2D/step` count CUDA synchronisations and host-to-device copies per step; "
              if synced else "CUDA synchronisation and copy counts need a GPU and were not measured here: ")
    report.add(
        f"## 4. Tracing correctness against {cost}: every way to write the two lines",
        "",
        f"Measured in one run on {environment['device_name']} ({environment['device']}, torch "
        f"{environment['packages']['torch']}), {record['settings']['amp_dtype']} autocast; step times are "
        f"medians of {_rounds(record)} interleaved steps of the `{record['settings']['preset']}` "
        f"preset{_step(record)}, as ratios to the 4.25 variant: `step/4.25` divides the medians, `paired` is the "
        f"median of same-round ratios (the ratio the figure shows). {counts}"
        "`host tensors` counts the tensors each forward makes on the host, each a host-to-device copy on a GPU.",
        "",
        *variant_tables(record),
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
                  "ratio to 4.25 (paired) shown per variant", "04_variants")


def matrix(report: Report) -> None:
    """Section 5: which stacks have the bug."""
    from where223.study import matrix_analysis

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



def architectures(report: Report) -> None:
    """Section 6: which other architectures share the bug class, where, and what 4.26.0 changed for them. Each
    group's count is of architectures per release, not of records summed over releases."""
    from where223.study.architectures import architectures_per_release

    data = report.json("architectures/summary.json")
    releases = data["releases"]
    lines = [
        "## 6. Beyond GPT-2: every architecture through the same export",
        "",
        "Every model type of transformers 4.25.1's base and causal-LM auto mappings, built small with random "
        "weights and exported as notebook 01 exports GPT-2 (CPU bf16 autocast, training mode, opset 17), then "
        "judged by ONNX Runtime, linted, blamed and compared with its eager run:",
        "",
        "| release | attempted | built | fed | exported | judged | types accepted | accepted (runs here) |",
        "|---|---|---|---|---|---|---|---|",
        *[
            f"| {release} | " + " | ".join(str(data["counts"][release][key]) for key in
                                          ("attempted", "built", "fed", "exported", "judged", "types_accepted",
                                           "accepted")) + " |"
            for release in releases
        ],
        "",
        "*Types accepted* counts the graphs ONNX Runtime refused only for a kernel its CPU provider lacks "
        "(bfloat16 MatMul or Gemm, say): their types pass the check that refuses GPT-2's `Where`.",
        "",
        "Failures that share an operator and the source line blame names for ONNX Runtime's node "
        "(largest first; the first divergence is the first line whose result is another float type in the graph "
        "than eagerly):",
        "",
    ]
    typed = [g for g in data["failure_groups"] if g["outcome"] in ("where_type_error", "type_error")]
    for group in typed:
        members = "; ".join(f"{release}: {', '.join(names)}" for release, names in sorted(group["by_release"].items()))
        counted = _per_release(architectures_per_release(group, releases))
        what = f"`{group['code']}`" if group["code"] else f"`{group['what']}`"
        where = ", ".join(f"`{source}`" for source in group["sources"][:3])
        more = f" and {len(group['sources']) - 3} more" if len(group["sources"]) > 3 else ""
        first = ", ".join(f"`{line}` ×{count}" for line, count in group["first_divergences"].items())
        lines.append(
            f"- **{group['operator']}** ({group['outcome']}) from {what} at {where or 'no recorded line'}{more}: "
            f"{counted} ({members})"
            + (f"; first divergence {first}" if first else "; eager and graph dtypes agree on every joined line")
        )
    other = [g for g in data["failure_groups"] if g not in typed]
    if other:
        shown = other[:OTHER_SHOWN]
        lines += [
            "",
            "Other outcomes (missing kernels, failed builds, feeds and exports), grouped by outcome, stage and first "
            "line of the error, with the architectures of each release in each group (largest first):",
            "",
            *[
                f"- {label} ({_per_release(architectures_per_release(group, releases))})"
                for label, group in zip(outcome_labels(shown), shown, strict=True)
            ],
        ]
        if len(other) > len(shown):
            lines += ["", f"{len(other) - len(shown)} more groups in the summary."]
    changes = data["release_changes"]
    lines += [
        "",
        f"What {releases[-1]} changed against {releases[0]}: "
        + ("; ".join(f"{c['model_type']} {c[releases[0]]} → {c[releases[-1]]}" for c in changes) or "nothing")
        + ".",
        "",
        "Data: [`architectures/summary.json`](architectures/summary.json) and one JSON per architecture and release "
        "under `architectures/<release>/`; `make sweep` rebuilds them (`spaces/architectures.yaml`).",
        "",
    ] if len(releases) > 1 else ["", "Data: [`architectures/summary.json`](architectures/summary.json).", ""]
    report.add(*lines)
    report.figure("architectures/outcomes", "Outcome of every architecture and release", "06_architectures")


OTHER_SHOWN = 12  # groups of other outcomes listed in section 6; the rest are counted and left to the summary
WHAT_LIMIT = 100  # characters of a first error line shown in a group's label


def outcome_labels(groups: list[dict[str, Any]], limit: int = WHAT_LIMIT) -> list[str]:
    """Each `failure_groups` group's label: its outcome, the operator or stage, and its first error line (`what`)
    cut after `limit` characters as `errors.printable` cuts names. Labels stay distinct and say how: where two
    groups with different first lines would show the same text before the cut (the count of characters left out
    is no way to tell lines apart), both print their whole line as Python's `repr` writes it (one line, and
    never the same for two different lines)."""
    from where223.errors import printable

    def label(group: dict[str, Any], what: str) -> str:
        return f"{group['outcome']} at {group['operator']}" + (f": {_code(what)}" if group["what"] else "")

    kept = [label(group, printable(group["what"][:limit], None)) for group in groups]
    lines_of: dict[str, set[tuple[str, str, str]]] = {}
    for text, group in zip(kept, groups, strict=True):
        lines_of.setdefault(text, set()).add((group["outcome"], group["operator"], group["what"]))
    return [
        label(group, repr(group["what"]) if len(lines_of[text]) > 1 else printable(group["what"], limit))
        for text, group in zip(kept, groups, strict=True)
    ]


def _code(text: str) -> str:
    """`text` as a Markdown code span, fenced by one backtick more than its longest run of them."""
    runs = re.findall(r"`+", text)
    fence = "`" * (max(map(len, runs), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _per_release(counts: Mapping[str, int]) -> str:
    """Architectures per release, e.g. `1 in 4.25.1, 0 in 4.26.0`."""
    return ", ".join(f"{count} in {release}" for release, count in counts.items())


# The variant table's cost columns; the others say whether the variant traces correctly.
COST_COLUMNS = ("host_tensors_per_forward", "step_time_ratio", "paired_ratio", "syncs_per_step", "h2d_copies_per_step")
NOT_MEASURED = "not measured"


def variant_tables(record: dict[str, Any]) -> list[str]:
    """The variant study as two narrow Markdown tables (correctness, then cost), each led by the variant; a column
    "not measured" on every row (CUDA counts on a CPU) is left out and named in one sentence instead."""
    from where223.study.ranking import COLUMNS, table_rows

    rows = table_rows(record)
    absent = [(key, title) for key, title in COLUMNS if all(row[key] == NOT_MEASURED for row in rows)]
    shown = [(key, title) for key, title in COLUMNS if (key, title) not in absent and key != "variant"]
    lines: list[str] = []
    for columns in (
        [column for column in shown if column[0] not in COST_COLUMNS],
        [column for column in shown if column[0] in COST_COLUMNS],
    ):
        columns = [("variant", "variant"), *columns]
        lines += [
            "| " + " | ".join(title for _, title in columns) + " |",
            "|" + "---|" * len(columns),
            *["| " + " | ".join(_cell(key, row[key]) for key, _ in columns) + " |" for row in rows],
            "",
        ]
    if absent:
        lines += [f"Not measured on this device for any variant: {', '.join(f'`{t}`' for _, t in absent)}.", ""]
    return lines


def _cell(key: str, value: Any) -> str:
    """A variant-table cell: ratios to three decimals, as the figure labels them."""
    if key.endswith("ratio") and isinstance(value, float):
        return f"{value:.3f}"
    return f"`{value}`" if key == "variant" else _value(value)


def _rounds(record: dict[str, Any]) -> str:
    """How many timed rounds the variant study ran, and why it stopped there (records without a stopping rule
    ran the settings' fixed number)."""
    timing = record.get("timing")
    if not timing:
        return str(record["settings"]["steps"])
    return (f"{timing['rounds']} (of at most {timing['max_rounds']}; stopped by {timing['stopped_by']}: "
            f"{timing['rule']})")


def _step(record: dict[str, Any]) -> str:
    """What one timed step of the variant study ran, as its record states it (older records: a training step)."""
    step = (record.get("timing") or {}).get("step")
    return f" (a step: {step})" if step else ""


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


SECTIONS: list[Callable[[Report], None]] = [failure, cause, fix, variants, matrix, architectures]


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
    """Write outputs/REPORT.md atomically, under the tree's writers' lock (waiting for a run that publishes)."""
    with outputs_lock(outputs, wait=True):
        return write_atomic(outputs / "REPORT.md", build(outputs))
