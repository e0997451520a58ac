"""Precision recipes of sweep cells: how a model is put in reduced precision before it is exported.

The set is open: `register` adds one (a later study's emulated CUDA fp16 policy, say). A recipe either wraps the
export in `torch.autocast` (`autocast`: the amp dtype of `where223.eager.precision.AMP_DTYPES`) or casts the whole
model and its floating-point inputs to one dtype (`cast`). torch is imported by the caller and passed in, so this
module loads in every stack, Python 3.10's too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from where223.pipeline.params import EMULATED_CUDA_FP16

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Recipe:
    """One precision recipe; `description` is what the write-up and README call it."""

    name: str
    description: str
    device: str = "cpu"
    # 'bf16' or 'fp16': the export runs under torch.autocast(device, that dtype); 'fp16_cuda_emulated': under CUDA's
    # fp16 policy of the stack's torch release applied to CPU tensors (where223.cuda_autocast), labelled emulated
    autocast: str | None = None
    cast: str | None = None  # 'bf16' or 'fp16': the model and its floating inputs are cast to it

    @property
    def amp_dtype(self) -> str:
        """The amp dtype of the eager run that the graph is compared with (`fp32`: no autocast)."""
        return self.autocast or "fp32"

    def context(self, torch: Any) -> contextlib.AbstractContextManager:
        """The context the export (and the eager comparison) runs in."""
        if self.autocast is None:
            return contextlib.nullcontext()
        if self.autocast == EMULATED_CUDA_FP16:
            from where223.cuda_autocast import emulate_cuda_autocast

            return emulate_cuda_autocast()
        return torch.autocast(self.device, dtype=getattr(torch, DTYPES[self.autocast]))

    def prepare(self, torch: Any, model: Any, inputs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The model and inputs as this recipe exports them (cast in place for a whole-model recipe)."""
        if self.cast is None:
            return model, inputs
        dtype = getattr(torch, DTYPES[self.cast])
        model = model.to(dtype)
        cast = {name: t.to(dtype) if torch.is_floating_point(t) else t for name, t in inputs.items()}
        return model, cast

    def to_dict(self) -> dict[str, Any]:
        """The recipe as records name it."""
        return {"name": self.name, "description": self.description, "device": self.device,
                "autocast": self.autocast, "cast": self.cast}  # fmt: skip


RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    """Add a recipe to the open set (a name already taken is an error)."""
    if recipe.name in RECIPES:
        raise ValueError(f"recipe {recipe.name!r} is already registered")
    RECIPES[recipe.name] = recipe
    return recipe


register(Recipe("cpu_bf16_autocast", "torch.autocast('cpu', torch.bfloat16) around the export", autocast="bf16"))
register(Recipe("bf16_model", "the whole model and its floating inputs cast to torch.bfloat16", cast="bf16"))
register(Recipe("fp16_model", "the whole model and its floating inputs cast to torch.float16", cast="fp16"))
register(Recipe("fp32_model", "the model left in float32, no autocast: the exporter's baseline, without reduced "
                "precision (what a refusal that is not the precision's looks like)"))
register(Recipe("cuda_fp16_autocast_emulated", "CUDA's torch.autocast(float16) policy of the stack's torch release, "
                "emulated on CPU tensors (where223.cuda_autocast)", autocast=EMULATED_CUDA_FP16))
