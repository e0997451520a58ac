"""Every failure the fuzz found (`make fuzz`, outputs/benchmarks/fuzz.json), as a named case: its input built in code
(or, where no smaller one was found, the fuzz's own input under tests/fuzz/fixtures/), run as the fuzz runs it (a
forked child, tests/fuzz/harness.py) and judged by the same rules. Each has a control beside it: the same command
on the harmless variant still works."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.fuzz import harness
from tests.fuzz.harness import Case, Outcome, run_case
from tests.graph import hostile

FIXTURES = Path(__file__).parent / "fixtures"
LINT_CODES = frozenset({0, 1, 2, 3})


@pytest.fixture(scope="module", autouse=True)
def _warm():
    harness.warm()


def _command(command: str, model: Path, folder: Path) -> Case:
    """`command` (lint, lint-json, lint-kernels, draw, repair) on `model`, as the fuzz's ONNX reader runs it."""
    names = [str(model)]
    env = {}
    if command.startswith("lint"):
        argv, codes = ["lint", str(model)], set(LINT_CODES)
        if command == "lint-json":
            argv += ["--format", "json"]
        elif command == "lint-kernels":
            argv.append("--kernels")
            codes.add(4)
            env["WHERE223_CACHE"] = str(folder / "cache")
    elif command == "draw":
        argv, codes = ["draw", str(model), "--stem", str(folder / "figure")], {0, 1, 2}
    else:
        argv, codes = ["repair", str(model), str(folder / "repaired.onnx"), "--ort-timeout", "5"], {0, 1, 2}
        names.append(str(folder / "repaired.onnx"))
    return Case("regression", argv, tuple(names), frozenset(codes), env=env)


def _judged(command: str, model: onnx.ModelProto | bytes | Path, folder: Path) -> Outcome:
    if isinstance(model, Path):
        path = model
    else:
        path = folder / "model.onnx"
        path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return run_case(_command(command, path, folder), folder)


def _assert_kept(outcome: Outcome) -> None:
    assert outcome.passed, (outcome.problems, outcome.status, outcome.signal, outcome.stderr[-1500:])


# --- the ONNX reader ---------------------------------------------------------------------------------------------

NAMELESS = "ZQZQZQ"  # a node name swapped for invalid UTF-8 in the serialized model


def name_not_utf8() -> bytes:
    """where_conflict with its node's name replaced, in the file's bytes, by six bytes that are not UTF-8: protobuf
    (proto2) parses it and hands the name back as bytes, not str."""
    model = hostile.where_conflict(node_name=NAMELESS)
    return model.SerializeToString().replace(NAMELESS.encode(), b"\xff\xfe\xfd\xfc\xfb\xfa")


@pytest.mark.parametrize("command", ["lint", "lint-json", "lint-kernels", "draw", "repair"])
def test_regression_a_node_name_that_is_not_utf8(tmp_path, command):
    """Found as `AttributeError: 'int' object has no attribute 'isprintable'` (printable() on bytes) and
    `TypeError: Object of type bytes is not JSON serializable` (lint --format json)."""
    _assert_kept(_judged(command, name_not_utf8(), tmp_path))


def test_printable_shows_a_name_protobuf_handed_back_as_bytes():
    """Beside the guard that refuses such a model, printable() itself takes bytes (the original crash was printable
    iterating them as ints): the bytes that are not UTF-8 escaped, the rest as text."""
    from where223.errors import printable

    assert printable(b"node\xff\n") == "node\\xff\\n"
    assert printable("node\n") == "node\\n"  # the control: text as before


def test_control_the_same_model_with_a_utf8_name_lints(tmp_path):
    outcome = _judged("lint", hostile.where_conflict(node_name=NAMELESS), tmp_path)
    assert outcome.passed and outcome.status == 1 and NAMELESS in outcome.stdout


