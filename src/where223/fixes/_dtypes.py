"""Which reduced types an ONNX operator allows at an opset (its schema, from the installed onnx), and the widest of
several torch dtypes: what the fixes decide by."""

from __future__ import annotations

from typing import Any

from where223.graph.lint import allowed_types
from where223.graph.schema import signature

ONNX_NAMES = {"bfloat16": "tensor(bfloat16)", "float16": "tensor(float16)", "float32": "tensor(float)",
              "float64": "tensor(double)"}  # fmt: skip


def dtype_name(dtype: Any) -> str:
    """`torch.bfloat16` -> 'bfloat16'."""
    return str(dtype).removeprefix("torch.")


def allowed(op_type: str, opset: int, dtype: Any) -> bool:
    """Whether `op_type`'s schema at `opset` allows `dtype` for its first input's type parameter, as ONNX Runtime
    runs the op (its function body's refusals included: `where223.graph.lint.allowed_types`; True for an op or a
    dtype the schema does not cover: nothing to fix then)."""
    sig = signature(op_type, "", opset)
    name = ONNX_NAMES.get(dtype_name(dtype))
    if sig is None or name is None or not sig.inputs:
        return True
    return name in allowed_types(op_type, opset, sig.inputs[0].type_str)


def widest(torch: Any, dtypes: set[Any]) -> Any:
    """The narrowest floating dtype that holds each of `dtypes` exactly ({bf16, float} -> float, {bf16, fp16} ->
    float), as the repair chooses it (`where223.graph.repair._types.widest`, the one table of which type holds
    which)."""
    from where223.graph.repair._types import widest as widest_type

    chosen = widest_type(ONNX_NAMES[dtype_name(d)] for d in dtypes)
    by_name = {name: getattr(torch, short) for short, name in ONNX_NAMES.items()}
    return by_name[chosen]
