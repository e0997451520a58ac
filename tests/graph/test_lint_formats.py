"""`where223 lint --format sarif|github`: SARIF 2.1.0 with what the schema requires, one result per finding; GitHub
workflow commands that no node name can break out of; nothing for a clean model."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from where223.cli import main
from where223.graph import kernels
from where223.graph.lint import FindingKind, lint_model
from where223.graph.lint_formats import RULES, escape_data, escape_property, github_commands, sarif

HOSTILE = "evil\n::error file=x.onnx::pwned %0A, a:b\r"
LEVELS = {"none", "note", "warning", "error"}


def _sarif_problems(log: dict) -> list[str]:
    """What SARIF 2.1.0's schema requires of the parts this tool writes, checked by hand (the schema itself is
    not vendored): sarifLog {version, runs}, run {tool}, tool {driver}, toolComponent {name}, reportingDescriptor
    {id}, result {message with text}, level and ruleIndex consistent with the driver's rules."""
    problems = []
    if log.get("version") != "2.1.0":
        problems.append("version is not 2.1.0")
    if "sarif-2.1.0" not in log.get("$schema", ""):
        problems.append("$schema does not name SARIF 2.1.0")
    runs = log.get("runs")
    if not isinstance(runs, list) or not runs:
        return [*problems, "no runs"]
    for run in runs:
        driver = run.get("tool", {}).get("driver", {})
        if not driver.get("name"):
            problems.append("tool.driver has no name")
        rules = driver.get("rules", [])
        if any("id" not in rule for rule in rules):
            problems.append("a rule without an id")
        for result in run.get("results", []):
            if not isinstance(result.get("message", {}).get("text"), str):
                problems.append("a result without message.text")
            if result.get("level") not in LEVELS:
                problems.append(f"level {result.get('level')!r}")
            index = result.get("ruleIndex", -1)
            if not 0 <= index < len(rules) or rules[index]["id"] != result.get("ruleId"):
                problems.append(f"ruleIndex {index} does not point at rule {result.get('ruleId')}")
            for location in result.get("locations", []):
                if "uri" not in location.get("physicalLocation", {}).get("artifactLocation", {}):
                    problems.append("a physical location without an artifact uri")
    return problems


def _parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """A workflow command parsed as GitHub's runner does: `::name k=v,k=v::message`, values unescaped."""
    assert line.startswith("::"), line
    head, message = line[2:].split("::", 1)
    name, _, props = head.partition(" ")
    properties = {}
    for pair in filter(None, props.split(",")):
        key, value = pair.split("=", 1)
        properties[key] = value
    unescape = {"%0D": "\r", "%0A": "\n", "%3A": ":", "%2C": ",", "%25": "%"}
    for key, value in properties.items():
        for escaped, raw in unescape.items():
            value = value.replace(escaped, raw)
        properties[key] = value
    return name, properties, message


