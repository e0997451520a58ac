"""TorchScript fix: `aten::scaled_dot_product_attention` in the query's type throughout.

The exporter's own symbolic builds its boolean mask's 0 and -inf as float constants, so in fp16 or bf16 the
exporter's type promotion computes the attention in float and hands float on (BERT in fp16: every following
`LayerNormalization` bound to float and float16); a scale given as a Python float is cast to the query's type by
the exporter's scalar-type analysis with torch's number for bfloat16, which ONNX reads as complex128 (`Cast(to=15)`:
every SDPA model in bf16 refused at a `Mul`). This symbolic computes the same attention (the scale's square root on
q and k, the boolean mask as 0 and -inf, a fully masked row's NaNs as 0, dropout) with every constant made in the
query's type and the scale cast to it by ONNX's number."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from where223.fixes._torchscript import cast, exporter_module, scalar_type

ATEN = "aten::scaled_dot_product_attention"


def _constant(g: Any, torch: Any, value: float, dtype: Any) -> Any:
    return g.op("Constant", value_t=torch.tensor([value], dtype=dtype))


def _causal_mask(g: Any, torch: Any, query: Any, key: Any) -> Any:
    """A boolean (L, S) mask, True on and below the diagonal."""
    last = g.op("Constant", value_t=torch.tensor([-1], dtype=torch.int64))
    second = g.op("Constant", value_t=torch.tensor([-2], dtype=torch.int64))
    size = g.op("Concat", g.op("Slice", g.op("Shape", query), second, last),
                g.op("Slice", g.op("Shape", key), second, last), axis_i=0)  # fmt: skip
    ones = g.op("ConstantOfShape", size, value_t=torch.tensor([1], dtype=torch.int64))
    return g.op("Cast", g.op("Trilu", ones, upper_i=0), to_i=9)  # 9: ONNX's bool


def make(original: Callable[..., Any]) -> Callable[..., Any]:
    """The fixed symbolic; queries not in a reduced type, and grouped-query attention, go to `original`."""
    import torch

    helper = exporter_module("symbolic_helper")

    def scaled_dot_product_attention(g: Any, query: Any, key: Any, value: Any, attn_mask: Any = None,
                                     dropout_p: Any = 0.0, is_causal: Any = False, scale: Any = None,
                                     *rest: Any) -> Any:  # fmt: skip
        qtype = scalar_type(query)
        dtype = qtype.dtype() if qtype is not None else None
        gqa = bool(rest) and bool(helper._maybe_get_const(rest[0], "b"))
        if dtype not in (torch.bfloat16, torch.float16) or gqa:
            return original(g, query, key, value, attn_mask, dropout_p, is_causal, scale, *rest)
        dropout = float(helper._maybe_get_const(dropout_p, "f") or 0.0)
        causal = bool(helper._maybe_get_const(is_causal, "b"))
        if scale is None or helper._is_none(scale):
            width = g.op("Cast", g.op("Slice", g.op("Shape", query),
                                      g.op("Constant", value_t=torch.tensor([-1], dtype=torch.int64)),
                                      g.op("Constant", value_t=torch.tensor([2**62], dtype=torch.int64))),
                         to_i=1)  # fmt: skip
            scale = g.op("Div", _constant(g, torch, 1.0, torch.float32), g.op("Sqrt", width))
            scale = cast(g, scale, dtype)
        elif (scalar_type(scale) is None) or scalar_type(scale).dtype() != dtype:
            scale = cast(g, scale, dtype)
        root = g.op("Sqrt", scale)
        rank = helper._get_tensor_rank(key) or 4
        perm = list(range(rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        scores = g.op("MatMul", g.op("Mul", query, root), g.op("Mul", g.op("Transpose", key, perm_i=perm), root))
        if causal:
            attn_mask = _causal_mask(g, torch, query, key)
        mask_type = None if attn_mask is None or helper._is_none(attn_mask) else scalar_type(attn_mask)
        zero = _constant(g, torch, 0.0, dtype)
        if mask_type is not None and mask_type.dtype() == torch.bool:
            additive = g.op("Where", attn_mask, zero, _constant(g, torch, float("-inf"), dtype))
            weights = g.op("Softmax", g.op("Add", scores, additive), axis_i=-1)
            weights = g.op("Where", g.op("IsNaN", weights), zero, weights)  # a fully masked row: 0, as eager's
        elif mask_type is not None:
            mask = attn_mask if mask_type.dtype() == dtype else cast(g, attn_mask, dtype)
            weights = g.op("Softmax", g.op("Add", scores, mask), axis_i=-1)
        else:
            weights = g.op("Softmax", scores, axis_i=-1)
        if dropout:
            weights = g.op("Dropout", weights, g.op("Constant", value_t=torch.tensor(dropout, dtype=torch.float)))
        return g.op("MatMul", weights, value)

    return scaled_dot_product_attention
