"""Section 6 of the write-up: every architecture through the same export, from `summary.json` (records only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from where223 import markdown
from where223.errors import printable
from where223.study._glance import Glance, field_key
from where223.study._page import Report
from where223.study.architectures import analysis


def section(report: Report) -> None:
    """Section 6: which other architectures share the bug class, where, and what 4.26.0 changed for them. Each
    group's count is of architectures per release, not of records summed over releases."""
    data = report.json("architectures/summary.json")
    releases = data["releases"]
    lines = [
        "## 6. Beyond GPT-2: every architecture through the same export",
        "",
        "Every model type of transformers 4.25.1's base and causal-LM auto mappings, built small with random "
        "weights and exported as notebook 01 exports GPT-2 (CPU bf16 autocast, training mode, opset 17), then "
        "judged by ONNX Runtime, linted, blamed and compared with its eager run:",
        "",
        *markdown.table(
            ["release", "attempted", "built", "fed", "exported", "judged", "types accepted", "accepted (runs here)"],
            [[release, *(data["counts"][release][key] for key in COUNTED)] for release in releases],
        ),
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
        counted = _per_release(analysis.architectures_per_release(group, releases))
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
                f"- {label} ({_per_release(analysis.architectures_per_release(group, releases))})"
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

COUNTED = ("attempted", "built", "fed", "exported", "judged", "types_accepted", "accepted")
OTHER_SHOWN = 12  # groups of other outcomes listed in section 6; the rest are counted and left to the summary

WHAT_LIMIT = 100  # characters of a first error line shown in a group's label

def outcome_labels(groups: list[dict[str, Any]], limit: int = WHAT_LIMIT) -> list[str]:
    """Each `failure_groups` group's label: its outcome, the operator or stage, and its first error line (`what`)
    cut after `limit` characters as `errors.printable` cuts names. Labels stay distinct and say how: where two
    groups with different first lines would show the same text before the cut (the count of characters left out
    is no way to tell lines apart), both print their whole line as Python's `repr` writes it (one line, and
    never the same for two different lines)."""
    def label(group: dict[str, Any], what: str) -> str:
        return f"{group['outcome']} at {group['operator']}" + (f": {markdown.code(what)}" if group["what"] else "")

    kept = [label(group, printable(group["what"][:limit], None)) for group in groups]
    lines_of: dict[str, set[tuple[str, str, str]]] = {}
    for text, group in zip(kept, groups, strict=True):
        lines_of.setdefault(text, set()).add((group["outcome"], group["operator"], group["what"]))
    return [
        label(group, repr(group["what"]) if len(lines_of[text]) > 1 else printable(group["what"], limit))
        for text, group in zip(kept, groups, strict=True)
    ]

def _per_release(counts: Mapping[str, int]) -> str:
    """Architectures per release, e.g. `1 in 4.25.1, 0 in 4.26.0`."""
    return ", ".join(f"{count} in {release}" for release, count in counts.items())



def glance(report: Report) -> Glance:
    """Section 6's line for "At a glance": of the architectures judged in the first release, how many fail with
    the seed's error and how many refuse another type, and what the last release changed."""
    path = "architectures/summary.json"
    data = report.json(path)
    glance = Glance(6, "Which architectures")
    first, last = data["releases"][0], data["releases"][-1]
    counts, outcomes, key = data["counts"][first], data["outcomes"][first], field_key(first)
    seed = [name for group in data["failure_groups"] if group["outcome"] == "where_type_error"
            for name in group["by_release"].get(first, [])]
    found = []
    if "where_type_error" in outcomes:
        found.append(f"{glance.quote(outcomes['where_type_error'], path, f'outcomes.{key}.where_type_error')} fail "
                     f"with the seed's `Where` error ({', '.join(f'`{name}`' for name in seed)})")
    if "type_error" in outcomes:
        found.append(f"{glance.quote(outcomes['type_error'], path, f'outcomes.{key}.type_error')} refuse another type")
    said = (f"of the {glance.quote(counts['attempted'], path, f'counts.{key}.attempted')} model types of "
            f"transformers {first}'s auto mappings, {glance.quote(counts['judged'], path, f'counts.{key}.judged')} "
            f"exported and judged: {' and '.join(found) or 'none refused for its types'}")
    changes = data["release_changes"]
    if last != first:
        moved: dict[tuple[str, str], list[str]] = {}
        for change in changes:
            moved.setdefault((change[first], change[last]), []).append(f"`{change['model_type']}`")
        shown = "; ".join(f"{', '.join(names)}: {before} → {after}" for (before, after), names in moved.items())
        said += (f"; transformers {last} changes "
                 f"{glance.quote(len(changes), path, 'release_changes', reduce='len')} outcomes"
                 + (f" ({shown})" if changes else ""))
    return glance.says(said + ".")
