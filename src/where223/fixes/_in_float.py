"""TorchScript fix: an op whose ONNX operator's schema does not allow its reduced input type at the export's opset
(bf16 into `Conv` before opset 22, into `Einsum`, `Softplus`, `Sin`, `MaxPool`, ...) computes in float: its
reduced-type inputs are cast to float before the exporter's own symbolic and its floating outputs back to the types
eager returned. At an opset whose schema allows the type nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from where223.fixes._dtypes import allowed
from where223.fixes._torchscript import cast, scalar_type

# ONNX operator -> the TorchScript aten ops whose symbolic emits it, as the class study's records name them
# (`emitter_calls`); each was refused in bf16 in the sweeps (AveragePool and GlobalAveragePool, which the adaptive
# pools emit, InstanceNormalization, which group_norm emits, HardSwish, TopK and Round were refused next, once the
# first refusal of their models was fixed).
IN_FLOAT_OPS: dict[str, tuple[str, ...]] = {
    "Conv": ("aten::_convolution", "aten::_convolution_mode", "aten::conv1d", "aten::conv2d", "aten::conv3d",
             "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"),
    "Einsum": ("aten::einsum",),
    "Softplus": ("aten::softplus",),
    "Sin": ("aten::sin",),
    "Cos": ("aten::cos",),
    "MaxPool": ("aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::max_pool1d_with_indices",
                "aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices"),
    "NegativeLogLikelihoodLoss": ("aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss2d"),
    "InstanceNormalization": ("aten::instance_norm", "aten::group_norm"),
    "HardSwish": ("aten::hardswish",),
    "TopK": ("aten::topk",),
    "Round": ("aten::round",),
    "SoftmaxCrossEntropyLoss": ("aten::cross_entropy_loss",),  # as its function body allows (graph.schema)
    "AveragePool": ("aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d", "aten::adaptive_avg_pool1d",
                    "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d"),
}


def _outputs_back(g: Any, result: Any, reduced: Any) -> Any:
    import torch

    def back(index: int, value: Any) -> Any:
        try:
            eager = g.original_node.outputsAt(index).type().dtype()
        except Exception:  # noqa: BLE001 - untyped: the reduced type the inputs had
            eager = reduced
        kind = scalar_type(value)
        floating = kind is None or kind.dtype() in (torch.float32, torch.float64)
        return cast(g, value, eager) if eager in (torch.bfloat16, torch.float16) and floating else value

    if isinstance(result, (tuple, list)):
        return type(result)(back(i, v) for i, v in enumerate(result))
    return back(0, result)


def _listed(value: Any) -> list[Any] | None:
    """The tensors of a `prim::ListConstruct` value, None for anything else."""
    try:
        node = value.node()
    except AttributeError:
        return None
    return list(node.inputs()) if node.kind() == "prim::ListConstruct" else None


def make_for(op_type: str, opset: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The wrapper maker for the aten ops that emit `op_type`, at the export's `opset`."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        def refused(value: Any) -> Any:
            kind = scalar_type(value)
            dtype = kind.dtype() if kind is not None else None
            return dtype if dtype in (torch.bfloat16, torch.float16) and not allowed(op_type, opset, dtype) else None

        def in_float(g: Any, *args: Any) -> Any:
            reduced = None
            new = []
            for value in args:
                items = _listed(value)
                if items is not None and any(refused(item) for item in items):  # einsum's tensors come as a list
                    reduced = next(refused(item) for item in items if refused(item))
                    value = g.op("prim::ListConstruct",
                                 *(cast(g, item, torch.float32) if refused(item) else item for item in items))
                elif refused(value) is not None:
                    reduced = refused(value)
                    value = cast(g, value, torch.float32)
                new.append(value)
            if reduced is None:
                return original(g, *args)
            return _outputs_back(g, original(g, *new), reduced)

        return in_float

    return make
