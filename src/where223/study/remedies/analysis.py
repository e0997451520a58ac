"""The remedies study's records, read: for each refusal class of the class study (operator, kind, exporter,
recipe, stack), how many of its members the rerun refused as the class sweep did, how many ONNX Runtime accepts
after `where223 repair` and after the export-time fixes, how many of those compute what eager PyTorch computed
within the class study's tolerance (of those, how many ran on ONNX Runtime's own kernels and how many were
`missing_kernel` graphs whose numerics were emulated), whether the repaired and fixed graphs agree, and whether each
numeric check's control failed as built; and for a sample of the class sweep's accepted models, whether the fixes
changed anything (a regression is a sample whose fixed export ONNX Runtime no longer accepts, or no longer matches
eager). Every comparison is judged here again by `where223.study.judging` from the fields its record keeps (eager's
outputs all zero or constant, or a control that did not fail: `not judged`, never counted within tolerance), so
records made before that rule are judged by it too.

`plan(stacks)` draws the cells from the class study's committed records (`planner:` of spaces/remedies-*.yaml):
`SAMPLES_PER_COLUMN` accepted models of each column first, then the members of every class taken in turn (the
first member of each class, then the second, ...), so a sweep stopped early has touched every class. Every function
here reads records only (no torch).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from itertools import zip_longest
from pathlib import Path
from typing import Any

from where223.graph import ort
from where223.outcomes import TYPES_ACCEPTED
from where223.pipeline import environment, paths, publish, records
from where223.study import judging
from where223.study.classes import analysis as classes
from where223.study.classes import refusals
from where223.study.remedies import baseline
from where223.study.remedies.record import OUT_DIR
from where223.sweep.worker import now
from where223.verdicts import NOT_JUDGED

SUMMARY = "summary.json"
SAMPLES_PER_COLUMN = 3  # accepted models per (stack, recipe, exporter) rerun as controls that must not regress
SPACES = {"today": "remedies-today.yaml", "2022": "remedies-2022.yaml"}


def load_records(out_dir: Path = OUT_DIR) -> list[dict[str, Any]]:
    """Every cell record under `out_dir/<release>/<recipe>-<exporter>/`, in path order."""
    return [records.read_json(path) for path in sorted(Path(out_dir).glob("*/*/*.json"))]


def _sample_rank(model: str) -> str:
    return hashlib.sha256(model.encode()).hexdigest()


def plan_lines(class_rows: list[dict[str, Any]], stack: str) -> list[str]:
    """The cells for one stack (its label: `today`, `2022`) as `MODEL RECIPE EXPORTER auto` lines:
    `SAMPLES_PER_COLUMN` types-accepted models per column (the first by a hash of their name, so the choice is fixed
    and blind to the results; few, so they come first), then every class's members in turn."""
    mine = [r for r in class_rows if refusals.column(r)[0] == stack]
    accepted: dict[tuple[str, str], list[str]] = defaultdict(list)
    for record in mine:
        if record.get("outcome") in TYPES_ACCEPTED:
            accepted[refusals.column(record)[1:]].append(record["model_type"])
    cells = [(m, recipe, exporter) for (recipe, exporter), models in sorted(accepted.items())
             for m in sorted(models, key=_sample_rank)[:SAMPLES_PER_COLUMN]]  # fmt: skip
    found = [g for g in refusals.groups(mine)]
    turns = zip_longest(*[[(m, g["recipe"], g["exporter"]) for m in g["members"]] for g in found])
    cells += [cell for turn in turns for cell in turn if cell is not None]
    lines: list[str] = []
    for model, recipe, exporter in cells:
        line = f"{model} {recipe} {exporter} auto"
        if line not in lines:
            lines.append(line)
    return lines


def plan(stacks: list[str], class_dir: Path = refusals.OUT_DIR) -> list[str]:
    """The cells for a space's stacks (`today`, `project`) from the class study's records (`planner:` of
    spaces/remedies-*.yaml; `where223 sweep --space ... --plan` writes them to the space's cells file)."""
    rows = refusals.load_records(class_dir)
    return [line for stack in stacks for line in plan_lines(rows, refusals.STACK_LABELS.get(stack, stack))]


def cell_key(record: dict[str, Any]) -> tuple[str, str, str, str]:
    """(stack label, recipe, exporter, model) of a record of either study."""
    return (*refusals.column(record), str(record.get("model_type")))


def plain_class(record: dict[str, Any]) -> tuple[str, str, str, str, str] | None:
    """The refusal class of a remedies record's plain export, read as the class study reads its records."""
    plain = record.get("plain") or {}
    return refusals.group_key({**plain, "key": record.get("key")})


def _numerics(part: dict[str, Any]) -> dict[str, Any]:
    return part.get("numerics") or {}


