"""`where223 explain` on arguments and factories that are not what it asks for: a bad opset or a factory that
returns no module is one line and exit 2 before anything is exported; a model that was never built is exit 1 with
its cause on one line, and its record is strict JSON. Each reaches its failure before any export (the full runs
with a valid opset and factory are tests/study/test_explain.py's)."""

from __future__ import annotations

import json

import pytest

from where223.cli import main

MODELS = "tests/study/explain_models.py"


def _factories(tmp_path):
    path = tmp_path / "factories.py"
    path.write_text(
        "def forty_two():\n    return 42\n\n"
        "def broken():\n    raise RuntimeError('the factory cannot make its model\\nits second line')\n\n"
        "def no_inputs():\n    raise AssertionError('never called: the module is refused first')\n"
    )
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("where223 explain: "), err
    return err[0]


def _strict(path):
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in {path}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.parametrize("opset", ["abc", "0", "-3", "1.5", "99999"])
def test_an_opset_that_is_not_a_whole_number_is_one_line_and_exit_2(opset, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["explain", "--factory", f"{MODELS}:matched", "--opset", opset, "--out", str(out)]) == 2
    assert f"opset {opset!r}" in _one_line(capsys)
    assert not out.exists()  # refused before anything ran


def test_a_valid_opset_is_taken_and_the_record_keeps_it(tmp_path, capsys):
    factories = _factories(tmp_path)
    code = main(["explain", "--factory", f"{factories}:broken", "--opset", "17", "--out", str(tmp_path / "out")])
    assert code == 1 and "not_built" in _one_line(capsys)  # the opset was taken; the factory then failed
    assert _strict(tmp_path / "out" / "record.json")["settings"]["opset"] == 17


def test_a_factory_that_returns_no_module_is_one_line_and_exit_2(tmp_path, capsys):
    factories = _factories(tmp_path)
    argv = ["explain", "--factory", f"{factories}:forty_two", "--inputs", f"{factories}:no_inputs"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    line = _one_line(capsys)
    assert "forty_two: returned int 42, not a torch.nn.Module" in line
    assert not (tmp_path / "out" / "record.json").exists()


def test_inputs_that_are_not_tensors_are_one_line_and_exit_2_and_a_module_is_taken(tmp_path, capsys):
    """The control for the factory check: `matched` returns a module, which is taken; its inputs then are not."""
    factories = _factories(tmp_path)
    argv = ["explain", "--factory", f"{MODELS}:matched", "--inputs", f"{factories}:forty_two"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "forty_two: example inputs are tensors (a dict or tuple of them): input_0 is int 42" in _one_line(capsys)


def test_a_factory_that_raises_is_a_model_never_built_exit_1_with_its_cause(tmp_path, capsys):
    factories = _factories(tmp_path)
    code = main(["explain", "--factory", f"{factories}:broken", "--out", str(tmp_path / "out"), "--json"])
    assert code == 1
    said = capsys.readouterr()
    assert json.loads(said.out)["outcome"] == "not_built"
    err = said.err.strip().splitlines()
    assert err == [f"where223 explain: not_built at build: the factory cannot make its model … its second line "
                   f"(record: {tmp_path / 'out' / 'record.json'})"]  # fmt: skip
    record = _strict(tmp_path / "out" / "record.json")
    assert record["built"] is False and record["error"]["type"] == "builtins.RuntimeError"


def test_a_config_that_makes_no_model_is_exit_1_and_its_record_strict_json(tmp_path, capsys):
    """`hidden_size=1e309` reads as infinity: GPT-2 cannot be built, and the record says what it could not hold."""
    argv = ["explain", "--model-type", "gpt2", "--config", "hidden_size=1e309", "--out", str(tmp_path), "--json"]
    assert main(argv) == 1
    assert "not_built at build" in _one_line(capsys)
    record = _strict(tmp_path / "record.json")
    assert record["outcome"] == "not_built" and record["subject"]["config"] == {"hidden_size": None}
    assert record["not_representable"] == [{"path": "/subject/config/hidden_size", "text": "Infinity"}]