def external_weight(location: str = "weights.bin") -> onnx.ModelProto:
    """An Add whose weight `w` lies in external data at `location` (the file absent: lint reads no weights)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    weight.data_location = TensorProto.EXTERNAL
    del weight.float_data[:]
    weight.external_data.add(key="location", value=location)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "external",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("command", ["lint", "repair"])
def test_regression_an_external_data_location_that_is_not_utf8(tmp_path, command):
    """Found (reading the guards after the case above) as `AttributeError: 'int' object has no attribute
    'isprintable'` (printable() of the location, handed back as bytes) and, printable() taking bytes, `TypeError: a
    bytes-like object is required, not 'str'` (the location searched for ONNX Runtime's memory marker)."""
    data = external_weight(NAMELESS).SerializeToString().replace(NAMELESS.encode(), b"\xff\xfe\xfd\xfc\xfb\xfa")
    outcome = _judged(command, data, tmp_path)
    _assert_kept(outcome)
    assert outcome.status == 2 and "not UTF-8" in outcome.stderr, outcome


def test_control_an_external_data_location_in_utf8_lints(tmp_path):
    outcome = _judged("lint", external_weight(), tmp_path)
    assert outcome.passed and outcome.status == 0, outcome


@pytest.mark.parametrize("command", ["lint", "lint-kernels", "draw", "repair"])
def test_regression_an_unknown_element_type_names_the_model(tmp_path, command):
    """Found as `where223 lint: element type 999 is not one the installed onnx defines`: no file named."""
    _assert_kept(_judged(command, hostile.unknown_element_type(), tmp_path))


def no_opset_for_a_domain() -> onnx.ModelProto:
    """where_conflict and a node in a domain the model imports no opset of: onnx's shape inference refuses it."""
    model = hostile.where_conflict()
    model.graph.node.append(helper.make_node("Thing", ["w"], ["t"], name="thing", domain="com.nowhere"))
    return model


@pytest.mark.parametrize("command", ["draw", "repair"])
def test_regression_shape_inference_failing_names_the_model(tmp_path, command):
    """Found as `where223 draw: <model>: onnx's shape inference failed on this model: ...`: the model is typed in
    memory, its path not passed on (lint names it)."""
    _assert_kept(_judged(command, no_opset_for_a_domain(), tmp_path))


def test_control_lint_names_the_model_when_shape_inference_fails(tmp_path):
    outcome = _judged("lint", no_opset_for_a_domain(), tmp_path)
    assert outcome.passed and outcome.status == 2 and str(tmp_path / "model.onnx") in outcome.stderr


def a_function_called_with(inputs: list[str]) -> onnx.ModelProto:
    """where_conflict beside a call of a model-local function of one formal input, given `inputs`."""
    function = helper.make_function("local.functions", "f", ["x"], ["y"], [helper.make_node("Identity", ["x"], ["y"])],
                                    [helper.make_opsetid("", 17)])
    model = hostile.where_conflict()
    model.graph.node.append(helper.make_node("f", inputs, ["b"], name="call", domain="local.functions"))
    model.graph.input.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]))
    model.opset_import.append(helper.make_opsetid("local.functions", 1))
    model.functions.append(function)
    return model


def test_regression_repair_names_the_model_when_the_function_inliner_fails(tmp_path):
    """Found as `where223 repair: <model>: onnx's function inliner failed on this model: Number of actual parameters
    cannot exceed number of formal parameters`: the repair lints the model with its functions inlined in memory,
    its path not passed on."""
    outcome = _judged("repair", a_function_called_with(["a", "a"]), tmp_path)
    _assert_kept(outcome)
    assert outcome.status == 2 and "<model>" not in outcome.stderr, outcome


def test_control_repair_of_a_function_called_as_declared(tmp_path):
    outcome = _judged("repair", a_function_called_with(["a"]), tmp_path)
    assert outcome.passed and outcome.status == 0, outcome


