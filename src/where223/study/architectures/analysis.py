"""The architecture sweep's records: every transformers architecture through the same export, under both sides of
the 4.26 fix.

`spaces/architectures.yaml` is the sweep (`where223 sweep --space spaces/architectures.yaml`, `make sweep`): each
model type of transformers 4.25.1's auto mappings of base models and causal-LM heads, under each stack (the
project's with 4.25.1, and with 4.26.0 on top), one cell each (`where223.sweep`; `architectures.run` runs it: built
small with random weights, exported as notebook 01 does, judged by ONNX Runtime, linted, blamed, and compared with
eager dtypes). Each record lands at `outputs/architectures/<release>/<model_type>.json`.

`summarize` writes `summary.json` from the records; the functions here read records only (no torch), for notebook
06 and the write-up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from where223.graph.ort import refused_operator as ort_message_operator
from where223.outcomes import Outcome
from where223.pipeline import environment, paths, portable, publish, records
from where223.sweep.worker import now

RELEASES: tuple[str, ...] = ("4.25.1", "4.26.0")
OUT_DIR: Path = paths.OUTPUTS / "architectures"
SUMMARY = "summary.json"  # what `summarize` writes in the sweep's folder
MODEL_TYPES: Path = paths.ROOT / "spaces" / "model_types-4.25.1.txt"


def model_types() -> list[str]:
    """Every model type of the installed transformers' MODEL_MAPPING_NAMES and MODEL_FOR_CAUSAL_LM_MAPPING_NAMES."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    return sorted(set(MODEL_MAPPING_NAMES) | set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))


# --- reading records (no torch) ---------------------------------------------------------------------------------


def load_records(out_dir: Path = OUT_DIR) -> list[dict[str, Any]]:
    """Every architecture record under `out_dir/<release>/`, sorted by release and model type."""
    return [records.read_json(path) for path in sorted(Path(out_dir).glob("*/*.json"))]


def counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """attempted / built / fed / exported / judged counts of some records, then how many ONNX Runtime's type check
    passed (accepted, or refused only for a kernel this machine lacks) and how many it accepted outright."""
    rows = list(rows)
    return {
        "attempted": len(rows),
        "built": sum(bool(r.get("built")) for r in rows),
        "fed": sum(bool(r.get("fed")) for r in rows),
        "exported": sum(bool(r.get("exported")) for r in rows),
        "judged": sum(bool(r.get("judged")) for r in rows),
        "types_accepted": sum(r.get("outcome") in (Outcome.ACCEPTED, Outcome.MISSING_KERNEL) for r in rows),
        "accepted": sum(r.get("outcome") == Outcome.ACCEPTED for r in rows),
    }


def first_root(record: dict[str, Any]) -> dict[str, Any] | None:
    """The blamed node ONNX Runtime names, else the first blamed one (None when nothing was blamed)."""
    blamed = record.get("blame") or []
    node = ((record.get("ort") or {}).get("type_binding") or {}).get("node")
    return next((b for b in blamed if b.get("ort_node") or b["node"] == node), blamed[0] if blamed else None)




def refused_operator(record: dict[str, Any]) -> str | None:
    """The operator ONNX Runtime refused (from its parsed binding or its message), or None."""
    ort = record.get("ort") or {}
    if ort.get("type_binding"):
        return ort["type_binding"]["op_type"]
    return ort_message_operator(ort.get("message"))


def failure_key(record: dict[str, Any]) -> tuple[str, str, str]:
    """(outcome, operator or stage, what) that one architecture's failure is grouped by. For a type refusal, the
    code of the line blame names for ONNX Runtime's node (transformers copies code between models, so one line of
    code in many files is one cause), else its file:line; for a missing kernel, the operator alone (any node of it
    lacks the kernel); for a failed stage, the first line of the error, whole but for the side folder of a path it
    quotes (two errors whose first lines differ anywhere else are two groups; the write-up shortens what it
    prints)."""
    outcome = str(record.get("outcome"))
    operator = refused_operator(record)
    if operator is not None:
        if outcome == Outcome.MISSING_KERNEL:
            return outcome, operator, ""
        root = first_root(record) or {}
        code = (root.get("code") or "").split("  #", 1)[0].strip()
        return outcome, operator, code or portable.without_side_folder(root.get("source")) or "(not blamed)"
    error = record.get("error") or {}
    reason = (error.get("message") or "").strip().splitlines()
    return outcome, str(error.get("stage", "")), portable.without_side_folder(reason[0]) if reason else ""


