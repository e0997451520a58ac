"""`aten::permute`'s TorchScript symbolic with its axes made non-negative.

torch's symbolic writes `Transpose(perm=dims)` with the dims the model passed, and ONNX's Transpose takes `perm`
in 0..rank-1 only: ONNX Runtime's inference refuses `perm {0, -2, -1, 1}` (bamba's mamba layer, once its type
refusal is fixed). A permutation names every axis once, so its length is the rank and -k is rank - k; a
permutation that is then the identity is no node at all, as torch's own symbolic makes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from where223.fixes._torchscript import exporter_module

ATEN = "aten::permute"


def non_negative(dims: list[int]) -> list[int]:
    """`dims` with each negative axis counted from the end (the permutation's length is the rank)."""
    return [dim + len(dims) if dim < 0 else dim for dim in dims]


def make(original: Callable[..., Any]) -> Callable[..., Any]:
    """The permute symbolic handing `original` the permutation with non-negative axes."""
    helper = exporter_module("symbolic_helper")

    @helper.parse_args("v", "is")
    def permute(g: Any, self: Any, dims: list[int]) -> Any:
        return original(g, self, non_negative(dims))

    return permute
