"""The repair on the shared fixtures: the repaired model lints clean and loads in ONNX Runtime; clean models are
untouched; what no rule resolves is refused with its reason (tests/graph/test_repair_rules.py: each rule)."""

from __future__ import annotations

import os
import stat

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


def test_repair_computes_each_conflict_in_its_widest_bound_type(repairable_model):
    # the model reproduces ONNX Runtime's own error first
    assert judge(repairable_model).verdict == OrtVerdict.WHERE_TYPE_ERROR
    repaired, changes = repair(repairable_model)
    assert all("widest bound type, tensor(float) (eager not consulted)" in c.why for c in changes)
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
    why = "the target asked for, tensor(float16)"
    assert where == [
        Change("cast_input", "Where_223", "", "x", 1, "tensor(float)", "tensor(float16)", where[0].cast_node,
               where[0].new_value, why),
        Change("cast_output", "Where_223", "", "w", 0, "tensor(float16)", "tensor(float)", where[1].cast_node,
               "w_where223_float16", why),
    ]  # fmt: skip
    assert lint_model(repaired).clean
    assert judge(repaired).verdict == OrtVerdict.ACCEPTED


def test_clean_model_is_untouched(clean_model):
    repaired, changes = repair(clean_model)
    assert repaired is clean_model and changes == []


def test_what_no_rule_resolves_is_refused_with_its_reason(violations_model):
    """A float Where condition: no type that holds float is a bool, so the repair refuses rather than leave it."""
    assert [(v.kind, v.node) for v in lint_model(violations_model).violations if v.kind == FindingKind.NOT_ALLOWED] \
        == [(FindingKind.NOT_ALLOWED, "Where_float_cond")]
    with pytest.raises(RepairError, match=r"Where_float_cond: tensor\(float\) is not allowed for B of Where at opset "
                                          r"17 and no allowed type holds it exactly \(allowed: tensor\(bool\)\)"):
        repair(violations_model)


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
    assert "ONNX Runtime loads the repaired model" in printed and "re-lint: no violation left, clean" in printed
    assert "eager was not consulted" in printed
    assert lint_model(out).clean

    untouched = tmp_path / "untouched.onnx"
    assert main(["repair", str(save(clean_model, "clean.onnx")), str(untouched)]) == 0
    said = capsys.readouterr().out  # ONNX Runtime asked all the same (test_declared_types.py: one it refuses)
    assert "nothing changed, nothing written (ONNX Runtime loads it)" in said and not untouched.exists()

    assert main(["repair", str(save(violations_model, "bad.onnx")), str(tmp_path / "x.onnx")]) == 1
    captured = capsys.readouterr()
    assert "Where_float_cond" in captured.err and "no allowed type holds it" in captured.err
    assert captured.err.count("\n") == 1 and not (tmp_path / "x.onnx").exists()  # refused: nothing written

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


def test_the_output_rule_resolves_conflicts_only_and_leaves_other_findings(violations_model):
    """`target="output"` (what the fix study was recorded with) repairs the four conflicts and leaves the float Where
    condition in place, as the repair before these rules did; the default refuses it (the test above)."""
    repaired, changes = repair(violations_model, target="output")
    assert {c.node for c in changes} == {"Where_223", "Clip_7", "Concat_9", "then_add"}
    left = lint_model(repaired).violations
    assert [(v.kind, v.node) for v in left] == [(FindingKind.NOT_ALLOWED, "Where_float_cond")]


# --- files as they were, and what an interrupt leaves (issue 37) --------------------------------------------------


def test_in_place_keeps_the_files_mode_and_owner(repairable_model, save, capsys):
    model = save(repairable_model, "in.onnx")
    os.chmod(model, 0o600)
    owner = (4321, 4322) if os.geteuid() == 0 else (os.getuid(), os.getgid())  # another owner only root may keep
    os.chown(model, *owner)
    assert main(["repair", str(model), "--in-place"]) == 0, capsys.readouterr().err
    after = model.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == (0o600, *owner)  # before: 0o644, root's
    assert lint_model(model).clean and after.st_nlink == 1  # control: repaired in place, as before


def test_in_place_refuses_a_file_with_other_hard_links(repairable_model, save, tmp_path, capsys):
    model, other = save(repairable_model, "in.onnx"), tmp_path / "other.onnx"
    os.link(model, other)
    before = model.read_bytes()
    assert main(["repair", str(model), "--in-place"]) == 2  # before: 0, `other` silently kept the old model
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 1 other hard link(s): --in-place would give this name a new file" in err
    assert model.read_bytes() == before and os.path.samefile(model, other)  # nothing written, the link intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "other.onnx"]


@pytest.mark.parametrize("stop", ["Ctrl-C", "SIGTERM"])
def test_an_interrupted_repair_says_what_it_had_written(repairable_model, save, tmp_path, monkeypatch, capsys,
                                                         stop):
    from where223.cli import Terminated
    from where223.graph import ort
    from where223.graph.repair import _file

    raised, code, said = {"Ctrl-C": (KeyboardInterrupt, 130, "interrupted (Ctrl-C)"),
                          "SIGTERM": (Terminated, 143, "terminated (SIGTERM)")}[stop]

    def interrupted(*args, **kwargs):
        raise raised

    model, out = save(repairable_model, "in.onnx"), tmp_path / "out.onnx"
    monkeypatch.setattr(ort, "judge", interrupted)  # while ONNX Runtime judges the written output
    assert main(["repair", str(model), str(out)]) == code
    err = capsys.readouterr().err
    assert err == (f"where223 repair: {said} after writing {out}: its checks (re-lint, ONNX Runtime) did not finish; "
                   "temporary files removed\n")  # before: "nothing published", the output written all the same
    assert lint_model(out).clean

    monkeypatch.setattr(_file.onnx, "save_model", interrupted)  # control: before the output is in place
    assert main(["repair", str(model), str(tmp_path / "never.onnx")]) == code
    assert capsys.readouterr().err == f"where223 repair: {said}: temporary files removed, nothing written\n"
    assert not (tmp_path / "never.onnx").exists() and not list(tmp_path.glob(".tmp-*"))