def _accepted(part: dict[str, Any]) -> bool:
    return part.get("outcome") in TYPES_ACCEPTED


def tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts of one class (or sample) over its rerun records: `*_within_tolerance` counts the comparisons that
    pass under `where223.study.judging` (split into `*_within_on_ort_kernels` and `*_within_emulated`), never one
    that could not have failed (`*_not_judged`)."""
    repaired = [r.get("repair") or {} for r in rows]
    fixed = [r.get("fixed") or {} for r in rows]
    numeric = [_numerics(p) for p in repaired + fixed] + [_numerics(r.get("plain") or {}) for r in rows]
    controls = [n["control"] for n in numeric if n.get("status") == "measured" and n.get("control")]
    pairs = [r.get("pair") or {} for r in rows]
    return {
        "rerun": len(rows),
        "refused_before": sum((r.get("plain") or {}).get("outcome") in refusals.TYPE_REFUSALS for r in rows),
        "accepted_before": sum(_accepted(r.get("plain") or {}) for r in rows),
        "repair_accepted": sum(_accepted(p) for p in repaired),
        "repair_refused_by_tool": sum(p.get("status") == "refused" for p in repaired),
        **classes.judged_counts([_numerics(p) for p in repaired], "repair"),
        "fix_accepted": sum(_accepted(p) for p in fixed),
        **classes.judged_counts([_numerics(p) for p in fixed], "fix"),
        "pair_compared": sum(p.get("status") == "measured" for p in pairs),
        "pair_within_tolerance": sum(judging.passed(p) for p in pairs),
        "pair_not_judged": sum(judging.not_judged(p) for p in pairs),
        "controls_run": len(controls),
        "controls_failed_as_built": sum(c.get("fails_as_built") is True for c in controls),
    }


def _not_remedied(rows: list[dict[str, Any]], float32: dict[tuple[str, str, str], dict[str, Any]] | None = None
                  ) -> list[dict[str, Any]]:  # fmt: skip
    """For each rerun member a remedy left refused: what the repair said and what ONNX Runtime said of the fix,
    and, for each still refused by ONNX Runtime, whether the model's float32 export is refused alike
    (`baseline.reason`)."""
    found = []
    for r in rows:
        repaired, fixed = r.get("repair") or {}, r.get("fixed") or {}
        if _accepted(repaired) and _accepted(fixed):
            continue
        stack, _, exporter = refusals.column(r)
        plain32 = (float32 or {}).get((stack, exporter, str(r.get("model_type"))))
        not_run = f"not run ({(r.get('plain') or {}).get('outcome') or r.get('outcome')})"
        refused = baseline.refused_parts(r)
        found.append({
            "model_type": r.get("model_type"),
            "repair": repaired.get("outcome") or repaired.get("status") or not_run,
            "repair_reason": (repaired.get("reason") or ((repaired.get("ort") or {}).get("message") or ""))[:300],
            "fix": fixed.get("outcome") or not_run,
            "fix_refused": refusals.refusal(fixed),
            "fix_message": ort.first_message_line((fixed.get("ort") or {}).get("message") or "")[:300],
            "refusal_left": baseline.refusal_left(refused[0]) if refused else None,
            "float32": baseline.reason(refused[0], plain32) if refused else baseline.NOT_REFUSED,
            "eager": eager_verdict(r),
        })
    return found


EAGER_RAN = "ran"
EAGER_REFUSED = "refused"  # eager PyTorch itself raised under the recipe: there is nothing to match


def eager_verdict(record: dict[str, Any]) -> str:
    """Whether eager PyTorch ran the model under the cell's recipe: `ran`, or `refused: <its error>` (then no
    remedy has an eager result to be held to, and the refusal is the model's own code's, before any exporter)."""
    error = (record.get("eager") or {}).get("error")
    if not error:
        return EAGER_RAN
    return f"{EAGER_REFUSED}: {str(error.get('message') or error.get('type') or '?').splitlines()[0][:200]}"


def tolerances(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The tolerances the records were judged by, per reduced type (read from the records: each numeric check
    keeps the one it used), and what the control is."""
    eager: dict[str, set[float]] = defaultdict(set)
    pair: dict[str, set[float]] = defaultdict(set)
    for r in rows:
        for part in ("plain", "repair", "fixed"):
            n = _numerics(r.get(part) or {})
            if n.get("status") == "measured":
                eager[n["reduced"]].add(n["tolerance"])
        if (r.get("pair") or {}).get("status") == "measured":
            pair[r["pair"]["reduced"]].add(r["pair"]["tolerance"])
    return {"against_eager": {k: sorted(v) for k, v in sorted(eager.items())},
            "repaired_against_fixed": {k: sorted(v) for k, v in sorted(pair.items())},
            "control": "the remedy's graph fed inputs rolled by one along their last axis, against eager's outputs "
                       "for the inputs as they were: must fail the same check"}


