"""Spaces: the committed ones expand to the studies' cells; every unknown name is one UsageError."""

from __future__ import annotations

from pathlib import Path

import pytest

from where223.errors import UsageError
from where223.pipeline.paths import OUTPUTS, ROOT
from where223.sweep.space import Cell, is_done, load_space

BASE = {
    "study": "t", "records": "'t/{stack}/{model}-{exporter}.json'", "stacks": "[project]", "models": "[gpt2-tiny]",
    "recipes": "[cpu_bf16_autocast]", "exporters": "[torchscript]", "runner": "where223.study.matrix.run",
}  # fmt: skip


def space_file(tmp_path: Path, **fields: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in {**BASE, **fields}.items()))
    return path


def test_the_committed_spaces_are_the_matrix_and_the_architecture_sweep():
    matrix = load_space(ROOT / "spaces" / "matrix.yaml")
    assert len(matrix.cells) == 144 and len(matrix.stacks) == 72
    assert matrix.record_path(Cell("torch-2.1.2+transformers-4.25.1", "gpt2-tiny", "cpu_bf16_autocast", "dynamo",
                                   "auto", "train")) == OUTPUTS / "matrix/cells/2.1.2-4.25.1-dynamo.json"  # fmt: skip
    architectures = load_space(ROOT / "spaces" / "architectures.yaml")
    assert len(architectures.cells) == 286 and len(architectures.stacks) == 2
    assert set(architectures.stacks) == {"project", "project+transformers-4.26.0"}
    committed = {p for p in (OUTPUTS / "architectures").glob("*/*.json")}
    assert {architectures.record_path(c) for c in architectures.cells} == committed


def test_the_model_types_listed_are_the_installed_transformers_mappings():
    from where223.study.architectures.analysis import MODEL_TYPES, model_types

    listed = [line for line in MODEL_TYPES.read_text().splitlines() if line and not line.startswith("#")]
    assert listed == model_types()


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"stacks": "[torch-9.9.9]"}, "unknown stack 'torch-9.9.9'"),
        ({"stacks": "[project+transformers-0.1]"}, "transformers '0.1' is not among"),
        ({"models": "[gpt3]"}, "unknown model 'gpt3'"),
        ({"recipes": "[fp8]"}, "unknown recipe 'fp8'"),
        ({"exporters": "[tflite]"}, "unknown exporter 'tflite'"),
        ({"modes": "[inference]"}, "unknown mode 'inference'"),
        ({"records": "'../{model}.json'"}, "leaves the outputs tree"),
        ({"records": "'t/{stack}.json'", "exporters": "[torchscript, dynamo]"}, "share"),
        ({"models": "{}"}, "`models` must be"),
        ({"runner": "where223.study.no_such_runner"}, "runner 'where223.study.no_such_runner' is no importable"),
        ({"runner": "null"}, "name the `runner` module"),
        ({"summary": "where223.study.no_such_summary"}, "summary 'where223.study.no_such_summary' is no importable"),
    ],
)
def test_a_bad_space_is_one_usage_error(tmp_path, fields, says):
    with pytest.raises(UsageError, match=says.replace("[", r"\[").replace("+", r"\+")):
        load_space(space_file(tmp_path, **fields))


def test_control_the_base_space_loads(tmp_path):
    space = load_space(space_file(tmp_path))
    expected = {"stack": "project", "model": "gpt2-tiny", "recipe": "cpu_bf16_autocast", "exporter": "torchscript",
                "opset": "auto", "mode": "train"}  # fmt: skip
    assert [c.key() for c in space.cells] == [expected]
    assert space.runner == "where223.study.matrix.run" and space.summary is None
    controls_only = load_space(space_file(tmp_path, models="[control-sleep]", runner="null"))
    assert controls_only.runner is None  # the engine's controls need no runner


def test_select_keeps_matching_cells_and_refuses_an_empty_selection(tmp_path):
    space = load_space(space_file(tmp_path, exporters="[torchscript, dynamo]", models="[gpt2-tiny, control-exit]"))
    assert len(space.select({"model": ["control-*"]}).cells) == 2
    assert len(space.select({"model": ["gpt2-tiny"], "exporter": ["dyn*"]}).cells) == 1
    with pytest.raises(UsageError, match="no cell matches"):
        space.select({"stack": ["torch-*"]})


