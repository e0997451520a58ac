"""`where223 convert`: small MLP and conv models convert to fp16 and bf16, ONNX Runtime loads them, lint finds them
clean and `diff` within tolerance; a node whose schema refuses the type at the model's opset keeps float32 between
Casts; a node whose value overflows float16 is kept in float32 by the search (the naive conversion departs); the
kernel listing is ONNX Runtime's own, refused with one line where it cannot be known."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graph.test_diff import chain
from where223.cli import main
from where223.errors import UsageError
from where223.graph import diff as diff_module
from where223.graph import ort
from where223.graph.convert import (
    ConvertError,
    KernelListing,
    NoListingError,
    _listing,
    _search,
    computed_in_reduced,
    convert,
    kernel_listing,
)
from where223.graph.convert._listing import KernelDef
from where223.graph.diff import diff
from where223.graph.kernels import KernelStatus, probe
from where223.graph.lint import lint_model
from where223.graph.ort import OrtVerdict, judge

F32, F16, BF16 = "tensor(float)", "tensor(float16)", "tensor(bfloat16)"
REDUCED = {"fp16": F16, "bf16": BF16}


def _lists_kernels() -> bool:
    ort.import_onnxruntime()  # without its training part
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return hasattr(state, "get_all_opkernel_def")


LISTS_KERNELS = _lists_kernels()


def _stated(table: dict[str, dict[str, set[str]]]) -> KernelListing:
    """A provider's kernels as this test states them (the CPU provider's, for the ops used here)."""
    kernels = [KernelDef(op, "", 1, 2**31 - 1, tuple((k, frozenset(v)) for k, v in sorted(types.items())))
               for op, types in table.items()]  # fmt: skip
    return KernelListing("CPUExecutionProvider", "as stated", kernels)


# ONNX Runtime 1.19 runs a bfloat16 LayerNormalization as its function body, whose Mul has no bfloat16 kernel there
BF16_LAYER_NORM = probe("LayerNormalization", 17, {"T": BF16}).status == KernelStatus.AVAILABLE
# What ONNX Runtime 1.32's CPU provider lists for these ops (Celu's float16 claimed on purpose: its schema at opset 17
# refuses float16, and the schema is asked first).
CPU = _stated({
    "MatMul": {"T": {F32}}, "Add": {"T": {F32}}, "Mul": {"T": {F32}}, "Relu": {"T": {F32}}, "Conv": {"T": {F32}},
    "LayerNormalization": {"T": {F32, F16, BF16} if BF16_LAYER_NORM else {F32, F16}, "U": {F32}},
    "Reshape": {"T": {F32, F16, BF16}, "shape": {"tensor(int64)"}}, "Transpose": {"T": {F32, F16, BF16}},
    "Max": {"T": {F32, F16}}, "Celu": {"T": {F32, F16}},
})  # fmt: skip


def _init(name: str, array, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype), name)


def _model(nodes, initializers, input_shape, output_shape, opset=17) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)]
    graph = helper.make_graph(nodes, "convert_test", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    initializers = [_init("W1", rng.standard_normal((8, 8)) / 3), _init("scale", np.ones(8)),
                    _init("bias", np.zeros(8)), _init("W2", rng.standard_normal((8, 4)) / 3),
                    _init("b2", rng.standard_normal(4)), _init("shape", [2, 4], np.int64)]  # fmt: skip
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="MatMul_1"),
             helper.make_node("LayerNormalization", ["h", "scale", "bias"], ["n"], name="LayerNorm_2", axis=-1),
             helper.make_node("Relu", ["n"], ["r"], name="Relu_3"),
             helper.make_node("MatMul", ["r", "W2"], ["m"], name="MatMul_4"),
             helper.make_node("Add", ["m", "b2"], ["a"], name="Add_5"),
             helper.make_node("Reshape", ["a", "shape"], ["y"], name="Reshape_6")]  # fmt: skip
    return _model(nodes, initializers, ["batch", 8], [2, 4])


def conv() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    initializers = [_init("K", rng.standard_normal((2, 1, 3, 3)) / 3), _init("shape", [1, 8], np.int64),
                    _init("scale", np.ones(8)), _init("bias", np.zeros(8))]  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "K"], ["c"], name="Conv_1"),
             helper.make_node("Reshape", ["c", "shape"], ["flat"], name="Reshape_2"),
             helper.make_node("LayerNormalization", ["flat", "scale", "bias"], ["y"], name="LayerNorm_3", axis=-1)]
    return _model(nodes, initializers, [1, 1, 4, 4], [1, 8])


def _casts_only_at_boundaries(model: onnx.ModelProto) -> None:
    """Every Cast's `to` is its output's declared type, and no Cast feeds another."""
    declared = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.value_info, *model.graph.output)}
    casts = {n.output[0]: n for n in model.graph.node if n.op_type == "Cast"}
    for out, node in casts.items():
        assert declared[out] == node.attribute[0].i and node.input[0] not in casts, node.name


@pytest.mark.parametrize(("build", "to", "keep_io_types"), [(mlp, "fp16", False), (mlp, "bf16", True),
                                                            (conv, "fp16", True), (conv, "bf16", False)])
def test_mlp_and_conv_convert_within_tolerance_accepted_and_lint_clean(build, to, keep_io_types):
    dims = {"batch": 2} if build is mlp else None
    model, record = convert(build(), to, keep_io_types, timeout_s=None, listing=CPU, dims=dims)
    assert judge(model).verdict == OrtVerdict.ACCEPTED and lint_model(model).clean
    assert record.diff.within and [r.within for r in record.rounds] == [True]
    layer_norm = to == "fp16" or BF16_LAYER_NORM
    assert {op for _, op in record.converted} == ({"LayerNormalization"} if layer_norm else set())
    reduced = REDUCED[to][7:-1]
    reasons = {k.op_type: k.reason for k in record.kept}
    no_kernel = "CPUExecutionProvider lists no {} kernel for {} (onnxruntime as stated)"
    assert reasons["Reshape"].startswith("it only moves data, beside a float32 value: moved in float32")
    if build is mlp:
        assert reasons["MatMul"] == no_kernel.format(reduced, "MatMul(13)")
    elif to == "bf16":  # the schema first: Conv allows no bfloat16 before opset 22 (the case where223 began with)
        assert reasons["Conv"] == "the schema of Conv(11) at opset 17 does not allow bfloat16 for T"
    else:
        assert reasons["Conv"] == no_kernel.format(reduced, "Conv(11)")
    io = TensorProto.FLOAT if keep_io_types else {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}[to]
    assert model.graph.input[0].type.tensor_type.elem_type == model.graph.output[0].type.tensor_type.elem_type == io
    scale = next(t for t in model.graph.initializer if t.name == "scale")
    assert (scale.data_type != TensorProto.FLOAT) == layer_norm
    assert {c.name for c in record.initializers} >= ({"scale", "bias"} if layer_norm else set())
    _casts_only_at_boundaries(model)


def test_a_node_whose_schema_refuses_the_type_keeps_float32_between_casts():
    """Celu's schema allows only float at opset 17: kept, though the listing claims a float16 kernel. The control: the
    Max nodes beside it, which the schema allows, convert, and so does the Reshape between two of them."""
    nodes = [helper.make_node("Max", ["x", "x"], ["m"], name="Max_1"),
             helper.make_node("Celu", ["m"], ["c"], name="Celu_2"),
             helper.make_node("Max", ["c", "x"], ["d"], name="Max_3"),
             helper.make_node("Reshape", ["d", "shape"], ["e"], name="Reshape_4"),
             helper.make_node("Max", ["e", "x"], ["y"], name="Max_5")]  # fmt: skip
    shape = [_init("shape", [2, 4], np.int64)]
    model, record = convert(_model(nodes, shape, [2, 4], [2, 4]), "fp16", timeout_s=None, listing=CPU)
    kept = {k.node: k.reason for k in record.kept}
    assert kept == {"Celu_2": "the schema of Celu(12) at opset 17 does not allow float16 for T"}
    assert [n for n, _ in record.converted] == ["Max_1", "Max_3", "Reshape_4", "Max_5"]
    producer = {out: node for node in model.graph.node for out in node.output}
    celu = next(node for node in model.graph.node if node.op_type == "Celu")
    into, out_of = producer[celu.input[0]], [n for n in model.graph.node if celu.output[0] in n.input]
    assert (into.op_type, into.attribute[0].i) == ("Cast", TensorProto.FLOAT)
    assert [(n.op_type, n.attribute[0].i) for n in out_of] == [("Cast", TensorProto.FLOAT16)]
    assert lint_model(model).clean and judge(model).verdict == OrtVerdict.ACCEPTED


def test_data_moved_beside_float32_nodes_stays_float32():
    """A Transpose between two MatMuls the CPU provider computes in float32: moved in float32. Converted, it would be a
    float16 Transpose (perm [1, 0, 2]) cast to float32 into a MatMul, on which ONNX Runtime 1.19 and 1.32 crash with a
    segmentation fault creating the session (their default optimisation level)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="MatMul_1"),
             helper.make_node("Transpose", ["h"], ["t"], name="Transpose_2", perm=[1, 0, 2]),
             helper.make_node("MatMul", ["t", "W"], ["y"], name="MatMul_3")]  # fmt: skip
    model, record = convert(_model(nodes, [_init("W", rng.standard_normal((4, 4)))], [2, 3, 4], [3, 2, 4]), "fp16",
                            keep_io_types=True, timeout_s=None, listing=CPU)  # fmt: skip
    assert record.converted == [] and "only moves data" in {k.node: k.reason for k in record.kept}["Transpose_2"]
    assert judge(model, timeout_s=60).verdict == OrtVerdict.ACCEPTED and record.diff.within


