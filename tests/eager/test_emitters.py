"""Which exporter function emitted a node: the TorchScript exporter's symbolic calls recorded during an export,
the dynamo exporter's FX node read back from the ONNX node's metadata."""

from __future__ import annotations

import inspect

import onnx
import torch

from where223.eager import emitters
from where223.eager.emitters import Emitters, emitter_of, record_symbolics


class Norm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * 2  # the line


def _export(path) -> None:
    kwargs = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(Norm(), (torch.randn(2, 4),), str(path), opset_version=17, **kwargs)


def test_symbolic_calls_are_recorded_with_their_source_line(tmp_path):
    with record_symbolics() as found:
        _export(tmp_path / "norm.onnx")
    assert found.available, found.why
    lines, start = inspect.getsourcelines(Norm)
    line = start + next(i for i, text in enumerate(lines) if "# the line" in text)
    calls = found.at(f"tests/eager/test_emitters.py:{line}", "LayerNormalization")
    assert calls and calls[0]["aten"] == "aten::layer_norm" and calls[0]["function"].endswith(".layer_norm")
    assert any(call["aten"] == "aten::mul" for call in calls)  # the same line's other op, after the hinted one
    assert onnx.load(str(tmp_path / "norm.onnx")).graph.node  # the export itself is unchanged


def test_the_registry_is_restored_and_a_missing_one_is_said(tmp_path, monkeypatch):
    """Control: after the block the registry's own lookup is back (nothing more is recorded); where torch has no
    registry at the places searched, the export still runs and the record says why nothing was recorded."""
    with record_symbolics() as found:
        pass
    _export(tmp_path / "after.onnx")
    assert found.calls == []
    monkeypatch.setattr(emitters, "_TORCHSCRIPT_REGISTRATION", ("no.such.module",))
    with record_symbolics() as missing:
        _export(tmp_path / "missing.onnx")
    assert not missing.available and "no.such.module" in missing.why and missing.calls == []


def test_a_dynamo_node_is_joined_with_its_function():
    node = onnx.helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"], name="node_layer_norm_5")
    fx = ("%layer_norm_5 : [num_users=1] = call_function[target=torch.ops.aten.layer_norm.default](args = (%x,), "
          "kwargs = {})")
    node.metadata_props.add(key=emitters.FX_NODE, value=fx)
    recorded = Emitters("dynamo", by_fx_node={"layer_norm_5": {"target": "aten.layer_norm.default",
                                                               "function": "torch_lib.ops.core.aten_layer_norm"}})
    assert emitter_of(node, recorded) == {"fx_node": "layer_norm_5", "target": "torch.ops.aten.layer_norm.default",
                                          "function": "torch_lib.ops.core.aten_layer_norm"}
    assert emitter_of(onnx.helper.make_node("Relu", ["x"], ["y"]), recorded) is None  # control: no metadata
