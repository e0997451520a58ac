"""Dynamo fix: a pass over the exported program before the ONNX exporter translates it, so the casts the fixes need
are the exporter's own (`aten._to_copy` nodes, translated as `Cast`s, their types in the graph's metadata):

- a layer norm, where or matmul handed mixed dtypes (bf16 activations with float weights under CPU autocast) computes
  in the widest of them and its result is cast back to the type eager returned, as eager's kernel does;
- an op whose ONNX operator does not allow its reduced input type at the export's opset (`IN_FLOAT_ATEN`: bf16
  into `Conv` before opset 22, `Softplus`, `MaxPool`, group_norm's `InstanceNormalization`, `TopK`, ...) computes
  in float, its floating outputs cast back (a tuple's, topk's values, where its users take them).
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

from where223.fixes._dtypes import allowed, widest

# aten overloads of the decomposed program -> the ONNX operator torchlib emits for them
IN_FLOAT_ATEN: dict[str, str] = {
    "aten.convolution.default": "Conv", "aten.conv1d.default": "Conv", "aten.conv2d.default": "Conv",
    "aten.conv3d.default": "Conv", "aten.conv1d.padding": "Conv", "aten.conv2d.padding": "Conv",
    "aten.einsum.default": "Einsum", "aten.softplus.default": "Softplus", "aten.sin.default": "Sin",
    "aten.cos.default": "Cos", "aten.max_pool2d.default": "MaxPool", "aten.max_pool1d.default": "MaxPool",
    "aten.max_pool3d.default": "MaxPool", "aten.max_pool2d_with_indices.default": "MaxPool",
    "aten.avg_pool1d.default": "AveragePool", "aten.avg_pool2d.default": "AveragePool",
    "aten.avg_pool3d.default": "AveragePool", "aten.adaptive_avg_pool1d.default": "AveragePool",
    "aten.adaptive_avg_pool2d.default": "AveragePool", "aten._adaptive_avg_pool2d.default": "AveragePool",
    "aten.adaptive_avg_pool3d.default": "AveragePool", "aten.hardswish.default": "HardSwish",
    "aten.group_norm.default": "InstanceNormalization", "aten.topk.default": "TopK", "aten.round.default": "Round",
}  # fmt: skip
# aten overloads whose ONNX operator binds one type to all their floating tensor inputs
BOUND = ("aten.layer_norm.default", "aten.where.self", "aten.matmul.default", "aten.mm.default", "aten.bmm.default")
DEFAULT_OPSET = 18  # the dynamo exporter's default in torch releases that do not name one


def default_opset(torch: Any) -> int:
    """The opset the installed `torch.onnx.export(dynamo=True)` writes by default (today's: 20)."""
    try:
        from torch.onnx import _constants

        return int(_constants.ONNX_DEFAULT_OPSET)
    except (ImportError, AttributeError):
        return DEFAULT_OPSET


def _val(node: Any) -> Any:
    return node.meta.get("val") if hasattr(node, "meta") else None


def _reduced(torch: Any, node: Any) -> bool:
    value = _val(node)
    return isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16)


def _tensors(torch: Any, node: Any) -> list[tuple[int, Any]]:
    """(position, value) of a node's tensor arguments; a list argument (einsum's operands) stands for its first
    tensor, its position marking the list."""
    found = []
    for position, arg in enumerate(node.args):
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        values = [_val(item) for item in items if isinstance(_val(item), torch.Tensor)]
        if values:
            found.append((position, values[0]))
    return found


def _to(graph: Any, torch: Any, node: Any, dtype: Any) -> Any:
    """An `aten._to_copy(node, dtype)` node typed in the metadata."""
    copy = graph.call_function(torch.ops.aten._to_copy.default, (node,), {"dtype": dtype})
    value = _val(node)
    if value is not None:
        copy.meta["val"] = value.to(dtype)
    return copy


