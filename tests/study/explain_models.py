"""Models of "your own" for `where223 explain`'s tests: a factory returns a module and its example inputs."""

from __future__ import annotations

import torch


class MaskedScores(torch.nn.Module):
    """GPT-2's mask line in small: under bf16 autocast the scores are bf16, and `fill_dtype` is the fill's type."""

    def __init__(self, fill_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
        self.fill_dtype = fill_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(x, self.weight)
        fill = torch.full([], -1e4, dtype=self.fill_dtype or scores.dtype)
        return torch.where(x > 0, scores, fill)  # the refused line


def example() -> tuple[torch.Tensor]:
    return (torch.randn(2, 8, generator=torch.Generator().manual_seed(1)),)


def mixed() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    """The fill in float32 whatever the scores' type: the Where ONNX Runtime refuses under autocast."""
    return MaskedScores(torch.float32), example()


def matched() -> torch.nn.Module:
    """The control: the fill in the scores' own type (its inputs come from `example`)."""
    return MaskedScores(None)