def test_the_search_keeps_the_overflowing_node_in_float32():
    naive = diff(chain(1000.0), chain(1000.0, TensorProto.FLOAT16), timeout_s=None)  # the control: every node fp16
    assert not naive.within and naive.departure.value == "t" and naive.departure.comparison.how == ["overflows"]
    model, record = convert(chain(1000.0), "fp16", timeout_s=None, listing=CPU)
    assert record.diff.within and not record.rounds[0].within and record.rounds[0].kept == ("Max_3",)
    searched = {k.node: k for k in record.kept if k.round}
    assert searched["Max_3"].round == 1 and "overflows" in searched["Max_3"].reason
    assert judge(model).verdict == OrtVerdict.ACCEPTED and lint_model(model).clean
    # the control: where nothing overflows, the same nodes convert in one round
    _, harmless = convert(chain(10.0), "fp16", timeout_s=None, listing=CPU)
    assert [n for n, _ in harmless.converted] == ["Max_3", "Max_4"] and len(harmless.rounds) == 1


def test_an_input_that_overflows_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_search, "kernel_listing", lambda provider, timeout_s: CPU)
    monkeypatch.setattr(diff_module, "_run_in_child", lambda m, f, p, o, t: diff_module._run_here(m, f, p, o))
    monkeypatch.setattr(_search, "judge", lambda model, providers, timeout_s: judge(model, providers))
    source, feeds, output = tmp_path / "chain.onnx", tmp_path / "big.npz", tmp_path / "out.onnx"
    onnx.save(chain(10.0), str(source))
    np.savez(feeds, x=np.full((2, 4), 1e5, np.float32))
    code = main(["convert", str(source), str(output), "--to", "fp16", "--feeds", str(feeds)])
    assert code == 1 and not output.exists() and "--keep-io-types keeps inputs in float32" in capsys.readouterr().err
    code = main(["convert", str(source), str(output), "--to", "fp16", "--feeds", str(feeds), "--keep-io-types"])
    assert code == 0 and lint_model(str(output)).clean  # the control
    assert main(["convert", str(source), str(source), "--to", "fp16"]) == 2  # the input is not overwritten


