"""TorchScript fix: an aten op whose ONNX operator binds one type to several inputs, handed mixed dtypes, is computed
in the widest of them and its result cast back to the type eager returned, which is what eager's kernel does:
`layer_norm` handed bf16 activations with float weight and bias (CPU autocast leaves it so; ONNX's
`LayerNormalization` binds all three), `where` handed a float and a bf16 value (GPT-2's mask in transformers
4.25.1, traced under autocast)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from where223.fixes._dtypes import widest
from where223.fixes._torchscript import cast, scalar_type

# aten op -> the positions of its inputs that its ONNX operator binds to one type parameter
BOUND: dict[str, tuple[int, ...]] = {"aten::layer_norm": (0, 2, 3), "aten::where": (1, 2)}


def output_dtype(g: Any, default: Any) -> Any:
    """The dtype the traced node's first output had eagerly, `default` when the trace did not type it."""
    try:
        found = g.original_node.outputsAt(0).type().dtype()
    except Exception:  # noqa: BLE001 - an untyped trace
        return default
    return found if found is not None else default


def make_for(aten: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The wrapper maker for `aten`: one dtype among its bound inputs passes through to the original unchanged."""
    positions = BOUND[aten]

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        def bound_in_widest(g: Any, *args: Any) -> Any:
            types = {p: scalar_type(args[p]) for p in positions if p < len(args)}
            dtypes = {t.dtype() for t in types.values() if t is not None}
            floating = {d for d in dtypes if d.is_floating_point}
            if len(floating) <= 1 or floating != dtypes:
                return original(g, *args)
            wide = widest(torch, floating)
            new = [cast(g, a, wide) if p in types and types[p] is not None and types[p].dtype() != wide else a
                   for p, a in enumerate(args)]  # fmt: skip
            first = types[positions[0]]
            back = output_dtype(g, first.dtype() if first is not None else wide)
            result = original(g, *new)
            return result if back == wide else cast(g, result, back)

        return bound_in_widest

    return make
