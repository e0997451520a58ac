"""Sweep every transformers architecture through the same export, under both sides of the 4.26 fix.

For each model type of transformers 4.25.1's auto mappings of base models and causal-LM heads, and each release
in `RELEASES`, one subprocess (`where223.study.architecture_cell`, with a timeout) builds the model small with
random weights, exports it as notebook 01 does (CPU, bf16 autocast, training mode, opset 17, stacks in doc
strings) and records ONNX Runtime's verdict, lint, blame and the eager-versus-graph divergence. A release other
than the installed one is imported from its side folder (`where223.gpt2.releases`, installed by `make setup`).

Each record lands at `outputs/architectures/<release>/<model_type>.json` by one rename, only once it is complete;
a record already there is skipped, so an interrupted sweep resumes where it stopped (timeouts and crashes are
retried with `retry=True`). `summarize` writes `summary.json` from the records; the functions below it read
records only (no torch), for notebook 06 and the write-up. `where223 architectures` runs it.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from where223.graph.ort import OrtVerdict
from where223.pipeline import environment, paths, publish, records
from where223.pipeline.worker import run_worker
from where223.study.architecture_cell import CellOutcome

RELEASES: tuple[str, ...] = ("4.25.1", "4.26.0")
OUT_DIR: Path = paths.OUTPUTS / "architectures"
WORK_DIR: Path = paths.CACHE / "architectures"
WORKER = "where223.study.architecture_cell"
TIMEOUT_S = 120.0
# Every outcome, from accepted to never built: ONNX Runtime's verdicts, then the stages that gave none.
OUTCOMES: tuple[str, ...] = (*OrtVerdict, *CellOutcome)
RETRIED: frozenset[str] = frozenset({CellOutcome.TIMEOUT, CellOutcome.CRASHED})


def model_types() -> list[str]:
    """Every model type of the installed transformers' MODEL_MAPPING_NAMES and MODEL_FOR_CAUSAL_LM_MAPPING_NAMES."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    return sorted(set(MODEL_MAPPING_NAMES) | set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))


def record_path(release: str, model_type: str, out_dir: Path = OUT_DIR) -> Path:
    """Where one architecture's record for one release lives."""
    return out_dir / release / f"{model_type}.json"


def is_done(path: Path, retry: bool = False) -> bool:
    """True when a complete record is there (with `retry`, timeouts and crashes count as not done)."""
    try:
        outcome = records.read_json(path).get("outcome")
    except (OSError, ValueError):
        return False
    return outcome in OUTCOMES and not (retry and outcome in RETRIED)


