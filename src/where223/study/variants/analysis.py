"""The variant study's records ranked and tabulated: what reads measurements only, never torch.

`where223.study.variants.run` measures (torch); this module turns its rows into tracing levels, sync costs, the
recommendation, each variant's shortfalls and the table, so that the report and the figures, which only read the
JSON record, import no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from where223.graph.ort import OrtVerdict
from where223.verdicts import NOT_MEASURED

BASELINE = "4.25"
ORT_STATUSES: dict[OrtVerdict, str] = {
    OrtVerdict.ACCEPTED: "ONNX Runtime created a session",
    OrtVerdict.WHERE_TYPE_ERROR: "ONNX Runtime refused the Where node's types",
    OrtVerdict.TYPE_ERROR: "ONNX Runtime refused the graph's types",
    OrtVerdict.MISSING_KERNEL: "type check passed, kernel missing on CPU",
    OrtVerdict.OTHER_ERROR: "another ONNX Runtime error",
}
# A variant's export from worst to best (`tracing_level` indexes it).
TRACING_LEVELS: tuple[str, ...] = (
    "refused by ONNX Runtime",
    "accepted, schema violations",
    "lint clean, dtype divergence",
    "lint clean, same dtypes as eager",
)


def trace_correct(row: dict[str, Any]) -> bool | None:
    """ONNX Runtime's type check passes and the linter finds no Where type conflict (None: not exported)."""
    if "ort" not in row:
        return None
    return OrtVerdict(row["ort"]["status"]).types_accepted and not row["where_type_conflict"]


def tracing_level(row: dict[str, Any]) -> int | None:
    """Index into TRACING_LEVELS of a variant's export (None: not exported)."""
    correct = trace_correct(row)
    if correct is None:
        return None
    if not correct:
        return 0
    if not row["lint_clean"]:
        return 1
    return 2 if row["divergences"] else 3


def _cuda_measured(row: dict[str, Any]) -> bool:
    return isinstance(row["syncs_per_step"], (int, float))


def sync_cost(row: dict[str, Any]) -> float:
    """Syncs plus host-to-device copies per step where measured (CUDA), else host-made tensors per forward."""
    if _cuda_measured(row):
        return float(row["syncs_per_step"]) + float(row["h2d_copies_per_step"])
    return float(row["host_tensors_per_forward"])


def paired_spread(ratios: Sequence[float]) -> float:
    """The run-to-run spread of a variant's step time: half the interquartile range of its same-round ratios."""
    if len(ratios) < 2:
        return 0.0
    first, _, third = statistics.quantiles(ratios, n=4, method="inclusive")
    return (third - first) / 2


# The stopping rule of the step timing (bench.step_times), stated in every record it decides.
MIN_ROUNDS = 6  # timed rounds before the rule is consulted (a spread from fewer same-round ratios is noise)
STABLE_ROUNDS = 3  # consecutive rounds over which no decision between two variants may change
# The smallest step-time difference (as a ratio to 4.25.1's step) that may decide between two variants: a variant a
# tenth faster is a reason to choose it, less is not; one run's same-round spread understates the spread between
# runs on a shared CPU, where reruns ordered two variants 0.03 apart both ways (NOTES).
MIN_SPEED_DIFFERENCE = 0.10
STOPPING_RULE = (
    f"timed rounds go on until every pair of variants the recommendation can depend on (`pairs`: eligible and "
    f"equal on every criterion ranked before time; variants.analysis.timing_pairs) has kept the same timing "
    f"decision (a tie within the sum of the two run-to-run spreads or {MIN_SPEED_DIFFERENCE} of 4.25.1's step, or "
    f"one faster: variants.analysis.timing_tie on their paired ratios) over the "
    f"last {STABLE_ROUNDS} rounds, consulted from round {MIN_ROUNDS} on, and stop at the settings' `steps` "
    f"rounds at most; a variant in none of those pairs is timed for the first {MIN_ROUNDS} rounds only (its "
    f"`steps_timed`; its ratio pairs those rounds with the baseline's and has the precision they give)"
)


def timing_rows(times: dict[str, list[float]], baseline: str = BASELINE) -> dict[str, dict[str, float]]:
    """Each variant's paired ratio to the baseline (the median of same-round ratios) and its spread; a variant
    timed for fewer rounds than the baseline is paired with the baseline's first rounds (they ran side by side)."""
    rows = {}
    for name, own in times.items():
        paired = [ours / theirs for ours, theirs in zip(own, times[baseline][: len(own)], strict=True)]
        rows[name] = {"paired_ratio": statistics.median(paired), "paired_ratio_spread": paired_spread(paired)}
    return rows