def failure_groups(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures grouped by `failure_key`, largest group first: the architectures of each release in it, the
    blamed source lines (file:line) and code, and the commonest first eager-versus-graph divergences. `size`
    counts records, so an architecture that fails alike under two releases counts twice in it (the write-up
    counts architectures per release, with `architectures_per_release`)."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in rows:
        if record.get("outcome") == Outcome.ACCEPTED:
            continue
        key = failure_key(record)
        group = groups.setdefault(
            key,
            {"outcome": key[0], "operator": key[1], "what": key[2], "code": None, "sources": set(), "by_release": {},
             "first_divergences": Counter()},
        )  # fmt: skip
        group["by_release"].setdefault(record["release"], []).append(record["model_type"])
        root = first_root(record) if refused_operator(record) and key[0] != Outcome.MISSING_KERNEL else None
        if root and root.get("source"):
            group["sources"].add(portable.without_side_folder(root["source"]))
            group["code"] = group["code"] or root.get("code")
        first = (record.get("divergence") or {}).get("first")
        if first:
            file = portable.without_side_folder(first["file"])
            line = f"{file}:{first['line']} {first['eager_dtype']}->{first['graph_dtype']}"
            group["first_divergences"][line] += 1
    ordered = sorted(groups.values(), key=lambda g: (-sum(map(len, g["by_release"].values())), g["outcome"]))
    for group in ordered:
        group["sources"] = sorted(group["sources"])
        group["source"] = group["sources"][0] if group["sources"] else group["what"]
        group["first_divergences"] = dict(group["first_divergences"].most_common(3))
        group["size"] = sum(map(len, group["by_release"].values()))
    return ordered


def architectures_per_release(group: dict[str, Any], releases: Iterable[str]) -> dict[str, int]:
    """How many architectures (distinct model types) of each of `releases` fell in a `failure_groups` group, 0
    for a release with none. Counted per release, never summed: an architecture that fails alike under both
    releases is one in each (a group's `size` counts records, so it counts that architecture twice)."""
    return {release: len(set(group["by_release"].get(release, ()))) for release in releases}


def release_changes(rows: Iterable[dict[str, Any]], releases: Sequence[str] = RELEASES) -> list[dict[str, Any]]:
    """Per model type, its outcome in each release and whether the later release changed it."""
    outcomes: dict[str, dict[str, str]] = {}
    for record in rows:
        outcomes.setdefault(record["model_type"], {})[record["release"]] = str(record["outcome"])
    changes = []
    for model_type, by_release in sorted(outcomes.items()):
        seen = [by_release.get(release) for release in releases]
        if None not in seen and len(set(seen)) > 1:
            changes.append({"model_type": model_type, **dict(zip(releases, seen, strict=True))})
    return changes


def summarize(out_dir: Path = OUT_DIR) -> dict[str, Any] | None:
    """Write `summary.json`: per release counts and outcomes, each architecture's outcomes, groups, changes (None,
    nothing written, when `out_dir` does not exist)."""
    if not out_dir.is_dir():
        return None
    rows = load_records(out_dir)
    releases = sorted({r["release"] for r in rows})
    summary = {
        "description": (
            "Every model type of transformers 4.25.1's MODEL_MAPPING_NAMES and MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "
            "built small with random weights and exported under torch.autocast('cpu', torch.bfloat16) in training "
            "mode at opset 17, then judged by ONNX Runtime's CPU provider, per transformers release"
        ),
        "releases": releases,
        "counts": {release: counts(r for r in rows if r["release"] == release) for release in releases},
        "outcomes": {
            release: dict(Counter(str(r["outcome"]) for r in rows if r["release"] == release)) for release in releases
        },
        "architectures": {
            model_type: {r["release"]: str(r["outcome"]) for r in rows if r["model_type"] == model_type}
            for model_type in sorted({r["model_type"] for r in rows})
        },
        "failure_groups": failure_groups(rows),
        "release_changes": release_changes(rows, releases),
        "driver_environment": environment.describe(),
        "updated_at": now(),
    }
    publish.write_record(Path(out_dir) / "summary.json", summary, Path(out_dir).parent)
    return summary
