"""The checks of notebook 03, each with its measured value, tolerance and verdict, and `verify_fix` running them all."""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from where223 import figures
from where223.gpt2 import divergence, export, releases, reproduce, training, variants
from where223.gpt2.export import autocast
from where223.gpt2.reproduce import NOT_REPRODUCED
from where223.graph import draw, lint, repair
from where223.graph.lint import FindingKind, LintReport
from where223.graph.ort import OrtVerdict, classify, load_session
from where223.graph.repair import Change
from where223.pipeline import environment, records

PASS, FAIL = "pass", "fail"
# ORTModule's session stage, which a bf16 graph on CPU reaches once the Where type check passes.
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
    conflicts = [v for v in report.violations if v.kind == FindingKind.BINDING_CONFLICT]
    others = sorted(
        {f"{v.op_type}:{v.type_param}" for v in report.violations if v.kind != FindingKind.BINDING_CONFLICT}
    )
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
    if record["status"] == NOT_REPRODUCED:
        return "trained" if record["path"] != "onnx_export" else "exported and loaded"
    message = record["error"]["message"]
    ort_verdict = classify(message)
    if ort_verdict == OrtVerdict.WHERE_TYPE_ERROR:
        return "where type error"
    stack = record["call_stack"]
    bf16_on_cpu = record["parameters"]["amp_dtype"] == "bf16" and record["parameters"]["device"] == "cpu"
    if bf16_on_cpu and ort_verdict == OrtVerdict.MISSING_KERNEL:
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


def eager_logits_of(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: str, amp_dtype: str
) -> torch.Tensor:
    """Logits of `model` on `batch` under autocast, as float32 on the CPU."""
    inputs = {key: value.to(device) for key, value in batch.items() if key != "labels"}
    with torch.no_grad(), autocast(device, amp_dtype):
        return model.to(device)(**inputs).logits.float().cpu()


