"""Reduced-precision numerics of exported graphs, measured against eager autocast logits.

On a CPU, ONNX Runtime has no bf16 kernels for Gemm, MatMul and more, so a bf16 graph runs only with those
kernels emulated (`where223.graph.emulate`: float32 compute, outputs rounded to bf16), and every number
measured that way is labelled "emulated bf16". On a GPU (device 'cuda') the same graph runs on ONNX Runtime's
CUDA kernels as it is. Either way the graph runs with its Dropouts passing through (training-mode exports keep
them), as eager `eval()` does, and a graph that fails the type check is never run: its numbers are "not
measured", with the reason.

Differences are given as max |difference| and in units of the reduced type's spacing at the magnitude of the
reference logits (bf16 keeps 8 significant bits: spacing 2**(floor(log2 |x|) - 7)).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from where223.graph.emulate import (
    EmulationError,
    EmulationRefused,
    emulate_reduced_precision,
    emulated_outputs,
    run_float_boundary,
    spacing,
    without_dropout,
)
from where223.graph.ort import OrtVerdict, judge
from where223.verdicts import NOT_MEASURED

ELEMENT_TYPES: dict[str, str] = {
    "bf16": "bfloat16", "fp16": "float16", "fp32": "float", "fp16_cuda_emulated": "float16",
}  # fmt: skip
CUDA_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")


class NotMeasured(RuntimeError):
    """The graph could not be run in reduced precision here; the message says why."""


def onnx_feeds(batch: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The export's inputs (input_ids, attention_mask) from a batch, as numpy arrays."""
    return {name: batch[name].cpu().numpy() for name in ("input_ids", "attention_mask")}


def reduced_precision_logits(
    onnx_model: str | Path | onnx.ModelProto, batch: Mapping[str, torch.Tensor], device: str
) -> tuple[np.ndarray, str]:
    """The graph's logits (float32) on `batch`, Dropouts passing through, and how they were computed:
    'emulated bf16' on a CPU, ONNX Runtime's CUDA kernels on 'cuda'. Raises NotMeasured with the reason when
    the graph fails the type check or cannot be run here."""
    model = without_dropout(onnx_model)
    if device == "cuda":
        judgement = judge(model, CUDA_PROVIDERS)
        if judgement.verdict != OrtVerdict.ACCEPTED:
            raise NotMeasured(f"ONNX Runtime does not run the graph on cuda: {judgement.verdict} "
                              f"({(judgement.message or '').strip()[:300]})")
        logits = run_float_boundary(model, onnx_feeds(batch), ["logits"], CUDA_PROVIDERS)["logits"]
        return logits, "ONNX Runtime CUDA kernels"
    try:
        emulation = emulate_reduced_precision(model)
    except (EmulationRefused, EmulationError) as error:
        raise NotMeasured(str(error)) from error
    return emulated_outputs(emulation, onnx_feeds(batch), ["logits"])["logits"], emulation.label


def logits_difference(measured: np.ndarray, reference: np.ndarray, amp_dtype: str) -> dict[str, float]:
    """max |measured - reference|, the reference's largest |logit|, the reduced type's spacing there, and the
    difference in those spacings."""
    measured, reference = np.asarray(measured, np.float64), np.asarray(reference, np.float64)
    difference = float(np.abs(measured - reference).max())
    magnitude = float(np.abs(reference).max())
    unit = spacing(magnitude, ELEMENT_TYPES[amp_dtype])
    return {"max_abs_diff": difference, "magnitude": magnitude, "spacing": unit, "spacings": difference / unit}


def numerics_record(
    onnx_model: str | Path | onnx.ModelProto,
    batch: Mapping[str, torch.Tensor],
    reference_logits: torch.Tensor | np.ndarray,
    device: str,
    amp_dtype: str,
) -> dict[str, Any]:
    """The graph's logits against eager autocast logits: how they were computed and how far apart, or
    'not measured' with the reason (never a pass)."""
    try:
        logits, execution = reduced_precision_logits(onnx_model, batch, device)
    except NotMeasured as reason:
        return {"status": NOT_MEASURED, "reason": str(reason)[:500]}
    reference = np.asarray(torch.as_tensor(reference_logits).float().cpu())
    return {"status": "measured", "execution": execution, **logits_difference(logits, reference, amp_dtype)}


def swapped_where(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """A control: every attention layer's Where with its two value inputs swapped (the mask fill value where
    the scores belong), a graph with the right types and the wrong numbers."""
    broken = copy.deepcopy(without_dropout(model))
    swapped = 0
    for node in broken.graph.node:
        if node.op_type == "Where" and "/attn/" in node.name:
            node.input[1], node.input[2] = node.input[2], node.input[1]
            swapped += 1
    if not swapped:
        raise ValueError("no attention Where to swap")
    return broken
