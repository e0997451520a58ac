"""What the torch.fx record says (records only, no torch): per release and configuration, whether the tracer traced
GPT-2, what it fixed at trace time, under each autocast policy whether the traced module computes eager's logits
(forward, eval mode) and whether it trains as eager does (losses, gradients, parameters); the answer to the
reviewer's question in sentences.

Every comparison is judged only when it could have failed: its control was told apart from eager and eager's
reference can tell modules apart (`not_judged_reasons`); otherwise it is `not judged` with the reason, never a pass,
and every count below leaves it out and says how many it left out."""

from __future__ import annotations

from typing import Any

from where223.study.fx.record import PROBE
from where223.verdicts import FAIL, NOT_JUDGED, NOT_MEASURED, PASS

POLICY_NAMES = {"bf16": "CPU bf16 autocast", "fp16_cuda_emulated": "CUDA fp16 autocast (emulated on CPU)"}
AGREES, VALUES_DIFFER, DTYPES_DIFFER, FAILED, NOT_TRACED = (
    "agrees", "values differ", "dtypes differ", "run failed", "not traced")  # fmt: skip
OUTCOMES = (AGREES, VALUES_DIFFER, DTYPES_DIFFER, FAILED, NOT_TRACED, NOT_JUDGED, NOT_MEASURED)
VERDICT_OF = {AGREES: PASS, VALUES_DIFFER: FAIL, DTYPES_DIFFER: FAIL, FAILED: FAIL, NOT_TRACED: NOT_MEASURED,
              NOT_JUDGED: NOT_JUDGED, NOT_MEASURED: NOT_MEASURED}  # fmt: skip
FORWARD, TRAINING = "forward", "training"


def not_judged_reasons(check: dict[str, Any]) -> list[str]:
    """Why a comparison could not have failed: eager's reference cannot tell modules apart (the record's
    `reference_problems`), or its control was missing, did not run, or was not told apart from eager."""
    reasons = list(check.get("reference_problems") or [])
    control = check.get("control")
    if control is None:
        reasons.append("no control was run")
    elif control["error"]:
        reasons.append(f"the control did not run ({control['error']})")
    elif not control["failed"]:
        reasons.append("its control (the first scores line changed) was not told apart from eager")
    return reasons


def outcome(trace: dict[str, Any], run: dict[str, Any] | None) -> str:
    """One forward cell's outcome: bitwise eager's logits, same dtype and other values, another dtype, no run, or
    not judged (`not_judged_reasons`)."""
    if not trace["traced"]:
        return NOT_TRACED
    if run is None or run["error"]:
        return FAILED
    if not_judged_reasons(run):
        return NOT_JUDGED
    if not run["dtypes_agree"]:
        return DTYPES_DIFFER
    return AGREES if run["equal"] else VALUES_DIFFER


def training_outcome(trace: dict[str, Any], training: dict[str, Any] | None) -> str:
    """One training cell's outcome: bitwise eager's run, other values, a run that failed on one side only, not
    measured (not run, or eager and traced alike stopped with the same error), or not judged."""
    if not trace["traced"]:
        return NOT_TRACED
    if training is None:
        return NOT_MEASURED
    if training["eager_error"] or training["traced_error"]:
        return NOT_MEASURED if training["eager_error"] == training["traced_error"] else FAILED
    if not_judged_reasons(training):
        return NOT_JUDGED
    return AGREES if training["compared"]["equal"] else VALUES_DIFFER


def _reason(kind: str, found: str, check: dict[str, Any] | None) -> str | None:
    if check is None:
        return None
    if found == NOT_JUDGED:
        return "; ".join(not_judged_reasons(check))
    if found == NOT_MEASURED and kind == TRAINING:
        return f"eager and the traced module alike stop: {check['eager_error']}"
    return None


def cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One forward row per release, configuration (and probe) and policy with its outcome, verdict and max
    |difference| (and, not judged, why)."""
    rows = []
    for trace in record["traces"]:
        runs = {run["policy"]: run for run in trace["runs"]}
        for policy in record["settings"]["policies"]:
            run = runs.get(policy)
            found = outcome(trace, run)
            rows.append({"kind": FORWARD, "release": trace["release"], "model": trace["model"], "policy": policy,
                         "outcome": found, "verdict": VERDICT_OF[found], "reason": _reason(FORWARD, found, run),
                         "max_abs_diff": None if run is None else run["max_abs_diff"],
                         "eager_dtype": None if run is None else run["eager_dtype"],
                         "traced_dtype": None if run is None else run["traced_dtype"]})  # fmt: skip
    return rows


def training_cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One training row per release, GPT-2 configuration and policy (the probe computes no loss: none), with its
    outcome, verdict, reason and the largest difference of the comparison (and of the control)."""
    rows = []
    for trace in record["traces"]:
        if trace["model"] == PROBE:
            continue
        trainings = {training["policy"]: training for training in trace.get("training", [])}
        for policy in record["settings"]["policies"]:
            training = trainings.get(policy)
            found = training_outcome(trace, training)
            compared = (training or {}).get("compared")
            rows.append({"kind": TRAINING, "release": trace["release"], "model": trace["model"], "policy": policy,
                         "outcome": found, "verdict": VERDICT_OF[found], "reason": _reason(TRAINING, found, training),
                         "max_abs_diff": _largest(compared), "training": training})  # fmt: skip
    return rows


