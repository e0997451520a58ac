"""The checks of notebook 03, each with its measured value, tolerance and verdict, the negative controls built
to break them, and `verify_fix` running them all.

A check that cannot fail proves nothing: every check that passes for the fix is run again on a control made
to break it (the unfixed attention, a variant that changes eager numbers, two wrong scales, a weak and a strong
one, dropout on in both ORTModule and PyTorch, a wrong graph repair, perturbed graphs), and `verification.json`
keeps the controls' verdicts and values beside the fix's. A check that passes with no control failing it, or whose
reference (the numbers it compares against) is all zero or constant, could not have failed: it is `not judged`
(`where223.study.judging`), with the reason in `not_judged`, and does not vote (`judge_by_controls`, applied once the
controls have run; `where223.study.fix.analysis` applies the same rule to committed records). A check says what it
left out of its verdict (`not_judged`) and what it could not measure (`not_measured`); the overall verdict repeats
both. A failing verdict is a result, written like a passing one.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx
import torch
import transformers
from onnx import numpy_helper

from where223.eager import divergence
from where223.eager.numerics import (
    NotMeasured,
    logits_difference,
    numerics_record,
    reduced_precision_logits,
    swapped_where,
)
from where223.eager.precision import autocast
from where223.gpt2 import export, models, releases, reproduce, training, variants
from where223.gpt2.reproduce import NOT_REPRODUCED
from where223.graph import lint, repair
from where223.graph.lint import FindingKind, LintReport
from where223.graph.ort import OrtVerdict, classify, judge, load_session
from where223.graph.repair import Change
from where223.graph.types import model_types
from where223.pipeline import environment, records
from where223.study import judging
from where223.study.fix.record import FIXED_MODEL, FP32_MODEL, REPAIRED_MODEL
from where223.verdicts import FAIL, INFO, NOT_JUDGED, NOT_MEASURED, PASS, verdict

# ORTModule's session stage, which a bf16 graph on CPU reaches once the Where type check passes.
SESSION_FRAME = ":_create_execution_agent"
# The graph repair this study verifies: the Cast at the conflict to the type the node's outputs carry (GPT-2's
# mask value to its attention weights' type, as the source fix does), the rule of `where223 repair` when this
# study was recorded; its default now computes in the widest bound type (graph.repair._binding).
REPAIR_RULE = "output"
# Float initializers with more elements than this are weights, compared by dtype and shape only.
WEIGHT_ELEMENTS = 64


@dataclass
class Check:
    """One verification: what was asked, what was measured, against which tolerance, and the verdict.

    `not_measured` names what the question asks that this device could not measure ("" when nothing);
    `not_judged` what the check measured or found and left out of its verdict on purpose ("" when nothing),
    which the overall verdict repeats, or, when the verdict is NOT_JUDGED, why the whole check could not have
    failed; `per_model` holds, for a check judged model by model, each model's result, its tolerance and how that
    was set, and the models left out with the reason ({} for other checks); `reference`, for a check comparing
    numbers against a reference, `judging.reference_facts` of each reference tensor ([] for other checks).
    """

    name: str
    question: str
    value: Any
    tolerance: Any
    verdict: str
    detail: str = ""
    not_measured: str = ""
    not_judged: str = ""
    per_model: dict[str, Any] = field(default_factory=dict)
    reference: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        for empty in ("per_model", "reference"):
            if not record[empty]:
                del record[empty]
        return record


def compared(name: str, question: str, value: Any, tolerance: Any, ok: bool, detail: str,
             references: Sequence[Any]) -> Check:  # fmt: skip
    """A check comparing numbers against `references` (tensors or arrays): PASS or FAIL by `ok`, unless the
    references do not distinguish (all zero, or constant), when it could not have failed (`judging`): NOT_JUDGED."""
    facts = [judging.reference_facts(_array(reference)) for reference in references]
    reason = judging.not_judged_reason(facts)
    said = judging.judged(ok, reason)
    return Check(name, question, value, tolerance, said, detail, not_judged=reason if said == NOT_JUDGED else "",
                 reference=facts)


def _array(value: Any) -> Any:
    """A tensor (any dtype, bf16 included) or a sequence as a float64 numpy array."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64).cpu().numpy()
    return torch.as_tensor(value, dtype=torch.float64).numpy()


def judge_by_controls(checks: Sequence[Check], controls: Sequence[Control]) -> list[Check]:
    """The rule's second half, once the controls have run: a check that passed and that no control failed has not
    been shown able to fail, so it is NOT_JUDGED with that reason (in place; `checks` returned)."""
    failing = {check.name for control in controls for check in control.checks if check.verdict == FAIL}
    for check in checks:
        if check.verdict == PASS and check.name not in failing:
            check.verdict = NOT_JUDGED
            check.not_judged = judging.not_judged_reason(check.reference, control_failed=False,
                                                         control="no control that ran it failed")  # fmt: skip
    return list(checks)


@dataclass
class Control:
    """A negative control: what was broken on purpose, the checks it was built to break, and their results."""

    name: str
    description: str
    breaks: list[str]
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "breaks": self.breaks,
            "checks": [check.to_dict() for check in self.checks],
        }


def _last_line(message: str | None) -> str:
    return (message or "").strip().splitlines()[-1][:200] if message and message.strip() else ""