def _wrap(graph: Any, torch: Any, node: Any, positions: list[int], compute: Any, back: Any) -> None:
    """`node` computes on its inputs at `positions` (a tensor, or each tensor of a list: einsum's) cast to
    `compute`; its users get its result cast to `back`."""
    with graph.inserting_before(node):
        args = list(node.args)
        for position in positions:
            given = args[position]
            if isinstance(given, (list, tuple)):
                args[position] = type(given)(_to(graph, torch, item, compute) if _reduced(torch, item) else item
                                             for item in given)  # fmt: skip
            else:
                args[position] = _to(graph, torch, given, compute)
        node.args = tuple(args)
    value = _val(node)
    if isinstance(value, (tuple, list)):  # topk's (values, indices): each floating item its users take, cast back
        node.meta["val"] = type(value)(_computed_in(torch, item, compute) for item in value)
        for user in list(node.users):
            if user.target is operator.getitem and _reduced(torch, user):
                _wrap_result(graph, torch, user, compute, _val(user).dtype)
        return
    _wrap_result(graph, torch, node, compute, back)


def _computed_in(torch: Any, value: Any, compute: Any) -> Any:
    floating = isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16)
    return value.to(compute) if floating else value


def _wrap_result(graph: Any, torch: Any, node: Any, compute: Any, back: Any) -> None:
    """`node`'s value, now computed in `compute`, cast to `back` for its users."""
    value = _val(node)
    if value is not None:
        node.meta["val"] = value.to(compute)
    with graph.inserting_after(node):
        result = _to(graph, torch, node, back)
    node.replace_all_uses_with(result, delete_user_cb=lambda user: user is not result)


def fix_program(program: Any, opset: int) -> list[str]:
    """Apply both rules to an exported program's graph in place; what was changed, one line per node."""
    import torch

    graph = program.graph_module.graph
    changes: list[str] = []
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        target = str(node.target)
        tensors = _tensors(torch, node)
        out = _val(node)
        if target in BOUND and isinstance(out, torch.Tensor):
            floating = [(i, v) for i, v in tensors if v.dtype.is_floating_point]
            dtypes = {v.dtype for _, v in floating}
            if len(dtypes) > 1:
                wide = widest(torch, dtypes)
                _wrap(graph, torch, node, [i for i, v in floating if v.dtype != wide], wide, out.dtype)
                changes.append(f"{node.name}: {target.split('.')[1]} of {'/'.join(sorted(map(str, dtypes)))} "
                               f"computed in {wide}")  # fmt: skip
        elif target in IN_FLOAT_ATEN and isinstance(out, (torch.Tensor, tuple, list)):
            op_type = IN_FLOAT_ATEN[target]
            refused = [(i, v.dtype) for i, v in tensors if v.dtype in (torch.bfloat16, torch.float16)
                       and not allowed(op_type, opset, v.dtype)]  # fmt: skip
            if refused:
                back = out.dtype if isinstance(out, torch.Tensor) else None  # a tuple's items: each its own
                _wrap(graph, torch, node, [i for i, _ in refused], torch.float32, back)
                changes.append(f"{node.name}: {op_type} in {refused[0][1]} not allowed at opset {opset}: computed "
                               "in float")  # fmt: skip
    if changes:
        graph.lint()
        program.graph_module.recompile()
    return changes


def export_dynamo_fixed(torch: Any, module: Any, args: tuple[Any, ...], path: Path, *, opset: int | str,
                        input_names: list[str]) -> dict[str, Any]:  # fmt: skip
    """`torch.onnx.export(dynamo=True)` of the program `torch.export` makes of `module`, after `fix_program`; called
    inside the recipe's context, as the sweep's dynamo exporter is (the program is made under it, translated with
    autocast off). Returns what the record says of it."""
    target = default_opset(torch) if opset == "auto" else int(opset)
    program = torch.export.export(module, args, strict=False).run_decompositions({})
    changes = fix_program(program, target)
    kwargs: dict[str, Any] = {} if opset == "auto" else {"opset_version": int(opset)}
    # the program holds autocast's casts already; translated under autocast, it would be traced again and
    # autocast would cast the float ops of the fix back to the reduced type
    with torch.autocast("cpu", enabled=False):
        torch.onnx.export(program, args, str(path), dynamo=True, input_names=list(input_names), **kwargs)
    return {"api": "torch.export.export + where223.fixes.fix_program + torch.onnx.export(dynamo=True)",
            "opset_requested": target, "fixes": ["program_pass"] if changes else [], "changes": changes}  # fmt: skip
