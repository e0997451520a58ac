"""The class study's records, read: which model types each stack, recipe and exporter brings to ONNX Runtime, which
it refuses for their types, grouped by what was refused, with each group's evidence.

`spaces/classes-today.yaml` and `spaces/classes-2022.yaml` are the sweeps (`where223 sweep --space ...`); each cell's
record lands at `outputs/classes/<release>/<recipe>-<exporter>/<model_type>.json`. `summarize` writes
`summary.json` from the records; every function here reads records only (no torch), for notebook 07 and the
write-up.

The records are read as refusals, grouped, in `where223.study.classes.refusals` (what this module and the emulated
CUDA fp16 reruns', `where223.study.classes.emulated`, both read); here: counts per column, the opset scan, the other
stack, timing, and the summary that joins them with the emulated reruns.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

from where223.outcomes import Outcome
from where223.pipeline import environment, paths, publish, records
from where223.study import judging
from where223.study.classes.refusals import (
    OUT_DIR,
    STACK_LABELS,
    TYPE_REFUSALS,
    column,
    converted,
    described,
    groups,
    load_records,
    refused_alike,
)
from where223.sweep.worker import now
from where223.verdicts import NOT_JUDGED, PASS

SUMMARY = "summary.json"  # what `summarize` writes in the sweep's folder
RECIPE_ORDER = ("cpu_bf16_autocast", "bf16_model", "fp16_model")
EXPORTER_ORDER = ("torchscript", "dynamo")


def column_order(col: tuple[str, str, str]) -> tuple[int, int, int, str]:
    """The write-up's order of columns: 2022 before today, the recipes and exporters as listed here."""
    stack, recipe, exporter = col
    labels = list(STACK_LABELS.values())

    def rank(value: str, order: Any) -> int:
        return list(order).index(value) if value in order else len(order)

    return rank(stack, labels), rank(recipe, RECIPE_ORDER), rank(exporter, EXPORTER_ORDER), "/".join(col)


def column_name(col: tuple[str, str, str]) -> str:
    return "/".join(col)


ORT_KERNELS = "ONNX Runtime CPU"  # a comparison's `execution` when ONNX Runtime ran the graph on its own kernels


def emulated(check: dict[str, Any]) -> bool:
    """Whether a comparison ran the graph with its reduced-precision kernels emulated (a `missing_kernel` graph,
    `where223.graph.emulate`: its `execution` says `emulated bf16` or `emulated fp16`) rather than on ONNX Runtime's."""
    return str(check.get("execution") or "").startswith("emulated")


def judged_counts(checks: Iterable[dict[str, Any]], prefix: str = "") -> dict[str, int]:
    """Of some comparisons against eager (records' `numerics`): how many pass under `where223.study.judging` (never
    one that could not have failed), of those how many ran on ONNX Runtime's own kernels and how many were emulated,
    and how many are not judged; each key `prefix_` first when `prefix` is given."""
    verdicts = [(judging.numeric_verdict(check)[0], check) for check in checks]
    passing = [check for said, check in verdicts if said == PASS]
    key = f"{prefix}_" if prefix else ""
    return {f"{key}within_tolerance": len(passing),
            f"{key}within_on_ort_kernels": sum(check.get("execution") == ORT_KERNELS for check in passing),
            f"{key}within_emulated": sum(emulated(check) for check in passing),
            f"{key}not_judged": sum(said == NOT_JUDGED for said, _ in verdicts)}  # fmt: skip


# The cells the engine lost: stopped at their time limit, their process dead, or left by a sweep's deadline (a
# resumed sweep runs a `not_run` cell again); issue 40's target: under 2% of each column's listed model types.
LOST: frozenset[Outcome] = frozenset({Outcome.TIMEOUT, Outcome.CRASHED, Outcome.NOT_RUN})
LOST_TARGET = 0.02


def counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """attempted (every record but a `not_run` one: that cell did not run), built, fed, exported and judged counts,
    then ONNX Runtime's verdicts, the eager comparisons (`within_tolerance` never counting one that could not have
    failed: `not_judged`) and the cells the engine lost (`LOST`, `not_run` included)."""
    rows = list(rows)
    numerics = [r.get("numerics") or {} for r in rows]
    return {
        "attempted": sum(r.get("outcome") != Outcome.NOT_RUN for r in rows),
        "lost": sum(r.get("outcome") in LOST for r in rows),
        "built": sum(bool(r.get("built")) for r in rows),
        "fed": sum(bool(r.get("fed")) for r in rows),
        "exported": sum(bool(r.get("exported")) for r in rows),
        "judged": sum(bool(r.get("judged")) for r in rows),
        "accepted": sum(r.get("outcome") == Outcome.ACCEPTED for r in rows),
        "missing_kernel": sum(r.get("outcome") == Outcome.MISSING_KERNEL for r in rows),
        "type_refused": sum(r.get("outcome") in TYPE_REFUSALS for r in rows),
        "other_refused": sum(r.get("outcome") in (Outcome.OTHER_ERROR,) for r in rows),
        "compared": sum(n.get("status") == "measured" for n in numerics),
        **judged_counts(numerics),
    }


def timing(rows: list[dict[str, Any]], cells_in_space: int | None = None) -> dict[str, Any]:
    """The recorded cells' wall time (each cell's own process, as its worker measured it): count, sum and mean,
    and what the mean makes of the whole space per worker (a projection from the recorded cells' mean, not a
    measurement of the rest)."""
    timed = [r for r in rows if isinstance(r.get("wall_s"), (int, float))]
    walls = [float(r["wall_s"]) for r in timed]
    mean = sum(walls) / len(walls) if walls else None
    projected = None if mean is None or not cells_in_space else round(mean * cells_in_space / 3600, 2)
    # what a cell's process spends outside its timed stages (interpreter start, imports, the record's writing)
    outside = [float(r["wall_s"]) - sum(r["timings_s"].values()) for r in timed if r.get("timings_s")]
    return {"cells": len(walls), "wall_s_sum": round(sum(walls), 1), "mean_wall_s": round(mean, 2) if mean else None,
            "median_wall_s": round(statistics.median(walls), 1) if walls else None,
            "median_outside_stages_s": round(statistics.median(outside), 1) if outside else None,
            "cells_in_space": cells_in_space, "projected_worker_hours": projected}


# The opsets each exporter of today's torch supports from 14 on (torch.onnx._constants: the TorchScript
# exporter's newest is 20, the dynamo exporter's 23; below 18 the dynamo exporter converts its graph down, and keeps
# opset 18 when the conversion fails, as it does for an operator newer than the target: `refusals.converted`).
# torch 2.1.2's TorchScript exporter (the 2022 stack) goes to 19.
OPSETS: dict[tuple[str, str], tuple[int, ...]] = {
    ("today", "torchscript"): tuple(range(14, 21)), ("today", "dynamo"): tuple(range(14, 24)),
    ("2022", "torchscript"): tuple(range(14, 20)),
}
OPSET_RECORDS = "opsets"  # classes/opsets/<release>/<recipe>-<exporter>/<model>-<opset>.json


def opset_plan(groups_: list[dict[str, Any]], stack: str) -> list[str]:
    """The opset scan's cells, as `MODEL RECIPE EXPORTER OPSET` lines, each listed once: each group's representative
    at every opset its exporter supports from 14 on (all of them first: the scan runs in this order), then, for
    each group whose representative is scanned, every member at the opsets on either side of each place the group
    appears or disappears (`boundaries`)."""
    mine = [group for group in groups_ if group["stack"] == stack]
    cells = [(group, group["representative"]["model_type"], opset)
             for group in mine for opset in OPSETS[stack, group["exporter"]]]  # every span first, then its edges
    cells += [(group, member, int(opset)) for group in mine
              for opset in (group.get("opset_span") or {}).get("boundaries", {}) for member in group["members"]]
    lines: list[str] = []
    for group, model, opset in cells:
        line = f"{model} {group['recipe']} {group['exporter']} {opset}"
        if line not in lines:
            lines.append(line)
    return lines


