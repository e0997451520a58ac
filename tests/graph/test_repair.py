"""Cast insertion: the repaired model lints clean and loads in ONNX Runtime; clean models are untouched."""

from __future__ import annotations

import numpy as np
import pytest

from where223.cli import main
from where223.graph.lint import FindingKind, lint_model
from where223.graph.ort import OrtVerdict, judge, load_session
from where223.graph.repair import Change, RepairError, repair


def _feeds():
    return {
        "cond": np.array([[True, False], [False, True]]),
        "x": np.ones((2, 2), np.float32),
        "y": np.full((2, 2), 2, np.float16),
        "hi": np.array(1.5, np.float16),
        "flag": np.array(True),
    }


def test_repair_to_output_type(repairable_model):
    # the model reproduces ONNX Runtime's own error first
    assert judge(repairable_model).verdict == OrtVerdict.WHERE_TYPE_ERROR
    repaired, changes = repair(repairable_model)
    assert [(c.kind, c.node, c.subgraph, c.value, c.position, c.from_type, c.to_type) for c in changes] == [
        ("cast_input", "Where_223", "", "y", 2, "tensor(float16)", "tensor(float)"),
        ("cast_input", "Clip_7", "", "hi", 2, "tensor(float16)", "tensor(float)"),
        ("cast_input", "Concat_9", "", "y", 1, "tensor(float16)", "tensor(float)"),
        ("cast_input", "Concat_9", "", "y", 2, "tensor(float16)", "tensor(float)"),
        ("cast_input", "then_add", "If_3/then_branch", "y", 1, "tensor(float16)", "tensor(float)"),
    ]
    # one Cast of y per graph, shared by every node that needs it
    assert changes[0].cast_node == changes[2].cast_node == changes[3].cast_node != changes[4].cast_node
    assert lint_model(repaired).clean
    assert judge(repaired).verdict == OrtVerdict.ACCEPTED
    session = load_session(repaired)
    clipped, cat, if_out = session.run(None, _feeds())
    np.testing.assert_array_equal(clipped, [[1.0, 1.5], [1.5, 1.0]])
    assert cat.dtype == np.float32 and cat.shape == (6, 2)
    np.testing.assert_array_equal(if_out, np.full((2, 2), 3.0))
    # the input model is not modified
    assert judge(repairable_model).verdict == OrtVerdict.WHERE_TYPE_ERROR


def test_repair_to_explicit_type_casts_outputs_back(repairable_model):
    repaired, changes = repair(repairable_model, target="float16")
    where = [c for c in changes if c.node == "Where_223"]
    assert where == [
        Change("cast_input", "Where_223", "", "x", 1, "tensor(float)", "tensor(float16)", where[0].cast_node,
               where[0].new_value),
        Change("cast_output", "Where_223", "", "w", 0, "tensor(float16)", "tensor(float)", where[1].cast_node,
               "w_where223_float16"),
    ]  # fmt: skip
    assert lint_model(repaired).clean
    assert judge(repaired).verdict == OrtVerdict.ACCEPTED


def test_clean_model_is_untouched(clean_model):
    repaired, changes = repair(clean_model)
    assert repaired is clean_model and changes == []


def test_other_findings_are_left_in_place(violations_model):
    repaired, changes = repair(violations_model)
    assert {c.node for c in changes} == {"Where_223", "Clip_7", "Concat_9", "then_add"}
    left = lint_model(repaired).violations
    assert [(v.kind, v.node) for v in left] == [(FindingKind.NOT_ALLOWED, "Where_float_cond")]


def test_target_outside_the_allowed_set_is_not_repairable(repairable_model):
    with pytest.raises(
        RepairError, match=r"Clip_7: target tensor\(bool\) is not allowed for type parameter T"
    ):
        repair(repairable_model, target="bool")


def test_cli(repairable_model, clean_model, violations_model, save, tmp_path, capsys):
    out = tmp_path / "fixed.onnx"
    assert main(["repair", str(save(repairable_model, "in.onnx")), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "5 change(s)" in printed and "Where_223: input 2 'y' tensor(float16) -> tensor(float)" in printed
    assert (
        "ONNX Runtime loads the repaired model" in printed
        and "re-lint: no type-binding conflict left, clean" in printed
    )
    assert lint_model(out).clean

    untouched = tmp_path / "untouched.onnx"
    assert main(["repair", str(save(clean_model, "clean.onnx")), str(untouched)]) == 0
    assert "nothing changed, nothing written" in capsys.readouterr().out and not untouched.exists()

    assert main(["repair", str(save(violations_model, "bad.onnx")), str(tmp_path / "x.onnx")]) == 1
    captured = capsys.readouterr()
    assert "1 other finding(s) left in place" in captured.out and "Where_float_cond" in captured.out
    assert "ONNX Runtime refuses the repaired model" in captured.err

    assert main(["repair", str(tmp_path / "absent.onnx"), str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err

    assert (
        main(["repair", str(save(repairable_model, "in2.onnx")), str(tmp_path / "x.onnx"), "--to", "half"])
        == 2
    )
    assert "unknown ONNX element type 'half'" in capsys.readouterr().err


def test_repair_accepts_a_path(repairable_model, save):
    repaired, changes = repair(save(repairable_model))
    assert len(changes) == 5 and lint_model(repaired).clean
