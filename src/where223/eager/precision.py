"""Mixed precision as every tool here applies it: the amp dtypes by name and `autocast`, torch.autocast for one
of them or nothing for fp32 (the case, the variant study, the fix's checks and the divergence report share it).

`fp16_cuda_emulated` is CUDA's fp16 autocast policy applied to CPU tensors (`where223.cuda_autocast`): the
types a CUDA export would carry, on a machine without a GPU; records and the write-up label it emulated."""

from __future__ import annotations

import contextlib

import torch

from where223.pipeline.params import EMULATED_CUDA_FP16

AMP_DTYPES: dict[str, torch.dtype | None] = {
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None, EMULATED_CUDA_FP16: torch.float16,
}  # fmt: skip


def autocast(device: str, amp_dtype: str) -> contextlib.AbstractContextManager:
    """torch.autocast for `amp_dtype` ('fp16', 'bf16') on `device`, CUDA's fp16 policy emulated on CPU for
    'fp16_cuda_emulated', or a no-op for 'fp32'."""
    dtype = AMP_DTYPES[amp_dtype]
    if dtype is None:
        return contextlib.nullcontext()
    if amp_dtype == EMULATED_CUDA_FP16:
        if device != "cpu":
            raise ValueError(f"{EMULATED_CUDA_FP16} emulates CUDA on CPU tensors; on {device} use fp16")
        from where223.cuda_autocast import emulate_cuda_autocast

        return emulate_cuda_autocast()
    return torch.autocast(device_type=device, dtype=dtype)
