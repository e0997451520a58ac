"""The eager-versus-graph divergence report works for any module: keyword or positional inputs, any source file."""

from __future__ import annotations

import torch

from where223.eager import divergence
from where223.eager.divergence import LineResult


class TwoInputs(torch.nn.Module):
    """Not GPT-2: a linear layer and a division, called with two positional tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x)
        return hidden / scale


def _this_file(results: list[LineResult]) -> list[tuple[int, str]]:
    return [(r.line, r.dtype) for r in results if r.file.endswith("test_divergence.py")]


def test_eager_results_take_positional_or_keyword_inputs_of_any_module():
    torch.manual_seed(0)
    model = TwoInputs()
    x, scale = torch.randn(2, 4), torch.tensor(2.0)
    positional = _this_file(divergence.eager_results(model, (x, scale), "cpu", "bf16"))
    keyword = _this_file(divergence.eager_results(model, {"x": x, "scale": scale, "labels": x}, "cpu", "bf16"))
    assert positional == keyword and len(positional) == 2
    assert [dtype for _, dtype in positional] == ["bfloat16", "bfloat16"]
    control = _this_file(divergence.eager_results(model, (x, scale), "cpu", "fp32"))  # no autocast, no bf16
    assert [dtype for _, dtype in control] == ["float", "float"]


def test_join_reports_the_first_line_whose_graph_type_differs():
    eager = [LineResult("m.py", 1, "0", "bfloat16", "linear", 0), LineResult("m.py", 2, "0", "bfloat16", "div", 1)]
    graph = [LineResult("m.py", 1, "/l", "bfloat16", "/l/MatMul", 0), LineResult("m.py", 2, "/", "float", "/Div", 1)]
    report = divergence.join(eager, graph)
    assert report.joined == 2 and report.first is not None and report.first.graph_node == "/Div"
    assert report.marks() == {"/l/MatMul": "agrees", "/Div": "diverges"}
    agreeing = [LineResult("m.py", 2, "/", "bfloat16", "/Div", 1)]  # control: the same type is no divergence
    assert divergence.join(eager, agreeing).first is None


def test_graph_results_keep_portable_stack_paths_from_any_working_folder(tmp_path, monkeypatch):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"], name="/m/Relu")
    node.doc_string = "transformers/models/m/modeling_m.py(7): forward\n"
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    from where223.pipeline import portable

    monkeypatch.setattr(portable, "ROOT", tmp_path)  # a checkout at tmp_path ...
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # ... whose sweep workers run in folders of their own inside it
    assert [r.file for r in divergence.graph_results(path)] == ["transformers/models/m/modeling_m.py"]
    monkeypatch.setattr(portable, "frame_file", portable.path)  # control: resolving against the folder
    assert divergence.graph_results(path)[0].file.endswith("work/transformers/models/m/modeling_m.py")


def test_graph_results_give_a_line_the_nodes_the_emulated_autocast_made_for_it(tmp_path, monkeypatch):
    """Under `where223.cuda_autocast` an op's casts and the op itself are recorded from the emulation's Python
    kernels: the innermost frames are its, the model's line is further out. The line's result is then the cast op,
    as under real autocast (whose casts carry no Python frame), not the float node before it."""
    import onnx
    from onnx import TensorProto, helper

    model_line = "transformers/pytorch_utils.py(112): forward\n"
    emulation = "torch/_ops.py(448): __call__\nsrc/where223/cuda_autocast.py(304): kernel\n"
    reshape = helper.make_node("Relu", ["x"], ["h"], name="/m/Reshape", doc_string=model_line)
    cast = helper.make_node("Cast", ["h"], ["y"], name="/m/Cast", to=TensorProto.FLOAT16,
                            doc_string=emulation + model_line)
    graph = helper.make_graph(
        [reshape, cast], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])],
    )  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    eager = [LineResult("transformers/pytorch_utils.py", 112, "0", "float16", "addmm", 0)]

    lines = divergence.graph_results(path)
    assert [(r.line, r.dtype, r.op) for r in lines] == [(112, "float16", "/m/Cast")]
    assert divergence.join(eager, lines).first is None
    monkeypatch.setattr(divergence, "is_plumbing", lambda file: False)  # control: the emulation's frames kept
    lines = divergence.graph_results(path)
    assert [(r.file, r.dtype) for r in lines] == [
        ("transformers/pytorch_utils.py", "float"), ("src/where223/cuda_autocast.py", "float16"),
    ]  # fmt: skip
    assert divergence.join(eager, lines).first.graph_node == "/m/Reshape"