def load_opset_records(out_dir: Path = OUT_DIR) -> list[dict[str, Any]]:
    """The opset scan's records (`classes/opsets/<release>/<recipe>-<exporter>/<model>-<opset>.json`)."""
    return [records.read_json(path) for path in sorted((Path(out_dir) / OPSET_RECORDS).glob("*/*/*.json"))]


def opset_ranges(numbers: list[int]) -> str:
    """[14, 15, 16, 18] -> '14-16, 18'."""
    parts: list[str] = []
    for number in sorted(numbers):
        if parts and int(parts[-1].split("-")[-1]) == number - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{number}"
        else:
            parts.append(str(number))
    return ", ".join(parts)


def boundaries(scanned: list[int], alike: list[int]) -> list[int]:
    """The opsets on either side of each place a group appears or disappears: adjacent scanned opsets of which one
    was refused alike and the other not ([14..20] scanned, alike at 15-20 -> [14, 15]; alike everywhere -> [])."""
    edges: set[int] = set()
    for low, high in pairwise(sorted(scanned)):
        if (low in alike) != (high in alike):
            edges |= {low, high}
    return sorted(edges)


def opset_span(group: dict[str, Any], scanned: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where a group's representative is refused alike (same operator and kind) across the opsets scanned, what it
    is at the others, and what every member is at the `boundaries` (alike, otherwise, or not scanned yet); None when
    the representative was not scanned."""
    model = group["representative"]["model_type"]
    col = (group["stack"], group["recipe"], group["exporter"])
    by_cell = {(r.get("model_type"), int(r["key"]["opset"])): r for r in scanned if column(r) == col}
    mine = {opset: record for (name, opset), record in by_cell.items() if name == model}
    if not mine:
        return None
    honest = [opset for opset, record in mine.items() if converted(record, opset)]
    alike = sorted(opset for opset in honest if refused_alike(mine[opset], group))
    other = {str(opset): described(record, opset) for opset, record in sorted(mine.items()) if opset not in alike}
    at_edges: dict[str, dict[str, Any]] = {}
    for opset in boundaries(honest, alike):
        found = {member: by_cell[(member, opset)] for member in group["members"] if (member, opset) in by_cell}
        same = sorted(m for m, r in found.items() if converted(r, opset) and refused_alike(r, group))
        at_edges[str(opset)] = {
            "members": len(group["members"]), "alike": same,
            "differ": {m: described(r, opset) for m, r in sorted(found.items()) if m not in same},
            "not_scanned": sorted(set(group["members"]) - set(found)),
        }
    return {"model_type": model, "scanned": sorted(mine), "alike": alike, "alike_text": opset_ranges(alike) or "none",
            "other": other, "boundaries": at_edges}


def stacks_compared(group: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """For a group's members, what the other stack made of the same model type under the same recipe and exporter:
    how many were refused alike (same operator and kind), and the others' outcome or class; None when no member
    was run on the other stack that way."""
    others = [label for label in STACK_LABELS.values() if label != group["stack"]]
    found: dict[str, dict[str, Any]] = {}
    for record in rows:
        stack, recipe, exporter = column(record)
        if stack in others and (recipe, exporter) == (group["recipe"], group["exporter"]) and record.get(
                "model_type") in group["members"]:
            found[record["model_type"]] = record
    if not found:
        return None
    alike = [model for model, record in sorted(found.items()) if refused_alike(record, group)]
    differ = {model: described(record) for model, record in sorted(found.items()) if not refused_alike(record, group)}
    return {"stack": others[0], "compared": len(found), "alike": alike, "differ": differ}


def coverage(column_counts: dict[str, dict[str, int]], listed: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Per column of a stack whose space lists its model types: the types with a record of a run (`attempted`: one
    record per type, a `not_run` one not counted), the types listed, the share recorded (what the column's counts
    are over), and the cells the engine lost (`LOST`) with their share of the listed types, under `LOST_TARGET` or
    not."""
    found = {}
    for name, counted in column_counts.items():
        total = listed.get(name.split("/", 1)[0])
        if total:
            lost = counted.get("lost", 0)
            found[name] = {"recorded": counted["attempted"], "listed": total,
                           "share": round(counted["attempted"] / total, 4),
                           "lost": lost, "lost_share": round(lost / total, 4),
                           "lost_under_target": lost / total < LOST_TARGET}
    return found


def summary(rows: list[dict[str, Any]], cells_in_space: dict[str, int] | None = None,
            scanned: list[dict[str, Any]] | None = None, emulated: list[dict[str, Any]] | None = None,
            listed: dict[str, int] | None = None) -> dict[str, Any]:
    """Counts per column and the refusal groups of some records (what `summary.json` holds); with the emulated
    CUDA fp16 reruns (`where223.study.classes.emulated`), each group's `gpu_side` and the refusals only they found;
    with `listed` (stack -> model types its space lists), each column's coverage."""
    from where223.study.classes import emulated as emulation

    columns = sorted({column(r) for r in rows}, key=column_order)
    found = groups(rows)
    return {
        "description": (
            "Every model type of the base and causal-LM mappings of transformers 5.24.0 (today's stack) and 4.25.1 "
            "(the 2022 stack), built small with random weights, under three precision recipes and each stack's "
            "exporters in eval mode, judged by ONNX Runtime's CPU provider and explained"
        ),
        "columns": [{"stack": c[0], "recipe": c[1], "exporter": c[2]} for c in columns],
        "counts": (counted := {column_name(c): counts(r for r in rows if column(r) == c) for c in columns}),
        "coverage": coverage(counted, listed or {}),
        "lost_target": LOST_TARGET,
        "groups": [
            {**group, "opset_span": opset_span(group, scanned or []), "other_stack": stacks_compared(group, rows),
             "gpu_side": emulation.gpu_side(group, emulated or [])}
            for group in found
        ],
        "emulated_only": emulation.refused_only_emulated(emulated or [], found),
        "timing": {stack: timing([r for r in rows if column(r)[0] == stack], (cells_in_space or {}).get(stack))
                   for stack in sorted({column(r)[0] for r in rows})},
        "driver_environment": environment.describe(),
        "updated_at": now(),
    }


SPACES = {"today": "classes-today.yaml", "2022": "classes-2022.yaml"}


def space_sizes() -> dict[str, int]:
    """How many cells each stack's space holds, as the sweep engine reads the space files (no torch)."""
    from where223.sweep.space import load_space

    return {stack: len(load_space(paths.ROOT / "spaces" / name).cells) for stack, name in SPACES.items()}


def listed_types() -> dict[str, int]:
    """How many model types each stack's space lists: a column's coverage is over them (no torch)."""
    from where223.sweep.space import load_space

    return {stack: len({cell.model for cell in load_space(paths.ROOT / "spaces" / name).cells})
            for stack, name in SPACES.items()}


def summarize(out_dir: Path = OUT_DIR) -> dict[str, Any] | None:
    """Write `summary.json` from the records under `out_dir` (None, nothing written, when it does not exist)."""
    if not Path(out_dir).is_dir():
        return None
    from where223.study.classes.emulated import load_emulated_records

    written = summary(load_records(out_dir), space_sizes(), load_opset_records(out_dir),
                      load_emulated_records(out_dir), listed_types())
    publish.write_record(Path(out_dir) / SUMMARY, written, Path(out_dir).parent)
    return written



def plan(stacks: list[str], out_dir: Path = OUT_DIR) -> list[str]:
    """The opset scan's cells for a space's stacks (`today`, `project`) from the records under `out_dir` as they
    are now (the sweep's and the scan's: a member's cells follow from its representative's scanned span)
    (`planner:` of `spaces/classes-opsets*.yaml`; `where223 sweep --space ... --plan` writes them to the space's
    cells file)."""
    found = summary(load_records(out_dir), scanned=load_opset_records(out_dir))["groups"]
    return [line for stack in stacks for line in opset_plan(found, STACK_LABELS.get(stack, stack))]
