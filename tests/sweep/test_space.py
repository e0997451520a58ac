"""Spaces: the committed ones expand to the studies' cells; every unknown name is one UsageError."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from where223 import cli
from where223.errors import UsageError
from where223.pipeline.paths import OUTPUTS, ROOT
from where223.sweep import space as spaces
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


@pytest.fixture
def lists(tmp_path: Path, monkeypatch) -> Path:
    """A folder made the one a space's @FILE lists are read from (and --plan writes to), as spaces/ is."""
    folder = tmp_path.resolve() / "spaces"
    folder.mkdir()
    monkeypatch.setattr(spaces, "LISTS", folder, raising=False)  # not raising: the code before had no LISTS
    return folder


def test_a_space_of_listed_cells_and_its_malformed_control(tmp_path, lists):
    """`cells: @FILE` runs the listed cells in each stack and mode, not the product of their fields; a line that is
    not four fields is one UsageError naming it."""
    listed = lists / "cells.txt"
    listed.write_text("# comment\ngpt2 bf16_model dynamo 14\nbert fp16_model torchscript 17\n")
    space = tmp_path / "space.yaml"
    space.write_text(f"study: s\nrecords: 'x/{{model}}-{{opset}}.json'\nrunner: where223.study.classes.run\n"
                     f"stacks: [project]\ncells: '@{listed}'\nmodes: [eval]\n")
    cells = load_space(space).cells
    assert [(c.model, c.recipe, c.exporter, c.opset, c.mode) for c in cells] == [
        ("gpt2", "bf16_model", "dynamo", 14, "eval"), ("bert", "fp16_model", "torchscript", 17, "eval")]
    listed.write_text("gpt2 bf16_model dynamo\n")
    with pytest.raises(UsageError, match="not 'MODEL RECIPE EXPORTER OPSET'"):
        load_space(space)


def test_a_listed_space_is_planned_by_its_planner_and_one_without_is_refused(tmp_path, lists, capsys):
    """`where223 sweep --plan` writes the planner's cells to the space's cells file; the control, a space that
    names no planner, is one line and exit 2 with nothing written."""
    from where223.cli import main
    from where223.study.classes import analysis

    cells = lists / "cells.txt"
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


# --- a space is checked before any cell runs: what it reads, writes, runs and formats -------------------------------

SECRET = "HUNTER2-not-a-model"


