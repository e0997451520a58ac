"""The checks of notebook 03: each returns its measured value, its tolerance and a verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from where223.gpt2 import models
from where223.gpt2.export import autocast, load_in_onnxruntime
from where223.gpt2.reproduce import is_where_type_error, parse_type_binding
from where223.graph.lint import BINDING_CONFLICT, LintReport
from where223.graph.repair import Change, is_missing_kernel

PASS, FAIL = "pass", "fail"
# ORTModule's stages, in order: the Where error stops the first; a bf16 graph on CPU stops at the second.
GRAPH_BUILD_FRAME = ":_initialize_graph_builder"
SESSION_FRAME = ":_create_execution_agent"


@dataclass
class Check:
    """One verification: what was asked, what was measured, against which tolerance, and the verdict."""

    name: str
    question: str
    value: Any
    tolerance: Any
    verdict: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(ok: bool) -> str:
    return PASS if ok else FAIL


def lint_check(report: LintReport) -> Check:
    """(a) No type parameter bound to different types anywhere in the fixed export."""
    conflicts = [v for v in report.violations if v.kind == BINDING_CONFLICT]
    others = sorted({f"{v.op_type}:{v.type_param}" for v in report.violations if v.kind != BINDING_CONFLICT})
    detail = f"other schema findings left in place: {', '.join(others)}" if others else "no other findings"
    return Check(
        "lint",
        "Does the fixed export bind every type parameter to one type?",
        len(conflicts),
        0,
        verdict(not conflicts),
        detail,
    )


def stage_outcome(record: dict[str, Any]) -> str:
    """Where a reproduction run ended: 'trained', 'where type error', 'graph build passed, bf16 ...', or other."""
    if record["status"] == "not reproduced":
        return "trained" if record["path"] != "onnx_export" else "exported and loaded"
    message = record["error"]["message"]
    if is_where_type_error(parse_type_binding(message)):
        return "where type error"
    stack = record["call_stack"]
    bf16_on_cpu = record["parameters"]["amp_dtype"] == "bf16" and record["parameters"]["device"] == "cpu"
    if bf16_on_cpu and is_missing_kernel(message):
        if record["path"] == "onnx_export":
            return "type check passed, bf16 execution unsupported on CPU"
        if any(frame.endswith(SESSION_FRAME) for frame in stack):
            return "graph build passed, bf16 execution unsupported on CPU"
    return f"other error: {message.strip().splitlines()[-1][:200]}"


def path_check(record: dict[str, Any]) -> Check:
    """(b) A path of notebook 01 gets past the stage that failed before the fix."""
    outcome = stage_outcome(record)
    passed = outcome in {"trained", "exported and loaded"} or "execution unsupported on CPU" in outcome
    return Check(
        f"path:{record['path']}",
        f"Does {record['path']} get past the stage that failed?",
        outcome,
        "past the Where type check",
        verdict(passed),
    )


def eager_logits(
    preset: str, seed: int, batch: dict[str, torch.Tensor], device: str, amp_dtype: str
) -> torch.Tensor:
    """Logits of a freshly built model in eval mode under autocast (whatever attention is patched in)."""
    return eager_logits_of(models.build_model(preset, seed).eval(), batch, device, amp_dtype)


def eager_logits_of(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: str, amp_dtype: str
) -> torch.Tensor:
    """Logits of `model` on `batch` under autocast, as float32 on the CPU."""
    inputs = {key: value.to(device) for key, value in batch.items() if key != "labels"}
    with torch.no_grad(), autocast(device, amp_dtype):
        return model.to(device)(**inputs).logits.float().cpu()


def onnxruntime_logits(onnx_path: str | Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits of an exported model run by onnxruntime on the CPU."""
    session = load_in_onnxruntime(onnx_path)
    feeds = {name: batch[name].numpy() for name in (i.name for i in session.get_inputs())}
    return torch.from_numpy(session.run(["logits"], feeds)[0]).float()


def bitwise_check(reference: torch.Tensor, patched: torch.Tensor, amp_dtype: str) -> Check:
    """(c) The fix changes no eager number under autocast."""
    difference = float((reference - patched).abs().max())
    return Check(
        "eager_bitwise",
        f"Are eager logits under {amp_dtype} autocast bitwise equal to 4.25.1's?",
        difference,
        0.0,
        verdict(torch.equal(reference, patched)),
        "max |difference| of logits",
    )


def close_check(
    name: str, question: str, expected: list[float] | torch.Tensor, measured, tolerance: float
) -> Check:
    """(d) Two series agree within an absolute tolerance."""
    difference = float((torch.as_tensor(expected) - torch.as_tensor(measured)).abs().max())
    return Check(name, question, difference, tolerance, verdict(difference <= tolerance), "max |difference|")


def signature_check(ours: list, release: list, release_name: str) -> Check:
    """(e) Our patched attention block has the same ops and dtypes as a release's own graph."""
    mismatches = sum(1 for a, b in zip(ours, release, strict=False) if tuple(a) != tuple(b)) + abs(
        len(ours) - len(release)
    )
    return Check(
        "matches_release",
        f"Does the patched attention block equal {release_name}'s (op types, dtypes)?",
        mismatches,
        0,
        verdict(mismatches == 0),
        f"{len(ours)} nodes vs {len(release)} nodes",
    )


def divergence_check(before: dict[str, Any], after: dict[str, Any]) -> Check:
    """(f) What the fix removes from the eager-versus-graph dtype divergence, and what it leaves."""
    left = [f"{d['file'].rsplit('/', 1)[-1]}:{d['line']} {d['graph_node']}" for d in after["divergences"]]
    return Check(
        "divergence",
        "Which eager-versus-graph dtype divergences remain after the fix?",
        {"before": before["count"], "after": after["count"]},
        "informational",
        "info",
        "left in place: " + ("; ".join(left) if left else "none"),
    )


def repair_check(report: LintReport, changes: list[Change]) -> Check:
    """Graph repair: the Casts it inserted leave no type-binding conflict."""
    conflicts = sum(1 for v in report.violations if v.kind == BINDING_CONFLICT)
    return Check(
        "graph_repair",
        "Does the Cast-inserting graph repair lint clean of type-binding conflicts?",
        conflicts,
        0,
        verdict(conflicts == 0 and bool(changes)),
        f"{len(changes)} Cast(s) inserted",
    )


def repaired_outputs_check(
    repaired: str | Path, fixed: str | Path, batch: dict[str, torch.Tensor], tolerance: float
) -> Check:
    """Graph repair vs source fix: the same logits from onnxruntime, where onnxruntime can run them."""
    question = "Do the repaired graph and the source-fixed graph give the same logits in onnxruntime?"
    try:
        difference = float(
            (onnxruntime_logits(repaired, batch) - onnxruntime_logits(fixed, batch)).abs().max()
        )
    except Exception as error:  # e.g. NOT_IMPLEMENTED: no bfloat16 Gemm kernel on the CPU
        reason = str(error).strip().splitlines()[-1][:200]
        return Check(
            "repaired_outputs",
            question,
            "not measured",
            tolerance,
            "info",
            f"onnxruntime cannot run these graphs here: {reason}",
        )
    return Check("repaired_outputs", question, difference, tolerance, verdict(difference <= tolerance))


def summary(checks: list[Check]) -> dict[str, Any]:
    """The verification record: every check and an overall verdict (informational checks do not vote)."""
    voting = [c for c in checks if c.verdict in (PASS, FAIL)]
    return {
        "verdict": verdict(all(c.verdict == PASS for c in voting)),
        "checks": [c.to_dict() for c in checks],
    }
