"""Notebook 01 with tiny parameters, on every path; its records agree with the committed outputs."""

from pathlib import Path

import pytest

from tests.conftest import load_json, run_name, run_notebook
from where223.pipeline.paths import OUTPUTS, ROOT
from where223.pipeline.run import NotebookFailedError

pytestmark = pytest.mark.slow
PATHS = ["onnx_export", "ortmodule", "ort_trainer"]


@pytest.fixture(params=PATHS)
def tiny_run(request, reproduced):
    return request.param, *reproduced(request.param)


def test_records_the_where_type_binding_error(tiny_run):
    path, executed, record = tiny_run
    assert executed.is_file() and executed.with_suffix(".html").is_file()
    assert record["status"] == "reproduced"
    assert record["parameters"]["seq_len"] == 8 and record["parameters"]["path"] == path
    binding = record["error"]["type_binding"]
    assert (binding["op_type"], binding["type_parameter"]) == ("Where", "T")
    assert binding["bound_types"] == ["tensor(float)", "tensor(bfloat16)"]
    assert binding["node"].endswith("transformer/h.0/attn/Where")
    assert "bound to different types (tensor(float) and tensor(bfloat16)" in record["error"]["ort_message"]
    assert record["environment"]["packages"]["torch"] == "2.1.2"
    assert (Path(record["exported_model"]).name) == "model.onnx"


def test_call_stack_goes_through_the_expected_frames(tiny_run):
    path, _, record = tiny_run
    stack = record["call_stack"]
    if path == "onnx_export":
        assert stack[-1].startswith("onnxruntime/capi/onnxruntime_inference_collection.py")
    else:
        assert stack[-1].endswith(":_initialize_graph_builder")
    if path == "ort_trainer":  # the same optimum and transformers frames as the original report
        assert "optimum/onnxruntime/trainer.py:349:train" in stack
        assert "transformers/trainer.py:2523:training_step" in stack


def test_committed_outputs_agree_with_the_code(tiny_run):
    path, _, record = tiny_run
    committed = load_json(OUTPUTS / run_name(path) / "reproduce.json")
    assert committed["status"] == record["status"]
    assert committed["error"]["exception"] == record["error"]["exception"]
    assert committed["error"]["type_binding"] == record["error"]["type_binding"]
    assert (ROOT / committed["exported_model"]).is_file()


def test_bad_parameter_fails_the_notebook_with_the_allowed_values(session_outputs: Path):
    with pytest.raises(NotebookFailedError) as caught:
        run_notebook("01_reproduce", session_outputs / "bad", path="torchscript")
    assert "parameter path='torchscript' is not allowed" in str(caught.value)
    name = "01_reproduce__path=torchscript"
    assert (session_outputs / "bad" / "failed" / name / "notebooks" / f"{name}.ipynb").is_file()
