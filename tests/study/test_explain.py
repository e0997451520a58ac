"""`where223 explain` on a model of one's own: the refusal, its line, the eager kernel and the emitter in one
report; the control with matching types is accepted and compared with eager. Runs on the project's stack (torch
2.1.2, its TorchScript exporter)."""

from __future__ import annotations

import inspect
import json

import pytest

from tests.study import explain_models
from where223.cli import main

pytestmark = pytest.mark.slow
MODELS = "tests/study/explain_models.py"


def _line(text: str) -> int:
    lines, start = inspect.getsourcelines(explain_models.MaskedScores)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_a_refused_where_is_explained(tmp_path, capsys):
    code = main(["explain", "--factory", f"{MODELS}:mixed", "--exporter", "torchscript", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["outcome"] == "where_type_error" and (tmp_path / "model.onnx").is_file()
    assert f"explain_models.py:{_line('# the refused line')}" in out
    assert "eager `where.self` handed bool/bfloat16/float" in out and "(mixed dtypes)" in out
    assert "emitted by `torch.onnx.symbolic_opset13.where`" in out
    assert (tmp_path / "explanation.md").read_text().strip() == out.strip()


def test_the_control_with_matching_types_is_accepted_and_compared(tmp_path, capsys):
    args = ["explain", "--factory", f"{MODELS}:matched", "--inputs", f"{MODELS}:example", "--exporter",
            "torchscript", "--opset", "17", "--out", str(tmp_path), "--json"]  # an opset given: the control of
    # tests/study/test_explain_untrusted.py's bad ones
    assert main(args) == 0
    said = json.loads(capsys.readouterr().out)
    record = json.loads((tmp_path / "record.json").read_text())
    assert said["outcome"] in ("accepted", "missing_kernel") and said["node"] is None
    assert record["numerics"]["status"] == "measured" and record["numerics"]["within_tolerance"] is True
    assert record["settings"]["opset"] == 17 and record["onnx_opset"] == 17


def test_usage_errors_are_one_line(tmp_path, capsys):
    assert main(["explain", "--factory", "no_such_module:f", "--out", str(tmp_path)]) == 2
    assert main(["explain", "--factory", f"{MODELS}:matched", "--out", str(tmp_path)]) == 2  # no example inputs
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no_such_module" in err[0] and "--inputs" in err[1]


def test_the_report_says_a_comparison_that_could_not_fail_is_not_judged():
    from where223.study.classes.explain import report

    flat = {"outputs": [{"max_abs_reference": 0.0, "reference_spread": 0.0, "reference_size": 4, "relative": 0.0}],
            "status": "measured", "within_tolerance": True, "execution": "ONNX Runtime CPU", "relative": 0.0,
            "tolerance": 0.0625, "reduced": "fp16"}
    record = {"outcome": "accepted", "model_type": "m", "numerics": flat}
    assert "within the tolerance 0.0625 (fp16) — not judged: the reference outputs are all zero" in report(record)
    moving = {**flat, "outputs": [{**flat["outputs"][0], "max_abs_reference": 1.0, "reference_spread": 2.0}]}
    assert "not judged" not in report({**record, "numerics": moving})  # control: a reference that distinguishes
