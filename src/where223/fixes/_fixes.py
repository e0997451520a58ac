"""The export-time fixes by name, and the context an export runs in with them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from where223.fixes import _binding, _in_float, _permute, _sdpa
from where223.fixes._cast_target import corrected_casts
from where223.fixes._torchscript import overridden


@dataclass(frozen=True)
class Fix:
    """One export-time fix: the exporter it is for, the refusal classes (operator, kind) it resolves, and how."""

    name: str
    exporter: str
    classes: tuple[tuple[str, str], ...]
    how: str


FIXES: tuple[Fix, ...] = (
    Fix("sdpa_in_query_type", "torchscript",
        (("Mul", "invalid_type"), ("LayerNormalization", "type_binding_conflict"), ("Div", "invalid_type")),
        "scaled_dot_product_attention's symbolic with its mask constants in the query's type and its scale cast to "
        "it by ONNX's number (not torch's Cast(to=15))"),
    Fix("cast_target", "torchscript", (("Div", "invalid_type"), ("Mul", "invalid_type")),
        "after the exporter's scalar-type analysis, a Cast whose `to` is torch's number for its output's type "
        "(15, bfloat16; ONNX's complex128) gets ONNX's number (16)"),
    Fix("bound_in_widest", "torchscript",
        (("LayerNormalization", "type_binding_conflict"), ("Where", "type_binding_conflict")),
        "layer_norm's and where's symbolics compute mixed dtypes in the widest and cast back to eager's output type"),
    Fix("in_float", "torchscript", tuple((op, "invalid_type") for op in _in_float.IN_FLOAT_OPS),
        "ops whose schema does not allow the reduced type at the opset compute in float, cast back"),
    Fix("permute_axes", "torchscript", (("Transpose", "other_error"),),
        "permute's symbolic with negative axes counted from the end: ONNX's Transpose takes perm in 0..rank-1 "
        "(a second refusal, after a type class is fixed: bamba)"),
    Fix("program_pass", "dynamo",
        (("LayerNormalization", "type_binding_conflict"), ("MatMul", "type_binding_conflict"),
         ("Conv", "invalid_type"), ("Softplus", "invalid_type"), ("MaxPool", "invalid_type"),
         ("Einsum", "invalid_type"), ("InstanceNormalization", "invalid_type"), ("TopK", "invalid_type"),
         ("Round", "invalid_type")),
        "a pass over the exported program: mixed-dtype layer_norm, where and matmul in the widest dtype, ops whose "
        "schema does not allow the reduced type in float, both cast back"),
)


@contextlib.contextmanager
def fixed(exporter: str, opset: int) -> Iterator[list[str]]:
    """The context a TorchScript export at `opset` runs in with every TorchScript fix (the symbolics overridden for
    its duration only); yields the names of the fixes in force. The dynamo exporter's fix is a different export
    call (`export_dynamo_fixed`), so for it this context changes nothing."""
    if exporter != "torchscript":
        yield []
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(corrected_casts())
        stack.enter_context(overridden(_sdpa.ATEN, opset, _sdpa.make))
        stack.enter_context(overridden(_permute.ATEN, opset, _permute.make))
        for aten in _binding.BOUND:
            stack.enter_context(overridden(aten, opset, _binding.make_for(aten)))
        for op_type, atens in _in_float.IN_FLOAT_OPS.items():
            for aten in atens:
                stack.enter_context(overridden(aten, opset, _in_float.make_for(op_type, opset)))
        yield [fix.name for fix in FIXES if fix.exporter == "torchscript"]
