"""Hand-made ONNX models for the graph tests, built with onnx.helper (no torch)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

F32, F16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL


def _value(name: str, elem: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _if_node(then_nodes: list[onnx.NodeProto], then_out: str) -> onnx.NodeProto:
    """`If_3`: then_branch runs `then_nodes` (reading outer-scope values), else_branch passes x through."""
    then_branch = helper.make_graph(then_nodes, "then", [], [_value(then_out, F32, [2, 2])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["else_out"], name="else_identity")],
        "else",
        [],
        [_value("else_out", F32, [2, 2])],
    )
    return helper.make_node(
        "If", ["flag"], ["if_out"], name="If_3", then_branch=then_branch, else_branch=else_branch
    )


def _model(
    nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto], extra_opsets: tuple = ()
) -> onnx.ModelProto:
    inputs = [
        _value("cond", BOOL, [2, 2]),
        _value("x", F32, [2, 2]),
        _value("y", F16, [2, 2]),
        _value("hi", F16, []),
        _value("flag", BOOL, []),
    ]
    graph = helper.make_graph(nodes, "where223_test", inputs, outputs)
    opsets = [helper.make_opsetid("", 17), *extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def conflicts_nodes() -> list[onnx.NodeProto]:
    """Four type-binding conflicts, one of them inside If_3's then_branch."""
    return [
        helper.make_node("Where", ["cond", "x", "y"], ["w"], name="Where_223"),
        # Clip's optional `min` omitted (empty name): `max` is input position 2
        helper.make_node("Clip", ["w", "", "hi"], ["clipped"], name="Clip_7"),
        helper.make_node("Concat", ["x", "y", "y"], ["cat"], name="Concat_9", axis=0),
        _if_node([helper.make_node("Add", ["x", "y"], ["then_out"], name="then_add")], "then_out"),
    ]


CONFLICT_OUTPUTS = [_value("clipped", F32, [2, 2]), _value("cat", F32, [6, 2]), _value("if_out", F32, [2, 2])]


@pytest.fixture
def repairable_model() -> onnx.ModelProto:
    """Only type-binding conflicts: Where_223, Clip_7, Concat_9 and If_3/then_branch's then_add."""
    return _model(conflicts_nodes(), CONFLICT_OUTPUTS)


@pytest.fixture
def violations_model() -> onnx.ModelProto:
    """The four conflicts, plus a float Where condition (type_not_allowed) and an unchecked custom op."""
    nodes = [
        *conflicts_nodes(),
        helper.make_node("Where", ["x", "x", "x"], ["float_cond"], name="Where_float_cond"),
        helper.make_node("FusedMatMul", ["x", "x"], ["fused"], name="Fused_1", domain="com.example"),
    ]
    outputs = [*CONFLICT_OUTPUTS, _value("float_cond", F32, [2, 2]), _value("fused", F32, [2, 2])]
    return _model(nodes, outputs, (helper.make_opsetid("com.example", 1),))


@pytest.fixture
def clean_model() -> onnx.ModelProto:
    """The same shapes with consistent types: y cast to float before every use."""
    nodes = [
        helper.make_node("Cast", ["y"], ["y32"], name="Cast_y", to=F32),
        helper.make_node("Where", ["cond", "x", "y32"], ["w"], name="Where_223"),
        helper.make_node("Concat", ["x", "y32", "w"], ["cat"], name="Concat_9", axis=0),
    ]
    return _model(nodes, [_value("cat", F32, [6, 2])])


@pytest.fixture
def save(tmp_path: Path):
    """Save a model into the test's temporary folder and return its path."""

    def _save(model: onnx.ModelProto, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    return _save


@pytest.fixture
def unreadable_files(tmp_path: Path, clean_model: onnx.ModelProto) -> dict[str, Path]:
    """A missing path, garbage bytes, a text file and a truncated real model."""
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(bytes(range(7, 256)) * 3)
    text = tmp_path / "notes.onnx"
    text.write_text("this is not an ONNX model\n")
    data = clean_model.SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    return {"missing": tmp_path / "absent.onnx", "garbage": garbage, "text": text, "truncated": truncated}


def _registry_replaced(monkeypatch, registry):
    """The runtime's lists replaced by `registry` for one test, every cache that read them cleared before and after."""
    import where223.graph.lint as lint
    import where223.graph.schema as schema

    def clear() -> None:
        schema.signature.cache_clear()
        lint.allowed_types.cache_clear()
        lint._body_cache.clear()

    clear()
    monkeypatch.setattr(schema, "runtime_registry", lambda: registry)
    monkeypatch.setattr(lint, "runtime_registry", lambda: registry)
    return clear


@pytest.fixture
def no_runtime_lists(monkeypatch):
    """An onnxruntime that lists neither its schemas nor its kernels (as onnxruntime-training 1.19)."""
    from where223.graph.schema import RuntimeRegistry, runtime_registry

    clear = _registry_replaced(monkeypatch, RuntimeRegistry(runtime_registry().version, None, None))
    yield
    clear()


@pytest.fixture
def fake_kernels(monkeypatch):
    """An onnxruntime whose kernel list has one kernel: Softmax 13 on, for float."""
    from where223.graph.schema import KernelDef, RuntimeRegistry, runtime_registry

    kernels = {("", "Softmax"): (KernelDef(13, 2**31 - 1, (("T", frozenset({"tensor(float)"})),)),)}
    clear = _registry_replaced(monkeypatch, RuntimeRegistry(runtime_registry().version, runtime_registry().schemas,
                                                            kernels))
    yield
    clear()
