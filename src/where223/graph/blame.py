"""Which Python source lines produced an ONNX node, read from the stack its exporter recorded.

`torch.onnx.export(..., verbose=True)` (TorchScript exporter) writes the Python stack into each node's
doc_string, innermost frame first, one `FILE(LINE): FUNCTION` per line. Stacks written as Python
tracebacks (`File "FILE", line LINE, in FUNCTION`), in the doc_string or in a node metadata_props entry
whose key mentions "stack", are read too.

The stack is the model's word, not ours: a code line is read only from a `.py` file that resolves, after
symlinks, inside one of the known source roots (the running interpreter's absolute `sys.path` entries and the
where223 repository). Any other file a frame names (`/proc/self/environ`, `/etc/passwd`, `../../x`) is shown by
name only, with "(source not shown: outside the known roots)", and never opened.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import onnx

from where223.errors import printable
from where223.graph.loading import ModelLike, find_node, load_model, subgraphs

_TORCHSCRIPT_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<function>\S.*)$")
_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S.*)$')
# frames of torch's tracing/export machinery: everything from the first of these outwards is the
# call to torch.onnx.export, not the model. Paths may be absolute or, in portable exports, relative to
# site-packages (`torch/onnx/utils.py`): both are recognised.
_MACHINERY = re.compile(r"(^|[/\\])torch[/\\](jit|onnx)[/\\]")
# nn.Module.__call__ plumbing between a module's forward and its caller; the op-call plumbing (`OpOverload.__call__`)
# and the kernels of the emulated CUDA autocast (where223.cuda_autocast) between an op's caller and the op
_PLUMBING = re.compile(
    r"(^|[/\\])(torch[/\\]nn[/\\]modules[/\\]module|torch[/\\]_ops|where223[/\\]cuda_autocast)\.py$"
)
OUTSIDE_ROOTS = "source not shown: outside the known roots"


def is_plumbing(file: str) -> bool:
    """Whether a frame's file only carries a call between the model's line and the op it calls (module calls,
    op overloads, the emulated CUDA autocast's kernels): no model line is ever one of these."""
    return bool(_PLUMBING.search(file))

def same_op(aten: str, op_type: str) -> bool:
    """Whether an ATen op or kernel plausibly became an ONNX op: one's letters a prefix of the other's, after the
    namespace, an overload and a `native_` prefix (`aten::layer_norm`, `native_layer_norm` and LayerNormalization,
    `where.self` and Where, `convolution` and Conv)."""
    name = aten.rpartition("::")[2].split(".")[0].removeprefix("native_").replace("_", "").lower()
    onnx_name = op_type.replace("_", "").lower()
    return bool(name) and bool(onnx_name) and (onnx_name.startswith(name) or name.startswith(onnx_name))


# What to do when an export carries no Python stacks (the one home of this advice; `where223 explain` quotes it).
# The dynamo half is checked against real exports by tests/study/test_classes.py: today's dynamo exporter keeps
# stacks at opset 18 and above and drops them when it converts down (its conversion fails, keeping opset 18 and
# the stacks, for graphs with an operator newer than the target).
NO_SOURCE_ADVICE = (
    "with the TorchScript exporter, export with torch.onnx.export(..., verbose=True) to record the Python stack in "
    "doc_string; with the dynamo exporter, keep its default opset or ask for 18 or above (its stacks live in "
    "metadata_props, which its conversion to a lower opset drops)"
)
# the checkout where223 runs from: src/where223/graph/blame.py -> the folder holding pyproject.toml
_REPOSITORY = Path(__file__).resolve().parents[3]


def source_roots() -> list[Path]:
    """The folders whose `.py` files blame may read: absolute `sys.path` entries, and the repository."""
    roots = [Path(entry) for entry in sys.path if entry and os.path.isabs(entry)]
    if (_REPOSITORY / "pyproject.toml").is_file():
        roots.append(_REPOSITORY)
    resolved = []
    for root in roots:
        try:
            if root.is_dir():
                resolved.append(root.resolve())
        except OSError:
            continue
    return list(dict.fromkeys(resolved))


def readable_source(file: str, roots: list[Path] | None = None) -> Path | None:
    """The `.py` file a frame names, resolved, when it lies inside a known root; None otherwise.

    A relative name (portable exports write paths relative to site-packages) is looked up in each root.
    """
    if not file or "\0" in file:
        return None
    roots = source_roots() if roots is None else roots
    candidates = [Path(file)] if os.path.isabs(file) else [root / file for root in roots]
    for candidate in candidates:
        try:
            resolved = candidate.resolve()
            if resolved.suffix == ".py" and resolved.is_file() and any(resolved.is_relative_to(r) for r in roots):
                return resolved
        except (OSError, ValueError):
            continue
    return None


class SourceFiles:
    """`readable_source` over the roots of one moment, each frame's file looked up once: one model's nodes repeat
    the same few files thousands of times (a GPT-2 export: 9000 frames, about 20 files)."""

    def __init__(self) -> None:
        self.roots = source_roots()
        self._found: dict[str, Path | None] = {}

    def find(self, file: str) -> Path | None:
        if file not in self._found:
            self._found[file] = readable_source(file, self.roots)
        return self._found[file]


@dataclass(frozen=True)
class Frame:
    """One Python stack frame: where, in which function, and the code when the file is readable."""

    file: str
    line: int
    function: str
    code: str | None
    note: str = ""  # why no code is shown, when the file was not read (OUTSIDE_ROOTS)

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{printable(self.file)}:{self.line} in {printable(self.function)}{note}"


@dataclass
class BlameResult:
    """The recorded source of one node (frames innermost first; empty when none was recorded)."""

    node: str
    op_type: str
    subgraph: str
    source: str  # "doc_string", "metadata_props[KEY]" or "" when nothing was recorded
    frames: list[Frame]

    @property
    def model_frames(self) -> list[Frame]:
        """The frames inside the model: tracing machinery and nn.Module call plumbing left out."""
        inside = []
        for frame in self.frames:
            if _MACHINERY.search(frame.file):
                break
            if not is_plumbing(frame.file):
                inside.append(frame)
        return inside or list(self.frames)

    def to_dict(self, all_frames: bool = True) -> dict[str, Any]:
        """A JSON-ready record; `all_frames=False` keeps only the model's frames (stable across runs)."""
        record = asdict(self)
        record["model_frames"] = [asdict(f) for f in self.model_frames]
        if not all_frames:
            del record["frames"]
        return record

    def format(self, all_frames: bool = False) -> str:
        """Human-readable frames, innermost first; names and code read from the model shown escaped."""
        where = f" in subgraph {printable(self.subgraph)}" if self.subgraph else ""
        node = f"{printable(self.node)} ({printable(self.op_type)}){where}"
        if not self.frames:
            return f"{node} carries no source information: {NO_SOURCE_ADVICE}"
        shown = self.frames if all_frames else self.model_frames
        lines = [f"{node}, from {printable(self.source)}:"]
        for frame in shown:
            lines.append(f"  {frame}")
            if frame.code:
                lines.append(f"      {printable(frame.code)}")
        hidden = len(self.frames) - len(shown)
        if hidden:
            lines.append(f"  ({hidden} frames of torch call and export machinery hidden; --all shows them)")
        return "\n".join(lines)


def parse_stack(text: str, files: SourceFiles | None = None) -> list[Frame]:
    """The frames in a recorded stack, innermost first: torch's `FILE(LINE): FUNCTION` lines (innermost first as
    written) or traceback lines (`File "F", line N, in FUNCTION`, outermost first as Python writes them, as the
    dynamo exporter's `pkg.torch.onnx.stack_trace` does: reversed); `files` shares the lookups of the files
    between the stacks of one model."""
    frames: list[Frame] = []
    tracebacks = 0
    lines = text.splitlines()
    files = files or SourceFiles()
    for i, raw in enumerate(lines):
        match = _TORCHSCRIPT_FRAME.match(raw.strip()) or _TRACEBACK_FRAME.match(raw)
        if not match:
            continue
        file, line = match["file"], int(match["line"])
        source = files.find(file)
        code = linecache.getline(str(source), line).strip() or None if source is not None else None
        note = "" if source is not None else OUTSIDE_ROOTS
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if code is None and match.re is _TRACEBACK_FRAME and following and not following.startswith("File "):
            code, note = following, ""  # the traceback's own copy of the line, from the stack text itself
        tracebacks += match.re is _TRACEBACK_FRAME
        frames.append(Frame(file=file, line=line, function=match["function"].strip(), code=code, note=note))
    return frames[::-1] if frames and tracebacks == len(frames) else frames


def recorded_stack(node: onnx.NodeProto, files: SourceFiles | None = None) -> tuple[str, list[Frame]]:
    """Where a node's stack was recorded (`doc_string`, `metadata_props[KEY]`, or "") and its frames, innermost
    first."""
    frames = parse_stack(node.doc_string, files)
    if frames:
        return "doc_string", frames
    for entry in getattr(node, "metadata_props", ()):  # NodeProto.metadata_props: onnx >= 1.16
        if "stack" in entry.key.lower():
            frames = parse_stack(entry.value, files)
            if frames:
                return f"metadata_props[{entry.key}]", frames
    return "", []


def blame(model_or_path: ModelLike, node_name: str) -> BlameResult:
    """The source frames recorded for the node called `node_name` (weights are not loaded)."""
    model, _ = load_model(model_or_path)
    path, _, node = find_node(model.graph, node_name)
    source, frames = recorded_stack(node)
    return BlameResult(node=node.name, op_type=node.op_type, subgraph=path, source=source, frames=frames)


def blame_all(model_or_path: ModelLike) -> list[BlameResult]:
    """`blame` of every node, in every subgraph, in graph order: the model loaded and checked once and each source
    file looked up once (blaming node by node repeats both for every node)."""
    model, _ = load_model(model_or_path)
    files = SourceFiles()
    results = []
    for path, sub in subgraphs(model.graph):
        for node in sub.node:
            source, frames = recorded_stack(node, files)
            results.append(BlameResult(node=node.name, op_type=node.op_type, subgraph=path, source=source,
                                       frames=frames))
    return results
