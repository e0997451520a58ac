"""The command line: one table of commands, help from the library's docstrings, one-line errors (exit 2),
exit 1 for "found something", atomic and explicit outputs, and node names shown escaped and cut."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from where223 import cli
from where223.errors import NAME_LIMIT, printable
from where223.graph.repair import _file as repair_module
from where223.pipeline.paths import ROOT

EVIL = "evil\n\x1b[2Jno type-constraint violations"


def _where_model(node_name: str = "Where_223", external_weight: bool = False) -> onnx.ModelProto:
    """Where(cond, float x, float16 y): one type-binding conflict at `node_name`, repairable by a Cast."""
    inputs = [
        helper.make_tensor_value_info("cond", TensorProto.BOOL, [2, 2]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 2]),
    ]
    weight = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "x")
    nodes = [helper.make_node("Where", ["cond", "x", "y"], ["w"], name=node_name)]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 2])], [weight]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if external_weight:
        onnx.external_data_helper.convert_model_to_external_data(model, location="m.onnx.data", size_threshold=0)
    return model


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(_where_model(), str(path))
    return path


def _call(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(code: int, err: str, command: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"where223 {command}: "), err
    assert "Traceback" not in err


# --- usage and file errors: exit 2, one line ---------------------------------------------------------------


SPACE = {
    "study": "cli-test",
    "records": "'cli-test/{model}.json'",
    "stacks": "[project]",
    "models": "[gpt2-tiny]",
    "runner": "where223.study.matrix.run",
    "recipes": "[cpu_bf16_autocast]",
    "exporters": "[torchscript]",
}


def _space(tmp: Path, **fields: str) -> Path:
    """A sweep space file under `tmp` (SPACE with `fields` replaced)."""
    path = tmp / "space.yaml"
    path.write_text("".join(f"{key}: {value}\n" for key, value in {**SPACE, **fields}.items()))
    return path


def _plan(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


USER_ERRORS = {
    "lint: missing model": lambda t, m: ["lint", t / "absent.onnx"],
    "blame: unknown node": lambda t, m: ["blame", m, "Where_9"],
    "draw: --stem under a file": lambda t, m: ["draw", m, "--stem", m / "figure"],
    "draw: negative hops": lambda t, m: ["draw", m, "--hops", "-1"],
    "repair: output is a directory": lambda t, m: ["repair", m, t],
    "repair: output names a directory": lambda t, m: ["repair", m, f"{t / 'new'}/"],
    "repair: output folder missing": lambda t, m: ["repair", m, t / "missing" / "out.onnx"],
    "repair: output folder is a file": lambda t, m: ["repair", m, m / "out.onnx"],
    "repair: output is the input": lambda t, m: ["repair", m, m],
    "repair: no output": lambda t, m: ["repair", m],
    "repair: --in-place with another output": lambda t, m: ["repair", m, t / "other.onnx", "--in-place"],
    "repair: unknown --to": lambda t, m: ["repair", m, t / "out.onnx", "--to", "half"],
    "run: malformed YAML": lambda t, m: ["run", "--params", _plan(t, "runs: [\n  - {notebook: 01")],
    "run: missing plan": lambda t, m: ["run", "--params", t / "absent.yaml"],
    "run: plan is a list": lambda t, m: ["run", "--params", _plan(t, "- 01_reproduce\n")],
    "run: run entry is a string": lambda t, m: ["run", "--params", _plan(t, "runs: [01_reproduce]\n")],
    "run: unknown plan key": lambda t, m: ["run", "--params", _plan(t, "runs: [{notebook: 01_reproduce}]\nrunz: 1\n")],
    "run: empty plan": lambda t, m: ["run", "--params", _plan(t, "runs: []\n")],
    "run: unknown notebook": lambda t, m: ["run", "--params", _plan(t, "runs: [{notebook: 99_nothing}]\n")],
    "run: --only selects nothing": lambda t, m: ["run", "--only", "99"],
    "run: --only empty": lambda t, m: ["run", "--only", ""],
    "run: unknown kernel": lambda t, m: ["run", "--only", "01", "--kernel", "nokernel", "--output-root", t / "out"],
    "repair: --ort-timeout not above 0": lambda t, m: ["repair", m, t / "out.onnx", "--ort-timeout", "0"],
    "report: missing outputs folder": lambda t, m: ["report", "--output-root", t / "absent"],
    "report: empty --output-root": lambda t, m: ["report", "--output-root", ""],  # not the current folder
    "compare: empty --output-root": lambda t, m: ["compare", "--output-root", ""],
    "sweep: missing space": lambda t, m: ["sweep", "--space", t / "absent.yaml"],
    "sweep: space not YAML": lambda t, m: ["sweep", "--space", _plan(t, "study: [\n")],
    "sweep: unknown stack": lambda t, m: ["sweep", "--space", _space(t, stacks="[torch-9.9.9]")],
    "sweep: unknown overlay release": lambda t, m: ["sweep", "--space", _space(t, stacks="[project+transformers-9.9]")],
    "sweep: unknown model": lambda t, m: ["sweep", "--space", _space(t, models="[gpt3-huge]")],
    "sweep: unknown recipe": lambda t, m: ["sweep", "--space", _space(t, recipes="[fp8_everything]")],
    "sweep: unknown exporter": lambda t, m: ["sweep", "--space", _space(t, exporters="[tflite]")],
    "sweep: record path leaves outputs": lambda t, m: ["sweep", "--space", _space(t, records="'../{model}.json'")],
    "sweep: filter matches nothing": lambda t, m: ["sweep", "--space", _space(t), "--model", "nothing*"],
    "sweep: not a scheduler address": lambda t, m: ["sweep", "--space", _space(t), "--scheduler", "nowhere"],
    "sweep: unreachable scheduler": lambda t, m: [
        "sweep", "--space", _space(t), "--force", "--scheduler", "tcp://127.0.0.1:9", "--output-root", t
    ],  # fmt: skip
    "sweep: missing outputs folder": lambda t, m: ["sweep", "--space", _space(t), "--output-root", t / "missing"],
    "strip: missing notebook": lambda t, m: ["strip", t / "absent.ipynb"],
    "strip: not a notebook": lambda t, m: ["strip", _plan(t, "not json")],
    "unknown option": lambda t, m: ["lint", m, "--colour"],
}


@pytest.mark.parametrize("case", list(USER_ERRORS))
def test_user_errors_are_one_line_and_exit_2(case, tmp_path, model_path, capsys):
    argv = USER_ERRORS[case](tmp_path, model_path)
    before = model_path.read_bytes()
    code, out, err = _call(argv, capsys)
    _one_line_error(code, err, argv[0])
    assert model_path.read_bytes() == before  # the input is never written over by mistake
    assert not (tmp_path / "missing").exists() and not (tmp_path / "new").exists()  # no folder was created
    assert not (tmp_path / "cli-test").exists()  # a sweep wrote no record


def test_ctrl_c_in_run_is_one_line_exit_130_and_publishes_nothing(tmp_path, monkeypatch, capsys):
    import papermill

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    root = tmp_path / "out"
    root.mkdir()
    code, out, err = _call(["run", "--only", "01", "--output-root", root], capsys)
    assert code == 130
    assert err.count("\n") == 1 and err.startswith("where223 run: interrupted (Ctrl-C)"), err
    published = [p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != "failed"]
    assert published == []


def test_unknown_command_is_one_line(capsys):
    code, _, err = _call(["lnt", "m.onnx"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("where223: argument COMMAND: invalid choice")


def test_unknown_variant_of_the_study_is_a_usage_error(capsys):
    code, _, err = _call(["bench-variants", "--variants", "4.27", "--device", "cpu"], capsys)
    _one_line_error(code, err, "bench-variants")


def test_repair_of_a_model_whose_external_weights_are_missing(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_where_model(external_weight=True), str(path))
    (tmp_path / "m.onnx.data").unlink()
    code, _, err = _call(["repair", path, tmp_path / "out.onnx"], capsys)
    _one_line_error(code, err, "repair")
    assert "external weight data" in err and not (tmp_path / "out.onnx").exists()


def test_a_plan_with_two_problems_gives_two_lines(tmp_path, capsys):
    plan = _plan(tmp_path, "runs:\n  - {notebook: 98_nothing}\n  - {notebook: 99_nothing}\n")
    code, _, err = _call(["run", "--params", plan], capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 2 and all(line.startswith("where223 run: ") for line in lines), err
    assert "98_nothing" in lines[0] and "99_nothing" in lines[1]


def test_the_entry_point_gives_one_line_too(tmp_path):
    """`python -m where223` as a user runs it: exit 2, one stderr line, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "where223", "run", "--params", str(_plan(tmp_path, "{{{"))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("where223 run: ") and "not valid YAML" in done.stderr