def timing_decisions(times: dict[str, list[float]], baseline: str = BASELINE,
                     pairs: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], int]:
    """For every pair of variants (sorted by name), or only `pairs`: 0 a tie (`timing_tie`), 1 the first
    slower, -1 faster."""
    rows = timing_rows(times, baseline)
    names = sorted(rows)
    return {
        (a, b): 0 if timing_tie(rows[a], rows[b]) else (1 if rows[a]["paired_ratio"] > rows[b]["paired_ratio"] else -1)
        for index, a in enumerate(names)
        for b in names[index + 1 :]
        if pairs is None or (a, b) in pairs
    }


def timing_pairs(rows: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """The pairs of variants (sorted by name) whose timing decision the recommendation can depend on: both
    eligible and equal on every criterion ranked before time that is known before timing (the sync cost,
    measured on a GPU after the timing, is left out, so the set can only be larger than needed)."""
    eligible = sorted(name for name, row in rows.items() if row["eager_equal"] and trace_correct(row) is not False)

    def key(row: dict[str, Any]) -> tuple:
        return (not row.get("lint_clean", True), row.get("divergences", 0), not row["eager_equal_probe"],
                row.get("attention_casts", 0))

    return {(a, b) for index, a in enumerate(eligible) for b in eligible[index + 1 :] if key(rows[a]) == key(rows[b])}


def timing_settled(history: Sequence[dict[tuple[str, str], int]]) -> bool:
    """Whether the stopping rule stops after the rounds whose decisions `history` holds (one entry per round)."""
    if len(history) < MIN_ROUNDS:
        return False
    last = history[-STABLE_ROUNDS:]
    return all(decisions == last[0] for decisions in last)


def timing_tie(row: dict[str, Any], other: dict[str, Any]) -> bool:
    """Two paired step-time ratios no further apart than the sum of their spreads (the difference of two uncertain
    ratios is uncertain by up to both), or than `MIN_SPEED_DIFFERENCE`: a tie, not a difference."""
    spread = row.get("paired_ratio_spread", 0.0) + other.get("paired_ratio_spread", 0.0)
    return abs(row["paired_ratio"] - other["paired_ratio"]) <= max(spread, MIN_SPEED_DIFFERENCE)


def _by_measurable_speed(group: list[str], rows: dict[str, dict[str, Any]]) -> list[list[str]]:
    """`group` (study order) in clusters: each holds the fastest left and whatever ties with it on time."""
    clusters, left = [], list(group)
    while left:
        fastest = rows[min(left, key=lambda name: rows[name]["paired_ratio"])]
        cluster = [name for name in left if timing_tie(rows[name], fastest)]
        clusters.append(cluster)
        left = [name for name in left if name not in cluster]
    return clusters


def _timing(row: dict[str, Any]) -> str:
    return f"{row['paired_ratio']:.3f} ± {row.get('paired_ratio_spread', 0.0):.3f}"


def recommend(rows: dict[str, dict[str, Any]], preset: str, head_size: int) -> dict[str, Any]:
    """The recommended variant and the reasons, from the measurements alone (`head_size`: the preset's):
    `reasons` state what decided (no step time in them), `timing_reasons` the step times behind them, which vary
    from run to run (`where223 compare` lists them apart as timings).

    Eligible: eager logits bitwise equal to 4.25.1 and a trace-correct export. Among those, ranked by: no
    lint violation at all, fewest dtype divergences from eager, least sync cost, equal outputs on the probe
    too, fewest Casts in the attention block, then the paired step-time ratio, but only where two ratios
    differ by more than the sum of their run-to-run spreads and by a tenth at least (`timing_tie`). Variants
    equal on every measured criterion whose times tie keep the study's order: noise never picks the winner, and
    the reasons say it was a tie.
    """
    eligible = [name for name, row in rows.items() if row["eager_equal"] and trace_correct(row) is not False]
    if not eligible:
        return {
            "variant": None,
            "reasons": ["no variant is both eager-equal and trace-correct"],
            "timing_reasons": [],
            "ranking": [],
        }

    def measured(name: str) -> tuple:
        row = rows[name]
        return (
            not row.get("lint_clean", True),
            row.get("divergences", 0),
            sync_cost(row),
            not row["eager_equal_probe"],
            row.get("attention_casts", 0),
        )

    clusters = [
        cluster
        for key in sorted({measured(name) for name in eligible})
        for cluster in _by_measurable_speed([name for name in eligible if measured(name) == key], rows)
    ]
    ranking = [name for cluster in clusters for name in cluster]
    best, base = rows[ranking[0]], rows[BASELINE]
    reasons = [f"eager logits under autocast are bitwise equal to transformers 4.25.1 on the {preset} preset"]
    if "ort" not in best:
        reasons.append("export not checked in this run: tracing validity did not enter the ranking")
    else:
        reasons += [
            f"export: {ORT_STATUSES[best['ort']['status']]}; lint "
            + ("clean" if best["lint_clean"] else f"{len(best['lint_violations'])} violation(s)"),
            f"{best['divergences']} dtype divergence(s) from eager (4.25: {base['divergences']}), "
            f"{best['attention_casts']} Cast(s) in the attention block (4.25: {base['attention_casts']})",
        ]
    if _cuda_measured(best):
        reasons.append(
            f"{best['syncs_per_step']:g} cudaStreamSynchronize and {best['h2d_copies_per_step']:g} "
            f"host-to-device copies per step "
            f"(4.25: {base['syncs_per_step']:g} and {base['h2d_copies_per_step']:g})"
        )
    else:
        reasons.append(
            f"{best['host_tensors_per_forward']} host-made tensors per forward, each a host-to-device copy "
            f"on a GPU (4.25: {base['host_tensors_per_forward']}); CUDA syncs {NOT_MEASURED} on this device"
        )
    timing_reasons = [
        f"step time {best['step_time_ratio']:.3f} x that of 4.25 (medians), {_timing(best)} x "
        "(median of same-round ratios ± half their interquartile range)"
    ]
    ties = clusters[0][1:]
    if ties:
        reasons.append(
            f"ties with {', '.join(ties)}: equal on every measured criterion, step times within the run-to-run "
            "spreads or a tenth of 4.25.1's; the first in the study's order is named"
        )
        times = ", ".join(f"{name} {_timing(rows[name])}" for name in ties)
        timing_reasons.append(f"tied step times: {ranking[0]} {_timing(best)}; {times}")
    slower = [name for name in ranking if measured(name) == measured(ranking[0]) and name not in clusters[0]]
    if slower:
        reasons.append(
            "faster, beyond the run-to-run spreads and by a tenth at least, than its equals on every measured "
            f"criterion: {', '.join(slower)}")
        times = ", ".join(f"{name} {_timing(rows[name])}" for name in slower)
        timing_reasons.append(f"step times of its slower equals: {times}")
    if not best["eager_equal_probe"]:
        reasons.append(
            "caveat: with a head size whose square root the autocast dtype cannot hold (probe model), its "
            f"outputs differ from 4.25.1; the {preset} preset's head size {head_size} "
            "is not affected (its logits are equal, above)"
        )
    return {"variant": ranking[0], "reasons": reasons, "timing_reasons": timing_reasons, "ranking": ranking}


def shortfalls(rows: dict[str, dict[str, Any]], name: str, best: str) -> list[str]:
    """What variant `name` loses against `best`, criterion by criterion, from the measurements."""
    row, top = rows[name], rows[best]
    lost = []
    if not row["eager_equal"]:
        lost.append(f"eager logits differ from 4.25.1 (max |diff| {row['eager_max_abs_diff']:.3g})")
    if "ort" in row:
        if not trace_correct(row):
            lost.append(ORT_STATUSES[row["ort"]["status"]])
        elif not row["lint_clean"] and top["lint_clean"]:
            ops = sorted({v["op_type"] for v in row["lint_violations"]})
            lost.append(f"{len(row['lint_violations'])} schema violation(s) ({', '.join(ops)})")
        if row["divergences"] > top["divergences"]:
            lost.append(f"{row['divergences']} dtype divergence(s) from eager")
    if sync_cost(row) > sync_cost(top):
        unit = "syncs + host-to-device copies per step" if _cuda_measured(row) else "host-made tensors per forward"
        lost.append(f"{sync_cost(row):g} {unit} against {sync_cost(top):g}")
    if not row["eager_equal_probe"] and top["eager_equal_probe"]:
        lost.append("outputs differ from 4.25.1 on the probe head size")
    return lost


COLUMNS: tuple[tuple[str, str], ...] = (
    ("variant", "variant"),
    ("eager_equal", "eager==4.25.1"),
    ("eager_equal_probe", "probe=="),
    ("trace_correct", "trace ok"),
    ("lint_clean", "lint clean"),
    ("ort_status", "ONNX Runtime"),
    ("divergences", "diverg."),
    ("attention_casts", "casts"),
    ("host_tensors_per_forward", "host tensors"),
    ("step_time_ratio", "step/4.25"),
    ("paired_ratio", "paired"),
    ("syncs_per_step", "syncs/step"),
    ("h2d_copies_per_step", "H2D/step"),
)


def table_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat dict per variant with every COLUMNS field ('not exported' where the export was skipped)."""
    flat = []
    for name, row in record["variants"].items():
        values = {"variant": name, "ort_status": row["ort"]["status"] if "ort" in row else "not exported"}
        for key, _ in COLUMNS:
            values.setdefault(key, row.get(key, "not exported"))
        flat.append(values)
    return flat


def format_table(record: dict[str, Any]) -> str:
    """The study as a plain-text table, then the recommendation."""

    def text(value: Any) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    rows = [[text(row[key]) for key, _ in COLUMNS] for row in table_rows(record)]
    header = [title for _, title in COLUMNS]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in (header, *rows)]
    recommendation = record["recommendation"]
    lines += ["", f"recommended: {recommendation['variant']}"]
    lines += [f"  - {reason}" for reason in recommendation["reasons"]]
    lines += [f"  - {reason}" for reason in recommendation.get("timing_reasons", [])]
    return "\n".join(lines)
