"""The TorchScript exporter's symbolic registry, reached the same way in torch 2.1 and today's torch (which moved
it under `torch.onnx._internal.torchscript_exporter`): a symbolic overridden for one export and restored after, and
the Casts a wrapping symbolic inserts, typed so that the wrapped symbolic sees the type it is handed."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any


def exporter_module(name: str) -> Any:
    """`registration`, `_type_utils`, `symbolic_opset14`, ...: today's location, else torch 2.1's."""
    for base in ("torch.onnx._internal.torchscript_exporter", "torch.onnx._internal", "torch.onnx"):
        try:
            return importlib.import_module(f"{base}.{name}")
        except ImportError:
            continue
    raise ImportError(f"this torch has no TorchScript exporter module {name!r}")


def scalar_type(value: Any) -> Any | None:
    """The JitScalarType of a symbolic's input, None when it is not a tensor of known type."""
    types = exporter_module("_type_utils")
    try:
        return types.JitScalarType.from_value(value, None)
    except Exception:  # noqa: BLE001 - a list, a None, a value the tracer did not type
        return None


def cast(g: Any, value: Any, dtype: Any) -> Any:
    """`Cast(value, to=dtype)` typed as `value`'s tensor type with `dtype` (a torch dtype), so symbolics that read
    their inputs' types see the new one; the ONNX number comes from torch's own table, not torch's ScalarType."""
    types = exporter_module("_type_utils")
    onnx_type = int(types.JitScalarType.from_dtype(dtype).onnx_type())
    out = g.op("Cast", value, to_i=onnx_type)
    with contextlib.suppress(Exception):  # an untyped value stays untyped
        out.setType(value.type().with_dtype(dtype))
    return out


@contextlib.contextmanager
def overridden(name: str, opset: int, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """For the duration, the symbolic of `name` (`aten::layer_norm`) at `opset` is `make(original)`; the override is
    removed after, whatever the export did (an override registered before is restored)."""
    registry = exporter_module("registration").registry
    group = registry.get_function_group(name)
    original = group.get(opset) if group is not None else None
    if original is None:
        yield  # this torch has no symbolic for it at this opset: nothing to fix
        return
    functions = group._functions  # OverrideDict: the one place custom symbolics live
    previous = functions._overrides.get(opset) if functions.overridden(opset) else None
    group.add_custom(make(original), opset)
    try:
        yield
    finally:
        if previous is not None:
            group.add_custom(previous, opset)
        else:
            group.remove_custom(opset)
