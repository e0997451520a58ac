"""Mixed precision as every tool here applies it: the amp dtypes by name and `autocast`, torch.autocast for one
of them or nothing for fp32 (the case, the variant study, the fix's checks and the divergence report share it)."""

from __future__ import annotations

import contextlib

import torch

AMP_DTYPES: dict[str, torch.dtype | None] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}


def autocast(device: str, amp_dtype: str) -> contextlib.AbstractContextManager:
    """torch.autocast for `amp_dtype` ('fp16', 'bf16') on `device`, or a no-op for 'fp32'."""
    dtype = AMP_DTYPES[amp_dtype]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=dtype)
