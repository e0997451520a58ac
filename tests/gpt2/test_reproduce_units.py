from pathlib import Path

import pytest

from where223.gpt2 import models, reproduce
from where223.graph.ort import OrtVerdict
from where223.pipeline import portable
from where223.pipeline.paths import ROOT

# ONNX Runtime's own wording, in the two forms this project meets (CPU bf16 and the CUDA fp16 of the seed).
CPU_MESSAGE = (
    "[ONNXRuntimeError] : 1 : FAIL : Type Error: Type parameter (T) of Optype (Where) bound to different "
    "types (tensor(float) and tensor(bfloat16) in node (/transformer/h.0/attn/Where)."
)
GPU_MESSAGE = (
    "[ONNXRuntimeError] : 1 : FAIL : Type Error: Type parameter (T) of Optype (Where) bound to different "
    "types (tensor(float) and tensor(float16) in node (Where_223)."
)


def test_status_follows_onnx_runtimes_verdict():
    assert reproduce.status_of(OrtVerdict.WHERE_TYPE_ERROR) == reproduce.REPRODUCED
    assert reproduce.status_of(OrtVerdict.ACCEPTED) == reproduce.NOT_REPRODUCED
    others = (OrtVerdict.TYPE_ERROR, OrtVerdict.MISSING_KERNEL, OrtVerdict.OTHER_ERROR)
    assert {reproduce.status_of(verdict) for verdict in others} == {reproduce.OTHER_ERROR}


def _record(tmp_path: Path, caught: BaseException | None) -> dict:
    settings = reproduce.ReproduceSettings.resolve(
        path="onnx_export", preset="tiny", device="cpu", amp_dtype="bf16", batch_size=1, seq_len=8, opset=17, seed=0
    )
    return reproduce.build_record(settings, tmp_path, caught, 0.0)


def test_record_keeps_status_verdict_and_binding(tmp_path):
    record = _record(tmp_path, RuntimeError(GPU_MESSAGE))
    assert (record["status"], record["ort_verdict"]) == ("reproduced", "where_type_error")
    assert record["error"]["type_binding"] == {
        "op_type": "Where",
        "type_parameter": "T",
        "node": "Where_223",
        "bound_types": ["tensor(float)", "tensor(float16)"],
    }
    assert reproduce.check_outcome(record).startswith("REPRODUCED")
    other_op = _record(tmp_path, RuntimeError(CPU_MESSAGE.replace("Optype (Where)", "Optype (Add)")))
    assert (other_op["status"], other_op["ort_verdict"]) == ("other error", "type_error")
    assert other_op["error"]["type_binding"]["op_type"] == "Add"
    ran = _record(tmp_path, None)
    assert (ran["status"], ran["ort_verdict"], ran["error"]) == ("not reproduced", "accepted", None)


def test_paths_are_made_portable():
    assert portable.path("/x/venv/lib/python3.11/site-packages/torch/nn/module.py") == "torch/nn/module.py"
    assert portable.path(str(ROOT / "src" / "a.py")) == "src/a.py"
    assert portable.text(f"Load model from {ROOT}/outputs/r/model.onnx failed") == (
        "Load model from outputs/r/model.onnx failed"
    )


def test_call_stack_lists_frames_outermost_first():
    def inner():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError) as caught:
        inner()
    frames = reproduce.call_stack(caught.value)
    assert frames[-1].endswith(":inner") and frames[-1].startswith("tests/gpt2/test_reproduce_units.py:")


def test_check_outcome_rejects_other_errors():
    record = {
        "status": "other error",
        "path": "ortmodule",
        "environment": {"packages": {"torch": "x", "transformers": "y"}},
        "error": {"message": "Gemm(bfloat16) not implemented", "type_binding": None},
    }
    with pytest.raises(AssertionError, match="failed with another error: Gemm"):
        reproduce.check_outcome(record)


def test_check_outcome_reports_not_reproduced_without_failing():
    record = {
        "status": "not reproduced",
        "path": "onnx_export",
        "error": None,
        "environment": {"packages": {"torch": "2.4.1", "transformers": "4.25.1"}},
    }
    assert reproduce.check_outcome(record).startswith(
        "NOT REPRODUCED: path onnx_export ran without error on torch 2.4.1"
    )


def test_synthetic_dataset_is_deterministic_and_learnable():
    first = models.SyntheticSentiment(size=64, seq_len=16, vocab_size=256, seed=3)
    again = models.SyntheticSentiment(size=64, seq_len=16, vocab_size=256, seed=3)
    assert all((first[i]["input_ids"] == again[i]["input_ids"]).all() for i in range(64))
    labels = {int(first[i]["labels"]) for i in range(64)}
    assert labels == {0, 1}
    row = first[5]
    assert int(row["labels"]) == int((row["input_ids"] >= 128).sum() * 2 > 16)


def test_presets_build_gpt2_from_configs():
    tiny = models.make_config("tiny")
    assert (tiny.n_layer, tiny.n_embd) == (2, 32)
    assert models.make_config("gpt2").n_embd == 768
    assert models.make_config("tiny", dropout=False).attn_pdrop == 0.0


def test_real_dataset_needs_the_hub(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="dataset='sst2'"):
        models.load_dataset("sst2", 4, 8, 256, 0)


def test_keep_exported_model_leaves_one_file_with_stable_doc_strings(tmp_path: Path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"], name="relu",
                            doc_string="/tmp/ipykernel_4242/123.py(1): <module>\nmodel.py(7): forward")
    value = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [value("x", TensorProto.FLOAT, [1])], [value("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(graph), str(tmp_path / reproduce.ORTMODULE_EXPORT))
    (tmp_path / "ortmodule_post_processed_training.onnx").write_bytes(b"a later stage")
    assert reproduce.keep_exported_model(tmp_path) == tmp_path / "model.onnx"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    kept = onnx.load(str(tmp_path / "model.onnx")).graph.node[0].doc_string
    assert kept == "<ipykernel>/123.py(1): <module>\nmodel.py(7): forward"