# --- the control: well-formed calls still exit 0 or 1 ------------------------------------------------------


def test_well_formed_calls_exit_0_or_1(tmp_path, model_path, capsys):
    assert _call(["lint", model_path], capsys)[0] == 1  # a violation found
    assert _call(["blame", model_path, "Where_223"], capsys)[0] == 1  # no source recorded
    code, out, _ = _call(["draw", model_path, "--stem", tmp_path / "figure", "--hops", "1"], capsys)
    assert code == 0 and out.split() == [f"{tmp_path / 'figure'}.png", f"{tmp_path / 'figure'}.svg"]
    fixed = tmp_path / "fixed.onnx"
    code, out, _ = _call(["repair", model_path, fixed], capsys)
    assert code == 0 and "1 change(s)" in out
    assert _call(["lint", fixed], capsys)[0] == 0
    assert _call(["run", "--help"], capsys)[0] == 0


def test_repair_in_place_overwrites_the_input_only_when_asked(model_path, capsys):
    before = model_path.read_bytes()
    assert _call(["repair", model_path, model_path, "--in-place"], capsys)[0] == 0
    assert model_path.read_bytes() != before and _call(["lint", model_path], capsys)[0] == 0
    assert not [p for p in model_path.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_repair_writes_atomically(tmp_path, model_path, monkeypatch, capsys):
    """A write that fails half way leaves the previous output byte-identical and no temporary file."""
    output = tmp_path / "out.onnx"
    output.write_bytes(b"the previous output")

    def half_written(model, path, *args, **kwargs):
        Path(path).write_bytes(b"half a model")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(repair_module.onnx, "save_model", half_written)
    code, _, err = _call(["repair", model_path, output], capsys)
    _one_line_error(code, err, "repair")
    assert output.read_bytes() == b"the previous output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


# --- names read from a model are shown escaped and cut ------------------------------------------------------


def test_printable_escapes_control_characters_and_cuts_long_text():
    assert printable("/transformer/h.0/attn/Where") == "/transformer/h.0/attn/Where"
    assert printable(EVIL) == "evil\\n\\x1b[2Jno type-constraint violations"
    cut = printable("x" * 100_000)
    assert cut.startswith("x" * NAME_LIMIT) and cut.endswith(f"…[{100_000 - NAME_LIMIT} more characters]")


def test_node_names_are_printed_escaped(tmp_path, capsys):
    path = tmp_path / "evil.onnx"
    onnx.save(_where_model(EVIL), str(path))
    escaped = printable(EVIL)
    code, out, _ = _call(["lint", path], capsys)
    assert code == 1 and f"in node ({escaped})" in out
    assert "\x1b" not in out and "no type-constraint violations" not in out.splitlines()
    code, _, err = _call(["blame", path, EVIL], capsys)
    assert code == 1 and err.count("\n") == 1 and escaped in err and "\x1b" not in err
    code, out, _ = _call(["repair", path, tmp_path / "fixed.onnx"], capsys)
    assert code == 0 and f"{escaped}: input 2 'y'" in out and "\x1b" not in out
    code, _, err = _call(["draw", path, EVIL + "x", "--stem", tmp_path / "figure"], capsys)
    _one_line_error(code, err, "draw")
    assert "\x1b" not in err


def test_a_huge_node_name_is_cut(tmp_path, capsys):
    path = tmp_path / "huge.onnx"
    onnx.save(_where_model("W" * 100_000), str(path))
    code, out, _ = _call(["lint", path], capsys)
    assert code == 1 and "more characters]" in out
    assert max(map(len, out.splitlines())) < 2 * NAME_LIMIT + 200


# --- one table, help from the library's docstrings, lazy imports ------------------------------------------


def test_every_command_is_in_the_table_with_help_from_its_library(capsys):
    assert list(cli.COMMANDS) == [
        "run", "report", "compare", "lint", "blame", "draw", "repair", "diff", "convert", "explain", "bench-variants",
        "sweep", "strip",
    ]  # fmt: skip
    _, overview, _ = _call(["--help"], capsys)
    for name, command in cli.COMMANDS.items():
        library = cli.library_doc(command.explained_by)
        code, help_text, _ = _call([name, "--help"], capsys)
        assert code == 0 and library and library.splitlines()[0] in help_text, name
        assert command.summary() in help_text and name in overview
    with pytest.raises(LookupError):  # the control: a function the module does not define
        cli.library_doc("where223.graph.lint:no_such_function")


def test_help_and_lint_import_no_torch(model_path):
    script = (
        "import sys; from where223.cli import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch loaded'; sys.exit(rc)"
    )
    for argv in (
        ["bench-variants", "--help"], ["sweep", "--help"], ["lint", str(model_path)]
    ):  # fmt: skip
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode in (0, 1) and "torch loaded" not in done.stderr, done.stderr


def _command_line_in(source: str) -> list[str]:
    """What a library module must leave to the cli package: argument parsing, printing, its own entry point."""
    markers = ("import argparse", "print(", "def cli_main", "def main(", 'if __name__ == "__main__"')
    return [marker for marker in markers if marker in source]


def test_no_library_module_parses_arguments_or_prints():
    """argparse and print live in the cli package; worker entry points (run as `python -m` in other environments or
    before .venv exists) keep a small main, and their docstrings say why."""
    workers = {
        "sweep/cell.py", "gpt2/releases.py", "pipeline/installer.py", "graph/ort_child.py", "sweep/warm.py",
    }  # fmt: skip
    package = ROOT / "src" / "where223"
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if not relative.startswith("cli/") and relative not in {"__main__.py"} | workers:
            assert _command_line_in(path.read_text()) == [], relative
    for worker in sorted(workers):
        docstring = (package / worker).read_text().split('"""')[1]
        assert "worker entry point" in " ".join(docstring.split()), worker
    # the control: a module with a command line of its own is caught
    assert _command_line_in('import argparse\n\ndef main():\n    print("done")\n') == [
        "import argparse", "print(", "def main("
    ]  # fmt: skip
