"""The dtypes each eager kernel received and returned, by the model source line that called it.

`where223.eager.divergence` records torch *functions* (a TorchFunctionMode), which see their arguments before
autocast casts them and see a functional such as `layer_norm` as one call. What ONNX's schemas bind is what the
kernel computes with, so this module records below autocast: a TorchDispatchMode sees each ATen op with the
tensors the kernel was handed (autocast's casts already applied, as `_to_copy` calls of their own) and what it
returned. Each call is keyed by the innermost frame outside torch (the model's line), so an eager kernel that
accepts mixed input dtypes where an ONNX schema binds one type (`native_layer_norm` fed bf16 activations and
float weights) is visible on the line that the exported node's stack names.

Calls are summarised per line as distinct signatures (op, input dtypes, output dtypes) with counts, in first-seen
order; only calls that touch a floating tensor are kept.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from where223.pipeline import portable

_TORCH_DIR = str(Path(torch.__file__).parent)
_THIS_FILE = __file__
DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "double",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.uint8: "uint8",
    torch.int8: "int8",
}
FLOATING = frozenset({"float", "float16", "bfloat16", "double"})
SIGNATURE_LIMIT = 12  # distinct signatures kept per line


def _dtype(value: Any) -> str | None:
    if isinstance(value, torch.Tensor):
        return DTYPE_NAMES.get(value.dtype, str(value.dtype).removeprefix("torch."))
    return None


def _dtypes(values: Any) -> list[str]:
    flat, _ = tree_flatten(values)
    return [name for name in map(_dtype, flat) if name is not None]


def _library_frame(filename: str) -> bool:
    return filename.startswith(_TORCH_DIR) or "/torch/" in filename or filename == _THIS_FILE


@dataclass
class Signature:
    """One distinct kernel call on a line: the ATen op, its tensor inputs' and outputs' dtypes, how often."""

    op: str
    inputs: list[str]
    outputs: list[str]
    count: int = 1

    @property
    def mixed(self) -> bool:
        """Whether the kernel was handed floating tensors of more than one dtype."""
        return len({d for d in self.inputs if d in FLOATING}) > 1

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "inputs": self.inputs, "outputs": self.outputs, "count": self.count,
                "mixed": self.mixed}  # fmt: skip


@dataclass
class KernelTable:
    """Distinct kernel signatures per source line (`file:line`, the file portable)."""

    lines: dict[str, list[Signature]] = field(default_factory=dict)
    calls: int = 0

    def add(self, where: str, op: str, inputs: list[str], outputs: list[str]) -> None:
        self.calls += 1
        signatures = self.lines.setdefault(where, [])
        for signature in signatures:
            if (signature.op, signature.inputs, signature.outputs) == (op, inputs, outputs):
                signature.count += 1
                return
        if len(signatures) < SIGNATURE_LIMIT:
            signatures.append(Signature(op, inputs, outputs))

    def at(self, source: str) -> list[dict[str, Any]]:
        """The signatures of a `file:line` (matched on the file's trailing path), as records keep them."""
        from where223.eager.emitters import same_line

        return [s.to_dict() for where, signatures in self.lines.items() if same_line(where, source) for s in signatures]

    def mixed_lines(self) -> dict[str, list[dict[str, Any]]]:
        """Every line with a kernel handed floating tensors of several dtypes."""
        return {where: [s.to_dict() for s in signatures if s.mixed]
                for where, signatures in self.lines.items() if any(s.mixed for s in signatures)}  # fmt: skip


class KernelRecorder(TorchDispatchMode):
    """Record every ATen call that touches a floating tensor, by the innermost frame outside torch."""

    def __init__(self) -> None:
        super().__init__()
        self.table = KernelTable()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        inputs = _dtypes((args, kwargs or {}))
        outputs = _dtypes(result)
        if FLOATING.intersection(inputs) or FLOATING.intersection(outputs):
            frame = sys._getframe(1)
            while frame is not None and _library_frame(frame.f_code.co_filename):
                frame = frame.f_back
            if frame is not None:
                where = f"{portable.frame_file(frame.f_code.co_filename)}:{frame.f_lineno}"
                name = getattr(func, "__name__", str(func))
                self.table.add(where, name.split(".")[0] if name.endswith(".default") else name, inputs, outputs)
        return result


def record_kernels(
    call: Callable[[], Any], context: AbstractContextManager | None = None
) -> tuple[Any, KernelTable]:
    """Run `call()` (no grad, inside `context`, e.g. the recipe's autocast) with the recorder below it; returns
    its result and the table."""
    recorder = KernelRecorder()
    with torch.no_grad(), context or nullcontext(), recorder:
        result = call()
    return result, recorder.table