@pytest.mark.skipif(not LISTS_KERNELS, reason="this onnxruntime does not list its kernels")
def test_the_listing_is_onnx_runtimes_own_and_not_the_probed_table():
    listing = kernel_listing(timeout_s=None)
    matmul = {"T": {F16}, "A": {F16}, "B": {F16}, "Y": {F16}}
    assert not listing.has_kernel("MatMul", "", 13, matmul) and listing.has_kernel("MatMul", "", 13, {"T": {F32}})
    assert listing.has_kernel("LayerNormalization", "", 17, {"T": {F16}, "U": {F32}})
    # the probed table calls float16 MatMul available: ONNX Runtime loads it and computes it in float
    assert probe("MatMul", 17, {"T": F16}).status == KernelStatus.AVAILABLE
    assert probe("MatMul", 17, {"T": F32}).status == KernelStatus.AVAILABLE  # where both agree
    with pytest.raises(NoListingError, match="lists no kernel for AzureExecutionProvider on this machine"):
        kernel_listing("AzureExecutionProvider", timeout_s=None)
    with pytest.raises(UsageError, match="'CUDAExecutionProvider' is not in this onnxruntime"):
        kernel_listing("CUDAExecutionProvider", timeout_s=None)
    model, record = convert(mlp(), "fp16", timeout_s=None, dims={"batch": 2})  # the real listing, end to end
    assert record.diff.within and {op for _, op in record.converted} == {"LayerNormalization"}


