"""Where an exported graph's precision departs from what PyTorch computes eagerly, for any torch module.

The `Where` is only where GPT-2's failure surfaces. This module runs a module eagerly under the same autocast
with a TorchFunctionMode that records, for every op call, its output dtype and the model source line that
made it; it reads the same source line from each exported node's doc_string and the node's type from the
graph (onnx type inference); it joins the two by source line and layer, and lists every line whose result
has another floating dtype in the graph than in eager PyTorch, in graph order, the first one marked.

Nothing here knows GPT-2: notebook 02 and `verify` point it at the case, the architecture sweep
(`where223.study.architectures.run`) at every transformers model type. It needs the export's node stacks (the
TorchScript exporter's doc strings with `torch.onnx.export(..., verbose=True)`, or the dynamo exporter's
`metadata_props`) and reads the graph with `where223.graph` (which stays torch-free).

A line's result is the last floating tensor it produces: eagerly, the last op called from that line in one
execution; in the graph, the last node (in graph order) carrying that line in one layer's scope.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from where223.eager.precision import autocast
from where223.graph.blame import SourceFiles, is_plumbing, recorded_stack
from where223.graph.dtypes import short_type
from where223.graph.loading import load_model
from where223.graph.types import model_types
from where223.pipeline import portable
from where223.pipeline.paths import ROOT

_TORCH_DIR = str(Path(torch.__file__).parent)
_THIS_FILE = __file__
_THIS_FILE_PORTABLE = portable.path(__file__)
_DTYPE_NAMES = {
    torch.float32: "float",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "double",
}
FLOATING = frozenset(_DTYPE_NAMES.values())


def _is_library_frame(filename: str) -> bool:
    """torch's own frames, this module's and the call plumbing's (`blame.is_plumbing`: the emulated CUDA autocast's
    kernels record the casts and ops they make from their own lines), by absolute path or by a portable one
    (`torch/...`, as exports rewritten by `export.stable_doc_strings` record them)."""
    return (
        filename.startswith((_TORCH_DIR, "torch/"))
        or "/torch/" in filename
        or filename in (_THIS_FILE, _THIS_FILE_PORTABLE)
        or is_plumbing(filename)
    )


@dataclass(frozen=True)
class LineResult:
    """The floating dtype one execution of a source line produced."""

    file: str
    line: int
    scope: str  # eager: execution index of that line; graph: the node's scope (e.g. /transformer/h.0/attn)
    dtype: str
    op: str  # eager: torch function name; graph: node name
    order: int


class DtypeRecorder(TorchFunctionMode):
    """Record every torch call's floating output dtype with the innermost non-torch source line."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int, str, str]] = []  # file, line, frame id, dtype, op

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        tensors = [
            t
            for t in (result if isinstance(result, (tuple, list)) else [result])
            if isinstance(t, torch.Tensor)
        ]
        floating = [_DTYPE_NAMES[t.dtype] for t in tensors if t.dtype in _DTYPE_NAMES]
        if floating:
            frame = sys._getframe(1)
            while frame is not None and _is_library_frame(frame.f_code.co_filename):
                frame = frame.f_back
            if frame is not None:
                name = getattr(func, "__name__", str(func))
                self.calls.append(
                    (portable.path(frame.f_code.co_filename), frame.f_lineno, id(frame), floating[-1], name)
                )
        return result


Inputs = dict[str, torch.Tensor] | tuple[torch.Tensor, ...]


def eager_results(model: torch.nn.Module, inputs: Inputs, device: str, amp_dtype: str) -> list[LineResult]:
    """Run the module once under autocast and return each source line execution's result dtype.

    `inputs` is a batch of keyword tensors (a `labels` entry is left out) or a tuple of positional ones.
    """
    recorder = DtypeRecorder()
    model = model.to(device)
    if isinstance(inputs, dict):  # moved before recording: the moves are the caller's lines, not the model's
        args, kwargs = (), {key: value.to(device) for key, value in inputs.items() if key != "labels"}
    else:
        args, kwargs = tuple(value.to(device) for value in inputs), {}
    with torch.no_grad(), autocast(device, amp_dtype), recorder:
        model(*args, **kwargs)
    results: list[LineResult] = []
    executions: dict[tuple[str, int], int] = {}
    previous: tuple[str, int, int] | None = None
    for order, (file, line, frame_id, dtype, op) in enumerate(recorder.calls):
        key = (file, line)
        if previous != (file, line, frame_id):
            executions[key] = executions.get(key, -1) + 1
        previous = (file, line, frame_id)
        result = LineResult(file, line, str(executions[key]), dtype, op, order)
        if results and (results[-1].file, results[-1].line, results[-1].scope) == (file, line, result.scope):
            results[-1] = result  # the line's last floating output is its result
        else:
            results.append(result)
    return results