def _hostile_model():
    """A Where whose branches disagree, in a node named to break out of a workflow command."""
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "x", "y"], ["w"], name=HOSTILE)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, [2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2]),
        ],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_sarif_has_one_result_per_violation(violations_model, save):
    path = save(violations_model)
    report = lint_model(path)
    log = sarif(report)
    assert _sarif_problems(log) == []
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "where223 lint" and run["tool"]["driver"]["version"]
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == [str(kind) for kind in RULES]
    results = run["results"]
    assert len(results) == len(report.violations) == 5
    assert [r["ruleId"] for r in results] == [str(v.kind) for v in report.violations]
    assert {r["level"] for r in results} == {"error"}
    first = results[0]
    assert first["message"]["text"] == report.violations[0].message()
    (location,) = first["locations"]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == path.as_uri()
    assert location["logicalLocations"] == [{"name": "Where_223", "fullyQualifiedName": "Where_223",
                                             "kind": "function", "properties": {"opType": "Where"}}]
    inner = next(r for r in results if r["locations"][0]["logicalLocations"][0]["name"] == "then_add")
    assert inner["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "If_3/then_branch/then_add"
    assert results[-1]["properties"]["root"] is False and results[-1]["properties"]["causedBy"] == ["Where_223"]


@pytest.mark.parametrize("spoil", ["version", "$schema", "driver name", "message", "rule index"])
def test_control_the_sarif_check_catches_a_broken_log(violations_model, spoil):
    log = sarif(lint_model(violations_model))
    run, result = log["runs"][0], log["runs"][0]["results"][0]
    if spoil == "version":
        log["version"] = "2.0.0"
    elif spoil == "$schema":
        del log["$schema"]
    elif spoil == "driver name":
        del run["tool"]["driver"]["name"]
    elif spoil == "message":
        result["message"] = {"markdown": "x"}
    else:
        result["ruleIndex"] = 2
    assert len(_sarif_problems(log)) == 1


def test_a_clean_model_has_no_results_and_no_commands(clean_model, save, capsys):
    report = lint_model(clean_model)
    log = sarif(report)
    assert _sarif_problems(log) == [] and log["runs"][0]["results"] == []
    assert github_commands(report) == ""
    path = str(save(clean_model))
    assert main(["lint", path, "--format", "github"]) == 0 and capsys.readouterr().out == ""
    assert main(["lint", path, "--format", "sarif"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["results"] == []


def test_github_commands_one_line_per_violation(violations_model, save):
    path = save(violations_model)
    report = lint_model(path)
    lines = github_commands(report).split("\n")
    assert len(lines) == len(report.violations)
    parsed = [_parse_command(line) for line in lines]
    assert {name for name, _, _ in parsed} == {"error"}
    assert {props["file"] for _, props, _ in parsed} == {str(path)}
    assert parsed[0][1]["title"] == "type_binding_conflict in Where node Where_223"
    assert parsed[0][2] == report.violations[0].message()


def test_a_hostile_node_name_cannot_break_a_command(save):
    path = save(_hostile_model(), "a,b:c%.onnx")
    report = lint_model(path)
    text = github_commands(report)
    assert "\n" not in text and "\r" not in text  # one violation, one line: no second command can start
    name, props, message = _parse_command(text)
    assert name == "error" and set(props) == {"file", "title"}
    assert props["file"] == str(path)  # `,`, `:` and `%` in the file name survive the round trip
    assert props["title"] == r"type_binding_conflict in Where node evil\n::error file=x.onnx::pwned %0A, a:b\r"
    assert r"node (evil\n::error file=x.onnx::pwned %250A, a:b\r)" in message  # %-escaped, newline printable
    # the control: the same command without escaping is broken by the name
    naive = f"::error file={path},title={report.violations[0].node}::{report.violations[0].node}"
    assert naive.split("\n")[1].startswith("::error file=x.onnx::pwned")  # a second, injected command
    with pytest.raises(ValueError):
        _parse_command(naive.split("\n")[0])  # the properties run into the name's `::` and `,`


def test_escapes_as_github_documents():
    assert escape_data("100%\r\n::x,y") == "100%25%0D%0A::x,y"
    assert escape_property("100%\r\n::x,y") == "100%25%0D%0A%3A%3Ax%2Cy"


def test_sarif_with_a_hostile_name_stays_one_line_per_field(save):
    log = sarif(lint_model(save(_hostile_model())))
    (result,) = log["runs"][0]["results"]
    logical = result["locations"][0]["logicalLocations"][0]
    assert logical["name"] == r"evil\n::error file=x.onnx::pwned %0A, a:b\r"
    assert all(ch.isprintable() for ch in result["message"]["text"] + logical["name"])


def test_missing_kernels_are_warnings(tmp_path, monkeypatch, save, capsys):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path / "cache"))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="MatMul_bf16")],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [2, 2]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 2])],
    )
    path = str(save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)))
    assert main(["lint", path, "--kernels", "--format", "sarif"]) == 4
    log = json.loads(capsys.readouterr().out)
    assert _sarif_problems(log) == []
    (result,) = log["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == (str(FindingKind.MISSING_KERNEL), "warning")
    assert result["properties"]["binding"] == {"T": "tensor(bfloat16)"}
    assert main(["lint", path, "--kernels", "--format", "github"]) == 4
    name, props, message = _parse_command(capsys.readouterr().out.strip())
    assert name == "warning" and "No CPUExecutionProvider kernel for MatMul(13)" in message
    assert main(["lint", path, "--format", "sarif"]) == 0  # without --kernels: no finding
    assert json.loads(capsys.readouterr().out)["runs"][0]["results"] == []


def test_json_is_format_json(violations_model, save, capsys):
    path = str(save(violations_model))
    assert main(["lint", path, "--json"]) == 1
    first = capsys.readouterr().out
    assert main(["lint", path, "--format", "json"]) == 1
    assert capsys.readouterr().out == first
    assert main(["lint", path, "--format", "sarif"]) == 1  # the exit code does not depend on the format
    capsys.readouterr()
    assert main(["lint", path, "--json", "--format", "github"]) == 2
    assert "disagree" in capsys.readouterr().err
