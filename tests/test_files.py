"""Atomic writes (`where223.files`): a model's external weights keep the names the model gives them."""

from __future__ import annotations

import os
import stat

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


def _owner_to_keep() -> tuple[int, int]:
    """An owner and group a replacement can be given: another user's where this process may chown (root)."""
    return (4321, 4322) if os.geteuid() == 0 else (os.getuid(), os.getgid())


def _attributes(path) -> tuple[int, int, int]:
    found = path.lstat()
    return stat.S_IMODE(found.st_mode), found.st_uid, found.st_gid


def test_keep_mode_passes_a_replaced_files_mode_and_owner_on(tmp_path):
    owner = _owner_to_keep()
    target, control, pointed = tmp_path / "kept.bin", tmp_path / "control.bin", tmp_path / "pointed.bin"
    for path in (target, control, pointed):
        path.write_bytes(b"old")
        os.chmod(path, 0o640)
        os.chown(path, *owner)
    with files.atomic_path(target, keep_mode=True) as partial:
        partial.write_bytes(b"new")
    assert target.read_bytes() == b"new" and _attributes(target) == (0o640, *owner)
    with files.atomic_path(control) as partial:  # control: without keep_mode, a new file as before
        partial.write_bytes(b"new")
    assert _attributes(control) == (0o666 & ~_umask(), os.getuid(), os.getgid())
    link = tmp_path / "link.bin"
    link.symlink_to(pointed)
    with files.atomic_path(link, keep_mode=True) as partial:  # a symlink is replaced as a link: nothing to keep
        partial.write_bytes(b"new")
    assert not link.is_symlink() and _attributes(link) == (0o666 & ~_umask(), os.getuid(), os.getgid())
    assert pointed.read_bytes() == b"old" and _attributes(pointed) == (0o640, *owner)


def test_a_models_weights_keep_their_mode_too_and_each_file_placed_is_told(tmp_path):
    target = tmp_path / "model.onnx"
    with files.atomic_model_path(target) as partial:
        _save_beside(partial)
    for path in (target, tmp_path / "model.onnx.data"):
        os.chmod(path, 0o600)
    told = []
    files.placed.append(told.append)
    try:
        with files.atomic_model_path(target, keep_mode=True) as partial:
            _save_beside(partial)
        with pytest.raises(RuntimeError), files.atomic_path(tmp_path / "never.bin") as partial:
            raise RuntimeError("the writer failed")  # control: nothing placed, nothing told
    finally:
        files.placed.remove(told.append)
    assert told == [tmp_path / "model.onnx.data", target]
    assert [_attributes(path)[0] for path in told] == [0o600, 0o600]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
