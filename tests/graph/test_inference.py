"""where223.graph.inference: the element-types-only inference lint asks for (`shapes=False`) types every value as
inference with shapes types it, and an error of onnx's inference is one line."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from where223.graph import inference
from where223.graph.lint import lint_model
from where223.graph.loading import MalformedModelError
from where223.graph.mutants import conformance_models, model_name, mutants_of
from where223.graph.types import model_types

F32, F16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL


def _chain(links: int = 40, conflict_at: int = 7) -> onnx.ModelProto:
    """Relu and Add links in float, one Where among them bound to float and float16 (a root and its consequences)."""
    nodes, last = [], "x"
    for k in range(links):
        out = f"v{k}"
        if k == conflict_at:
            nodes.append(helper.make_node("Where", ["cond", last, "h"], [out], name=f"where_{k}"))
        elif k % 2:
            nodes.append(helper.make_node("Add", [last, "x"], [out], name=f"add_{k}"))
        else:
            nodes.append(helper.make_node("Relu", [last], [out], name=f"relu_{k}"))
        last = out
    inputs = [helper.make_tensor_value_info(name, elem, [4]) for name, elem in (("x", F32), ("h", F16), ("cond", BOOL))]
    graph = helper.make_graph(nodes, "chain", inputs, [helper.make_tensor_value_info(last, F32, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _element_types(model: onnx.ModelProto, shapes: bool) -> dict[tuple[str, str], str | None]:
    types = model_types(model, shapes=shapes)
    return {
        (path, name): scope.type_of(name)
        for path, scope in types.scopes.items()
        for node in scope.nodes
        for name in (*node.inputs, *node.outputs)
        if name
    }


def _conformance_models() -> list[onnx.ModelProto]:
    """Every fifth of onnx's conformance models with its first two one-float-type mutants (the differential test
    runs lint, types only, on all of them against ONNX Runtime)."""
    roots, paths = conformance_models()
    found = []
    for path in paths[::5]:
        found.append(onnx.load(str(path), load_external_data=False))
        found.extend(mutant.model for mutant in mutants_of(path, model_name(path, roots))[:2])
    return found


def test_types_only_inference_types_every_value_as_full_inference_does():
    """lint infers element types without shapes (`types.py`'s docstring): over onnx's conformance models and their
    mutants it gives every value the element type that inference with shapes gives."""
    models = _conformance_models()
    assert len(models) > 500
    differ, compared = {}, 0
    for model in models:
        try:
            full = _element_types(model, shapes=True)
        except MalformedModelError:
            continue
        short = _element_types(model, shapes=False)
        compared += 1
        differ |= {(model.graph.name, *key): (full[key], short.get(key)) for key in full if short.get(key) != full[key]}
    assert compared > 500 and not differ, list(differ.items())[:5]


def test_the_types_comparison_sees_a_value_typed_otherwise():
    """The control for the test above: a value whose declared type differs is a difference it reports."""
    model = _chain()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.value_info.append(helper.make_tensor_value_info("v2", F16, None))
    assert _element_types(model, shapes=False) != _element_types(other, shapes=True)


def test_an_error_of_onnx_s_inference_is_one_line(monkeypatch):
    class Failing:
        @staticmethod
        def infer_shapes(*_args):
            raise onnx.shape_inference.InferenceError("[ShapeInferenceError] first\n[TypeInferenceError] last line")

    assert lint_model(_chain()).violations  # the control: onnx's own inference, no error
    monkeypatch.setattr(inference, "c_shape_inference", Failing)
    with pytest.raises(MalformedModelError) as caught:
        lint_model(_chain())
    assert "shape inference" in str(caught.value) and "last line" in str(caught.value)
    assert "\n" not in str(caught.value)
