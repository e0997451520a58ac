"""Notebook 01 with tiny parameters, on every path; its records agree with the committed outputs."""

import json
from pathlib import Path

import pytest

from tests.conftest import TINY, load_json, run_name, run_notebook
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


TIMING_KEYS = {"start_time", "end_time", "duration", "execution", "seconds"}  # what a rerun may change


def _without_timings(value):
    if isinstance(value, dict):
        if value.get("cell_type") == "code" and "outputs" in value:  # a cell's stream text, however it was chunked
            value = {**value, "outputs": _joined_streams(value["outputs"])}
        return {key: _without_timings(item) for key, item in value.items() if key not in TIMING_KEYS}
    if isinstance(value, list):
        return [_without_timings(item) for item in value]
    return value


def _joined_streams(outputs: list) -> list:
    """A cell's outputs with all its stdout text joined, then all its stderr text: how a kernel's writes are split
    into messages, and how stdout and stderr interleave, depends on timing (other outputs keep their order)."""
    streams = {"stdout": "", "stderr": ""}
    others = []
    for output in outputs:
        if output.get("output_type") == "stream":
            text = output.get("text", "")
            streams[output.get("name", "stdout")] += "".join(text) if isinstance(text, list) else text
        else:
            others.append(output)
    return [*others, streams]


def _first_difference(a, b, where: str = "") -> str:
    """The path of the first leaf where two JSON values differ, and both values (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{where}/{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{where}[{index}]")
    return f"{where}: {str(a)[:300]!r} != {str(b)[:300]!r}"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in ("failed", ".staging")}


def test_a_rerun_on_the_same_machine_changes_only_timings(reproduced, session_outputs: Path, tmp_path: Path):
    from where223.pipeline import compare

    reproduced("onnx_export")
    first = _snapshot(session_outputs)
    run_notebook("01_reproduce", session_outputs, path="onnx_export", **TINY)
    second = _snapshot(session_outputs)
    assert sorted(first) == sorted(second)
    changed = sorted(name for name in first if first[name] != second[name])
    assert changed, "control: the executed copy records when it ran, so something must change"
    for name in changed:
        assert name.endswith((".ipynb", ".json")), f"{name} changed in bytes"
        a, b = (_without_timings(json.loads(side[name])) for side in (first, second))
        assert a == b, f"{name} changed beyond its timings: {_first_difference(a, b)}"
    for label, files in (("first", first), ("second", second)):
        for name, data in files.items():
            (tmp_path / label / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / label / name).write_bytes(data)
    result = compare.compare(tmp_path / "first", tmp_path / "second")
    assert result.reproduced and not result.of("informational"), compare.table(result, compare.KINDS)
