"""TorchScript fix: `aten::layer_norm` handed mixed dtypes (bf16 activations with float weight and bias, as CPU
autocast leaves it) is computed in the widest of them and its result cast back to the type eager returned, which is
what eager's `native_layer_norm` kernel does; ONNX's `LayerNormalization` binds one type to all three."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from where223.fixes._dtypes import widest
from where223.fixes._torchscript import cast, scalar_type

ATEN = "aten::layer_norm"


def output_dtype(g: Any, default: Any) -> Any:
    """The dtype the traced node's first output had eagerly, `default` when the trace did not type it."""
    try:
        found = g.original_node.outputsAt(0).type().dtype()
    except Exception:  # noqa: BLE001 - an untyped trace
        return default
    return found if found is not None else default


def make(original: Callable[..., Any]) -> Callable[..., Any]:
    """The fixed symbolic: one dtype passes through to `original` unchanged."""
    import torch

    def layer_norm(g: Any, input: Any, normalized_shape: Any, weight: Any, bias: Any, *rest: Any) -> Any:
        types = {v: scalar_type(v) for v in (input, weight, bias)}
        dtypes = {t.dtype() for t in types.values() if t is not None}
        if len(dtypes) <= 1:
            return original(g, input, normalized_shape, weight, bias, *rest)
        wide = widest(torch, dtypes)
        args = [cast(g, v, wide) if t is not None and t.dtype() != wide else v for v, t in types.items()]
        result = original(g, args[0], normalized_shape, args[1], args[2], *rest)
        back = output_dtype(g, types[input].dtype() if types[input] is not None else wide)
        return result if back == wide else cast(g, result, back)

    return layer_norm
