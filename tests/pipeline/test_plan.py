"""Strict plans: every problem of a plan file or a selection is refused before anything runs, one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from where223.pipeline import run
from where223.pipeline.run import DEFAULT_PLAN, PlanError, PlannedRun, execute, load_plan, select

NOTEBOOK_NAMES = sorted(path.stem for path in run.NOTEBOOKS.glob("*.ipynb"))


def plan_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(PlanError) as caught:
        load_plan(plan_file(tmp_path, text))
    assert str(caught.value).splitlines() == caught.value.problems  # one line per problem
    path = tmp_path / "plan.yaml"  # each names the file (and the line, where the YAML reader finds the problem)
    return [problem.removeprefix(f"{path}: ").replace(f"{path}:", "line ") for problem in caught.value.problems]


def test_the_committed_plan_passes_every_check():
    assert load_plan(DEFAULT_PLAN)  # control: the checks refuse no good plan


def test_a_misspelled_parameter_is_refused_with_a_suggestion(tmp_path: Path):
    found = problems(tmp_path, "runs:\n  - notebook: 01_reproduce\n    parameters: {pathh: ortmodule}\n")
    assert found == ["runs[0] 01_reproduce: pathh: not a parameter of 01_reproduce; did you mean path?"]


def test_a_value_of_the_wrong_type_is_refused_against_the_notebooks_default(tmp_path: Path):
    found = problems(tmp_path, """runs:
  - notebook: 01_reproduce
    parameters: {opset: "14", seq_len: 8.0, path: ortmodule}
  - notebook: 03_fix_and_verify
    parameters: {variant: 4.26, loss_tolerance: 1, hops: true}
""")
    assert found == [
        "runs[0] 01_reproduce: opset: 01_reproduce takes int (default 17), not str '14'",
        "runs[0] 01_reproduce: seq_len: 01_reproduce takes int (default 16), not float 8.0",
        "runs[1] 03_fix_and_verify: variant: 03_fix_and_verify takes str (default \"4.26\"), not float 4.26",
        "runs[1] 03_fix_and_verify: hops: 03_fix_and_verify takes int (default 2), not bool True",
    ]  # an int where a float is declared (loss_tolerance: 1) is a float


def test_every_unknown_key_of_a_plan_is_listed_where_it_appears(tmp_path: Path):
    """By the YAML reader, against the plan's schema, before the entries are checked."""
    found = problems(tmp_path, """run: []
runs:
  - notebook: 01_reproduce
    parameter: {path: ortmodule}
  - notebook: 99_nothing
    parameters: {any: {name: 1}}
""")
    assert found == [
        "line 1: unknown key 'run'; did you mean runs?",
        "line 4: unknown key 'parameter' in runs[0]; did you mean parameters?",
    ]  # a parameter's own value may be a mapping of any keys: the notebook's checks judge it


def test_every_problem_of_a_plan_is_listed(tmp_path: Path):
    found = problems(tmp_path, """runs:
  - notebook: 01_reproduce
    parameters: {pathh: ortmodule}
  - notebook: 99_nothing
  - notebook: 02_grahp
  - notebook: 02_graph
    parameters: [hops, 1]
  - just a string
  - notebook: 01_reproduce
    parameters: {output_root: elsewhere}
  - notebook: 04_variants
  - notebook: 04_variants
""")
    assert found == [
        "runs[0] 01_reproduce: pathh: not a parameter of 01_reproduce; did you mean path?",
        f"runs[1]: notebook '99_nothing' does not exist; known: {', '.join(NOTEBOOK_NAMES)}",
        "runs[2]: notebook '02_grahp' does not exist; did you mean 02_graph?",
        "runs[3]: 'parameters' must be a mapping of names to values, not list",
        "runs[4]: must be a mapping with 'notebook' and 'parameters', not str",
        "runs[5] 01_reproduce: output_root: set by the runner, not by a plan (pass --output-root to move the outputs)",
        "runs[7]: the same executed copy as runs[6] (04_variants)",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "a plan is a mapping with a 'runs' list, not NoneType"),
        ("runs: []\n", "'runs' must be a non-empty list of {notebook, parameters} entries"),
        ("runs:\n", "'runs' must be a non-empty list of {notebook, parameters} entries"),
        ("runs: {notebook: 01_reproduce}\n", "'runs' must be a non-empty list of {notebook, parameters} entries"),
        ("runs:\n  - notebook: 01_reproduce\n   parameters: {}\n",
         "line 3: not valid YAML: expected <block end>, but found '<block mapping start>'"),
    ],
)
def test_an_empty_or_malformed_plan_is_refused(tmp_path: Path, text: str, problem: str):
    assert problems(tmp_path, text) == [problem]


def test_a_missing_plan_file_is_one_line(tmp_path: Path):
    with pytest.raises(PlanError, match=r"^plan file .*absent.yaml does not exist$"):
        load_plan(tmp_path / "absent.yaml")


PLAN = [PlannedRun("01_reproduce", {"path": "ortmodule"}), PlannedRun("02_graph", {}), PlannedRun("05_matrix", {})]


@pytest.mark.parametrize(
    ("only", "problem"),
    [
        ([], ["--only names no notebook prefix (e.g. --only 01,03)"]),
        ([""], ["--only names no notebook prefix (e.g. --only 01,03)"]),
        (["99"], ["--only 99: matches no notebook in the plan (01_reproduce, 02_graph, 05_matrix)"]),
        (["01", "9", "x"], ["--only 9: matches no notebook in the plan (01_reproduce, 02_graph, 05_matrix)",
                            "--only x: matches no notebook in the plan (01_reproduce, 02_graph, 05_matrix)"]),
    ],
)
def test_a_selection_that_selects_nothing_is_refused(only: list[str], problem: list[str]):
    with pytest.raises(PlanError) as caught:
        select(PLAN, only)
    assert caught.value.problems == problem


def test_a_selection_keeps_the_plans_order():
    assert select(PLAN, ["05", "01"]) == [PLAN[0], PLAN[2]]
    assert select(PLAN, None) == PLAN


def test_execute_refuses_unknown_parameters_before_starting_a_kernel(tmp_path: Path):
    with pytest.raises(PlanError, match=r"pathh: not a parameter of 01_reproduce; did you mean path\?"):
        execute(PlannedRun("01_reproduce", {"pathh": "ortmodule"}), output_root=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing staged, nothing published, no executed copy