# --- (a) lint ----------------------------------------------------------------------------------------------
def lint_check(report: LintReport, accepted: Mapping[str, str] | None = None) -> Check:
    """(a) No type parameter bound to different types (the kind of finding ONNX Runtime refused in the Where),
    and every value typed and every node checked, unless `accepted` says why untyped values ('untyped_values')
    or unchecked nodes ('unchecked_nodes') are acceptable.

    This is not "lint clean": findings of the other kind (a type outside the operator's allowed set) are
    counted, not judged, and the check names them in `not_judged` (so does the overall verdict), as it names
    accepted untyped values and unchecked nodes. `value["lint_clean"]` is the linter's one definition
    (`LintReport.clean`, what the variant table shows), whatever this verdict says.
    """
    accepted = dict(accepted or {})
    conflicts = [v for v in report.violations if v.kind == FindingKind.BINDING_CONFLICT]
    not_allowed = [v for v in report.violations if v.kind == FindingKind.NOT_ALLOWED]
    value = {
        "binding_conflicts": len(conflicts),
        "type_not_allowed": len(not_allowed),
        "untyped_values": report.untyped_values,
        "unchecked_nodes": report.unchecked_count,
        "lint_clean": report.clean,
    }
    unexplained = [key for key in ("untyped_values", "unchecked_nodes") if value[key] and key not in accepted]
    others = sorted({f"{v.op_type}:{v.type_param}" for v in not_allowed})
    ignored = [f"{len(not_allowed)} type_not_allowed finding(s) ({', '.join(others)})"] if not_allowed else []
    ignored += [f"{value[key]} {key.replace('_', ' ')} (accepted: {why})" for key, why in accepted.items()
                if value.get(key)]
    notes = [f"lint clean: {report.clean} ({report.outcome})"]
    notes += [f"type_not_allowed left in place, not judged: {', '.join(others)}" if others else "no other findings"]
    notes += [f"{key} not explained: {value[key]}" for key in unexplained]
    return Check(
        "lint",
        "Does the export bind every type parameter to one type, with every value typed and every node checked? "
        "(binding conflicts judged, other lint findings counted)",
        value,
        "0 binding conflicts; 0 untyped values and 0 unchecked nodes unless accepted; type_not_allowed not judged",
        verdict(not conflicts and not unexplained),
        "; ".join(notes),
        not_judged="; ".join(ignored),
    )


# --- (b) the paths of notebook 01 ----------------------------------------------------------------------------
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
    unsupported = "execution unsupported on CPU" in outcome
    passed = outcome in {"trained", "exported and loaded"} or unsupported
    parameters = record["parameters"]
    what = "training" if record["path"] != "onnx_export" else "inference"
    return Check(
        f"path:{record['path']}",
        f"Does {record['path']} get past the stage that failed?",
        outcome,
        "past the Where type check",
        verdict(passed),
        not_measured=(
            f"{parameters['amp_dtype']} {what} through ONNX Runtime on {parameters['device']}, no kernel "
            f"({record['path']})" if unsupported else ""
        ),
    )


# --- (c) eager numbers ---------------------------------------------------------------------------------------
def eager_outputs(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: str, amp_dtype: str
) -> list[torch.Tensor]:
    """Logits and every layer's attention probabilities of `model` on `batch` under autocast, on the CPU."""
    inputs = {key: value.to(device) for key, value in batch.items() if key != "labels"}
    with torch.no_grad(), autocast(device, amp_dtype):
        out = model.to(device)(**inputs, output_attentions=True)
    return [tensor.cpu() for tensor in (out.logits, *out.attentions)]


def eager_logits_of(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: str, amp_dtype: str
) -> torch.Tensor:
    """Logits of `model` on `batch` under autocast, as float32 on the CPU."""
    return eager_outputs(model, batch, device, amp_dtype)[0].float()


def root_is_exact(head_size: int, amp_dtype: str) -> bool:
    """Whether the autocast dtype holds sqrt(head size) exactly (then a Python-float scale changes nothing)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp_dtype, torch.float32)
    root = math.sqrt(head_size)
    return float(torch.tensor(root, dtype=torch.float64).to(dtype)) == root


def bitwise_check(
    name: str, model_label: str, reference: Sequence[torch.Tensor], patched: Sequence[torch.Tensor], amp_dtype: str
) -> Check:
    """(c) The fix changes no eager number under autocast: logits and attention probabilities, bit for bit."""
    equal = len(reference) == len(patched) and all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(reference, patched, strict=False)
    )
    difference = max(
        (float((a.float() - b.float()).abs().max()) for a, b in zip(reference, patched, strict=False)
         if a.shape == b.shape),
        default=math.inf,
    )
    return compared(
        name,
        f"Are eager logits and attention probabilities on {model_label} under {amp_dtype} autocast bitwise "
        f"equal to unpatched transformers {transformers.__version__}'s?",
        difference,
        0.0,
        equal,
        "max |difference| of logits and attention probabilities",
        reference,
    )


def eager_checks(settings: reproduce.ReproduceSettings, variant: str) -> list[Check]:
    """(c) Eager equality on the run's preset and on the probe (a head size whose root the dtype cannot hold)."""
    model = settings.build_model(dropout=False).eval()
    batch = settings.build_batch()
    probe, probe_batch = models.probe_model(settings.seed, settings.device)
    cases = [("eager_bitwise", model, batch), ("eager_bitwise_probe", probe, probe_batch)]
    references = [eager_outputs(m, b, settings.device, settings.amp_dtype) for _, m, b in cases]
    checks = []
    for (name, module, inputs), reference in zip(cases, references, strict=True):
        with variants.patched_attention(variant):
            patched = eager_outputs(module, inputs, settings.device, settings.amp_dtype)
        head = module.config.n_embd // module.config.n_head
        label = f"{'the ' + settings.preset + ' preset' if name == 'eager_bitwise' else 'the probe'} (head size "
        label += f"{head}, sqrt {'exact' if root_is_exact(head, settings.amp_dtype) else 'inexact'} in "
        label += f"{settings.amp_dtype})"
        checks.append(bitwise_check(name, label, reference, patched, settings.amp_dtype))
    return checks


