"""`where223 diff` and `repair --reference`: a faithful conversion is within tolerance and a departing one is not, with
its first departing value named (overflow, saturation, underflow); values are matched through a converter's Casts;
bad input is exit 2; every ONNX Runtime run is bounded. Small models built here with onnx.helper."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from where223.cli import main
from where223.graph import diff as diff_module
from where223.graph import ort
from where223.graph.diff import FORMATS, TOLERANCE_SPACINGS, CannotCompareError, compare, diff, run_model

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


@pytest.fixture
def in_process(monkeypatch):
    """ONNX Runtime's runs and type checks here, not in a child process each (the child path and its bound:
    `test_runs_are_bounded`), so that the command-line cases stay fast."""
    monkeypatch.setattr(diff_module, "_run_in_child",
                        lambda model, feeds, provider, optimize, timeout_s: diff_module._run_here(model, feeds,
                                                                                                  provider, optimize))
    judge = ort.judge
    monkeypatch.setattr(ort, "judge", lambda model, providers=("CPUExecutionProvider",), timeout_s=None,
                        probe=False: judge(model, providers, None, probe))  # fmt: skip


def _model(nodes, initializers, elem=F32, inputs=("x",), output="y", opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "diff_test", [helper.make_tensor_value_info(n, elem, [2, 4]) for n in inputs],
                              [helper.make_tensor_value_info(output, elem, [2, 4])], initializers)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def chain(scale: float, elem: int = F32) -> onnx.ModelProto:
    """y = Max(Max(x * scale * scale, x), x) / scale^2: its intermediate `t` exceeds 65504 for scale 1000. Two Max
    nodes (float16 kernels on ONNX Runtime's CPU) make the float16 values real there."""
    np_type = np.float16 if elem == F16 else np.float32
    constants = [numpy_helper.from_array(np.array(v, np_type), n)
                 for n, v in (("c1", scale), ("c2", scale), ("c3", 1 / scale**2))]  # fmt: skip
    nodes = [helper.make_node("Mul", ["x", "c1"], ["h"], name="Mul_1"),
             helper.make_node("Mul", ["h", "c2"], ["t"], name="Mul_2"),
             helper.make_node("Max", ["t", "x"], ["s"], name="Max_3"),
             helper.make_node("Max", ["s", "x"], ["u"], name="Max_4"),
             helper.make_node("Mul", ["u", "c3"], ["y"], name="Mul_5")]  # fmt: skip
    return _model(nodes, constants, elem)


def _save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _call(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_tolerance_is_k_spacings_of_the_reduced_type():
    assert TOLERANCE_SPACINGS == 32  # stated in where223.graph.diff before any model was run
    assert FORMATS["float16"].spacing(1.0) == 2**-10 and FORMATS["bfloat16"].spacing(1.0) == 2**-7
    assert FORMATS["float16"].spacing(65504.0) == 32 and FORMATS["float16"].spacing(0.0) == 2**-24
    reference = np.array([1.0, -0.5, 0.25], np.float32)
    inside = compare(reference, reference + 31 * 2**-10, "float16")
    beyond = compare(reference, reference + 33 * 2**-10, "float16")
    assert inside.within and round(inside.spacings) == 31 and inside.tolerance == 32 * 2**-10
    assert not beyond.within and beyond.differing == 3 and beyond.how == []  # precision alone
    assert compare(np.array([3, 4]), np.array([3, 5]), None).differing == 1  # integers: equal or not


def test_a_faithful_conversion_passes_and_an_overflowing_one_names_its_first_departure(tmp_path, capsys, in_process):
    faithful = (_save(chain(10.0), tmp_path / "ref10.onnx"), _save(chain(10.0, F16), tmp_path / "fp16_10.onnx"))
    code, out, _ = _call(["diff", *faithful], capsys)
    assert code == 0 and "within tolerance" in out and "y (float16)" in out
    naive = (_save(chain(1000.0), tmp_path / "ref.onnx"), _save(chain(1000.0, F16), tmp_path / "fp16.onnx"))
    code, out, _ = _call(["diff", *naive, "--json"], capsys)
    record = json.loads(out)
    assert code == 1 and not record["within"] and record["outputs"][0]["how"] == ["overflows"]
    first = record["departure"]
    assert (first["value"], first["node"], first["candidate_type"], first["how"]) == (
        "t", "Mul_2", "float16", ["overflows"])
    assert first["beyond_range"] == 8 and first["magnitude"] > 65504
    assert record["feeds"]["source"] == "generated" and record["feeds"]["seed"] == 0
    code, out, _ = _call(["diff", *naive], capsys)
    assert code == 1 and "first departure at 't' (output of Mul_2, Mul), float16 in the candidate: overflows" in out


def _scaled(weights: dict[str, float], elem=F32, clamp: float | None = None) -> onnx.ModelProto:
    """y = x * a * b, its constants in `elem`; `clamp` holds them at +-clamp (onnxconverter-common's max_finite_val
    does so at 1e4 before rounding to float16)."""
    np_type = np.float16 if elem == F16 else np.float32
    arrays = {n: np.full(4, v if clamp is None else np.clip(v, -clamp, clamp), np_type) for n, v in weights.items()}
    nodes = [helper.make_node("Mul", ["x", "a"], ["h"], name="Mul_a"), helper.make_node("Mul", ["h", "b"], ["y"],
                                                                                        name="Mul_b")]
    return _model(nodes, [numpy_helper.from_array(a, n) for n, a in arrays.items()], elem)


def test_saturation_and_underflow_are_named_where_they_happen():
    held = diff(_scaled({"a": 2e4, "b": 1e-4}), _scaled({"a": 2e4, "b": 1e-4}, F16, clamp=1e4), timeout_s=None)
    assert not held.within
    first = held.departure
    assert (first.value, first.kind, first.comparison.how, first.comparison.ceiling) == (
        "a", "initializer", ["saturates"], 1e4)
    assert "saturates: 4 element(s) held at 10000" in held.format()
    # a = 1e-9 rounds to float16's zero: within 32 subnormal spacings of the reference there, but y = x * a * 1e4 then
    # reads zero where the reference is a nonzero value below float16's normals
    flushed = diff(_scaled({"a": 1e-9, "b": 1e4}), _scaled({"a": 1e-9, "b": 1e4}, F16), timeout_s=None)
    assert (flushed.departure.value, flushed.departure.comparison.how) == ("y", ["underflows"])
    # the control: weights float16 holds, rounded alike, are within tolerance
    assert diff(_scaled({"a": 3.0, "b": 0.5}), _scaled({"a": 3.0, "b": 0.5}, F16), timeout_s=None).within


def _keep_io_candidate() -> onnx.ModelProto:
    """How onnxconverter-common's convert_float_to_float16(keep_io_types=True) rewrites y = Max(Max(x, z), z): a Cast
    to float16 after the input under a new name, the last node's output renamed and cast back to y."""
    nodes = [helper.make_node("Cast", ["x"], ["graph_input_cast_0"], to=F16, name="graph_input_cast0"),
             helper.make_node("Max", ["graph_input_cast_0", "z"], ["m"], name="Max_1"),
             helper.make_node("Max", ["m", "z"], ["graph_output_cast_0"], name="Max_2"),
             helper.make_node("Cast", ["graph_output_cast_0"], ["y"], to=F32, name="graph_output_cast0")]
    return _model(nodes, [numpy_helper.from_array(np.zeros(4, np.float16), "z")])


def test_values_are_matched_through_a_converters_casts(tmp_path, capsys, in_process):
    reference = _model([helper.make_node("Max", ["x", "z"], ["m"], name="Max_1"),
                        helper.make_node("Max", ["m", "z"], ["y"], name="Max_2")],
                       [numpy_helper.from_array(np.zeros(4, np.float32), "z")])  # fmt: skip
    paths = (_save(reference, tmp_path / "ref.onnx"), _save(_keep_io_candidate(), tmp_path / "cand.onnx"))
    small, large = tmp_path / "small.npz", tmp_path / "large.npz"
    np.savez(small, x=np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4))
    np.savez(large, x=np.full((2, 4), 1e5, np.float32))
    code, out, _ = _call(["diff", *paths, "--feeds", small], capsys)
    assert code == 0 and f"inputs: {small}" in out
    code, out, _ = _call(["diff", *paths, "--feeds", large, "--json"], capsys)
    first = json.loads(out)["departure"]
    assert code == 1 and (first["value"], first["candidate_value"], first["kind"], first["how"]) == (
        "x", "graph_input_cast_0", "input", ["overflows"])


def test_bad_input_is_exit_2_in_one_line(tmp_path, capsys):
    reference = _save(chain(10.0), tmp_path / "ref.onnx")
    candidate = _save(chain(10.0, F16), tmp_path / "cand.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not a model")
    wrong_name, pickled = tmp_path / "wrong.npz", tmp_path / "pickled.npz"
    np.savez(wrong_name, q=np.zeros((2, 4), np.float32))
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    cases = {
        (reference, garbage): "garbage.onnx",
        (reference, candidate, "--feeds", wrong_name): "the model has no input named 'q'",
        (reference, candidate, "--feeds", pickled): "not an .npz of plain arrays",
        (reference, candidate, "--feeds", tmp_path / "absent.npz"): "no such file",
        (reference, candidate, "--dim", "batch"): "expected NAME=N",
        (reference, candidate, "--dim", "batch=2"): "--dim names no dynamic dimension",
    }
    for argv, message in cases.items():
        code, out, err = _call(["diff", *argv], capsys)
        assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_runs_are_bounded():
    model, feeds = chain(10.0), {"x": np.ones((2, 4), np.float32)}
    here = run_model(model, feeds, timeout_s=None)
    in_child = run_model(model, feeds, timeout_s=60)  # the command line's way: a child process
    np.testing.assert_array_equal(here["y"], in_child["y"])
    with pytest.raises(CannotCompareError, match="did not finish running the model within 0.001 s"):
        run_model(model, feeds, timeout_s=0.001)


def test_repair_reference_says_whether_the_repair_is_within_tolerance(tmp_path, capsys, in_process,
                                                                       repairable_model):  # fmt: skip
    broken = _save(repairable_model, tmp_path / "broken.onnx")
    reference = onnx.ModelProto()
    reference.CopyFrom(repairable_model)
    for value in reference.graph.input:  # the float32 model the float16 inputs were converted from
        if value.type.tensor_type.elem_type == F16:
            value.type.tensor_type.elem_type = F32
    code, out, _ = _call(["repair", broken, tmp_path / "ok.onnx", "--reference", _save(reference, tmp_path / "r.onnx")],
                         capsys)  # fmt: skip
    assert code == 0 and "diff: within tolerance" in out
    swapped = reference.graph.node[2]
    swapped.input[:] = ["y", "x", "x"]  # Concat_9(y, x, x): another model
    code, out, err = _call(["repair", broken, tmp_path / "off.onnx", "--reference",
                            _save(reference, tmp_path / "other.onnx")], capsys)  # fmt: skip
    assert code == 1 and "departs from the reference" in err and (tmp_path / "off.onnx").is_file()
    code, _, err = _call(["repair", broken, tmp_path / "no.onnx", "--reference", tmp_path / "absent.onnx"], capsys)
    assert code == 2 and not (tmp_path / "no.onnx").exists()


def test_a_dimension_written_minus_one_is_dynamic_when_inputs_are_generated_and_checked():
    """Found by benchmarks/converters.py (rapidocr's text-direction classifier, `x: [-1, 3, '?', '?']`, as
    paddle2onnx writes a dynamic dimension): generate_feeds treats a dimension of -1 as dynamic, so check_feeds must
    too, or the model cannot be compared with the inputs generated for it. The control: a static dimension that does
    not fit is still refused."""
    model = chain(10.0)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    generated = diff_module.generate_feeds(model, dims={"x:0": 3})  # given back as Feeds: checked
    comparator = diff_module.Comparator(model, generated, timeout_s=None)
    assert comparator.feeds.arrays["x"].shape == (3, 4) and comparator.outputs["y"].shape == (3, 4)
    with pytest.raises(CannotCompareError, match=r"input 'x' has shape \[3, 5\], the model takes \[-1, 4\]"):
        diff_module.check_feeds(model, {"x": np.ones((3, 5), np.float32)}, "given")
