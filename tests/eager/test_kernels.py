"""The kernel recorder sees what each ATen kernel was handed, below autocast, by the model's source line."""

from __future__ import annotations

import inspect

import torch

from where223.eager.kernels import record_kernels


class MixedNorm(torch.nn.Module):
    """layer_norm fed bf16 activations with float weights: the eager kernel takes both, ONNX binds one type."""

    def __init__(self, weight_dtype: torch.dtype) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(4).to(weight_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x.bfloat16(), (4,), self.norm.weight, self.norm.bias)  # the line


def _line(text: str) -> int:
    lines, start = inspect.getsourcelines(MixedNorm)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_a_kernel_fed_mixed_dtypes_is_seen_at_its_line():
    _, table = record_kernels(lambda: MixedNorm(torch.float32)(torch.randn(2, 4)))
    at = table.at(f"tests/eager/test_kernels.py:{_line('# the line')}")
    norm = [s for s in at if "layer_norm" in s["op"]]
    assert norm and norm[0]["inputs"][:3] == ["bfloat16", "float", "float"] and norm[0]["mixed"]
    assert f"tests/eager/test_kernels.py:{_line('# the line')}" in table.mixed_lines()


def test_the_control_with_one_dtype_is_not_mixed():
    _, table = record_kernels(lambda: MixedNorm(torch.bfloat16)(torch.randn(2, 4)))
    norm = [s for s in table.at(f"tests/eager/test_kernels.py:{_line('# the line')}") if "layer_norm" in s["op"]]
    assert norm and not norm[0]["mixed"] and table.mixed_lines() == {}


def test_the_recorder_sits_below_autocast():
    """Under CPU bf16 autocast, mm's kernel is handed bf16 (autocast cast the float inputs first); the control
    without autocast hands it float."""
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    line = inspect.currentframe().f_lineno + 1
    call = lambda: torch.mm(a, b)  # noqa: E731
    _, cast = record_kernels(call, torch.autocast("cpu", dtype=torch.bfloat16))
    _, plain = record_kernels(call)
    where = f"tests/eager/test_kernels.py:{line}"
    assert [s["inputs"] for s in cast.at(where) if s["op"] == "mm"] == [["bfloat16", "bfloat16"]]
    assert [s["inputs"] for s in plain.at(where) if s["op"] == "mm"] == [["float", "float"]]