def worker_environment(release: str) -> dict[str, str]:
    """The worker's environment: offline, and the release's side folder first unless it is the installed one."""
    if release == metadata.version("transformers"):
        env = dict(os.environ)
    else:
        from where223.gpt2.releases import release_environment

        env = release_environment(release)
    source = str(paths.ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), source) if p)
    env.update({"TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def run_architecture(
    model_type: str,
    release: str,
    out_dir: Path = OUT_DIR,
    timeout_s: float = TIMEOUT_S,
    work_dir: Path = WORK_DIR,
    worker: str = WORKER,
) -> dict[str, Any]:
    """Run one architecture's worker and publish its record; a timeout or a crash is recorded by the driver."""
    work = work_dir / release / model_type
    work.mkdir(parents=True, exist_ok=True)
    written = work / "record.json"
    command = [
        sys.executable, "-m", worker, "--model-type", model_type, "--release", release,
        "--onnx", str(work / "model.onnx"), "--out", str(written),
    ]  # fmt: skip
    result = run_worker(command, written, timeout_s, env=worker_environment(release), cwd=work)
    if result.record is not None:
        record = result.record
    else:
        record = {
            "model_type": model_type,
            "release": release,
            "outcome": CellOutcome.TIMEOUT if result.timed_out else CellOutcome.CRASHED,
            "error": result.error,
            "recorded_by": "driver",
            "recorded_at": _now(),
            "environment": environment.describe(),
        }
    record["wall_s"] = result.wall_s
    publish.write_record(record_path(release, model_type, out_dir), record, Path(out_dir).parent)
    return record


def shard_of(items: Sequence[str], shard: tuple[int, int]) -> list[str]:
    """Items `index`, `index + count`, ... of `items` for shard (index, count)."""
    index, count = shard
    return list(items[index::count])


def build(
    releases: Sequence[str] = RELEASES,
    types: Sequence[str] | None = None,
    *,
    out_dir: Path = OUT_DIR,
    timeout_s: float = TIMEOUT_S,
    force: bool = False,
    retry: bool = False,
    shard: tuple[int, int] = (0, 1),
    work_dir: Path = WORK_DIR,
    worker: str = WORKER,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run every architecture of this shard not yet recorded (all with `force`), release by release; summarize."""
    chosen = shard_of(list(types) if types is not None else model_types(), shard)
    plan = [(release, model_type) for release in releases for model_type in chosen]
    counts: Counter[str] = Counter()
    for number, (release, model_type) in enumerate(plan, 1):
        path = record_path(release, model_type, out_dir)
        if not force and is_done(path, retry):
            counts["already recorded"] += 1
            continue
        record = run_architecture(model_type, release, out_dir, timeout_s, work_dir, worker)
        counts[record["outcome"]] += 1
        tally = ", ".join(f"{key} {value}" for key, value in sorted(counts.items()))
        progress(f"[{number}/{len(plan)}] {release} {model_type}: {record['outcome']} ({record['wall_s']} s; {tally})")
    return summarize(out_dir)


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
        "types_accepted": sum(r.get("outcome") in (OrtVerdict.ACCEPTED, OrtVerdict.MISSING_KERNEL) for r in rows),
        "accepted": sum(r.get("outcome") == OrtVerdict.ACCEPTED for r in rows),
    }


def first_root(record: dict[str, Any]) -> dict[str, Any] | None:
    """The blamed node ONNX Runtime names, else the first blamed one (None when nothing was blamed)."""
    blamed = record.get("blame") or []
    node = ((record.get("ort") or {}).get("type_binding") or {}).get("node")
    return next((b for b in blamed if b.get("ort_node") or b["node"] == node), blamed[0] if blamed else None)


# What an ONNX Runtime refusal without a parsed binding names: the operator whose input type is not allowed, or the
# operator without a kernel.
_REFUSED_OPERATOR = re.compile(r"of operator \((?P<checked>[^)]+)\)|implementation for (?P<kernel>\w+)\(")
# A release's side folder in a portable path, or in an error that quotes one: the same file of another release
# groups with it (a path starts the text or follows a space, a quote or a bracket).
_SIDE_FOLDER = re.compile(r"(?:^|(?<=[\s'\"(\[]))\.cache/transformers/[^/\s]+/")


def refused_operator(record: dict[str, Any]) -> str | None:
    """The operator ONNX Runtime refused (from its parsed binding or its message), or None."""
    ort = record.get("ort") or {}
    if ort.get("type_binding"):
        return ort["type_binding"]["op_type"]
    match = _REFUSED_OPERATOR.search(ort.get("message") or "")
    return (match["checked"] or match["kernel"]) if match else None


def _portable_source(source: str | None) -> str:
    return _SIDE_FOLDER.sub("", source or "")


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
        if outcome == OrtVerdict.MISSING_KERNEL:
            return outcome, operator, ""
        root = first_root(record) or {}
        code = (root.get("code") or "").split("  #", 1)[0].strip()
        return outcome, operator, code or _portable_source(root.get("source")) or "(not blamed)"
    error = record.get("error") or {}
    reason = (error.get("message") or "").strip().splitlines()
    return outcome, str(error.get("stage", "")), _portable_source(reason[0]) if reason else ""


def failure_groups(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures grouped by `failure_key`, largest group first: the architectures of each release in it, the
    blamed source lines (file:line) and code, and the commonest first eager-versus-graph divergences. `size`
    counts records, so an architecture that fails alike under two releases counts twice in it (the write-up
    counts architectures per release, with `architectures_per_release`)."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in rows:
        if record.get("outcome") == OrtVerdict.ACCEPTED:
            continue
        key = failure_key(record)
        group = groups.setdefault(
            key,
            {"outcome": key[0], "operator": key[1], "what": key[2], "code": None, "sources": set(), "by_release": {},
             "first_divergences": Counter()},
        )  # fmt: skip
        group["by_release"].setdefault(record["release"], []).append(record["model_type"])
        root = first_root(record) if refused_operator(record) and key[0] != OrtVerdict.MISSING_KERNEL else None
        if root and root.get("source"):
            group["sources"].add(_portable_source(root["source"]))
            group["code"] = group["code"] or root.get("code")
        first = (record.get("divergence") or {}).get("first")
        if first:
            line = f"{_portable_source(first['file'])}:{first['line']} {first['eager_dtype']}->{first['graph_dtype']}"
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


def summarize(out_dir: Path = OUT_DIR) -> dict[str, Any]:
    """Write `summary.json`: per release counts and outcomes, each architecture's outcomes, groups, changes."""
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
        "updated_at": _now(),
    }
    publish.write_record(Path(out_dir) / "summary.json", summary, Path(out_dir).parent)
    return summary