def bare_scan() -> onnx.ModelProto:
    """A Scan node with no inputs, outputs or attributes (its required `body` graph missing), at opset 13."""
    graph = helper.make_graph([helper.make_node("Scan", [], [])], "bare", [], [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.mark.parametrize("command", ["lint", "draw", "repair"])
def test_regression_a_scan_without_its_body_is_refused_not_a_crash(tmp_path, command):
    """Found as SIGSEGV: onnx 1.16's Scan inference reads the missing `num_scan_inputs` unchecked (a Scan without
    `body` but with `num_scan_inputs` is inferred; onnx 1.23's does not crash). The guards refuse it, naming the
    model."""
    _assert_kept(_judged(command, bare_scan(), tmp_path))


def test_control_a_scan_with_its_body_lints(tmp_path):
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["s_out"])], "body",
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                             [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [])])
    node = helper.make_node("Scan", ["x"], ["y"], name="scan", body=body, num_scan_inputs=1)
    graph = helper.make_graph([node], "scan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    outcome = _judged("lint", model, tmp_path)
    assert outcome.passed and outcome.status == 0, outcome


def label_encoder_reading(value: str, declared: bool) -> onnx.ModelProto:
    """onnx's conformance LabelEncoder (ai.onnx.ml 4) reading `value`, declared as a graph input or not."""
    node = helper.make_node("LabelEncoder", [value], ["Y"], domain="ai.onnx.ml", keys_strings=["a", "b", "c"],
                            values_int64s=[0, 1, 2])
    inputs = [helper.make_tensor_value_info(value, TensorProto.STRING, [5])] if declared else []
    graph = helper.make_graph([node], "label_encoder", inputs, [helper.make_tensor_value_info("Y", TensorProto.INT64,
                                                                                               [5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 4)], ir_version=9)


@pytest.mark.parametrize("command", ["lint", "draw", "repair"])
def test_regression_a_value_nothing_defines_is_refused_before_inference(tmp_path, command):
    """Found as SIGSEGV (the full run, 2 of 10,000 onnx cases): a conformance LabelEncoder whose graph input was
    dropped; onnx's inference of LabelEncoder (1.16 and 1.23) reads the missing input's type unchecked. The guards
    refuse a main-graph value that nothing defines, as ONNX Runtime does ("is not a graph input, initializer, or
    output of a previous node"), naming the model."""
    outcome = _judged(command, label_encoder_reading("X", declared=False), tmp_path)
    _assert_kept(outcome)
    assert outcome.status == 2 and "X is read by a LabelEncoder node" in outcome.stderr, outcome.stderr


def test_regression_repair_names_the_model_a_refusal_after_inlining_concerns(tmp_path):
    """Found by the full run (3 of 10,000 onnx cases) as "<model>: value ... is read by a Cast node but is no graph
    input ...": a mutated conformance model whose model-local function body reads a value nothing defines, refused
    once repair's round computed the call inline, on the edited model, which named no file. The fuzz's own input."""
    outcome = _judged("repair", FIXTURES / "function-body-reading-nothing.onnx", tmp_path)
    _assert_kept(outcome)
    assert outcome.status == 2 and "function-body-reading-nothing.onnx: value" in outcome.stderr, outcome.stderr


def test_control_a_label_encoder_reading_its_graph_input_lints(tmp_path):
    outcome = _judged("lint", label_encoder_reading("X", declared=True), tmp_path)
    assert outcome.passed and outcome.status == 0, outcome


def test_regression_ifs_nested_past_protobufs_depth_once_inferred(tmp_path):
    """Found as `google.protobuf.message.DecodeError: ... Exceeded upb_DecodeOptions_MaxDepth` from
    `onnx.load_model_from_string` of onnx's inferred model: the file parses (its branch outputs untyped), the
    inferred model, whose value types add levels, does not. The fuzz's own input (onnx's nllloss expanded model,
    a node wrapped in 32 nested Ifs)."""
    _assert_kept(_judged("lint", FIXTURES / "nested-ifs-past-protobuf-depth.onnx", tmp_path))


def a_branch_reading_nothing() -> onnx.ModelProto:
    """where_conflict beside an If whose branches read `ghost`, a value no scope has."""
    model = hostile.where_conflict()
    branch = helper.make_graph([helper.make_node("Identity", ["ghost"], ["b"], name="reads_ghost")], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    model.graph.node.append(helper.make_node("If", ["flag"], ["if_out"], name="if_ghost", then_branch=branch,
                                             else_branch=branch))
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    return model


def test_regression_repair_prints_no_warnings_of_its_libraries(tmp_path):
    """Found as 5 lines on stderr: onnx-ir's logger warns twice ("Input 'ghost' of node 'reads_ghost' (::Identity:)
    cannot be found in any scope ..." and its "Caveat: ..."), through logging's last-resort handler, before
    repair's own one line."""
    _assert_kept(_judged("repair", a_branch_reading_nothing(), tmp_path))


def loop_body_declaring_its_iteration_float(trip_count: str = "") -> onnx.ModelProto:
    """A Loop whose body declares its input 0 (the iteration number, int64) float, given `trip_count` as the node's
    input 0 ("": left out, as the optional M may be)."""
    body = helper.make_graph([helper.make_node("Identity", ["v"], ["v_out"], name="copy")], "body",
                             [helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
                             [helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])])
    loop = helper.make_node("Loop", [trip_count, ""], ["loop_out"], name="loop", body=body)
    inputs = [helper.make_tensor_value_info("m", TensorProto.INT64, [])] if trip_count else []
    graph = helper.make_graph([loop], "loop", inputs, [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def test_regression_repair_of_a_body_input_the_node_leaves_out(tmp_path):
    """Found as `AttributeError: 'NoneType' object has no attribute 'name'` in the repair's Editor.cast_input: the
    declared-type rule cast the node's input 0, which the Loop leaves out (a mutated conformance model)."""
    outcome = _judged("repair", loop_body_declaring_its_iteration_float(), tmp_path)
    _assert_kept(outcome)
    assert outcome.status == 1 and "leaves out" in outcome.stderr, outcome


def test_control_repair_of_a_body_input_the_node_gives(tmp_path):
    outcome = _judged("repair", loop_body_declaring_its_iteration_float("m"), tmp_path)
    assert outcome.passed, outcome
    assert "leaves out" not in outcome.stderr


# --- the kernel cache ---------------------------------------------------------------------------------------------


def _cache_case(tmp_path: Path, entries: dict) -> Outcome:
    from tests.fuzz.json_cases import cache_file
    from where223.graph.ort import import_onnxruntime

    cache = tmp_path / "cache"
    table = cache_file(cache)
    table.parent.mkdir(parents=True)
    table.write_text(json.dumps({"format": 1, "onnxruntime": import_onnxruntime().__version__,
                                 "provider": "CPUExecutionProvider", "onnx": onnx.__version__, "entries": entries}))
    model = tmp_path / "model.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    case = Case("regression", ["lint", str(model), "--kernels"], (str(model), str(table), str(cache)),
                frozenset({0, 1, 2, 3, 4}), env={"WHERE223_CACHE": str(cache)})
    return run_case(case, tmp_path)


@pytest.mark.parametrize("status", [["available"], {"status": "available"}], ids=["list", "mapping"])
def test_regression_a_cache_entry_whose_status_is_not_text(tmp_path, status):
    """Found as `TypeError: unhashable type: 'list'` (and 'dict') from `value.get("status") in statuses`, in the
    kernel cache's stricter reader as it was being written (the reader before it caught TypeError whole)."""
    _assert_kept(_cache_case(tmp_path, {"Relu(14) opset 17 T=tensor(float)": {"status": status, "message": None}}))


def test_control_a_cache_entry_as_written_is_used(tmp_path):
    outcome = _cache_case(tmp_path, {"Relu(14) opset 17 T=tensor(float)": {"status": "missing", "message": "no"}})
    assert outcome.passed and outcome.status == 4, outcome  # the cached verdict, not a probe's


# --- the YAML readers: spaces, the stacks file, plans ----------------------------------------------------------------


def _yaml_case(tmp_path: Path, entry: str, text: str) -> Outcome:
    """`entry` (space, stacks, plan) reading `text`, stopped before it runs anything, as the fuzz's YAML readers run
    it."""
    from tests.fuzz import yaml_cases

    recipe = {"seed": "matrix.yaml" if entry != "plan" else "small.yaml", "entry": entry, "mutations": [],
              "flow": False, "snippet": None, "snippet_key": "", "line": 0, "encoding": "utf-8", "blob": b"",
              "file": "file"}
    case, _, _ = yaml_cases.build(recipe, tmp_path, "regression")
    name = "stacks.yaml" if entry == "stacks" else "input.yaml"
    (tmp_path / name).write_text(text)
    return run_case(case, tmp_path)


def _committed(name: str) -> str:
    from tests.fuzz.yaml_cases import SPACES

    return (SPACES / name).read_text()


HUGE = "9" * 5000  # past Python's 4,300 digits for int(str)
HUGE_INTEGERS = {
    "space": lambda: _committed("matrix.yaml").replace("timeout_s: 600", f"timeout_s: {HUGE}"),
    "stacks": lambda: _committed("stacks.yaml").replace('python: "3.11"', f"python: {HUGE}", 1),
    "plan": lambda: f"runs:\n  - notebook: 01_reproduce\n    parameters: {{batch_size: {HUGE}}}\n",
}


@pytest.mark.parametrize("entry", list(HUGE_INTEGERS))
def test_regression_a_5000_digit_integer_in_a_yaml_file(tmp_path, entry):
    """Found as `ValueError: Exceeds the limit (4300 digits) for integer string conversion` from PyYAML's
    `construct_yaml_int`, through the project's YAML reader: a traceback."""
    _assert_kept(_yaml_case(tmp_path, entry, HUGE_INTEGERS[entry]()))


@pytest.mark.parametrize("entry", list(HUGE_INTEGERS))
def test_control_the_committed_yaml_files_are_read(tmp_path, entry):
    text = HUGE_INTEGERS[entry]().replace(HUGE, "600" if entry == "space" else '"3.11"' if entry == "stacks" else "1")
    outcome = _yaml_case(tmp_path, entry, text)
    assert outcome.passed and outcome.status == 0, outcome


@pytest.mark.parametrize(("axis", "line"), [("modes", "modes: [nosuchmode]"), ("models", "models: [nosuchmodel]"),
                                            ("recipes", "recipes: [nosuchrecipe]"),
                                            ("exporters", "exporters: [nosuchexporter]")])
def test_regression_an_unknown_name_in_a_space_names_the_space(tmp_path, axis, line):
    """Found as `where223 sweep: unknown mode 'nosuchmode' (eval, train)`: which file says so is not told."""
    text = "\n".join(line if current.startswith(f"{axis}:") else current
                     for current in _committed("matrix.yaml").splitlines())
    _assert_kept(_yaml_case(tmp_path, "space", text + "\n"))


@pytest.mark.parametrize(("committed", "changed"), [
    ("  environments: [torch-1.12.1,", "  environments: [nosuchstack,"),
    ("  transformers: [4.22.0,", "  transformers: ['1',"),
], ids=["environment", "transformers"])
def test_regression_an_unknown_stack_in_a_space_names_the_space(tmp_path, committed, changed):
    """Found as `where223 sweep: unknown stack 'x': no environment 'x' (stacks.yaml has ...)` and `unknown stack
    'torch-1.12.1+transformers-1': transformers '1' is not among stacks.yaml's (...)`."""
    _assert_kept(_yaml_case(tmp_path, "space", _committed("matrix.yaml").replace(committed, changed)))