def _largest(compared: dict[str, Any] | None) -> float | None:
    if not compared:
        return None
    values = [compared[key] for key in ("loss_max_abs_diff", "gradient_max_abs_diff", "after_max_abs_diff")
              if compared[key] is not None]  # fmt: skip
    return max(values, default=None)


def compares(record: dict[str, Any]) -> dict[str, str]:
    """Per policy: what its training runs compare, as the record says (`run.TRAINING_COMPARES`)."""
    found: dict[str, str] = {}
    for trace in record["traces"]:
        for training in trace.get("training", []):
            found.setdefault(training["policy"], training["compares"])
    return found


def counts(rows: list[dict[str, Any]]) -> str:
    """`N of M judged agree` with what the count leaves out: not judged and not measured cells, how many."""
    judged = [row for row in rows if row["verdict"] in (PASS, FAIL)]
    text = f"{sum(row['verdict'] == PASS for row in judged)} of {len(judged)} judged agree" if judged else "none judged"
    left = [f"{sum(row['verdict'] == verdict for row in rows)} {verdict}" for verdict in (NOT_JUDGED, NOT_MEASURED)
            if any(row["verdict"] == verdict for row in rows)]  # fmt: skip
    return text + (f"; left out: {', '.join(left)}" if left else ", none left out")


def control_lines(record: dict[str, Any], model: str = "as configured") -> dict[str, str]:
    """Per release: the line its controls changed (`file.py:line`), from the record."""
    lines: dict[str, str] = {}
    for trace in record["traces"]:
        if trace["model"] != model:
            continue
        for check in [*trace["runs"], *trace.get("training", [])]:
            control = check.get("control")
            if control and control["changed"]:
                lines.setdefault(trace["release"], control["changed"])
    return lines


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
    reason = f" ({row['reason']})" if row["reason"] else ""
    return f"under {POLICY_NAMES.get(row['policy'], row['policy'])}: {row['outcome']}{reason}{dtypes}{difference}"


def answer(record: dict[str, Any]) -> list[str]:
    """The forward comparison in sentences, from the record only: per release, GPT-2's configurations; then the
    autocast-region probe (the same torch-only module in every release's interpreter: its first run)."""
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


def _training_detail(row: dict[str, Any]) -> str:
    """What one training cell found, in words, from its record (the same words for releases that found the same)."""
    training = row["training"]
    if row["outcome"] == NOT_TRACED:
        return "not traced"
    if training is None:
        return "not run"
    if row["outcome"] == NOT_MEASURED:
        return f"not measured: {row['reason']}"
    if row["outcome"] == FAILED:
        return (f"run failed: eager {training['eager_error'] or 'trained'}, traced "
                f"{training['traced_error'] or 'trained'}")  # fmt: skip
    compared = training["compared"]
    steps, parameters = training["steps"], compared["parameters"]
    if compared["equal"]:
        found = (f"each of the {steps} steps' losses, all {parameters} parameters' gradients after the first "
                 f"backward and all {parameters} parameters after step {steps} bitwise eager's")  # fmt: skip
    else:
        found = _differences(compared, steps)
    if row["outcome"] == NOT_JUDGED:
        return f"not judged ({row['reason']}): {found}"
    told = _differences(training["control_compared"], steps)
    return f"{row['outcome']}: {found}; its control told apart: {told}"


def _differences(compared: dict[str, Any], steps: int) -> str:
    parameters = compared["parameters"]
    losses = (f"losses equal at all {steps} steps" if compared["losses_equal"] else
              f"losses differ from step {compared['first_unequal_step']} (max |Δ| {compared['loss_max_abs_diff']:.3g})")
    gradients = (f"{parameters - compared['gradients_equal']} of {parameters} first gradients differ "
                 f"(max |Δ| {compared['gradient_max_abs_diff']:.3g}, {compared['worst_gradient']})")
    after = (f"{parameters - compared['after_equal']} of {parameters} parameters after step {steps} differ "
             f"(max |Δ| {compared['after_max_abs_diff']:.3g})")  # fmt: skip
    return f"{losses}, {gradients}, {after}"


