"""Opening ONNX models without their weights, with one-line errors for files that are not models.

Every model passes `where223.graph.guards` on the way in: recursion among its functions, an exponential
inlining, a cycle, an opset version onnx cannot look up, and (for a file) external data of any tensor outside the
model's folder are refused here, before onnx's own code (which would crash, hang or read the file) sees them.
Weights are read only by `load_weights_into`, which reads every tensor's external data itself, once the guards
allow it; ONNX Runtime gets a model only past `guard_for_runtime` (a file) or `guard_in_memory` (a ModelProto).
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import serialization

from where223.errors import UsageError, printable
from where223.graph import guards
from where223.graph.nodes import ReadGraph, node_label, read_graphs

ModelLike = onnx.ModelProto | str | os.PathLike[str]


class UnreadableModelError(UsageError, ValueError):
    """The input is not a readable ONNX model (missing, not protobuf, truncated, no graph)."""


class MalformedModelError(UnreadableModelError):
    """The model reads, but onnx's own function inliner or shape inference fails on it (for example a
    model-local function called with more outputs than it declares)."""


class UnknownElementTypeError(MalformedModelError):
    """A type in the model names an element type the installed onnx does not define (`dtypes.elem_type_name`); the
    typing of the model (`types.model_types`) names the model."""


def onnx_failure(path: Path | None, stage: str, error: Exception) -> MalformedModelError:
    """A one-line error for onnx's `stage` failing on the model at `path`, with onnx's own reason."""
    reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    reason = reason.split(" failed: ", 1)[-1]  # onnx's C++ assertions: "<file>:<line>: ... failed: <reason>"
    return MalformedModelError(f"{path or '<model>'}: onnx's {stage} failed on this model: {reason}")


def inline_local_functions(model: onnx.ModelProto, path: Path | None = None) -> onnx.ModelProto:
    """The model with its model-local functions inlined by onnx's inliner; MalformedModelError if it fails."""
    import onnx.inliner

    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as error:  # onnx's C++ inliner raises RuntimeError, its bindings others
        raise onnx_failure(path, "function inliner", error) from error


class NodeNotFoundError(UsageError, KeyError):
    """No node has the requested name; the message lists close names."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class OpenedModel:
    """A model as `open_model` returns it: the model, the path it came from (None in memory), and its graphs with
    their nodes read on the way (`nodes.read_graphs`; the guards walk them), for walks that visit every node."""

    model: onnx.ModelProto
    path: Path | None
    graphs: list[ReadGraph]


def open_model(source: ModelLike, name: Path | None = None) -> OpenedModel:
    """`load_model(source)` (weights never read), with the model's graphs read (see `OpenedModel`); `name` names an
    in-memory model in the guards' refusals (the file it came from)."""
    if isinstance(source, onnx.ModelProto):
        return _opened(source, None, name)
    path = source if isinstance(source, Path) else Path(source)  # a Path as given: parsing it again costs
    data = _read_regular_file(path)
    try:  # as onnx.load(path) parses: the format its file extension names (a text format), else protobuf
        form = serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1]) or "protobuf"
        if form == "protobuf":  # onnx's deserialize_proto, without its wrapper's cost (a model of one node pays it)
            model = onnx.ModelProto()
            decoded = model.ParseFromString(data)
            if decoded is not None and decoded != len(data):
                raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {len(data)}")
        else:
            model = serialization.registry.get(form).deserialize_proto(data, onnx.ModelProto())
    except DecodeError as exc:
        raise UnreadableModelError(f"{path}: not an ONNX model or truncated ({exc})") from exc
    except (OSError, ValueError, RecursionError) as exc:
        raise UnreadableModelError(f"{path}: cannot be read as ONNX ({exc})") from exc
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise UnreadableModelError(
            f"{path}: not an ONNX model or truncated (no ir_version, graph or opset_import)"
        )
    return _opened(model, path)