# --- (d) fp32 inference and training against unpatched PyTorch -----------------------------------------------
def onnxruntime_logits(onnx_path: str | Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits of an exported model run by onnxruntime on the CPU."""
    session = load_session(onnx_path)
    feeds = {name: batch[name].numpy() for name in (i.name for i in session.get_inputs())}
    return torch.from_numpy(session.run(["logits"], feeds)[0]).float()


def close_check(
    name: str, question: str, expected: list[float] | torch.Tensor, measured, tolerance: float
) -> Check:
    """(d) Two series agree within an absolute tolerance (`expected` the reference)."""
    difference = float((torch.as_tensor(expected) - torch.as_tensor(measured)).abs().max())
    return compared(name, question, difference, tolerance, difference <= tolerance, "max |difference|", [expected])


def gradient_differences(
    reference: Mapping[str, torch.Tensor], measured: Mapping[str, torch.Tensor]
) -> list[dict[str, Any]]:
    """Per parameter: max |difference| and that relative to max |reference gradient|, worst relative first."""
    rows = []
    for name in sorted(set(reference) | set(measured)):
        if name not in reference or name not in measured or reference[name].shape != measured[name].shape:
            rows.append({"parameter": name, "max_abs": math.inf, "relative": math.inf})
            continue
        max_abs = float((reference[name] - measured[name]).abs().max())
        scale = float(reference[name].abs().max())
        relative = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
        rows.append({"parameter": name, "max_abs": max_abs, "relative": relative})
    return sorted(rows, key=lambda row: -row["relative"])


def ort_executed(execution: Mapping[str, Any]) -> bool:
    """Whether ORTModule's execution manager shows ONNX Runtime ran the graph, with fallback disabled."""
    return (
        execution.get("execution_agent") is not None
        and execution.get("fallback_policy", "").endswith("FALLBACK_DISABLE")
        and not execution.get("fallback_pending", True)
    )


def gradient_check(
    reference: Mapping[str, torch.Tensor],
    measured: Mapping[str, torch.Tensor],
    tolerance: float,
    execution: Mapping[str, Any],
) -> Check:
    """(d) Every parameter's gradient after the first backward through ORTModule matches PyTorch's (relative
    to the largest reference gradient of that parameter), and ONNX Runtime was seen executing it."""
    rows = gradient_differences(reference, measured)
    worst = rows[0] if rows else {"parameter": "(none)", "max_abs": math.inf, "relative": math.inf}
    executed = ort_executed(execution)
    seen = (
        f"ONNX Runtime executed: {execution.get('execution_agent')} with {execution.get('inference_session')}, "
        f"fallback {execution.get('fallback_policy')}, pending {execution.get('fallback_pending')}"
        if executed else f"ONNX Runtime not seen executing: {dict(execution)}"
    )
    return compared(
        "fp32_gradients",
        f"Do ORTModule's fp32 gradients of all {len(rows)} parameters after the first backward match PyTorch's?",
        worst["relative"],
        tolerance,
        executed and bool(rows) and worst["relative"] <= tolerance,
        f"worst: {worst['parameter']} (max |difference| {worst['max_abs']:.3g}, relative {worst['relative']:.3g}); "
        + seen,
        [reference[name] for name in sorted(reference)],
    )


@dataclass
class Fp32Reference:
    """Unpatched PyTorch in fp32, dropout off: the numbers a fix must not change."""

    batch: dict[str, torch.Tensor]
    logits: torch.Tensor
    data: list[dict[str, torch.Tensor]]
    training: training.TrainingRun


def fp32_reference(settings: reproduce.ReproduceSettings, steps: int) -> Fp32Reference:
    """Unpatched eager fp32 logits of the run's batch and an eager fp32 training run of `steps` AdamW steps."""
    batch = settings.build_batch()
    logits = eager_logits_of(settings.build_model(dropout=False).train(), batch, settings.device, "fp32")
    data = training.batches(settings.build_dataset(settings.batch_size * steps), settings.batch_size, steps)
    run = training.eager_training(settings.preset, settings.seed, data, settings.device, "fp32")
    return Fp32Reference(batch, logits, data, run)


def dropout_reference(settings: reproduce.ReproduceSettings, reference: Fp32Reference) -> Fp32Reference:
    """`reference` with its eager fp32 training run again with dropout on (same seed, same data): what the
    dropout control's ORTModule run, dropout on too, is compared with, so that only the random masks differ."""
    run = training.eager_training(settings.preset, settings.seed, reference.data, settings.device, "fp32",
                                  dropout=True)
    return dataclasses.replace(reference, training=run)


def fp32_inference_check(
    settings: reproduce.ReproduceSettings, variant: str, reference: Fp32Reference, out: Path, tolerance: float
) -> Check:
    """(d) The variant's fp32 export, run by onnxruntime, gives unpatched PyTorch's logits (dropout off)."""
    with variants.patched_attention(variant):
        model = settings.build_model(dropout=False).train()
        path = export.export_onnx(model, reference.batch, out, settings.opset, settings.device, "fp32")
    return close_check("fp32_inference", "Do onnxruntime's fp32 logits match unpatched PyTorch's?",
                       reference.logits, onnxruntime_logits(path, reference.batch), tolerance)


def fp32_training_checks(
    settings: reproduce.ReproduceSettings,
    variant: str,
    reference: Fp32Reference,
    log_dir: Path,
    *,
    loss_tolerance: float,
    gradient_tolerance: float,
    dropout: bool = False,
) -> tuple[list[Check], training.TrainingRun]:
    """(d) ORTModule in fp32 with the variant against unpatched PyTorch: gradients first, then the losses."""
    with variants.patched_attention(variant):
        run = training.ortmodule_training(settings.preset, settings.seed, reference.data, settings.device, "fp32",
                                          settings.opset, log_dir, dropout=dropout)
    checks = [
        gradient_check(reference.training.first_gradients, run.first_gradients, gradient_tolerance,
                       run.ort_execution),
        close_check("fp32_training", f"Do ORTModule's {len(run.losses)} fp32 losses match unpatched PyTorch's?",
                    reference.training.losses, run.losses, loss_tolerance),
    ]
    return checks, run


# --- (e) the release's own graph --------------------------------------------------------------------------------
def _tensor_description(tensor: onnx.TensorProto) -> tuple:
    """dtype, shape and values of a constant; float tensors over WEIGHT_ELEMENTS elements (weights) keep no values."""
    array = numpy_helper.to_array(tensor)
    is_weight = array.dtype.kind == "f" and array.size > WEIGHT_ELEMENTS
    return ("tensor", onnx.TensorProto.DataType.Name(tensor.data_type), tuple(tensor.dims),
            None if is_weight else tuple(array.ravel().tolist()))


def _attribute_description(attribute: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, onnx.TensorProto):
        return _tensor_description(value)
    if isinstance(value, onnx.GraphProto):
        return ("graph", tuple(node.op_type for node in value.node))
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return tuple(_tensor_description(v) if isinstance(v, onnx.TensorProto) else v for v in value)
    return value


def _input_source(
    name: str,
    block: Mapping[int, int],
    producers: Mapping[str, tuple[onnx.NodeProto, int]],
    initializers: Mapping[str, onnx.TensorProto],
) -> tuple:
    if not name:
        return ("none",)
    if name in initializers:
        return ("constant", _tensor_description(initializers[name]))
    if name not in producers:
        return ("input", name)
    producer, position = producers[name]
    if producer.op_type == "Constant":
        values = [_attribute_description(a) for a in producer.attribute]
        return ("constant", values[0] if len(values) == 1 else tuple(values))
    if id(producer) in block:
        return ("node", block[id(producer)], position)
    return ("outside", producer.op_type, position)


def attention_blocks(model: onnx.ModelProto) -> dict[int, list[dict[str, Any]]]:
    """Every layer's attention block (nodes named /transformer/h.<layer>/attn/...), each node described by its
    op type, attributes (constant values and dtypes included), inputs by source and output types.

    An input's source is ('node', index in the block, output position) inside the block, ('constant', its
    value) for a Constant or initializer anywhere, ('outside', producer op type, output position) for another
    node, or ('input', name) for a graph input: names of values do not count, their wiring does.
    """
    types = model_types(model)
    graph = model.graph
    producers = {out: (node, position) for node in graph.node for position, out in enumerate(node.output)}
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    blocks: dict[int, list[onnx.NodeProto]] = {}
    for node in graph.node:
        parts = node.name.split("/")
        if len(parts) > 3 and parts[1] == "transformer" and parts[2].startswith("h.") and parts[3] == "attn":
            blocks.setdefault(int(parts[2][2:]), []).append(node)
    described: dict[int, list[dict[str, Any]]] = {}
    for layer, nodes in sorted(blocks.items()):
        index = {id(node): position for position, node in enumerate(nodes)}

        def source(name: str, index: dict[int, int] = index) -> tuple:
            return _input_source(name, index, producers, initializers)

        described[layer] = [
            {
                "name": node.name,
                "op_type": f"{node.domain}:{node.op_type}" if node.domain else node.op_type,
                "attributes": tuple(sorted((a.name, _attribute_description(a)) for a in node.attribute)),
                "inputs": tuple(source(name) for name in node.input),
                "outputs": tuple(str(types.type_of(out)) for out in node.output),
            }
            for node in nodes
        ]
    return described


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_block_difference(ours: Mapping[int, list[dict]], theirs: Mapping[int, list[dict]]) -> tuple[int, str]:
    """The number of differing nodes over every layer's attention block, and the first difference in words."""
    differing, first = 0, ""
    for layer in sorted(set(ours) | set(theirs)):
        a, b = ours.get(layer, []), theirs.get(layer, [])
        for position in range(max(len(a), len(b))):
            if position >= len(a) or position >= len(b):
                differing += 1
                first = first or (f"layer {layer}: {len(a)} nodes vs {len(b)}; node {position} is only in "
                                  f"{'ours' if len(a) > len(b) else 'theirs'}")
                continue
            mine, other = a[position], b[position]
            fields = [key for key in ("op_type", "attributes", "inputs", "outputs") if mine[key] != other[key]]
            if fields:
                differing += 1
                key = fields[0]
                first = first or (f"layer {layer}, node {position} `{mine['name']}` vs `{other['name']}`: {key} "
                                  f"{_short(mine[key])} vs {_short(other[key])}")
    return differing, first


def release_check(ours: str | Path | onnx.ModelProto, theirs: str | Path | onnx.ModelProto, release_name: str) -> Check:
    """(e) Every layer's attention block equals the release's: op types, wiring, attributes, constants, dtypes."""
    mine, other = (attention_blocks(m if isinstance(m, onnx.ModelProto) else onnx.load(str(m))) for m in (ours, theirs))
    differing, first = first_block_difference(mine, other)
    nodes = sum(map(len, mine.values()))
    ok = differing == 0 and bool(mine)
    return Check(
        "matches_release",
        f"Does every layer's attention block equal {release_name}'s (op types, wiring, attributes, constants, "
        "dtypes)?",
        differing,
        0,
        verdict(ok),
        f"{len(mine)} layer(s), {nodes} nodes vs {sum(map(len, other.values()))}; "
        + (f"first difference: {first}" if first else "no difference" if mine else "no attention block found"),
    )


def perturbed_release(model: onnx.ModelProto, how: str) -> onnx.ModelProto:
    """A copy of a release graph broken on purpose in its last layer: 'swap_where' swaps the Where's two value
    inputs, 'mask_constant' halves the Where's fill value (a control of the release comparison)."""
    broken = copy.deepcopy(model)
    layer = max(attention_blocks(broken))
    where = next(node for node in broken.graph.node
                 if node.op_type == "Where" and node.name.startswith(f"/transformer/h.{layer}/attn/"))
    if how == "swap_where":
        where.input[1], where.input[2] = where.input[2], where.input[1]
        return broken
    if how == "mask_constant":
        fill = (
            [tensor for tensor in broken.graph.initializer if tensor.name == where.input[2]]
            + [onnx.helper.get_attribute_value(attribute) for node in broken.graph.node
               if node.op_type == "Constant" and where.input[2] in node.output
               for attribute in node.attribute if attribute.name == "value"] or _no_fill(where)
        )[0]  # (the same lines as before: exported models' doc strings cite this file's lines below)
        values = (numpy_helper.to_array(fill).astype("float32") / 2).ravel().tolist()
        halved = onnx.helper.make_tensor(fill.name + "_control", fill.data_type, list(fill.dims), values)
        broken.graph.initializer.append(halved)
        where.input[2] = halved.name
        return broken
    raise ValueError(f"unknown perturbation {how!r}: swap_where | mask_constant")


# --- (f) divergence, and the graph repair ------------------------------------------------------------------------
def divergence_check(before: dict[str, Any], after: dict[str, Any]) -> Check:
    """(f) What the fix removes from the eager-versus-graph dtype divergence, and what it leaves."""
    left = [f"{d['file'].rsplit('/', 1)[-1]}:{d['line']} {d['graph_node']}" for d in after["divergences"]]
    return Check(
        "divergence",
        "Which eager-versus-graph dtype divergences remain after the fix?",
        {"before": before["count"], "after": after["count"]},
        "informational",
        INFO,
        "left in place: " + ("; ".join(left) if left else "none"),
    )


def repair_check(repaired: Any, fixed: Any, changes: Sequence[Change]) -> Check:
    """Graph repair, judged by ONNX Runtime rather than the linter that chose the Casts: the repaired graph and
    the source-fixed graph, loaded separately, each get past the type check (a missing kernel after it counts
    as past); a type error in either fails, and the record says which."""
    judged = {"repaired": judge(repaired), "fixed": judge(fixed)}
    refused = [label for label, judgement in judged.items() if not judgement.verdict.types_accepted]
    notes = [f"{len(changes)} Cast(s) inserted"]
    notes += [f"{label} graph refused: {_last_line(judged[label].message)}" for label in refused]
    missing = [label for label, judgement in judged.items() if judgement.verdict == OrtVerdict.MISSING_KERNEL]
    return Check(
        "graph_repair",
        "Does ONNX Runtime accept the types of the repaired graph (and of the source-fixed graph, loaded apart)?",
        {label: judgement.verdict.value for label, judgement in judged.items()},
        "past the type check (accepted or missing_kernel)",
        verdict(not refused and bool(changes)),
        "; ".join(notes),
        not_measured=(f"execution by ONNX Runtime here, no kernel ({', '.join(f'{m} graph' for m in missing)})"
                      if missing else ""),
    )


def miscast_repair(repaired: onnx.ModelProto, changes: Sequence[Change], to: int = onnx.TensorProto.DOUBLE):
    """A control of the graph repair: its Casts cast to the wrong type (double by default)."""
    broken = copy.deepcopy(repaired)
    names = {change.cast_node for change in changes}
    for node in broken.graph.node:
        if node.name in names:
            for attribute in node.attribute:
                if attribute.name == "to":
                    attribute.i = to
    return broken


def export_numerics(
    settings: reproduce.ReproduceSettings, variant: str, fixed: str | Path, repaired: str | Path
) -> dict[str, Any]:
    """The fixed and the repaired exports' reduced-precision logits against eager autocast logits (the fixed
    one against the patched code's, the repaired one against unpatched transformers'), in max |difference|
    and spacings of the autocast dtype: emulated bf16 on a CPU (`where223.eager.numerics`)."""
    batch = settings.build_batch()
    model = settings.build_model(dropout=False).eval()
    unpatched = eager_logits_of(model, batch, settings.device, settings.amp_dtype)
    with variants.patched_attention(variant):
        patched = eager_logits_of(model, batch, settings.device, settings.amp_dtype)
    return {
        "fixed": numerics_record(fixed, batch, patched, settings.device, settings.amp_dtype),
        "repaired": numerics_record(repaired, batch, unpatched, settings.device, settings.amp_dtype),
    }


# Tolerance of `repaired_outputs`, per model: this many spacings of the reduced type (at the source-fixed graph's
# largest |logit|) for each stage of the model, a stage being one of its n_layer blocks or its head.
REPAIRED_OUTPUTS_SPACINGS_PER_STAGE = 2
REPAIRED_OUTPUTS_FORMULA = (f"{REPAIRED_OUTPUTS_SPACINGS_PER_STAGE} x (n_layer + 1) spacings of the reduced type at "
                            "the source-fixed graph's largest |logit|")


def repaired_outputs_tolerance(layers: int) -> int:
    """The tolerance of `repaired_outputs` on a model of `layers` blocks, in spacings of the reduced type:
    REPAIRED_OUTPUTS_SPACINGS_PER_STAGE x (layers + 1), fixed by the type and the depth before any result.

    The repaired graph and the source-fixed graph compute the same function and differ only in where they
    round: in each block the source fix rounds the scaled scores to the reduced type before the mask and the
    softmax, the repair keeps them in float32 until the softmax's output is rounded. Count, per stage (each
    block, and the head that rounds the logits): one spacing for two roundings of slightly different values (half
    a spacing each, in opposite directions), and one more for a later rounding that the difference tips to the
    neighbouring value: 2 spacings. LayerNorm rescales the residual stream at every block, so these add up
    across stages rather than multiply. The count assumes that a stage's relative error reaches the logits
    with a gain of order one; it is an estimate stated in advance, not a proof, which is why a model on which
    the check's control cannot exceed it is left out of the check (`repaired_outputs_check`).
    """
    if layers < 1:
        raise ValueError(f"a model has at least one block, not {layers}")
    return REPAIRED_OUTPUTS_SPACINGS_PER_STAGE * (layers + 1)


@dataclass(frozen=True)
class RepairPair:
    """One model's graph repair (of its unfixed export) and source-fixed export, with the batch to run and the
    model's number of blocks (its tolerance depends on it)."""

    model: str
    repaired: str | Path | onnx.ModelProto
    fixed: str | Path | onnx.ModelProto
    batch: dict[str, torch.Tensor]
    layers: int


def probe_repair_pair(settings: reproduce.ReproduceSettings, variant: str, out_dir: Path) -> RepairPair:
    """The probe (head size 20: its scale inexact in bf16/fp16, its scores large enough to reach the logits),
    exported unfixed and repaired, and exported with `variant`, into `out_dir`."""
    probe, batch = models.probe_model(settings.seed, "cpu")
    unfixed = export.export_onnx(probe, batch, out_dir / "probe-unfixed.onnx", settings.opset, settings.device,
                                 settings.amp_dtype)
    with variants.patched_attention(variant):
        fixed = export.export_onnx(probe, batch, out_dir / "probe-fixed.onnx", settings.opset, settings.device,
                                   settings.amp_dtype)
    return RepairPair("the probe", repair.repair(unfixed, target=REPAIR_RULE)[0], fixed, batch, probe.config.n_layer)


def swapped_repairs(pairs: Sequence[RepairPair]) -> list[RepairPair]:
    """The control of `repaired_outputs`: each pair with every attention Where of its repaired graph given its
    two value inputs swapped (right types, wrong numbers)."""
    return [dataclasses.replace(pair, repaired=swapped_where(pair.repaired)) for pair in pairs]


@dataclass(frozen=True)
class RepairedOutputs:
    """Repaired against source-fixed logits, per model (`logits_difference`'s fields) with each model's number
    of blocks, and how the logits were computed; or why they were not (`not_measured`, then nothing else)."""

    differences: dict[str, dict[str, float]]
    layers: dict[str, int]
    execution: str = ""
    not_measured: str = ""


def measure_repaired_outputs(pairs: Sequence[RepairPair], device: str, amp_dtype: str) -> RepairedOutputs:
    """Each pair's repaired and fixed graphs run in reduced precision (emulated bf16 on a CPU, ONNX Runtime's
    CUDA kernels on a GPU) and their logits compared; not measured when either graph of any pair cannot run."""
    differences, execution = {}, ""
    for pair in pairs:
        logits = {}
        for label in ("fixed", "repaired"):
            try:
                logits[label], execution = reduced_precision_logits(getattr(pair, label), pair.batch, device)
            except NotMeasured as reason:
                return RepairedOutputs({}, {}, not_measured=f"the {label} graph of {pair.model} was not run: {reason}")
        differences[pair.model] = {**logits_difference(logits["repaired"], logits["fixed"], amp_dtype),
                                   **judging.reference_facts(logits["fixed"])}  # the rule reads the reference
    return RepairedOutputs(differences, {pair.model: pair.layers for pair in pairs}, execution)


def _model_line(model: str, result: Mapping[str, Any]) -> str:
    control = (f"; control {result['control_spacings']:.2f} spacings ({result['control_verdict']})"
               if "control_spacings" in result else "")
    return (f"{model} ({result['layers']} block(s)): {result['max_abs_diff']:.3g} = {result['spacings']:.2f} spacings, "
            f"tolerance {result['tolerance_spacings']} (|logits| {result['magnitude']:.3g}, spacing "
            f"{result['spacing']:.3g}){control}")


def repaired_outputs_check(
    measured: RepairedOutputs, amp_dtype: str, control: RepairedOutputs | None = None
) -> Check:
    """Graph repair vs source fix: the same reduced-precision logits on every model, each model within its own
    tolerance (`repaired_outputs_tolerance`: the reduced type's spacing and the model's depth).

    `control` is the same measurement on graphs broken on purpose (`swapped_repairs`). A model on which the
    control stays within the tolerance is one on which no error of that kind can fail the check: it is left
    out of the verdict, its numbers and the reason kept in `per_model` and named in `not_judged`; the verdict
    is a pass only if every model left in passes, and with no model left in the check is "not measured" (it
    does not vote). The same call with `measured` the control's own numbers gives the control's verdict on the
    same models. The value and the tolerance are per model, in spacings, for the models judged.

    On a CPU the graphs run with their reduced-precision kernels emulated (float32 compute, outputs rounded:
    "emulated bf16"), on a GPU on ONNX Runtime's CUDA kernels; a graph that fails the type check is not run, and
    the check is then "not measured". The two graphs compute the same function but round different
    intermediates, so exact equality is not the question. On the tiny preset (weights of 0.02) the attention
    barely reaches the logits, so the probe is measured too.
    """
    models = list(measured.layers) or ["(no model)"]
    question = (f"Do the repaired graph and the source-fixed graph give the same {amp_dtype} logits on "
                f"{' and '.join(models)}, each within {REPAIRED_OUTPUTS_SPACINGS_PER_STAGE} x (n_layer + 1) "
                f"{amp_dtype} spacings?")
    formula = REPAIRED_OUTPUTS_FORMULA.replace("the reduced type", amp_dtype)
    emulated = (f"{amp_dtype} logits on ONNX Runtime's own kernels ({measured.execution}: float32 compute, "
                "outputs rounded)") if measured.execution.startswith("emulated") else ""
    if measured.not_measured:
        return Check("repaired_outputs", question, NOT_MEASURED, formula, NOT_MEASURED, measured.not_measured,
                     per_model={"tolerance_formula": formula, "models": {}, "dropped": {}})
    results: dict[str, dict[str, Any]] = {}
    dropped: dict[str, str] = {}
    for model, difference in measured.differences.items():
        tolerance = repaired_outputs_tolerance(measured.layers[model])
        result = {"layers": measured.layers[model], "tolerance_spacings": tolerance, **difference,
                  "verdict": verdict(difference["spacings"] <= tolerance)}
        if control is not None and not control.not_measured:
            controlled = control.differences[model]["spacings"]
            result.update(control_spacings=controlled, control_verdict=verdict(controlled <= tolerance))
            if controlled <= tolerance:
                dropped[model] = (f"its control (every attention Where's value inputs swapped) differs by only "
                                  f"{controlled:.2f} spacings, within its tolerance of {tolerance}: no error of that "
                                  "kind can fail the check on it")
        flat = judging.undistinguishing([difference]) if "reference_size" in difference else ""
        if flat:
            dropped[model] = f"{flat} (the source-fixed graph's logits): any graph giving them passes"
        results[model] = result
    judged = {model: result for model, result in results.items() if model not in dropped}
    notes = [f"max |difference| of {measured.execution} logits, in spacings of {amp_dtype} at the source-fixed "
             "graph's largest |logit|: " + "; ".join(_model_line(m, r) for m, r in results.items())]
    notes += [f"tolerance {formula}"]
    if control is not None and control.not_measured:
        notes.append(f"control not measured ({control.not_measured}): no model shown able to fail")
    notes += [f"left out: {model}: {why}" for model, why in dropped.items()]
    per_model = {"tolerance_formula": formula, "models": results, "dropped": dropped}
    left_out = "; ".join(f"{model} ({'control within tolerance' if why.startswith('its control') else why})"
                         for model, why in dropped.items())  # fmt: skip
    if not judged:
        notes.insert(0, "no model on which its control fails and its reference distinguishes, so nothing judged")
        return Check("repaired_outputs", question, {model: result["spacings"] for model, result in results.items()},
                     {model: result["tolerance_spacings"] for model, result in results.items()}, NOT_JUDGED,
                     "; ".join(notes), not_measured=emulated, not_judged=left_out, per_model=per_model)
    return Check(
        "repaired_outputs",
        question,
        {model: result["spacings"] for model, result in judged.items()},
        {model: result["tolerance_spacings"] for model, result in judged.items()},
        verdict(all(result["verdict"] == PASS for result in judged.values())),
        "; ".join(notes),
        # emulation checks the graphs' numbers, not ONNX Runtime's own reduced-precision kernels: say so
        not_measured=emulated,
        not_judged=left_out,
        per_model=per_model,
    )


def coverage(checks: Sequence[Check]) -> list[str]:
    """What the checks asked and could not measure on this device, from their own fields: entries that differ
    only in a trailing '(...)' are merged ('x (a)', 'x (b)' -> 'x (a, b)')."""
    missing = [check.not_measured for check in checks if check.not_measured]
    missing += [f"{check.name} ({_last_line(check.detail)})" for check in checks
                if isinstance(check.value, str) and check.value == NOT_MEASURED]
    merged: dict[str, list[str]] = {}
    for entry in missing:
        what, _, which = entry.partition(" (") if entry.endswith(")") else (entry, "", "")
        merged.setdefault(what, [])
        if which and which[:-1] not in merged[what]:
            merged[what].append(which[:-1])
    return [f"{what} ({', '.join(which)})" if which else what for what, which in merged.items()]


def verdict_statement(checks: Sequence[Check], device: str) -> str:
    """The overall verdict with what it covers: how many checks passed, which failed, what each check left out
    of its verdict on purpose (`not_judged`), what was not measured."""
    voting = [c for c in checks if c.verdict in (PASS, FAIL)]
    failed = [c.name for c in voting if c.verdict == FAIL]
    overall = verdict(not failed)
    text = f"{overall} — {len(voting) - len(failed)} of {len(voting)} checks pass"
    if failed:
        text += f"; failed: {', '.join(failed)}"
    text += "".join(f"; {c.name} not judged: {c.not_judged}" if c.verdict == NOT_JUDGED else
                    f"; {c.name} did not judge {c.not_judged}" for c in checks if c.not_judged)  # fmt: skip
    missing = coverage(checks)
    text += f"; not measured on {device}: {'; '.join(missing)}" if missing else "; nothing asked went unmeasured"
    return text


def summary(checks: list[Check], device: str = "cpu") -> dict[str, Any]:
    """The verification record: every check, an overall verdict (informational checks do not vote) and the
    statement of what that verdict covers."""
    voting = [c for c in checks if c.verdict in (PASS, FAIL)]
    return {
        "verdict": verdict(all(c.verdict == PASS for c in voting)),
        "verdict_statement": verdict_statement(checks, device),
        "not_measured": coverage(checks),
        "checks": [c.to_dict() for c in checks],
    }


UNFIXED_VARIANT, NUMERICS_VARIANT, WRONG_SCALE_VARIANT = "4.25", "float+masked_fill", "control-wrong-scale"
WEAK_SCALE_VARIANT = "control-head-size-scale"


def export_and_lint(settings: reproduce.ReproduceSettings, variant: str, out: Path) -> tuple[Path, LintReport]:
    """The bf16 export of the run's model with `variant` patched in, and its lint report."""
    with variants.patched_attention(variant):
        path = export.export_onnx(settings.build_model().train(), settings.build_batch(), out, settings.opset,
                                  settings.device, settings.amp_dtype)
    return path, lint.lint_model(path)


def path_checks(settings: reproduce.ReproduceSettings, variant: str) -> list[Check]:
    """(b) Each path of notebook 01, reproduced with `variant` patched in (in a scratch folder)."""
    checks = []
    for path in reproduce.PATHS:
        with variants.patched_attention(variant), tempfile.TemporaryDirectory() as scratch:
            record = reproduce.reproduce(dataclasses.replace(settings, path=path), Path(scratch))
        checks.append(path_check(record))
    return checks


def run_controls(
    settings: reproduce.ReproduceSettings,
    variant: str,
    reference: Fp32Reference,
    scratch: Path,
    *,
    repaired: onnx.ModelProto,
    changes: Sequence[Change],
    fixed_path: Path,
    release_paths: tuple[Path, Path] | None,
    release_name: str,
    tolerances: Mapping[str, float],
    swapped_outputs: RepairedOutputs,
) -> list[Control]:
    """The negative controls, each running the checks it was built to break (see the module docstring).

    Two wrong scales: the weaker one (dividing by the head size, the control as first built) is kept beside the
    stronger one (multiplying by sqrt(head size)), so the record shows how far each check is from missing an
    error of that kind. `swapped_outputs` is `repaired_outputs`' measurement on its control
    graphs (`swapped_repairs`), made once by `verify_fix`, where the check itself uses it too."""
    unfixed = Control(UNFIXED_VARIANT, "the unfixed attention: transformers 4.25.1's two lines",
                      ["lint", "path:*", "matches_release"])
    unfixed.checks.append(lint_check(export_and_lint(settings, UNFIXED_VARIANT, scratch / "unfixed.onnx")[1]))
    unfixed.checks += path_checks(settings, UNFIXED_VARIANT)
    if release_paths:
        unfixed_release = releases.export_with_variant(UNFIXED_VARIANT, scratch / "unfixed-release-settings.onnx")
        unfixed.checks.append(release_check(unfixed_release, release_paths[1], release_name))

    numerics = Control(NUMERICS_VARIANT, "a Python-float scale: the same numbers unless bf16/fp16 cannot hold "
                       "sqrt(head size)", ["eager_bitwise_probe"], eager_checks(settings, NUMERICS_VARIANT))

    def scale_control(name: str) -> Control:
        control = Control(name, variants.get_variant(name).description,
                          ["eager_bitwise", "eager_bitwise_probe", "fp32_inference", "fp32_gradients", "fp32_training"],
                          eager_checks(settings, name))
        control.checks.append(fp32_inference_check(settings, name, reference, scratch / f"{name}-fp32.onnx",
                                                   tolerances["logits"]))
        control.checks += fp32_training_checks(settings, name, reference, scratch / name,
                                               loss_tolerance=tolerances["loss"],
                                               gradient_tolerance=tolerances["gradient"])[0]
        return control

    weak_scale, wrong_scale = scale_control(WEAK_SCALE_VARIANT), scale_control(WRONG_SCALE_VARIANT)

    dropout = Control("dropout on", f"{variant} trained through ORTModule with dropout on, against PyTorch with "
                      "dropout on from the same seed and data: only the random masks differ (ONNX Runtime draws "
                      "its own random numbers)", ["fp32_gradients", "fp32_training"])
    dropout.checks += fp32_training_checks(settings, variant, dropout_reference(settings, reference),
                                           scratch / "dropout", loss_tolerance=tolerances["loss"],
                                           gradient_tolerance=tolerances["gradient"], dropout=True)[0]

    miscast = Control("repair cast to double", "the graph repair with its Casts to double instead of the "
                      "conflict's type", ["graph_repair"], [repair_check(miscast_repair(repaired, changes), fixed_path,
                                                                          changes)])
    swapped = Control("repair: Where inputs swapped", "the graph repair with every attention Where's two value "
                      "inputs swapped (right types, wrong numbers)", ["repaired_outputs"],
                      [repaired_outputs_check(swapped_outputs, settings.amp_dtype, control=swapped_outputs)])
    controls = [unfixed, numerics, weak_scale, wrong_scale, dropout, miscast, swapped]
    if release_paths:
        ours, theirs = release_paths
        release_model = onnx.load(str(theirs))
        for how, text in (("swap_where", "the release graph with the last layer's Where inputs swapped"),
                          ("mask_constant", "the release graph with the last layer's mask fill value halved")):
            controls.append(Control(f"release: {how}", text, ["matches_release"],
                                    [release_check(ours, perturbed_release(release_model, how), release_name)]))
    return controls


def verify_fix(
    settings: reproduce.ReproduceSettings,
    variant: str,
    source_dir: Path,
    fix_dir: Path,
    *,
    fp32_steps: int = 3,
    loss_tolerance: float = 1e-5,
    logits_tolerance: float = 1e-5,
    gradient_tolerance: float = 1e-4,
    release: str = "4.26.0",
    lint_accepted: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Verify attention `variant` against the unfixed run of `settings` kept in `source_dir`; the record.

    Every check, in notebook 03's order: (a) the fixed export has no type-binding conflict, every value typed
    and every node checked (other lint findings counted, named as not judged), (b) each path of notebook 01 gets
    past the stage that failed, (c) eager logits and attention probabilities under autocast are bitwise
    unchanged on the preset and on the probe, (d) fp32 gradients and losses through ORTModule and fp32 logits
    in onnxruntime match unpatched PyTorch, (e) every layer's attention block equals transformers `release`'s
    own (skipped when `release` is ""), (f) the eager-versus-graph divergence before and after, and the graph
    repair of the unfixed model beside the fix, judged by ONNX Runtime, and its logits against the fix's (emulated
    bf16 on a CPU, on the preset and the probe, each within a tolerance set by its depth, a model on which the
    control cannot fail left out; `numerics` records both against eager). Then the negative controls
    (`run_controls`). The exports, lint.json, divergence.json and the record itself (verification.json) are
    written into `fix_dir`.
    """
    reproduce.read_record(settings, source_dir)  # the unfixed run must be there, and be this one
    fix_dir.mkdir(parents=True, exist_ok=True)
    unfixed = source_dir / reproduce.EXPORTED_MODEL
    model = settings.build_model().train()
    batch = settings.build_batch()
    tolerances = {"loss": loss_tolerance, "logits": logits_tolerance, "gradient": gradient_tolerance}
    checks: list[Check] = []

    fixed_path, fixed_lint = export_and_lint(settings, variant, fix_dir / FIXED_MODEL)
    records.write_json(fix_dir / "lint.json", fixed_lint.to_dict())
    checks.append(lint_check(fixed_lint, lint_accepted))
    checks += path_checks(settings, variant)
    checks += eager_checks(settings, variant)

    reference = fp32_reference(settings, fp32_steps)
    training_checks, ort_run = fp32_training_checks(settings, variant, reference, fix_dir,
                                                    loss_tolerance=loss_tolerance,
                                                    gradient_tolerance=gradient_tolerance)
    checks += training_checks
    checks.append(fp32_inference_check(settings, variant, reference, fix_dir / FP32_MODEL, logits_tolerance))

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        release_paths = None
        if release:
            release_paths = (releases.export_with_variant(variant, scratch / "release-settings.onnx"),
                             releases.export_with_release(release))
            checks.append(release_check(*release_paths, f"transformers {release}"))

        found_before = divergence.divergence_report(model, batch, unfixed, settings.device, settings.amp_dtype)
        with variants.patched_attention(variant):
            found_after = divergence.divergence_report(model, batch, fixed_path, settings.device,
                                                       settings.amp_dtype)
        found = {"before": found_before.to_dict(), "after": found_after.to_dict()}
        records.write_json(fix_dir / "divergence.json", found)
        checks.append(divergence_check(found["before"], found["after"]))

        repaired, changes = repair.repair(unfixed, target=REPAIR_RULE)
        repaired_path = fix_dir / REPAIRED_MODEL
        repair.save_model(repaired, repaired_path)
        checks.append(repair_check(repaired_path, fixed_path, changes))
        repair_pairs = [RepairPair(f"the {settings.preset} preset", repaired_path, fixed_path, batch,
                                   model.config.n_layer),
                        probe_repair_pair(settings, variant, scratch)]
        swapped_outputs = measure_repaired_outputs(swapped_repairs(repair_pairs), settings.device,
                                                   settings.amp_dtype)
        checks.append(repaired_outputs_check(
            measure_repaired_outputs(repair_pairs, settings.device, settings.amp_dtype), settings.amp_dtype,
            control=swapped_outputs))

        controls = run_controls(settings, variant, reference, scratch, repaired=repaired, changes=changes,
                                fixed_path=fixed_path, release_paths=release_paths,
                                release_name=f"transformers {release}", tolerances=tolerances,
                                swapped_outputs=swapped_outputs)

    verification = {
        **summary(judge_by_controls(checks, controls), settings.device),
        "controls": [control.to_dict() for control in controls],
        "numerics": export_numerics(settings, variant, fixed_path, repaired_path),
        "variant": variant,
        "source_run": settings.run_name(),
        "losses": {"eager": reference.training.losses, "ortmodule": ort_run.losses},
        "gradients": gradient_differences(reference.training.first_gradients, ort_run.first_gradients),
        "ortmodule_execution": ort_run.ort_execution,
        "environment": environment.describe(settings.device),
    }
    records.write_json(fix_dir / "verification.json", verification)
    return verification


def _no_fill(where: onnx.NodeProto) -> list:
    """`perturbed_release`'s refusal of a Where whose fill is computed (no initializer or Constant holds it)."""
    raise ValueError(f"the Where {where.name}'s fill value {where.input[2]!r} is neither an initializer nor a "
                     "Constant's value: no constant to halve")