def training_answer(record: dict[str, Any]) -> list[str]:
    """The training comparison in sentences, per policy: the count of judged cells that agree, then each distinct
    finding with the releases that found it."""
    rows = [row for row in training_cells(record) if row["outcome"] != NOT_TRACED]  # the tracer refused: no run
    sentences = []
    for policy in record["settings"]["policies"]:
        mine = [row for row in rows if row["policy"] == policy]
        if not mine:
            continue
        found: dict[str, list[str]] = {}
        for row in mine:
            label = row["release"] if row["model"] == "as configured" else f"{row['release']} ({row['model']})"
            found.setdefault(_training_detail(row), []).append(label)
        details = "; ".join(f"{', '.join(labels)}: {detail}" for detail, labels in found.items())
        sentences.append(f"Under {POLICY_NAMES.get(policy, policy)}: {counts(mine)}. {details}.")
    return sentences


def lost_regions(record: dict[str, Any]) -> list[str]:
    """The source's autocast regions that no traced graph holds (fx records calls, not context managers)."""
    regions: list[str] = []
    for trace in record["traces"]:
        if trace["traced"] and trace["autocast_nodes_in_graph"] == 0:
            regions += [f"{trace['release']}: {line}" for line in trace["autocast_regions_in_source"]
                        if f"{trace['release']}: {line}" not in regions]  # fmt: skip
    return regions


def _training_verdict(record: dict[str, Any]) -> str:
    """Training, the question as asked, GPT-2 as configured: per policy, whether the judged cells all agree."""
    rows = [row for row in training_cells(record) if row["model"] == "as configured"]
    parts = []
    for policy in record["settings"]["policies"]:
        mine = [row for row in rows if row["policy"] == policy]
        judged = [row for row in mine if row["verdict"] in (PASS, FAIL)]
        name = POLICY_NAMES.get(policy, policy)
        if judged and all(row["verdict"] == PASS for row in judged):
            parts.append(f"under {name}, no: the traced module trained bitwise as eager did ({counts(mine)})")
        elif judged:
            failed = ", ".join(f"{row['release']} {row['outcome']}" for row in judged if row["verdict"] == FAIL)
            parts.append(f"under {name}, yes: {failed} ({counts(mine)})")
        else:
            reasons = sorted({row["reason"] or row["outcome"] for row in mine})
            parts.append(f"under {name}, no answer: {'; '.join(reasons)} ({counts(mine)})")
    return "Training GPT-2 as configured (the question as asked): " + "; ".join(parts) + "."


def verdict(record: dict[str, Any]) -> str:
    """The answer in one paragraph, from the record's outcomes only: training first (the question as asked), then
    the forward comparison, the configuration the tracer refuses and the probe."""
    rows = cells(record)
    seed = [row for row in rows if row["model"] == "as configured"]
    untraced = sorted({row["release"] for row in rows if row["model"] not in ("as configured", PROBE)
                       and row["outcome"] == NOT_TRACED})  # fmt: skip
    probe = [row for row in rows if row["model"] == PROBE and row["release"] == record["settings"]["releases"][0]]
    judged = [row for row in seed if row["verdict"] in (PASS, FAIL)]
    parts = [_training_verdict(record)] if any(trace.get("training") for trace in record["traces"]) else []
    if judged and all(row["verdict"] == PASS for row in judged):
        parts.append(f"Forward, GPT-2 as configured (eval mode): the traced module's logits were bitwise eager's in "
                     f"every judged cell ({counts(seed)}): the values the tracer fixed (listed above) changed neither "
                     f"the logits' dtype nor their values there.")  # fmt: skip
    elif judged:
        parts.append("Forward, GPT-2 as configured (eval mode), the traced module departs from eager: "
                     + "; ".join(f"{row['release']} {_run_sentence(row)}" for row in judged if row["verdict"] == FAIL)
                     + f" ({counts(seed)}).")  # fmt: skip
    else:
        parts.append(f"Forward, GPT-2 as configured (eval mode): no cell judged ({counts(seed)}).")
    not_judged: dict[str, list[str]] = {}
    for row in seed:
        if row["verdict"] == NOT_JUDGED:
            not_judged.setdefault(f"under {POLICY_NAMES.get(row['policy'], row['policy'])}: {row['reason']}",
                                  []).append(row["release"])  # fmt: skip
    if not_judged:
        parts.append("Not judged: " + "; ".join(f"{', '.join(releases)} {reason}"
                                                 for reason, releases in not_judged.items()) + ".")  # fmt: skip
    if untraced:
        parts.append(f"With `reorder_and_upcast_attn=True` transformers' tracer does not trace GPT-2 at all "
                     f"({', '.join(untraced)}).")
    changed = [row for row in probe if row["outcome"] not in (AGREES, NOT_JUDGED)]
    if changed:
        parts.append("And an autocast region, which that configuration relies on, does not survive tracing: the "
                     "probe computes other values than eager " + "; ".join(_run_sentence(row) for row in changed)
                     + ".")  # fmt: skip
    return " ".join(parts)
