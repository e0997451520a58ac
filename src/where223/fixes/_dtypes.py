"""Which reduced types an ONNX operator allows at an opset (its schema, from the installed onnx), and the widest of
several torch dtypes: what the fixes decide by."""

from __future__ import annotations

from typing import Any

from where223.graph.schema import signature

ONNX_NAMES = {"bfloat16": "tensor(bfloat16)", "float16": "tensor(float16)", "float32": "tensor(float)",
              "float64": "tensor(double)"}  # fmt: skip
_WIDTH = {"bfloat16": 1, "float16": 1, "float32": 2, "float64": 3}


def dtype_name(dtype: Any) -> str:
    """`torch.bfloat16` -> 'bfloat16'."""
    return str(dtype).removeprefix("torch.")


def allowed(op_type: str, opset: int, dtype: Any) -> bool:
    """Whether `op_type`'s schema at `opset` allows `dtype` for its first input's type parameter (True for an op or
    a dtype the schema does not cover: nothing to fix then)."""
    sig = signature(op_type, "", opset)
    name = ONNX_NAMES.get(dtype_name(dtype))
    if sig is None or name is None or not sig.inputs:
        return True
    return name in sig.allowed(sig.inputs[0].type_str)


def widest(torch: Any, dtypes: set[Any]) -> Any:
    """The narrowest floating dtype that holds each of `dtypes` exactly ({bf16, float} -> float, {bf16, fp16} ->
    float)."""
    names = {dtype_name(d) for d in dtypes}
    if names <= {"bfloat16"} or names <= {"float16"}:
        return next(iter(dtypes))
    top = max(_WIDTH.get(n, 2) for n in names)
    return torch.float64 if top == 3 else torch.float32
