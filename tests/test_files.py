"""Atomic writes (`where223.files`): a model's external weights keep the names the model gives them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from where223 import files


def _model_with_weights() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weight],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save_beside(partial) -> None:
    """What an exporter does with large weights: writes them beside the file it was given, named after it."""
    onnx.save_model(_model_with_weights(), str(partial), save_as_external_data=True,
                    location=f"{partial.name}.data", size_threshold=0)  # fmt: skip


def _another_writer_cleans(folder, monkeypatch) -> None:
    """A later writer into the folder, in another process: it removes what dead processes left."""
    monkeypatch.setattr(files.os, "getpid", lambda: 1)
    monkeypatch.setattr(files, "_alive", lambda pid: False)
    files.remove_stale_temporaries(folder)
    monkeypatch.undo()


def test_a_models_external_weights_survive_the_next_writer(tmp_path, monkeypatch):
    target = tmp_path / "model.onnx"
    with files.atomic_model_path(target) as partial:
        assert partial.name == "model.onnx" and partial.parent != tmp_path
        _save_beside(partial)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    _another_writer_cleans(tmp_path, monkeypatch)
    weights = numpy_helper.to_array(onnx.load(str(target)).graph.initializer[0])
    assert weights[63, 63] == 4095

    control = tmp_path / "control"  # control: atomic_path's temporary name is the one the weights get
    with files.atomic_path(control / "model.onnx") as partial:
        _save_beside(partial)
    assert [p.name.startswith(files.TEMPORARY_PREFIX) for p in sorted(control.iterdir())] == [True, False]
    _another_writer_cleans(control, monkeypatch)
    with pytest.raises(onnx.checker.ValidationError, match="doesn't exist"):  # the model names weights now gone
        onnx.load(str(control / "model.onnx"))


def test_a_failed_model_write_leaves_the_old_files(tmp_path):
    target = tmp_path / "model.onnx"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), files.atomic_model_path(target) as partial:
        _save_beside(partial)
        raise RuntimeError("the exporter failed")
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"] and target.read_bytes() == b"old"
