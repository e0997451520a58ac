"""The refusal classes under CUDA's fp16 autocast policy, emulated on CPU (issue 24): which classes of the class sweep
a GPU user exporting under `torch.autocast("cuda", torch.float16)` would meet, and which are this CPU's alone.

Every member of every refusal group is exported again by its group's exporter, on its group's stack, under the
sweep recipe `cuda_fp16_autocast_emulated` (`where223.cuda_autocast`); the records go to
`classes/emulated/<release>/cuda_fp16_autocast_emulated-<exporter>/<model>.json` (`spaces/classes-emulated.yaml`,
whose planner is this module's `plan`). A group meets a GPU user exporting under CUDA fp16 autocast when a member rerun
is refused alike (same operator, same kind of refusal); otherwise (every member rerun accepted or refused otherwise)
its class is not one CUDA's autocast policy gives. The whole-model recipes' classes do not depend on a device's
autocast policy: a GPU user who casts the model meets them as this CPU did; their rerun asks whether autocast on a
GPU gives them too.
Records only: no torch.
"""

from __future__ import annotations

from itertools import zip_longest
from pathlib import Path
from typing import Any

from where223.pipeline import records
from where223.study.classes.refusals import (
    OUT_DIR,
    STACK_LABELS,
    TYPE_REFUSALS,
    column,
    described,
    group_key,
    groups,
    load_records,
    refused_alike,
)

RECIPE = "cuda_fp16_autocast_emulated"
RECORDS = "emulated"  # classes/emulated/<release>/<recipe>-<exporter>/<model>.json
MEETS_GPU, CPU_ONLY, NOT_RERUN = "refused alike", "not refused alike", "not rerun yet"


def load_emulated_records(out_dir: Path = OUT_DIR) -> list[dict[str, Any]]:
    """The emulated reruns' records, in path order."""
    return [records.read_json(path) for path in sorted((Path(out_dir) / RECORDS).glob("*/*/*.json"))]


def plan_lines(groups_: list[dict[str, Any]], stack: str) -> list[str]:
    """One stack's cells (`MODEL RECIPE EXPORTER auto`): every group's members in turn (each group's first member
    before any group's second), each (model, exporter) once."""
    mine = [group for group in groups_ if group["stack"] == stack]
    turns = zip_longest(*[[(model, group["exporter"]) for model in group["members"]] for group in mine])
    lines: list[str] = []
    for turn in turns:
        for cell in turn:
            if cell is None:
                continue
            line = f"{cell[0]} {RECIPE} {cell[1]} auto"
            if line not in lines:
                lines.append(line)
    return lines


def plan(stacks: list[str], out_dir: Path = OUT_DIR) -> list[str]:
    """The emulated reruns' cells for a space's stacks (`planner:` of spaces/classes-emulated*.yaml)."""
    found = groups(load_records(out_dir))
    return [line for stack in stacks for line in plan_lines(found, STACK_LABELS.get(stack, stack))]


def gpu_side(group: dict[str, Any], emulated: list[dict[str, Any]]) -> dict[str, Any]:
    """What the emulated reruns made of a group's members: refused alike, refused otherwise, accepted or failed
    (each member's outcome or class), and the group's verdict."""
    stack, exporter = group["stack"], group["exporter"]
    mine = {record["model_type"]: record for record in emulated
            if column(record)[0] == stack and column(record)[2] == exporter
            and record.get("model_type") in group["members"]}  # fmt: skip
    alike = sorted(model for model, record in mine.items() if refused_alike(record, group))
    other = {model: described(record) for model, record in sorted(mine.items()) if model not in alike}
    verdict = NOT_RERUN if not mine else (MEETS_GPU if alike else CPU_ONLY)
    return {"rerun": len(mine), "members": len(group["members"]), "alike": alike, "other": other, "verdict": verdict}


def refused_only_emulated(emulated: list[dict[str, Any]], groups_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Type refusals the emulated reruns found that no group of their stack and exporter has (a class the GPU user
    meets and the CPU recipes did not show)."""
    known = {(g["operator"], g["kind"], g["exporter"], g["stack"]) for g in groups_}
    found = []
    for record in emulated:
        key = group_key(record)
        if key is not None and (key[0], key[1], key[2], key[4]) not in known and record.get("outcome") in TYPE_REFUSALS:
            found.append({"model_type": record["model_type"], "operator": key[0], "kind": key[1],
                          "exporter": key[2], "stack": key[4]})  # fmt: skip
    return found