def _refused(argv: list, capsys) -> str:
    """The one line of a command that must refuse: exit 2, no traceback; its stderr."""
    code = cli.main([str(arg) for arg in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err[-2000:])
    return err


@pytest.mark.parametrize("where", ["absolute", "environ", "link out", "dot-dot"])
def test_a_list_outside_the_spaces_folder_is_refused_and_never_shown(where, tmp_path, lists, capsys):
    """`models: @FILE` read any file and put it in the error line (`@/proc/self/environ` printed the environment);
    now FILE must lie inside spaces/ once links are resolved, and the line never quotes it."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{SECRET}\n")
    (lists / "inside.txt").symlink_to(secret)
    named = {"absolute": str(secret), "environ": "/proc/self/environ", "link out": str(lists / "inside.txt"),
             "dot-dot": f"{lists}/../secret.txt"}[where]  # fmt: skip
    environment = Path("/proc/self/environ").read_bytes().split(b"\0")[0].decode(errors="replace")
    err = _refused(["sweep", "--space", space_file(tmp_path, models=f"'@{named}'"), "--summary-only"], capsys)
    assert "is not a file inside" in err and SECRET not in err and environment not in err


def test_control_a_list_inside_the_spaces_folder_is_read(tmp_path, lists):
    (lists / "models.txt").write_text("# tiny ones\ngpt2-tiny\ncontrol-exit\n")
    (lists / "linked.txt").symlink_to(lists / "models.txt")  # a link that stays inside is followed
    for name in ("models.txt", "linked.txt"):
        space = load_space(space_file(tmp_path, models=f"'@{lists / name}'"))
        assert [cell.model for cell in space.cells] == ["gpt2-tiny", "control-exit"]


def test_an_unknown_name_in_a_list_is_named_by_its_line_not_shown(tmp_path, lists):
    (lists / "models.txt").write_text(f"gpt2-tiny\n{SECRET}\n")
    with pytest.raises(UsageError, match=r"models.txt line 2: not a known model") as caught:
        load_space(space_file(tmp_path, models=f"'@{lists / 'models.txt'}'"))
    assert SECRET not in str(caught.value)  # the code before: unknown model 'HUNTER2-...'


PLANNED = ("study: s\nrecords: 'x/{model}.json'\nstacks: [today]\nmodes: [eval]\n"
           "planner: where223.study.classes.analysis\n")


@pytest.mark.parametrize("where", ["absolute", "link out", "link in", "folder link"])
def test_plan_writes_only_inside_the_spaces_folder_and_never_through_a_link(where, tmp_path, lists, capsys):
    """`--plan` wrote its cells wherever `cells: @FILE` named, following links; now only to a file inside spaces/
    that no link leads to. The file a link points at is left as it was."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "cells.txt").write_text("kept\n")
    (lists / "inside.txt").write_text("kept\n")
    (lists / "out.txt").symlink_to(outside / "cells.txt")
    (lists / "in.txt").symlink_to(lists / "inside.txt")
    (lists / "folder").symlink_to(outside)
    named = {"absolute": outside / "cells.txt", "link out": lists / "out.txt", "link in": lists / "in.txt",
             "folder link": lists / "folder" / "cells.txt"}[where]  # fmt: skip
    space = tmp_path / "space.yaml"
    space.write_text(PLANNED + f"cells: '@{named}'\n")
    err = _refused(["sweep", "--space", space, "--plan"], capsys)
    assert "is not a file inside" in err or "reached through a link" in err, err
    assert (outside / "cells.txt").read_text() == (lists / "inside.txt").read_text() == "kept\n"


@pytest.mark.parametrize(("field", "module", "says"), [
    ("runner", "os", "runner 'os' is not a module of where223"),
    ("runner", "where223.study.matrix.analysis", "defines no run_cell()"),
    ("runner", "where223.errors", "defines no run_cell()"),
    ("summary", "os", "summary 'os' is not a module of where223"),
    ("summary", "where223.study.matrix.run", "defines no summarize()"),
    ("planner", "os", "planner 'os' is not a module of where223"),
    ("planner", "where223.study.matrix.analysis", "defines no plan()"),
])  # fmt: skip
def test_runner_summary_and_planner_name_only_where223_modules_defining_what_the_sweep_calls(
    tmp_path, field, module, says
):
    """`runner: os` was accepted (its cells recorded `crashed`, exit 0); `summary: os` and `planner: os` were
    tracebacks. Each names a module of where223's own whose source defines the function the sweep calls."""
    with pytest.raises(UsageError, match=re.escape(says)):
        load_space(space_file(tmp_path, **{field: module}))


def test_control_where223_modules_defining_what_the_sweep_calls_load(tmp_path):
    named = {"runner": "where223.study.classes.run", "summary": "where223.study.classes.analysis",
             "planner": "where223.study.remedies.baseline"}  # fmt: skip
    space = load_space(space_file(tmp_path, **named))
    assert {"runner": space.runner, "summary": space.summary, "planner": space.planner} == named


@pytest.mark.parametrize("template", [
    "'{nope}'", "'{0}'", "'{'", "'}'", "'{}'", "'{model.__class__}'", "'{model!r}'", "'{model:>40}'", "''",
    "'t/{stack[0]}.json'", "[a]",
])  # fmt: skip
def test_a_records_template_names_only_the_cells_fields(tmp_path, template):
    """`records: '{nope}'`, `'{0}'` and `'{'` were tracebacks; an attribute or a conversion formatted what it
    liked. A template names only the cell's key fields and its stack's torch and transformers, as `{field}`."""
    with pytest.raises(UsageError, match=r"records .*(may name only|is not a template)|records must be a template"):
        load_space(space_file(tmp_path, records=template))
    with pytest.raises(UsageError, match=r"identity.cell .*(may name only|is not a template)|identity.cell must be"):
        load_space(space_file(tmp_path, identity=f"{{cell: {template}}}"))


def test_control_a_template_of_every_field_of_the_cell(tmp_path):
    every = "'t/{stack}/{model}/{recipe}/{exporter}/{opset}/{mode}/{torch}-{transformers}.json'"
    space = load_space(space_file(tmp_path, records=every, identity="{cell: '{model}-{torch}'}"))
    torch = space.stacks["project"].attributes()["torch"]
    assert space.record_path(space.cells[0], tmp_path) == tmp_path / (
        f"t/project/gpt2-tiny/cpu_bf16_autocast/torchscript/auto/train/{torch}-"
        f"{space.stacks['project'].attributes()['transformers']}.json")
    assert space.identity == {"cell": "{model}-{torch}"}


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "-1", "0", "'600'", "true", "[600]"])
def test_timeout_s_is_a_finite_number_above_zero(tmp_path, value):
    """`timeout_s: .nan` or `.inf` crashed the worker and the sweep still exited 0."""
    with pytest.raises(UsageError, match="timeout_s must be a finite number of seconds above 0"):
        load_space(space_file(tmp_path, timeout_s=value))


