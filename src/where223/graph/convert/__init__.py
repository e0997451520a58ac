"""Convert a float32 model to fp16 or bf16 node by node, on onnx-ir: one rule or pass per file.

- `_listing`: the kernels the provider registers, as the installed ONNX Runtime lists them (refused where it
  cannot list them: onnxruntime-training 1.19.2, a provider without its hardware);
- `_plan`: which nodes compute in the reduced type: the schema allows it at the model's opset and a kernel is
  listed; everything else keeps float32, with its reason (`computed_in_reduced` counts, in any model, the nodes
  declared in a reduced type that the provider computes in it);
- `_initializers`: float32 initializers rounded to the reduced type, what overflowed or flushed to zero counted;
- `_retype`: the pass applying a plan: Casts only at the boundaries between float32 and the reduced type, Cast
  targets and typing attributes following their nodes, every main-graph value declared with its type;
- `_search`: check (lint, ONNX Runtime), compare with the float32 model (`where223.graph.diff`), keep in float32 the
  nodes where the first departure arises, try again (bounded); `_record`: what it did and why; `_file`: the command.

Names load from their submodule when first used, so that the kernel listing's child process
(`python -m where223.graph.convert._listing`) imports no more than it needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULE_OF: dict[str, str] = {
    # convert a model, or a file into another
    "convert": "_search",
    "convert_file": "_file",
    "reduced_target": "_search",
    "MAX_ROUNDS": "_search",
    # what it did, and why it stopped
    "ConversionRecord": "_record",
    "KeptNode": "_record",
    "SearchRound": "_record",
    "ConvertError": "_record",
    "InitializerConversion": "_initializers",
    # the kernels it may use
    "kernel_listing": "_listing",
    "KernelListing": "_listing",
    "NoListingError": "_listing",
    # the rule and the pass, for callers that build their own search
    "plan": "_plan",
    "Choice": "_plan",
    "computed_in_reduced": "_plan",
    "MOVES": "_plan",
    "NO_ARITHMETIC": "_plan",
    "RetypePass": "_retype",
}

__all__ = list(_SUBMODULE_OF)


def __getattr__(name: str) -> Any:
    submodule = _SUBMODULE_OF.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
