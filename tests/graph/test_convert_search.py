"""`convert`'s search on models quantized inside (a quantizer's integers are a step function of the floats before
it): a graph input rounded to float16 that moves a quantizer keeps float32 when no converted node is left to keep;
from the second half of the rounds a departing integer keeps every converted node upstream of every departing integer
at once, so that a model quantized throughout ends within the bound (ddddocr's captcha reader, 22 quantizers, did
not). Each with its control: the search without the rule fails."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.graph.test_convert import F16, F32, _init, _stated
from where223.graph.convert import ConvertError, _search, convert
from where223.graph.lint import lint_model
from where223.graph.ort import OrtVerdict, judge

# Max has a float16 kernel on ONNX Runtime's CPU provider (1.32 lists one; an Add listed so would run in float between
# Casts it removes again, and nothing would round); Sqrt is listed here without and keeps float32
LISTING = _stated({"Max": {"T": {F32, F16}}, "Sqrt": {"T": {F32}}})


def quantized(blocks: int, mixed: bool) -> onnx.ModelProto:
    """x -> [Sqrt (mixed, after the first block)] -> Max(., 0.5) -> DynamicQuantizeLinear -> DequantizeLinear,
    `blocks` times; the output is the last quantizer's uint8 (integer outputs must be equal). With `mixed`, each
    block's input is off its quantizer's grid, so each Max's rounding moves its own quantizer."""
    nodes, previous = [], "x"
    for k in range(1, blocks + 1):
        if mixed and k > 1:
            nodes.append(helper.make_node("Sqrt", [previous], [f"p{k}"], name=f"Sqrt_{k}"))
            previous = f"p{k}"
        nodes += [helper.make_node("Max", [previous, "c"], [f"a{k}"], name=f"Max_{k}"),
                  helper.make_node("DynamicQuantizeLinear", [f"a{k}"], [f"q{k}", f"s{k}", f"z{k}"],
                                   name=f"Quantize_{k}"),
                  helper.make_node("DequantizeLinear", [f"q{k}", f"s{k}", f"z{k}"], [f"d{k}"], name=f"Dequantize_{k}")]
        previous = f"d{k}"
    nodes.append(helper.make_node("Identity", [f"q{blocks}"], ["y"], name="Out"))
    graph = helper.make_graph(nodes, "quantized", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 64])],
                              [_init("c", [0.5])])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def feeds(tmp_path):
    path = tmp_path / "feeds.npz"
    np.savez(path, x=np.random.default_rng(0).uniform(0, 254, (1, 64)).astype(np.float32))
    return path


def _convert(model, feeds, **options):
    return convert(model, "fp16", timeout_s=None, listing=LISTING, feeds=feeds, **options)


def test_a_departing_integer_keeps_every_converted_node_upstream_once_the_search_escalates(feeds, monkeypatch):
    # nearest first (16 rounds): one Max a round, the next block's Max moving its own quantizer
    _, record = _convert(quantized(3, mixed=True), feeds, keep_io_types=True)
    assert [r.kept for r in record.rounds] == [("Max_1",), ("Max_2",), ("Max_3",), ()]
    assert record.diff.within and record.converted == []
    monkeypatch.setattr(_search, "MAX_ROUNDS", 3)  # escalates from round 1: every Max at once
    model, record = _convert(quantized(3, mixed=True), feeds, keep_io_types=True)
    assert [r.kept for r in record.rounds] == [("Max_1", "Max_2", "Max_3"), ()] and record.diff.within
    assert judge(model).verdict == OrtVerdict.ACCEPTED and lint_model(model).clean
    # the control: never escalating, three rounds keep one Max each and the bound runs out
    monkeypatch.setattr(_search, "_FLOATS", _search._FLOATS | {"uint8"})
    with pytest.raises(ConvertError, match="no conversion within tolerance in 3 rounds"):
        _convert(quantized(3, mixed=True), feeds, keep_io_types=True)


def test_nearest_first_keeps_only_the_max_that_moves_a_quantizer(feeds):
    """Without the Sqrt, a block's input lies on its quantizer's grid: only the first Max moves anything, and only it
    is kept (escalating at once would keep all three: the control)."""
    _, record = _convert(quantized(3, mixed=False), feeds, keep_io_types=True)
    assert [r.kept for r in record.rounds] == [("Max_1",), ()]
    assert [n for n, _ in record.converted] == ["Max_2", "Max_3"]


def test_a_rounded_input_that_moves_a_quantizer_keeps_float32(feeds, monkeypatch):
    """Without keep_io_types the input is float16 and feeds the first Max; with the Max kept, the rounded input still
    moves the quantizer: the input keeps float32, said in the record, and the result is within tolerance."""
    model, record = _convert(quantized(1, mixed=False), feeds)
    assert [r.kept for r in record.rounds] == [("Max_1",), ("input 'x'",), ()]
    assert [name for name, _ in record.kept_inputs] == ["x"] and "reaches 'q1'" in record.kept_inputs[0][1]
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT and record.diff.within
    assert "input 'x' keeps float32 (search)" in record.format()
    # the control: without the rule (no input reached), the search has nothing left to keep
    upstream = _search._upstream_converted
    monkeypatch.setattr(_search, "_upstream_converted", lambda *args, **kwargs: (upstream(*args, **kwargs)[0], set()))
    with pytest.raises(ConvertError, match="no converted node it arises at is left to keep in float32"):
        _convert(quantized(1, mixed=False), feeds)