def _read_regular_file(path: Path) -> bytes:
    """The bytes of the regular file at `path`, opened once (never blocking: a FIFO or a device is refused after
    the open, never read) and asked what it is on the descriptor it is read from; an UnreadableModelError else."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        raise UnreadableModelError(f"{path}: no such file") from None
    except OSError as exc:  # a file or folder it may not read, a loop of links, a name too long
        raise UnreadableModelError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise UnreadableModelError(f"{path}: not a file")
        # read until the end: at once for a file as large as it was said to be (a short read of a regular file is
        # its end), on for one that grew
        first = os.read(descriptor, found.st_size + 1)
        if len(first) <= found.st_size:
            return first
        parts = [first]
        while part := os.read(descriptor, 2**20):
            parts.append(part)
        return b"".join(parts)
    except OSError as exc:
        raise UnreadableModelError(f"{path}: cannot be read as ONNX ({exc})") from exc
    finally:
        os.close(descriptor)


def _opened(model: onnx.ModelProto, path: Path | None, name: Path | None = None) -> OpenedModel:
    """The guards (`guards.check_structure`, and for a file `guards.check_external_locations`), the model's graphs
    read on the way; a refusal as a one-line MalformedModelError naming the model."""
    try:
        graphs = guards.check_structure(model)
        if path is not None and guards.may_hold_external(model, graphs):  # path.parent only when asked
            guards.check_external_locations(model, path.parent, graphs)
    except guards.StructureError as error:
        raise MalformedModelError(f"{path or name or '<model>'}: {error}") from error
    return OpenedModel(model, path, graphs)


def load_model(source: ModelLike, load_weights: bool = False) -> tuple[onnx.ModelProto, Path | None]:
    """The model and the path it came from (None for an in-memory model).

    External weight data is read only when `load_weights` is true, and only from regular files inside the
    model's folder (symlinks resolved) whose recorded byte ranges exist; the tensor headers (name, dtype,
    shape) are always read. Raises `UnreadableModelError` with a one-line message for anything that is not
    a usable ONNX model, and `MalformedModelError` for one the guards refuse (see `where223.graph.guards`).
    """
    opened = open_model(source)
    if load_weights and opened.path is not None:
        load_weights_into(opened.model, opened.path)
    return opened.model, opened.path


def check_weights_of(model: onnx.ModelProto, path: Path | None) -> list[guards.ExternalData]:
    """UnreadableModelError unless every external weight file of the model loaded from `path` lies inside its
    folder (symlinks resolved) and holds the bytes it is said to; nothing is read (None: in memory, no folder).
    Every tensor's external data, checked (`guards.check_external_data`)."""
    if path is None:
        return []
    try:
        return guards.check_external_data(model, path.parent)
    except guards.StructureError as error:
        raise UnreadableModelError(f"{path}: its external weight data cannot be read: {error}") from error


def guard_for_runtime(source: str | os.PathLike[str]) -> None:
    """Before ONNX Runtime opens the file at `source` itself: refuse what the guards refuse (MalformedModelError)
    and external weights outside its folder (UnreadableModelError). A file that is not a readable model passes,
    for ONNX Runtime to refuse in its own words."""
    try:
        model, path = load_model(source)
    except MalformedModelError:
        raise
    except UnreadableModelError:
        return
    check_weights_of(model, path)


def guard_in_memory(model: onnx.ModelProto) -> None:
    """Before ONNX Runtime is handed an in-memory model: what the guards refuse (MalformedModelError), and external
    data of any tensor (UnreadableModelError): held in memory, the model has no folder, and ONNX Runtime would look
    for the data relative to the directory it runs in."""
    open_model(model)
    try:
        guards.check_in_memory(model)
    except guards.StructureError as error:
        raise UnreadableModelError(f"<model>: {error}") from error


def load_weights_into(model: onnx.ModelProto, path: Path) -> None:
    """Read the external data of every tensor of a model loaded from `path` into it (`guards.model_tensors`: function
    bodies and sparse tensors too, which onnx's own loader skips in some releases), once the guards allow every
    file of it; each tensor then holds its data itself, so the model can be saved anywhere."""
    for found in check_weights_of(model, path):
        try:
            with found.file.open("rb") as handle:
                handle.seek(found.offset)
                data = handle.read() if found.length is None else handle.read(found.length)
        except (OSError, MemoryError) as exc:
            raise UnreadableModelError(f"{path}: its external weight data cannot be read ({exc})") from exc
        if found.length is not None and len(data) != found.length:
            raise UnreadableModelError(f"{path}: its external weight data changed while it was read")
        found.tensor.raw_data = data
        found.tensor.data_location = onnx.TensorProto.DEFAULT
        del found.tensor.external_data[:]


def subgraphs(graph: onnx.GraphProto, path: str = "") -> list[tuple[str, onnx.GraphProto]]:
    """Every graph reachable from `graph` (itself first, then depth first), with its subgraph path ("" for the main
    one): `nodes.read_graphs`'s graphs, without recursion."""
    return [(read.path, read.graph) for read in read_graphs(graph, path)]


def find_node(graph: onnx.GraphProto, name: str) -> tuple[str, int, onnx.NodeProto]:
    """The subgraph path, index and node called `name` (or labelled so when nameless), in any subgraph.

    Raises NodeNotFoundError listing close names and, for an ORT-style name such as `Where_223`, the
    nodes of that op type.
    """
    names: list[str] = []
    for path, sub in subgraphs(graph):
        for index, node in enumerate(sub.node):
            if node_label(node, index) == name:
                return path, index, node
            names.append(node.name)
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    op_type = re.sub(r"_\d+$", "", name.rsplit("/", 1)[-1])
    same_op = [n.name for _, g in subgraphs(graph) for n in g.node if n.op_type == op_type and n.name]
    message = f"no node named '{printable(name)}' among {len(names)} nodes"
    if close:
        message += f"; close names: {', '.join(map(printable, close))}"
    if same_op:
        more = f" (+{len(same_op) - 5} more)" if len(same_op) > 5 else ""
        message += f"; {printable(op_type)} nodes: {', '.join(map(printable, same_op[:5]))}{more}"
    raise NodeNotFoundError(message)


class FreshNames:
    """Fresh value and node names that collide with nothing in the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.taken: set[str] = set()
        for _, graph in subgraphs(model.graph):
            self.taken.update(v.name for v in (*graph.input, *graph.output, *graph.initializer))
            for node in graph.node:
                self.taken.update((node.name, *node.input, *node.output))

    def fresh(self, base: str) -> str:
        """`base`, else `base_2`, `base_3`, ...: the first name not taken, which is taken from then on."""
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name
