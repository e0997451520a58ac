"""Which exporter function emitted each ONNX node: recorded while torch.onnx exports.

- TorchScript exporter: `record_symbolics()` wraps the symbolic registry's lookups for the export's duration, so
  each symbolic function the exporter runs is recorded with the ATen op it converts, the Python line the traced
  node came from (the node's source range, innermost frame outside torch) and the scalar types of its inputs.
- Dynamo exporter: `record_dispatch()` wraps the dispatcher that picks the torchlib function for each FX node;
  the ONNX nodes then carry the FX node in `metadata_props["pkg.torch.onnx.fx_node"]`, by which `emitter_of`
  joins a node with its function.

Both patch private torch modules, which move between releases: where a module is not found the recording is
skipped and `Emitters.available` says why, never failing the export. torch is imported by the callers' stack.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from where223.graph.blame import parse_stack, same_op

FX_NODE = "pkg.torch.onnx.fx_node"
_FX_NAME = re.compile(r"^%(\S+) :")
_FX_TARGET = re.compile(r"target=([^\]]+)\]")
_TORCHSCRIPT_REGISTRATION = (
    "torch.onnx._internal.torchscript_exporter.registration",  # torch >= 2.9
    "torch.onnx._internal.registration",  # torch 1.13 - 2.8
)
_DYNAMO_DISPATCHING = ("torch.onnx._internal.exporter._dispatching",)


def _qualname(function: Any) -> str:
    for inner in (function, getattr(function, "function", None), getattr(function, "func", None)):
        if inner is not None and hasattr(inner, "__qualname__") and hasattr(inner, "__module__"):
            if inner.__module__ and not inner.__module__.startswith("onnxscript.values"):
                return f"{inner.__module__}.{inner.__qualname__}"
    name = getattr(function, "name", None)
    return f"onnxscript function {name}" if name else repr(function)[:200]


def _model_line(stack: str) -> str | None:
    frames = [f for f in parse_stack(stack) if "/torch/" not in f.file and not f.file.startswith("torch/")]
    if not frames:
        return None
    return f"{frames[0].file}:{frames[0].line}"


@dataclass
class Emitters:
    """What an export recorded of its emitting functions; `available` False with `why` when it could not."""

    exporter: str
    available: bool = True
    why: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # distinct (aten, function, source, input types)
    by_fx_node: dict[str, dict[str, str]] = field(default_factory=dict)  # dynamo: FX node name -> target, function

    def at(self, source: str | None, op_hint: str | None = None) -> list[dict[str, Any]]:
        """TorchScript: the symbolic calls from a `file:line` (trailing path match), the ones whose ATen op
        matches `op_hint` (e.g. 'layer_norm' for LayerNormalization) first."""
        if not source:
            return []
        found = [call for call in self.calls if same_line(call.get("source"), source)]
        if op_hint:
            found.sort(key=lambda call: not same_op(call["aten"], op_hint))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"exporter": self.exporter, "available": self.available, "why": self.why, "calls": len(self.calls)}


def same_line(one: str | None, other: str | None) -> bool:
    """Whether two `file:line` strings name the same line, one file path possibly a suffix of the other (records
    name files relative to site-packages, stacks may name them absolutely)."""
    if not one or not other:
        return False
    file, _, line = one.rpartition(":")
    other_file, _, other_line = other.rpartition(":")
    return line == other_line and (file.endswith(other_file) or other_file.endswith(file))


def _find(modules: tuple[str, ...]) -> Any:
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


@contextlib.contextmanager
def record_symbolics() -> Iterator[Emitters]:
    """Record the TorchScript exporter's symbolic function calls during the block."""
    emitters = Emitters("torchscript")
    registration = _find(_TORCHSCRIPT_REGISTRATION)
    registry = getattr(registration, "registry", None)
    if registry is None:
        emitters.available, emitters.why = False, "no symbolic registry in this torch (searched "
        emitters.why += ", ".join(_TORCHSCRIPT_REGISTRATION) + ")"
        yield emitters
        return
    seen: set[tuple[str, str, str | None, tuple[str, ...]]] = set()
    original = registry.get_function_group

    def wrap(name: str, function: Any) -> Any:
        def symbolic(graph_context: Any, *inputs: Any, **attrs: Any) -> Any:
            node = getattr(graph_context, "original_node", None)
            try:
                source = _model_line(node.sourceRange()) if node is not None else None
            except Exception:  # noqa: BLE001 - a node without a source range
                source = None
            types = tuple(_scalar_type(value) for value in inputs)
            key = (name, _qualname(function), source, types)
            if key not in seen:
                seen.add(key)
                emitters.calls.append({"aten": name, "function": key[1], "source": source, "input_types": list(types)})
            return function(graph_context, *inputs, **attrs)

        return symbolic

    class Group:
        def __init__(self, name: str, group: Any) -> None:
            self._name, self._group = name, group

        def get(self, opset: int) -> Any:
            function = self._group.get(opset)
            return None if function is None else wrap(self._name, function)

        def __getattr__(self, attribute: str) -> Any:
            return getattr(self._group, attribute)

    def get_function_group(name: str) -> Any:
        group = original(name)
        return None if group is None else Group(name, group)

    registry.get_function_group = get_function_group
    try:
        yield emitters
    finally:
        del registry.get_function_group  # the instance attribute: the class's method shows through again


def _scalar_type(value: Any) -> str:
    try:
        kind = value.type()
        scalar = kind.scalarType() if hasattr(kind, "scalarType") else None
        return str(scalar) if scalar else kind.kind()
    except Exception:  # noqa: BLE001 - not a torch._C.Value (a Python constant)
        return type(value).__name__


@contextlib.contextmanager
def record_dispatch() -> Iterator[Emitters]:
    """Record which torchlib function the dynamo exporter picked for each FX node during the block."""
    emitters = Emitters("dynamo")
    dispatching = _find(_DYNAMO_DISPATCHING)
    if dispatching is None or not hasattr(dispatching, "dispatch"):
        emitters.available = False
        emitters.why = "no torch.onnx dispatcher found (the dynamo exporter's internals moved)"
        yield emitters
        return
    original = dispatching.dispatch

    def dispatch(node: Any, registry: Any) -> Any:
        function, message = original(node, registry)
        emitters.by_fx_node[str(node.name)] = {
            "target": str(node.target),
            "function": _qualname(function) if function is not None else f"none: {message}",
        }
        return function, message

    dispatching.dispatch = dispatch
    try:
        yield emitters
    finally:
        dispatching.dispatch = original


def emitter_of(node: Any, emitters: Emitters | None) -> dict[str, str] | None:
    """The FX node and torchlib function of a dynamo-exported ONNX node (from its metadata), or None."""
    props = {entry.key: entry.value for entry in getattr(node, "metadata_props", ())}
    text = props.get(FX_NODE)
    if not text:
        return None
    name = _FX_NAME.match(text)
    target = _FX_TARGET.search(text)
    found = {"fx_node": name.group(1) if name else text[:80], "target": target.group(1) if target else None}
    if emitters is not None and name and name.group(1) in emitters.by_fx_node:
        found["function"] = emitters.by_fx_node[name.group(1)]["function"]
    return found


@contextlib.contextmanager
def recording(exporter: str) -> Iterator[Emitters]:
    """The recorder for `exporter` ('torchscript' or 'dynamo'); any other records nothing."""
    if exporter == "torchscript":
        with record_symbolics() as emitters:
            yield emitters
    elif exporter == "dynamo":
        with record_dispatch() as emitters:
            yield emitters
    else:
        yield Emitters(exporter, available=False, why=f"no emitter recording for exporter {exporter!r}")
