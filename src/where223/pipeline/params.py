"""Parameter checks shared by notebooks and CLI: allowed values, 'auto' resolution, clear errors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from where223.errors import UsageError

T = TypeVar("T")

# CUDA's fp16 autocast policy emulated on CPU tensors (where223.eager.precision; the name lives here, without torch).
EMULATED_CUDA_FP16 = "fp16_cuda_emulated"


class ParameterError(UsageError, ValueError):
    """A parameter has a value the run cannot use; the message names it and says what to do."""


def check_choice(name: str, value: T, allowed: Iterable[T]) -> T:
    """Return `value` if it is one of `allowed`, else fail naming the parameter and the allowed values."""
    options = list(allowed)
    if value not in options:
        raise ParameterError(f"parameter {name}={value!r} is not allowed; choose one of {options}")
    return value


def check_range(name: str, value: int, low: int, high: int) -> int:
    """Return an int parameter within [low, high], else fail with the range."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ParameterError(f"parameter {name}={value!r} must be an integer in [{low}, {high}]")
    return value


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (torch is imported only when asked)."""
    import torch

    return torch.cuda.is_available()


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; 'cuda' without a GPU fails at once."""
    check_choice("device", device, ["auto", "cpu", "cuda"])
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise ParameterError(
            "parameter device='cuda' but torch sees no CUDA GPU; use device='auto' or device='cpu'"
        )
    return device


def resolve_amp_dtype(amp_dtype: str, device: str) -> str:
    """'auto' -> fp16 on CUDA, bf16 on CPU (CPU autocast in torch 2.1 supports bfloat16 only);
    'fp16_cuda_emulated' (CUDA's fp16 autocast policy on CPU tensors, where223.cuda_autocast) on CPU only."""
    check_choice("amp_dtype", amp_dtype, ["auto", "fp16", "bf16", "fp32", EMULATED_CUDA_FP16])
    if amp_dtype == "auto":
        return "fp16" if device == "cuda" else "bf16"
    if amp_dtype == "fp16" and device == "cpu":
        raise ParameterError(
            "parameter amp_dtype='fp16' is not supported on device='cpu' (CPU autocast supports bf16 only); "
            f"use amp_dtype='bf16', 'auto' or '{EMULATED_CUDA_FP16}' (CUDA's policy emulated), or run on a CUDA GPU"
        )
    if amp_dtype == EMULATED_CUDA_FP16 and device != "cpu":
        raise ParameterError(
            f"parameter amp_dtype='{EMULATED_CUDA_FP16}' emulates CUDA on CPU tensors: use it with device='cpu', "
            "or amp_dtype='fp16' on the GPU itself"
        )
    return amp_dtype
