"""Section 4 of the write-up: the variants of the two lines, from `variants-cpu.json` (records only)."""

from __future__ import annotations

from typing import Any

from where223 import markdown
from where223.study._glance import Glance, field_key
from where223.study._page import Report
from where223.study.variants.analysis import COLUMNS, table_rows
from where223.verdicts import NOT_MEASURED


def section(report: Report) -> None:
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
        *[f"- {reason}" for reason in best.get("timing_reasons", [])],  # step times: older records quote them above
        "",
        "Not measured, and why: " + "; ".join(f"`{name}`: {why}" for name, why in record["skipped"].items()) + ".",
        "",
        "Record: [`variants/variants-cpu.json`](variants/variants-cpu.json).",
        "",
        *emulated_lines(report, record),
    )
    report.figure("variants/variants-cpu", "Tracing validity against host-made tensors per forward, step-time "
                  "ratio to 4.25 (paired) shown per variant", "04_variants")

def _types(row: dict[str, Any]) -> str:
    """A variant's export under one policy in a few words: ONNX Runtime's verdict, divergences, attention Casts."""
    first = row.get("first_divergence") or {}
    where = f"; first at `{first['node']}`" if first else ""
    return (f"{row['ort']['status']}, {row['divergences']} divergences ({row['attention_divergences']} in attention)"
            f"{where}, {row['attention_casts']} Casts")


def emulated_lines(report: Report, record: dict[str, Any]) -> list[str]:
    """The export columns under CUDA's fp16 policy emulated on CPU beside CPU bf16's, where the record exists."""
    from where223.study.variants.record import EMULATED_TYPES

    if not (report.outputs / EMULATED_TYPES).is_file():
        return []
    emulated = report.json(EMULATED_TYPES)
    names = [name for name in record["variants"] if name in emulated["variants"] and "ort" in record["variants"][name]]
    rows = [[f"`{name}`", _types(record["variants"][name]), _types(emulated["variants"][name])] for name in names]
    passes = {"accepted", "missing_kernel"}  # past the type check (a missing kernel is this CPU's, not the graph's)
    moved = [name for name in names if (record["variants"][name]["ort"]["status"] in passes)
             != (emulated["variants"][name]["ort"]["status"] in passes)]  # fmt: skip
    same = [name for name in names if _divergence_columns(record["variants"][name])
            == _divergence_columns(emulated["variants"][name])]  # fmt: skip
    other = [f"`{name}`" for name in names if name not in same]
    return [
        "**Under CUDA's fp16 policy, emulated on CPU** (`where223.cuda_autocast`, section 1; not run on a GPU). The "
        "same exports of the tiny model, each variant patched in, under the policy a GPU user's "
        "`torch.autocast(\"cuda\", torch.float16)` applies; not measured: " + emulated["not_measured"] + ". Whether "
        "a variant passes ONNX Runtime's type check changes for " + (", ".join(f"`{name}`" for name in moved)
                                                                   if moved else "no variant") + "; the "
        f"divergence columns (how many, how many in attention, the first node) are CPU bf16's for {len(same)} of "
        f"{len(names)} variants" + (f" (not for {', '.join(other)})" if other else "") + ", with float16 where "
        "CPU bf16 has bfloat16.",
        "",
        *markdown.table(["variant", "CPU bf16 autocast", "CUDA fp16 autocast (emulated)"], rows),
        "",
        f"Record: [`{EMULATED_TYPES}`]({EMULATED_TYPES}).",
        "",
    ]


def _divergence_columns(row: dict[str, Any]) -> tuple[Any, ...]:
    first = row.get("first_divergence")
    return row.get("divergences"), row.get("attention_divergences"), first and first["node"]


# The variant table's cost columns; the others say whether the variant traces correctly.
COST_COLUMNS = ("host_tensors_per_forward", "step_time_ratio", "paired_ratio", "syncs_per_step", "h2d_copies_per_step")


def variant_tables(record: dict[str, Any]) -> list[str]:
    """The variant study as two narrow Markdown tables (correctness, then cost), each led by the variant; a column
    "not measured" on every row (CUDA counts on a CPU) is left out and named in one sentence instead."""
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
            *markdown.table([title for _, title in columns], [[_cell(key, row[key]) for key, _ in columns]
                                                              for row in rows]),
            "",
        ]
    if absent:
        lines += [f"Not measured on this device for any variant: {', '.join(f'`{t}`' for _, t in absent)}.", ""]
    return lines

def _cell(key: str, value: Any) -> Any:
    """A variant-table cell's value: ratios to three decimals, as the figure labels them (`markdown.cell` writes
    the others)."""
    if key.endswith("ratio") and isinstance(value, float):
        return f"{value:.3f}"
    return f"`{value}`" if key == "variant" else value

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


def glance(report: Report) -> Glance:
    """Section 4's line for "At a glance": how many ways of writing the two lines trace correctly, the one
    recommended, and what it costs beside the baseline (divergences, host-made tensors, step time)."""
    path = "variants/variants-cpu.json"
    record = report.json(path)
    glance = Glance(4, "Which way to write it")
    rows, best, baseline = record["variants"], record["recommendation"]["variant"], record["baseline"]
    correct = [row["trace_correct"] for row in rows.values()]
    said = (f"of {glance.quote(len(correct), path, 'variants.*.trace_correct', reduce='len')} ways to write the two "
            f"lines, {glance.quote(correct.count(True), path, 'variants.*.trace_correct', equal=True)} trace correctly "
            "under autocast")
    if not best:
        return glance.says(said + "; none qualifies for recommending.")
    costs = []
    for key, what in (("divergences", "dtype divergences from eager"),
                      ("host_tensors_per_forward", "host-made tensors per forward")):
        if all(isinstance(rows[name].get(key), int) for name in (best, baseline)):
            mine, theirs = (glance.quote(rows[name][key], path, f"variants.{field_key(name)}.{key}")
                            for name in (best, baseline))
            costs.append(f"{mine} {what} (`{baseline}`: {theirs})")
    if isinstance(rows[best].get("paired_ratio"), float):
        ratio = glance.quote(rows[best]["paired_ratio"], path, f"variants.{field_key(best)}.paired_ratio", format=".3f")
        costs.append(f"a step {ratio} times `{baseline}`'s (median of same-round ratios)")
    return glance.says(f"{said}; `{best}` is recommended: " + ", ".join(costs) + ".")
