"""TorchScript fix: the exporter's scalar-type analysis (a C++ pass) casts a Python scalar meeting a bf16 tensor
to bf16 with torch's ScalarType number, 15, which ONNX reads as complex128 (`x / (x.size(-1) ** 0.5)` in bf16:
`Cast(to=15)`, refused at the `Div`). The pass is wrapped for the export's duration: after it runs, every `Cast`
whose `to` is torch's number for the type its output carries, and not ONNX's, is given ONNX's number."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

ANALYSIS = "_jit_pass_onnx_scalar_type_analysis"
# torch's ScalarType numbers whose ONNX number differs, for the types a Cast's output may carry (c10 ScalarType.h)
TORCH_NUMBERS = {"BFloat16": 15}


def retarget(graph: Any) -> int:
    """Give every Cast in `graph` (and its blocks) whose `to` is torch's number for its output's type the ONNX number
    of that type; how many were changed."""
    from where223.fixes._torchscript import exporter_module

    types = exporter_module("_type_utils")
    changed = 0
    stack = [graph.block() if hasattr(graph, "block") else graph]
    while stack:
        block = stack.pop()
        for node in block.nodes():
            stack.extend(node.blocks())
            if node.kind() != "onnx::Cast" or "to" not in node.attributeNames():
                continue
            scalar = node.output().type().scalarType() if node.output().type().kind() == "TensorType" else None
            wanted = TORCH_NUMBERS.get(scalar or "")
            if wanted is not None and node.i("to") == wanted:
                node.i_("to", int(types.JitScalarType.from_value(node.output()).onnx_type()))
                changed += 1
    return changed


@contextlib.contextmanager
def corrected_casts() -> Iterator[list[int]]:
    """For the duration, the exporter's scalar-type analysis is followed by `retarget`; yields a list that gathers
    how many Casts each export's pass had retargeted."""
    import torch

    original = getattr(torch._C, ANALYSIS)
    counts: list[int] = []

    def scalar_type_analysis(graph: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(graph, *args, **kwargs)
        counts.append(retarget(graph))
        return result

    setattr(torch._C, ANALYSIS, scalar_type_analysis)
    try:
        yield counts
    finally:
        setattr(torch._C, ANALYSIS, original)