def test_control_a_finite_timeout_loads(tmp_path):
    assert load_space(space_file(tmp_path, timeout_s="0.5")).timeout_s == 0.5
    assert load_space(space_file(tmp_path)).timeout_s == 600


@pytest.mark.parametrize(("fields", "says"), [
    ({"timeout": "5"}, "unknown key 'timeout'; did you mean timeout_s?"),
    ({"stacks": "{environments: [project], transformer: [4.26.0]}"},
     "unknown key 'transformer' in stacks; did you mean transformers?"),
    ({"study": "'../../elsewhere'"}, "is not a folder name"),
    ({"study": "'a/b'"}, "is not a folder name"),
])  # fmt: skip
def test_an_unknown_key_or_a_study_that_is_no_folder_name_is_refused(tmp_path, fields, says):
    """Unknown keys were ignored (a misspelled `timeout` ran with 600 s); a study of `../..` put its summary
    outside the outputs tree."""
    with pytest.raises(UsageError, match=re.escape(says)):
        load_space(space_file(tmp_path, **fields))


def test_control_the_stacks_product_and_a_study_name_load(tmp_path):
    space = load_space(space_file(tmp_path, stacks="{environments: [project], transformers: [4.26.0]}",
                                  study="engine-test.2"))  # fmt: skip
    assert set(space.stacks) == {"project+transformers-4.26.0"} and space.study == "engine-test.2"


def test_priority_runs_its_models_first_and_names_only_the_spaces_models(tmp_path):
    models = "[gpt2-tiny, control-exit, control-sleep]"
    plain = load_space(space_file(tmp_path, models=models))
    assert [c.model for c in plain.cells] == ["gpt2-tiny", "control-exit", "control-sleep"]  # control: file order
    first = load_space(space_file(tmp_path, models=models, priority="[control-sleep, control-exit]"))
    assert [c.model for c in first.cells] == ["control-sleep", "control-exit", "gpt2-tiny"]
    for priority, says in (("[gpt3]", "'gpt3', not among its models"), ("[control-exit, control-exit]", "twice")):
        with pytest.raises(UsageError, match=says):
            load_space(space_file(tmp_path, models=models, priority=priority))
    today = load_space(ROOT / "spaces" / "classes-today.yaml")
    assert [c.model for c in today.cells[:6]] == ["bert"] * 6 and today.cells[6].model == "roberta"


def test_a_record_made_by_other_cell_code_is_not_done_when_asked(tmp_path):
    cell = Cell("project", "gpt2-tiny", "cpu_bf16_autocast", "torchscript", "auto", "train")
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"key": cell.key(), "outcome": "accepted", "code": {"commit": "a", "dirty": False}}))
    assert is_done(path, cell)  # control: resuming by key alone, as before
    assert is_done(path, cell, lambda code: code.get("commit") == "a")
    assert not is_done(path, cell, lambda code: code.get("commit") == "b")
    path.write_text(json.dumps({"key": cell.key(), "outcome": "accepted"}))  # made before records said their code
    assert not is_done(path, cell, lambda code: bool(code))