def _scope(node: Any) -> str:
    """A node's module scope: the dynamo exporter's `pkg.torch.onnx.name_scopes` without the op's own name, else
    the TorchScript exporter's node name without its last part (`/transformer/h.0/attn/Where` -> its layer)."""
    for entry in getattr(node, "metadata_props", ()):
        if entry.key == "pkg.torch.onnx.name_scopes":
            try:
                import ast

                scopes = ast.literal_eval(entry.value)
                return "/".join(scopes[:-1])
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                break
    return node.name.rsplit("/", 1)[0]


def graph_results(onnx_path: str | Path) -> list[LineResult]:
    """Each source line's result type in the exported graph, per layer scope, in graph order."""
    model, _ = load_model(onnx_path)
    types = model_types(model)
    by_key: dict[tuple[str, int, str], LineResult] = {}
    files = SourceFiles()
    for order, node in enumerate(model.graph.node):
        frames = [f for f in recorded_stack(node, files)[1] if not _is_library_frame(f.file)]
        if not frames or not node.output or not node.output[0]:
            continue
        kind = types.type_of(node.output[0])
        dtype = short_type(kind) if kind else None
        if dtype not in FLOATING:
            continue
        source = frames[0]
        scope = _scope(node)
        file = portable.frame_file(source.file)
        by_key[(file, source.line, scope)] = LineResult(file, source.line, scope, dtype, node.name, order)
    return sorted(by_key.values(), key=lambda result: result.order)


@dataclass
class Divergence:
    """One source line whose result has another floating dtype in the graph than eagerly."""

    file: str
    line: int
    code: str | None
    graph_node: str
    graph_dtype: str
    eager_dtype: str
    eager_op: str
    first: bool = False


@dataclass
class DivergenceReport:
    """Every divergence in graph order, plus how much could be joined."""

    divergences: list[Divergence] = field(default_factory=list)
    agreeing_nodes: list[str] = field(default_factory=list)
    joined: int = 0
    graph_lines: int = 0
    eager_lines: int = 0

    @property
    def first(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    def marks(self) -> dict[str, str]:
        """Graph node -> 'agrees' or 'diverges', for every node joined with an eager op."""
        marks = dict.fromkeys(self.agreeing_nodes, "agrees")
        marks.update((d.graph_node, "diverges") for d in self.divergences)
        return marks

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": len(self.divergences),
            "joined": self.joined,
            "graph_lines": self.graph_lines,
            "eager_lines": self.eager_lines,
            "first": None if self.first is None else asdict(self.first),
            "divergences": [asdict(d) for d in self.divergences],
        }


def join(eager: list[LineResult], graph: list[LineResult]) -> DivergenceReport:
    """Pair the k-th eager execution of a line with its k-th graph scope, and keep the disagreements."""
    eager_by_line: dict[tuple[str, int], list[LineResult]] = {}
    for result in eager:
        eager_by_line.setdefault((result.file, result.line), []).append(result)
    seen: dict[tuple[str, int], int] = {}
    report = DivergenceReport(graph_lines=len(graph), eager_lines=len(eager))
    for result in graph:
        key = (result.file, result.line)
        index = seen.get(key, 0)
        seen[key] = index + 1
        executions = eager_by_line.get(key, [])
        if index >= len(executions):
            continue
        report.joined += 1
        twin = executions[index]
        if twin.dtype == result.dtype:
            report.agreeing_nodes.append(result.op)
        else:
            report.divergences.append(
                Divergence(
                    result.file,
                    result.line,
                    source_code(result.file, result.line),
                    result.op,
                    result.dtype,
                    twin.dtype,
                    twin.op,
                )
            )
    if report.divergences:
        report.divergences[0].first = True
    return report


def source_code(file: str, line: int) -> str | None:
    """The stripped text of `file`:`line`, the file found as given, under the repository root or on sys.path
    (records name files portably: relative to site-packages or the repository)."""
    import linecache

    for candidate in (file, str(ROOT / file), *(str(Path(p) / file) for p in sys.path if p)):
        text = linecache.getline(candidate, line).strip()
        if text:
            return text
    return None


def divergence_report(
    model: torch.nn.Module, inputs: Inputs, onnx_path: str | Path, device: str, amp_dtype: str
) -> DivergenceReport:
    """Compare the eager run of `model` on `inputs` (keyword batch or positional tuple) under autocast with its
    export at `onnx_path`."""
    return join(eager_results(model, inputs, device, amp_dtype), graph_results(onnx_path))