@pytest.mark.skipif(LISTS_KERNELS, reason="this onnxruntime lists its kernels")
def test_without_the_listing_convert_refuses_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_listing, "_listed_in_child", lambda timeout_s: _listing._listed_here())  # no child: faster
    source = tmp_path / "mlp.onnx"
    onnx.save(mlp(), str(source))
    with pytest.raises(NoListingError, match="does not list its registered kernels"):
        _listing._listed_here()
    code = main(["convert", str(source), str(tmp_path / "out.onnx"), "--to", "fp16"])
    err = capsys.readouterr().err
    assert code == 2 and "get_all_opkernel_def" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.onnx").exists()


def test_bf16_at_an_opset_whose_cast_refuses_it_upgrades_the_opset_first(monkeypatch):
    """Found by benchmarks/converters.py (ddddocr's captcha reader, opset 12, and every PP-OCR model at opset 11 or
    12): Cast takes bfloat16 only from opset 13, so no boundary between float32 and bfloat16 can be placed before
    it; convert built a model lint refuses and called that a bug of its own. Now onnx's version converter brings the
    model to opset 13 first, and the record says so. The controls: fp16 at opset 12 keeps the model's opset; a
    model the version converter cannot bring there is refused with its reason, nothing converted."""
    def relu(opset):
        return _model([helper.make_node("Relu", ["x"], ["y"], name="Relu_1")], [], [2, 4], [2, 4], opset=opset)

    model, record = convert(relu(12), "bf16", timeout_s=None, listing=CPU)
    assert record.diff.within and judge(model).verdict == OrtVerdict.ACCEPTED and lint_model(model).clean
    assert (record.upgraded_from, record.opset, model.opset_import[0].version) == (12, 13, 13)
    assert "opset 12 -> 13 by onnx's version converter: Cast takes bfloat16 only from opset 13" in record.format()
    model, record = convert(relu(12), "fp16", timeout_s=None, listing=CPU)
    assert record.diff.within and (record.upgraded_from, record.opset) == (None, 12)
    monkeypatch.setattr(onnx.version_converter, "convert_version", lambda model, version: 1 / 0)
    with pytest.raises(ConvertError, match=r"opset 12 has no Cast to or from bfloat16 \(Cast takes it from opset "
                                           r"13\), and onnx's version converter cannot bring the model there "
                                           r"\(ZeroDivisionError"):
        convert(relu(12), "bf16", timeout_s=None, listing=CPU)


def test_computed_in_reduced_counts_declared_nodes_with_a_kernel_listed():
    """A float16 Max (the stated CPU listing has one) computes in float16, a float16 MatMul (none listed) does not, a
    float16 Reshape computes no arithmetic (counted only without `arithmetic`),
    a float16 node of a domain onnx has no schema for cannot be looked up, and a float32 node is not counted."""
    value = helper.make_tensor_value_info
    nodes = [helper.make_node("Max", ["x", "x"], ["m"], name="Max_1"),
             helper.make_node("Reshape", ["m", "shape"], ["r"], name="Reshape_2"),
             helper.make_node("MatMul", ["r", "W"], ["p"], name="MatMul_2"),
             helper.make_node("Thing", ["p"], ["g"], name="Thing_3", domain="my.domain"),
             helper.make_node("Cast", ["g"], ["c"], name="Cast_4", to=TensorProto.FLOAT),
             helper.make_node("Relu", ["c"], ["y"], name="Relu_5")]  # fmt: skip
    graph = helper.make_graph(nodes, "computed", [value("x", TensorProto.FLOAT16, [2, 2])],
                              [value("y", TensorProto.FLOAT, [2, 2])],
                              [numpy_helper.from_array(np.eye(2, dtype=np.float16), "W"),
                               _init("shape", [2, 2], np.int64)],
                              value_info=[value("g", TensorProto.FLOAT16, [2, 2])])  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    assert computed_in_reduced(model, CPU) == (4, 2, 1)
    assert computed_in_reduced(model, CPU, arithmetic=True) == (3, 1, 1)
    listed_matmul = _stated({"Max": {"T": {F32, F16}}, "MatMul": {"T": {F32, F16}}})  # the control
    assert computed_in_reduced(model, listed_matmul, arithmetic=True) == (3, 2, 1)