def not_judged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every comparison that could not have failed (`where223.study.judging`: eager's outputs all zero or constant,
    or a control that did not fail), with the reason and the seeds the cell tried: counted apart, never within
    tolerance."""
    found = []
    for r in rows:
        for part in ("plain", "repair", "fixed", "pair"):
            n = (r.get("pair") or {}) if part == "pair" else _numerics(r.get(part) or {})
            said, reason = judging.numeric_verdict(n)
            if said == NOT_JUDGED:
                found.append({"cell": "/".join(cell_key(r)), "part": part, "reason": reason,
                              "execution": n.get("execution"), "relative": n.get("relative"),
                              "control_relative": (n.get("control") or {}).get("relative"),
                              "seeds": [s.get("seed") for s in r.get("seeds") or []] or [0]})  # fmt: skip
    return found


def summary(rows: list[dict[str, Any]], class_rows: list[dict[str, Any]],
            cells_in_space: dict[str, int] | None = None,
            float32_rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """Per class and per sample column, what the remedies did (what `summary.json` holds); `float32_rows`, the
    float32 exports of what they left refused (`baseline`), say whether a refusal left is the precision's."""
    by_cell = {cell_key(r): r for r in rows}
    float32 = baseline.by_cell(float32_rows or [])
    found = refusals.groups(class_rows)
    class_list = []
    for group in found:
        column = (group["stack"], group["recipe"], group["exporter"])
        mine = [by_cell[(*column, m)] for m in group["members"] if (*column, m) in by_cell]
        key = (group["operator"], group["kind"], group["exporter"], group["recipe"], group["stack"])
        class_list.append({
            "stack": group["stack"], "recipe": group["recipe"], "exporter": group["exporter"],
            "operator": group["operator"], "kind": group["kind"], "members": group["size"],
            **tally(mine),
            "refused_alike": sum(plain_class(r) == key for r in mine),
            "not_remedied": _not_remedied(mine, float32),
            "fixes": sorted({f for r in mine for f in ((r.get("fixed") or {}).get("export") or {}).get("fixes", [])}),
        })
    members = {(g["stack"], g["recipe"], g["exporter"], m) for g in found for m in g["members"]}
    samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key, record in by_cell.items():
        if key not in members:
            samples["/".join(key[:3])].append(record)
    sample_summary = {}
    for column, mine in sorted(samples.items()):
        regressed = [r["model_type"] for r in mine if _accepted(r.get("plain") or {}) and (
            not _accepted(r.get("fixed") or {})
            or (judging.passed(_numerics(r.get("plain") or {}))
                and not judging.passed(_numerics(r.get("fixed") or {}))))]  # fmt: skip
        sample_summary[column] = {**tally(mine), "models": sorted(r["model_type"] for r in mine),
                                  "repair_nothing_to_do": sum((r.get("repair") or {}).get("status")
                                                              == "nothing_to_repair" for r in mine),
                                  "regressed": sorted(regressed)}  # fmt: skip
    return {
        "description": ("Each refusal class of the class study rerun member by member: the plain export, "
                        "`where223 repair` of it following eager's kernels, and the export with the export-time "
                        "fixes (where223.fixes), each judged by ONNX Runtime's CPU provider and run against eager "
                        "PyTorch; and a sample of accepted models that the fixes must not regress"),
        "tolerances": tolerances(rows),
        "not_judged": not_judged(rows),
        "counts": {stack: tally([r for r in rows if refusals.column(r)[0] == stack])
                   for stack in sorted({refusals.column(r)[0] for r in rows})},
        "classes": class_list,
        "samples": sample_summary,
        "timing": {stack: classes.timing([r for r in rows if refusals.column(r)[0] == stack],
                                         (cells_in_space or {}).get(stack))
                   for stack in sorted({refusals.column(r)[0] for r in rows})},
        "driver_environment": environment.describe(),
        "updated_at": now(),
    }


def space_sizes() -> dict[str, int]:
    """How many cells each stack's space lists, as the sweep engine reads the space files (no torch)."""
    from where223.sweep.space import load_space

    return {stack: len(load_space(paths.ROOT / "spaces" / name).cells) for stack, name in SPACES.items()}


def summarize(out_dir: Path = OUT_DIR, class_dir: Path = refusals.OUT_DIR) -> dict[str, Any] | None:
    """Write `summary.json` from the records under `out_dir` (None, nothing written, when it does not exist)."""
    if not Path(out_dir).is_dir():
        return None
    written = summary(load_records(out_dir), refusals.load_records(class_dir), space_sizes(),
                      baseline.load_baseline_records(class_dir))
    publish.write_record(Path(out_dir) / SUMMARY, written, Path(out_dir).parent)
    return written
