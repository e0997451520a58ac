"""Source frames from torch's verbose doc_strings (hand-written and real), and the no-source cases."""

from __future__ import annotations

import importlib.util
import textwrap

import onnx
import pytest
from onnx import TensorProto, helper

from where223.cli import main
from where223.graph.blame import OUTSIDE_ROOTS, Frame, blame, blame_all, parse_stack
from where223.graph.loading import NodeNotFoundError

SOURCE = textwrap.dedent(
    """\
    import torch

    def attention(weights, mask, value):
        return torch.where(mask, weights, value)

    class Block(torch.nn.Module):
        def forward(self, weights, mask):
            return attention(weights, mask, torch.tensor(-1e4, dtype=torch.float32))
    """
)


def _model_with_doc(doc_string: str, metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    where = helper.make_node("Where", ["cond", "x", "y"], ["w"], name="Where_223", doc_string=doc_string)
    for key, value in (metadata or {}).items():
        where.metadata_props.add(key=key, value=value)
    relu = helper.make_node("Relu", ["w"], ["r"], name="/transformer/h.0/attn/Relu")
    graph = helper.make_graph(
        [where, relu],
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, [2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2]),
        ],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def source_file(tmp_path, monkeypatch):
    """The model's source, in a folder on sys.path: a known root, so blame may read it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "block_code.py"
    path.write_text(SOURCE)
    return path


def test_torchscript_doc_string(source_file):
    torch_dir = "/venv/lib/python3.11/site-packages/torch"
    doc = (
        f"{source_file}(4): attention\n"
        f"{source_file}(8): forward\n"
        f"{torch_dir}/nn/modules/module.py(1508): _slow_forward\n"
        f"{torch_dir}/nn/modules/module.py(1527): _call_impl\n"
        f"{torch_dir}/jit/_trace.py(124): wrapper\n"
        f"{torch_dir}/onnx/utils.py(516): export\n"
        "/home/someone/run.py(10): <module>\n"
    )
    result = blame(_model_with_doc(doc), "Where_223")
    assert (result.node, result.op_type, result.subgraph, result.source) == (
        "Where_223",
        "Where",
        "",
        "doc_string",
    )
    assert len(result.frames) == 7
    assert result.model_frames == [
        Frame(str(source_file), 4, "attention", "return torch.where(mask, weights, value)"),
        Frame(
            str(source_file),
            8,
            "forward",
            "return attention(weights, mask, torch.tensor(-1e4, dtype=torch.float32))",
        ),
    ]
    assert result.frames[-1] == Frame(
        "/home/someone/run.py", 10, "<module>", None, OUTSIDE_ROOTS
    )  # outside the known roots: not read, no code
    text = result.format()
    assert f"{source_file}:4 in attention" in text and "(5 frames of torch call and export machinery" in text


def test_traceback_stack_in_metadata(source_file):
    stack = f'File "{source_file}", line 4, in attention\n    return torch.where(...)\n'
    result = blame(_model_with_doc("", {"pkg.torch.onnx.stack_trace": stack}), "Where_223")
    assert result.source == "metadata_props[pkg.torch.onnx.stack_trace]"
    assert result.frames == [
        Frame(str(source_file), 4, "attention", "return torch.where(mask, weights, value)")
    ]
    assert parse_stack('File "/gone.py", line 2, in f\n    x = 1\n') == [Frame("/gone.py", 2, "f", "x = 1")]


def test_traceback_frames_innermost_first():
    """Python (and the dynamo exporter's stack_trace) writes the outermost frame first; blame's frames are innermost
    first in both formats. Control: torch's own `FILE(LINE): FUNCTION` stacks keep their written order."""
    traceback_text = 'File "/m/outer.py", line 1, in forward\n    y = f(x)\nFile "/m/inner.py", line 9, in f\n    z\n'
    assert [f.file for f in parse_stack(traceback_text)] == ["/m/inner.py", "/m/outer.py"]
    torchscript_text = "/m/inner.py(9): f\n/m/outer.py(1): forward\n"
    assert [f.file for f in parse_stack(torchscript_text)] == ["/m/inner.py", "/m/outer.py"]


def test_no_source_recorded(save, capsys):
    path = save(_model_with_doc(""))
    assert blame(path, "Where_223").frames == []
    assert main(["blame", str(path), "Where_223"]) == 1
    err = capsys.readouterr().err
    assert "Where_223 (Where) carries no source information" in err and "verbose=True" in err


def test_unknown_node_lists_close_names(save, capsys):
    model = _model_with_doc("")
    with pytest.raises(NodeNotFoundError, match=r"no node named 'Where_22' .*close names: Where_223"):
        blame(model, "Where_22")
    with pytest.raises(NodeNotFoundError, match=r"Relu nodes: /transformer/h.0/attn/Relu"):
        blame(model, "Relu_12")
    assert main(["blame", str(save(model)), "Where_9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("where223 blame: no node named 'Where_9'")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:torch.tensor results are registered as constants")
def test_real_verbose_export(source_file, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("block_code", source_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "block.onnx"
    inputs = (torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool))
    torch.onnx.export(module.Block(), inputs, str(path), verbose=True, opset_version=17)
    where = next(n.name for n in onnx.load(str(path)).graph.node if n.op_type == "Where")
    result = blame(path, where)
    assert [(f.file, f.line, f.function) for f in result.model_frames] == [
        (str(source_file), 4, "attention"),
        (str(source_file), 8, "forward"),
    ]
    assert result.model_frames[0].code == "return torch.where(mask, weights, value)"
    assert any("/torch/onnx/" in f.file for f in result.frames)
    capsys.readouterr()
    assert main(["blame", str(path), where]) == 0
    assert f"{source_file}:4 in attention" in capsys.readouterr().out


def test_cli_prints_paths_relative_to_site_packages_and_the_repository(save, capsys):
    from where223.pipeline.paths import ROOT

    torch_dir = "/some/venv/lib/python3.11/site-packages/torch"
    doc = (
        "/some/venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py(277): _split_heads\n"
        f"{torch_dir}/nn/modules/module.py(1508): _slow_forward\n"
        f"{torch_dir}/onnx/utils.py(516): export\n"
        f"{ROOT}/src/where223/gpt2/export.py(69): export_onnx\n"
    )
    path = save(_model_with_doc(doc))
    assert str(blame(path, "Where_223").frames[0]).startswith("/some/venv/")  # the control: as recorded
    assert main(["blame", str(path), "Where_223", "--all"]) == 0
    out = capsys.readouterr().out
    assert "  transformers/models/gpt2/modeling_gpt2.py:277 in _split_heads" in out
    assert "  torch/onnx/utils.py:516 in export" in out and "  src/where223/gpt2/export.py:69" in out
    assert "site-packages" not in out and str(ROOT) not in out
    assert main(["blame", str(path), "Where_223", "--json"]) == 0
    out = capsys.readouterr().out
    assert "site-packages" not in out and str(ROOT) not in out and '"file": "torch/onnx/utils.py"' in out


def test_shared_source_files_look_each_file_up_once_and_find_the_same_frames(source_file, monkeypatch):
    from where223.graph import blame as blame_module

    stack = f"{source_file}(4): attention\n{source_file}(8): forward\n/home/someone/run.py(10): <module>\n"
    alone = [parse_stack(stack) for _ in range(3)]
    calls = []
    real = blame_module.readable_source
    monkeypatch.setattr(blame_module, "readable_source",
                        lambda file, roots=None: calls.append(file) or real(file, roots))
    files = blame_module.SourceFiles()
    shared = [parse_stack(stack, files) for _ in range(3)]
    assert shared == alone and shared[0][0].code == "return torch.where(mask, weights, value)"
    assert sorted(calls) == sorted({str(source_file), "/home/someone/run.py"})  # once per file, not per frame
    calls.clear()
    [parse_stack(stack) for _ in range(3)]
    assert len(calls) == 6  # control: without sharing, each stack looks its files up again


def test_blame_all_gives_what_blame_gives_node_by_node(source_file):
    doc = f"{source_file}(4): attention\n{source_file}(8): forward\n"
    model = _model_with_doc(doc)
    everything = blame_all(model)
    assert [result.node for result in everything] == ["Where_223", "/transformer/h.0/attn/Relu"]
    assert everything == [blame(model, node.name) for node in model.graph.node]
    assert everything[0].frames and not everything[1].frames  # control: the two nodes' answers differ