def test_a_record_is_done_only_with_the_cells_key_and_a_final_outcome(tmp_path):
    cell = Cell("project", "gpt2-tiny", "cpu_bf16_autocast", "torchscript", "auto", "train")
    path = tmp_path / "r.json"
    assert not is_done(path, cell)
    import json

    path.write_text(json.dumps({"key": cell.key(), "outcome": "timeout"}))
    assert is_done(path, cell)
    path.write_text(json.dumps({"key": cell.key(), "outcome": "not_run"}))
    assert not is_done(path, cell)  # not run yet: a resumed sweep runs it
    path.write_text(json.dumps({"key": {**cell.key(), "opset": 18}, "outcome": "accepted"}))
    assert not is_done(path, cell)  # another cell's record at this path
    path.write_text('{"key": ')
    assert not is_done(path, cell)


def test_the_summary_step_runs_the_space_s_summary_module(tmp_path, capsys):
    """`sweep --summary-only` on a copy of the committed matrix: the space's `summary` module rewrites matrix.json
    with the committed counts; an outputs tree without the study's records summarizes nothing (the control)."""
    import json
    import shutil

    from where223 import cli

    shutil.copytree(OUTPUTS / "matrix", tmp_path / "matrix")
    committed = json.loads((OUTPUTS / "matrix" / "matrix.json").read_text())["counts"]
    argv = ["sweep", "--space", str(ROOT / "spaces" / "matrix.yaml"), "--summary-only", "--output-root"]
    assert cli.main([*argv, str(tmp_path)]) == 0
    assert f"matrix.json: {json.dumps(committed, sort_keys=True)}" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert cli.main([*argv, str(tmp_path / "empty")]) == 0
    assert "matrix: no records yet" in capsys.readouterr().out


def test_a_space_of_listed_cells_and_its_malformed_control(tmp_path):
    """`cells: @FILE` runs the listed cells in each stack and mode, not the product of their fields; a line that is
    not four fields is one UsageError naming it."""
    from where223.errors import UsageError
    from where223.sweep.space import load_space

    listed = tmp_path / "cells.txt"
    listed.write_text("# comment\ngpt2 bf16_model dynamo 14\nbert fp16_model torchscript 17\n")
    space = tmp_path / "space.yaml"
    space.write_text(f"study: s\nrecords: 'x/{{model}}-{{opset}}.json'\nrunner: where223.study.classes.run\n"
                     f"stacks: [project]\ncells: '@{listed}'\nmodes: [eval]\n")
    cells = load_space(space).cells
    assert [(c.model, c.recipe, c.exporter, c.opset, c.mode) for c in cells] == [
        ("gpt2", "bf16_model", "dynamo", 14, "eval"), ("bert", "fp16_model", "torchscript", 17, "eval")]
    listed.write_text("gpt2 bf16_model dynamo\n")
    with pytest.raises(UsageError, match="is not 'MODEL RECIPE EXPORTER OPSET'"):
        load_space(space)


def test_a_listed_space_is_planned_by_its_planner_and_one_without_is_refused(tmp_path, capsys):
    """`where223 sweep --plan` writes the planner's cells to the space's cells file; the control, a space that
    names no planner, is one line and exit 2 with nothing written."""
    from where223.cli import main
    from where223.study.classes import analysis

    cells = tmp_path / "cells.txt"
    space = tmp_path / "space.yaml"
    body = f"study: s\nrecords: 'x/{{model}}.json'\nstacks: [today]\ncells: '@{cells}'\nmodes: [eval]\n"
    space.write_text(body + "planner: where223.study.classes.analysis\n")
    assert main(["sweep", "--space", str(space), "--plan"]) == 0
    lines = [line for line in cells.read_text().splitlines() if not line.startswith("#")]
    assert lines == analysis.plan(["today"]) and all(len(line.split()) == 4 for line in lines)
    cells.unlink()
    space.write_text(body)
    assert main(["sweep", "--space", str(space), "--plan"]) == 2 and not cells.exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
