"""What the torch.fx record says (records only, no torch): per release and configuration, whether the tracer traced
GPT-2, what it fixed at trace time, and under each autocast policy whether the traced module computes eager's
logits; the answer to the reviewer's question in sentences."""

from __future__ import annotations

from typing import Any

from where223.study.fx.record import PROBE

POLICY_NAMES = {"bf16": "CPU bf16 autocast", "fp16_cuda_emulated": "CUDA fp16 autocast (emulated on CPU)"}
AGREES, VALUES_DIFFER, DTYPES_DIFFER, FAILED, NOT_TRACED = (
    "agrees", "values differ", "dtypes differ", "run failed", "not traced")  # fmt: skip
OUTCOMES = (AGREES, VALUES_DIFFER, DTYPES_DIFFER, FAILED, NOT_TRACED)


def outcome(trace: dict[str, Any], run: dict[str, Any] | None) -> str:
    """One cell's outcome: bitwise eager's logits, same dtype and other values, another dtype, or no run."""
    if not trace["traced"]:
        return NOT_TRACED
    if run is None or run["error"]:
        return FAILED
    if not run["dtypes_agree"]:
        return DTYPES_DIFFER
    return AGREES if run["equal"] else VALUES_DIFFER


def cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per release, configuration (and probe) and policy with its outcome and max |difference|."""
    rows = []
    for trace in record["traces"]:
        runs = {run["policy"]: run for run in trace["runs"]}
        for policy in record["settings"]["policies"]:
            run = runs.get(policy)
            rows.append({"release": trace["release"], "model": trace["model"], "policy": policy,
                         "outcome": outcome(trace, run), "max_abs_diff": None if run is None else run["max_abs_diff"],
                         "eager_dtype": None if run is None else run["eager_dtype"],
                         "traced_dtype": None if run is None else run["traced_dtype"]})  # fmt: skip
    return rows


def fixed_sources(record: dict[str, Any], model: str = "as configured") -> dict[str, list[str]]:
    """Per release: the modeling lines whose nodes carry a trace-time dtype or extreme (`file:line: literals`)."""
    found: dict[str, list[str]] = {}
    for trace in record["traces"]:
        if trace["model"] != model:
            continue
        lines = []
        for node in trace["fixed_at_trace_time"]:
            where = node["source"] or f"node {node['node']}"
            text = f"{where} ({node['target']}: {', '.join(node['literals'])})"
            if text not in lines:
                lines.append(text)
        found[trace["release"]] = lines
    return found


def _run_sentence(row: dict[str, Any]) -> str:
    difference = "" if row["max_abs_diff"] is None else f", max |Δ| {row['max_abs_diff']:.3g}"
    dtypes = (f" ({row['traced_dtype']} traced, {row['eager_dtype']} eager)"
              if row["outcome"] == DTYPES_DIFFER else "")  # fmt: skip
    return f"under {POLICY_NAMES.get(row['policy'], row['policy'])}: {row['outcome']}{dtypes}{difference}"


def answer(record: dict[str, Any]) -> list[str]:
    """The reviewer's question answered in sentences, from the record only: per release, GPT-2's configurations;
    then the autocast-region probe (the same torch-only module in every release's interpreter: its first run)."""
    rows = cells(record)
    sentences = []
    for release in record["settings"]["releases"]:
        mine = [row for row in rows if row["release"] == release and row["model"] != PROBE]
        parts = []
        for model in dict.fromkeys(row["model"] for row in mine):
            trace = next(t for t in record["traces"] if t["release"] == release and t["model"] == model)
            if not trace["traced"]:
                parts.append(f"{model}: not traced ({trace['error']})")
                continue
            parts.append(f"{model}: " + "; ".join(_run_sentence(row) for row in mine if row["model"] == model))
        sentences.append(f"transformers {release}: GPT-2 " + "; GPT-2 ".join(parts) + ".")
    probe = [row for row in rows if row["model"] == PROBE]
    if probe:
        first = probe[0]["release"]
        sentences.append(f"{PROBE}: " + "; ".join(_run_sentence(row) for row in probe if row["release"] == first)
                         + ".")
    return sentences


def lost_regions(record: dict[str, Any]) -> list[str]:
    """The source's autocast regions that no traced graph holds (fx records calls, not context managers)."""
    regions: list[str] = []
    for trace in record["traces"]:
        if trace["traced"] and trace["autocast_nodes_in_graph"] == 0:
            regions += [f"{trace['release']}: {line}" for line in trace["autocast_regions_in_source"]
                        if f"{trace['release']}: {line}" not in regions]  # fmt: skip
    return regions


def verdict(record: dict[str, Any]) -> str:
    """The answer in one paragraph, from the record's outcomes only."""
    rows = cells(record)
    seed = [row for row in rows if row["model"] == "as configured"]
    untraced = sorted({row["release"] for row in rows if row["model"] not in ("as configured", PROBE)
                       and row["outcome"] == NOT_TRACED})  # fmt: skip
    probe = [row for row in rows if row["model"] == PROBE and row["release"] == record["settings"]["releases"][0]]
    agree = all(row["outcome"] == AGREES for row in seed)
    parts = [
        ("For GPT-2 as configured, no: in every release the traced module computed eager's logits bitwise under "
         "both policies: the values the tracer fixed (listed above) changed neither the logits' dtype nor their "
         "values." if agree else
         "For GPT-2 as configured, yes: " + "; ".join(f"{row['release']} {_run_sentence(row)}" for row in seed
                                                      if row["outcome"] != AGREES) + "."),  # fmt: skip
    ]
    if untraced:
        parts.append(f"With `reorder_and_upcast_attn=True` transformers' tracer does not trace GPT-2 at all "
                     f"({', '.join(untraced)}).")
    changed = [row for row in probe if row["outcome"] != AGREES]
    if changed:
        parts.append("And an autocast region, which that configuration relies on, does not survive tracing: the "
                     "probe computes other values than eager " + "; ".join(_run_sentence(row) for row in changed)
                     + ".")  # fmt: skip
    return " ".join(parts)
