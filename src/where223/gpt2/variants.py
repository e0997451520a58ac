"""Ways to write the two lines of GPT-2 attention that PR 20061 touched, and a patch that swaps them in.

The lines are the division of the scores by sqrt(head size) (`scale`) and the masking of future positions
(`mask`). transformers 4.24 made both constants with `torch.tensor`, 4.25 with `torch.full` (which broke
tracing under autocast), 4.26 kept 4.25 and cast the scores to their own dtype inside the `torch.where`.
`patched_attention(name)` replaces `GPT2Attention._attn` and `_upcast_and_reordered_attn` of transformers
4.25.1 with this module's implementation for one variant, and restores the originals on exit.
Besides the historic three, `STUDY` registers the combinations the variant study measures
(`where223.study.variants.run`); `where223.gpt2.releases` checks the historic ones against the real releases.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

Scale = Callable[[torch.Tensor, float], torch.Tensor]
Mask = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


# --- the scale line: attn_weights / sqrt(head size) -------------------------------------------------------
def scale_by_tensor(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """4.24: a 0-d tensor made by torch.tensor on the scores' device."""
    return weights / torch.tensor(divisor, dtype=weights.dtype, device=weights.device)


def scale_by_full(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """4.25 and 4.26: a 0-d tensor made by torch.full on the scores' device."""
    return weights / torch.full([], divisor, dtype=weights.dtype, device=weights.device)


def scale_by_float(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """A Python float: no tensor is made at all."""
    return weights / divisor


def scale_by_full_cast(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """torch.full, then the quotient cast back to the scores' dtype (an explicit Cast in the trace)."""
    return (weights / torch.full([], divisor, dtype=weights.dtype, device=weights.device)).to(weights.dtype)


def scale_by_float_cast(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """A Python float, then the quotient cast back to the scores' dtype.

    Traced under autocast, a division by a Python number is recorded in float32; the cast makes the graph
    round the scores to the autocast dtype where eager PyTorch does, and types the mask's input.
    """
    return (weights / divisor).to(weights.dtype)


def scale_by_full_constant(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """torch.full on the scores' device, of the divisor as a Python number.

    Eagerly the divisor already is a Python float, so this is `scale_by_full`. Traced, the head size is a
    traced value, and `float()` records it as a constant (the tracer warns; a module's head size never
    varies), so the graph holds a Constant of the autocast dtype instead of a ConstantOfShape, and the
    division stays in the autocast dtype, as eagerly.
    """
    return weights / torch.full([], float(divisor), dtype=weights.dtype, device=weights.device)


# --- the mask line: future positions get the dtype's most negative value ----------------------------------
def mask_by_tensor_to(weights: torch.Tensor, causal: torch.Tensor, fill: float) -> torch.Tensor:
    """4.24: torch.tensor on the host, copied to the scores' device."""
    value = torch.tensor(fill, dtype=weights.dtype).to(weights.device)
    return torch.where(causal, weights, value)


def mask_by_full_to(weights: torch.Tensor, causal: torch.Tensor, fill: float) -> torch.Tensor:
    """4.25: torch.full on the host, copied to the scores' device."""
    value = torch.full([], fill, dtype=weights.dtype).to(weights.device)
    return torch.where(causal, weights, value)


def mask_by_full_to_cast(weights: torch.Tensor, causal: torch.Tensor, fill: float) -> torch.Tensor:
    """4.26: as 4.25, with the scores cast to their own dtype inside the where."""
    value = torch.full([], fill, dtype=weights.dtype).to(weights.device)
    return torch.where(causal, weights.to(value.dtype), value)


def mask_by_full_device_cast(weights: torch.Tensor, causal: torch.Tensor, fill: float) -> torch.Tensor:
    """torch.full made directly on the scores' device (no host copy), with the cast inside the where."""
    value = torch.full([], fill, dtype=weights.dtype, device=weights.device)
    return torch.where(causal, weights.to(value.dtype), value)


def mask_by_masked_fill(weights: torch.Tensor, causal: torch.Tensor, fill: float) -> torch.Tensor:
    """masked_fill with a Python scalar: no tensor is made for the fill value."""
    return weights.masked_fill(~causal, fill)


def mask_by_where_scalar(weights: torch.Tensor, causal: torch.Tensor, fill: float) -> torch.Tensor:
    """torch.where with a Python scalar as the fill value (no tensor made; the exporter types it double)."""
    return torch.where(causal, weights, fill)


def scale_by_product(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """A deliberate bug, for negative controls only: multiplies by sqrt(head size) instead of dividing."""
    return weights * torch.full([], divisor, dtype=weights.dtype, device=weights.device)


def scale_by_head_size(weights: torch.Tensor, divisor: float) -> torch.Tensor:
    """A deliberate bug, for negative controls only: divides by the head size (divisor squared) instead of its
    square root, a smaller error than `scale_by_product`'s."""
    return weights / torch.full([], divisor * divisor, dtype=weights.dtype, device=weights.device)


SCALES: dict[str, Scale] = {
    "tensor": scale_by_tensor,
    "full": scale_by_full,
    "float": scale_by_float,
    "full_cast": scale_by_full_cast,
    "float_cast": scale_by_float_cast,
    "full_const": scale_by_full_constant,
    "product": scale_by_product,
    "head_size": scale_by_head_size,
}
MASKS: dict[str, Mask] = {
    "tensor_to": mask_by_tensor_to,
    "full_to": mask_by_full_to,
    "full_to_cast": mask_by_full_to_cast,
    "full_device_cast": mask_by_full_device_cast,
    "masked_fill": mask_by_masked_fill,
    "where_scalar": mask_by_where_scalar,
}


@dataclass(frozen=True)
class Variant:
    """One way to write the two lines: a scale and a mask, by their names in SCALES and MASKS."""

    name: str
    scale: str
    mask: str
    description: str


HISTORIC: dict[str, Variant] = {
    "4.24": Variant("4.24", "tensor", "tensor_to", "transformers 4.24 (PR 18017): torch.tensor for both"),
    "4.25": Variant("4.25", "full", "full_to", "transformers 4.25.1 (PR 20061): torch.full for both"),
    "4.26": Variant("4.26", "full", "full_to_cast", "transformers 4.26 (PR 20656): 4.25 + cast inside where"),
}
VARIANTS: dict[str, Variant] = dict(HISTORIC)
# The combinations the variant study measures besides the historic three (where223.study.variants.run says why
# these and not the other scale x mask pairs). Named scale+mask.
_STUDY_COMBINATIONS = (
    ("float", "masked_fill", "no tensor in either line: a Python float, masked_fill with a Python scalar"),
    ("float", "full_device_cast", "a Python float; torch.full on the device, cast inside the where"),
    ("full_cast", "full_device_cast", "torch.full scale cast back; torch.full on the device, cast in where"),
    ("float", "where_scalar", "a Python float; torch.where with a Python scalar"),
    ("float_cast", "masked_fill", "a Python float, quotient cast back to the scores' dtype; masked_fill"),
    ("full_const", "masked_fill", "torch.full on the device of a constant head size; masked_fill"),
    ("full_const", "full_device_cast", "torch.full on the device of a constant head size; device full, cast"),
)
STUDY: dict[str, Variant] = {
    f"{scale}+{mask}": Variant(f"{scale}+{mask}", scale, mask, text) for scale, mask, text in _STUDY_COMBINATIONS
}
VARIANTS.update(STUDY)


# Negative controls of `where223.study.fix.run`: variants built to break its checks, never offered as fixes
# (not in VARIANTS, so no study or test of the fixes iterates them; `patched_attention` still applies them).
CONTROLS: dict[str, Variant] = {
    "control-wrong-scale": Variant(
        "control-wrong-scale", "product", "full_to_cast", "4.26 multiplying by sqrt(head size) instead of dividing"
    ),
    "control-head-size-scale": Variant(
        "control-head-size-scale", "head_size", "full_to_cast",
        "4.26 dividing by the head size instead of its square root (the weaker wrong scale, the control as first "
        "built)",
    ),
}


def register(variant: Variant) -> Variant:
    """Add a variant to the registry (its scale and mask must be known)."""
    if variant.scale not in SCALES or variant.mask not in MASKS:
        raise ValueError(f"variant {variant.name!r}: scale must be in {sorted(SCALES)}, mask in {sorted(MASKS)}")
    VARIANTS[variant.name] = variant
    return variant


def get_variant(name: str) -> Variant:
    """A registered variant or negative control by name, or an error listing the variants' names."""
    if name in CONTROLS:
        return CONTROLS[name]
    if name not in VARIANTS:
        raise ValueError(f"unknown attention variant {name!r}; registered: {sorted(VARIANTS)}")
    return VARIANTS[name]


def make_attn(variant: Variant) -> Callable:
    """GPT2Attention._attn of transformers 4.25.1 with the variant's scale and mask lines."""
    scale, mask = SCALES[variant.scale], MASKS[variant.mask]

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights = scale(attn_weights, value.size(-1) ** 0.5)
        if self.scale_attn_by_inverse_layer_idx:
            attn_weights = attn_weights / float(self.layer_idx + 1)
        if not self.is_cross_attention:
            query_length, key_length = query.size(-2), key.size(-2)
            causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length].to(torch.bool)
            attn_weights = mask(attn_weights, causal_mask, torch.finfo(attn_weights.dtype).min)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        if head_mask is not None:
            attn_weights = attn_weights * head_mask
        return torch.matmul(attn_weights, value), attn_weights

    return _attn


def make_upcast_and_reordered_attn(variant: Variant) -> Callable:
    """GPT2Attention._upcast_and_reordered_attn of 4.25.1 (reorder_and_upcast_attn) with the variant's mask.

    The scores are float32 here by construction (autocast is off around baddbmm), so only the mask line
    varies; the scale is folded into baddbmm's alpha as in transformers.
    """
    mask = MASKS[variant.mask]

    def _upcast_and_reordered_attn(self, query, key, value, attention_mask=None, head_mask=None):
        bsz, num_heads, q_seq_len, dk = query.size()
        _, _, k_seq_len, _ = key.size()
        attn_weights = torch.empty(bsz * num_heads, q_seq_len, k_seq_len, dtype=torch.float32, device=query.device)
        scale_factor = 1.0
        if self.scale_attn_weights:
            scale_factor /= float(value.size(-1)) ** 0.5
        if self.scale_attn_by_inverse_layer_idx:
            scale_factor /= float(self.layer_idx + 1)
        with torch.autocast(query.device.type, enabled=False):
            q, k = query.reshape(-1, q_seq_len, dk), key.transpose(-1, -2).reshape(-1, dk, k_seq_len)
            attn_weights = torch.baddbmm(attn_weights, q.float(), k.float(), beta=0, alpha=scale_factor)
            attn_weights = attn_weights.reshape(bsz, num_heads, q_seq_len, k_seq_len)
        if not self.is_cross_attention:
            query_length, key_length = query.size(-2), key.size(-2)
            causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length].bool()
            attn_weights = mask(attn_weights, causal_mask, torch.finfo(attn_weights.dtype).min)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        if attn_weights.dtype != torch.float32:
            raise RuntimeError("Error with upcasting, attn_weights does not have dtype torch.float32")
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        if head_mask is not None:
            attn_weights = attn_weights * head_mask
        return torch.matmul(attn_weights, value), attn_weights

    return _upcast_and_reordered_attn


def apply_patch(name: str) -> Callable[[], None]:
    """Swap the variant into GPT2Attention now; return the function that restores the originals."""
    variant = get_variant(name)
    originals = (GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn)
    GPT2Attention._attn = make_attn(variant)
    GPT2Attention._upcast_and_reordered_attn = make_upcast_and_reordered_attn(variant)

    def restore() -> None:
        GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn = originals

    return restore


@contextlib.contextmanager
def patched_attention(name: str = "4.26") -> Iterator[Variant]:
    """Run a block with GPT-2 attention written as variant `name`; the originals return even on error."""
    restore = apply_patch(name)
    try:
        yield get_variant(name)
    finally:
        restore()