def onnxruntime_logits(onnx_path: str | Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits of an exported model run by onnxruntime on the CPU."""
    session = load_session(onnx_path)
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
    conflicts = sum(1 for v in report.violations if v.kind == FindingKind.BINDING_CONFLICT)
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


FIXED_MODEL, FP32_MODEL, REPAIRED_MODEL = "model.onnx", "model-fp32.onnx", "repaired.onnx"


def verify_fix(
    settings: reproduce.ReproduceSettings,
    variant: str,
    source_dir: Path,
    fix_dir: Path,
    *,
    fp32_steps: int = 3,
    loss_tolerance: float = 1e-5,
    logits_tolerance: float = 1e-5,
    release: str = "4.26.0",
) -> dict[str, Any]:
    """Verify attention `variant` against the unfixed run of `settings` kept in `source_dir`; the record.

    Every check, in notebook 03's order: (a) the fixed export lints clean, (b) each path of notebook 01 gets
    past the stage that failed, (c) eager logits under autocast are bitwise unchanged, (d) fp32 training
    through ORTModule and fp32 inference in onnxruntime match PyTorch, (e) the patched attention block equals
    transformers `release`'s own (skipped when `release` is ""), (f) the eager-versus-graph divergence before
    and after, and the graph repair of the unfixed model beside the fix. The exports, lint.json,
    divergence.json and the record itself (verification.json) are written into `fix_dir`.
    """
    reproduce.read_record(settings, source_dir)  # the unfixed run must be there, and be this one
    fix_dir.mkdir(parents=True, exist_ok=True)
    unfixed = source_dir / reproduce.EXPORTED_MODEL
    model = settings.build_model().train()
    batch = settings.build_batch()
    checks: list[Check] = []

    with variants.patched_attention(variant):
        fixed_path = export.export_onnx(settings.build_model().train(), batch, fix_dir / FIXED_MODEL,
                                        settings.opset, settings.device, settings.amp_dtype)
    fixed_lint = lint.lint_model(fixed_path)
    records.write_json(fix_dir / "lint.json", fixed_lint.to_dict())
    checks.append(lint_check(fixed_lint))

    for path in reproduce.PATHS:
        with variants.patched_attention(variant), tempfile.TemporaryDirectory() as scratch:
            record = reproduce.reproduce(dataclasses.replace(settings, path=path), Path(scratch))
        checks.append(path_check(record))

    reference = eager_logits_of(settings.build_model().eval(), batch, settings.device, settings.amp_dtype)
    with variants.patched_attention(variant):
        patched = eager_logits_of(settings.build_model().eval(), batch, settings.device, settings.amp_dtype)
    checks.append(bitwise_check(reference, patched, settings.amp_dtype))

    train_data = training.batches(settings.build_dataset(settings.batch_size * fp32_steps), settings.batch_size,
                                  fp32_steps)
    eager_losses = training.eager_losses(settings.preset, settings.seed, train_data, settings.device, "fp32")
    with variants.patched_attention(variant):
        ort_losses = training.ortmodule_losses(settings.preset, settings.seed, train_data, settings.device, "fp32",
                                               settings.opset, fix_dir)
    checks.append(close_check("fp32_training", f"Do ORTModule's {fp32_steps} fp32 losses match PyTorch's?",
                              eager_losses, ort_losses, loss_tolerance))

    with variants.patched_attention(variant):
        fp32_model = settings.build_model(dropout=False).train()
        fp32_path = export.export_onnx(fp32_model, batch, fix_dir / FP32_MODEL, settings.opset, settings.device,
                                       "fp32")
        expected = eager_logits_of(fp32_model, batch, settings.device, "fp32")
    checks.append(close_check("fp32_inference", "Do onnxruntime's fp32 logits match PyTorch's?", expected,
                              onnxruntime_logits(fp32_path, batch), logits_tolerance))

    if release:
        release_path = releases.export_with_release(release)
        checks.append(signature_check(releases.attention_block_signature(fixed_path),
                                      releases.attention_block_signature(release_path), f"transformers {release}"))

    found_before = divergence.divergence_report(model, batch, unfixed, settings.device, settings.amp_dtype)
    with variants.patched_attention(variant):
        found_after = divergence.divergence_report(model, batch, fixed_path, settings.device, settings.amp_dtype)
    found = {"before": found_before.to_dict(), "after": found_after.to_dict()}
    records.write_json(fix_dir / "divergence.json", found)
    checks.append(divergence_check(found["before"], found["after"]))

    repaired, changes = repair.repair(unfixed)
    repaired_path = fix_dir / REPAIRED_MODEL
    repair.save_model(repaired, repaired_path)
    checks.append(repair_check(lint.lint_model(repaired_path), changes))
    checks.append(repaired_outputs_check(repaired_path, fixed_path, batch, logits_tolerance))

    verification = {
        **summary(checks),
        "variant": variant,
        "source_run": settings.run_name(),
        "losses": {"eager": eager_losses, "ortmodule": ort_losses},
        "environment": environment.describe(settings.device),
    }
    records.write_json(fix_dir / "verification.json", verification)
    return verification


def draw_fix(
    settings: reproduce.ReproduceSettings,
    verification: dict[str, Any],
    source_dir: Path,
    fix_dir: Path,
    hops: int = 2,
) -> list[Path]:
    """Notebook 03's figures of a `verify_fix` run: the rejected Where before and after the fix, the graph
    repair beside the fix, and the fp32 losses; their PNGs, in that order (each has an SVG beside it)."""
    rejected = reproduce.read_record(settings, source_dir)["error"]["type_binding"]["node"]
    fixed_where = rejected.replace("/_original_module", "")  # the fixed export is a plain torch.onnx.export
    fixed, variant = fix_dir / FIXED_MODEL, verification["variant"]
    draw.draw_before_after(source_dir / reproduce.EXPORTED_MODEL, fixed, rejected, fixed_where,
                           fix_dir / "before_after", titles=("4.25.1 as released", f"patched: {variant}"), hops=hops)
    draw.draw_before_after(fix_dir / REPAIRED_MODEL, fixed, rejected, fixed_where, fix_dir / "repaired_vs_patched",
                           titles=("graph repair (Cast inserted)", f"source fix: {variant}"), hops=hops)
    losses = verification["losses"]
    figures.loss_curves({"PyTorch eager": losses["eager"], "ORTModule (patched)": losses["ortmodule"]},
                        fix_dir / "losses", title=f"fp32 training, {settings.preset}, dropout off")
    return [fix_dir / f"{stem}.png" for stem in ("before_after", "repaired_vs_patched", "losses")]
