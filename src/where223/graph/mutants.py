"""onnx's own conformance models and one-float-type mutants of them: material no one here wrote, for judging the
graph tools against ONNX Runtime. The differential test (`tests/graph/test_differential.py`) and the peers
benchmark (`benchmarks/peers.py`) both take their models from here.

The conformance models are `onnx/backend/test/data/**/model.onnx` of the installed wheel; a wheel that ships no
node models (onnx 1.23's ships only `light`, `pytorch-*`, `real` and `simple`) gets them from onnx's own generators
(`onnx.backend.test.case.node.collect_testcases`), written once per onnx version under
`<cache>/onnx-conformance/<version>/node/` (the cache folder as `where223.graph.kernels.cache_folder` finds it).

Each mutant changes one float type: a main-graph input or initializer retyped, or a Cast to another float type
inserted on one edge of the main graph, of an If/Loop/Scan body, or of a model-local function (the conformance
models hold none, so one node is first wrapped into one); nameless nodes are named first, so that the node names
ONNX Runtime and a tool give can be compared. A model's mutants are the same on every run (seeded by its name).
"""

from __future__ import annotations

import copy
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from where223.graph.loading import subgraphs
from where223.graph.nodes import node_label
from where223.graph.schema import opset_imports
from where223.graph.types import model_types

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
FLOATS = {
    TensorProto.FLOAT: "tensor(float)",
    TensorProto.FLOAT16: "tensor(float16)",
    TensorProto.DOUBLE: "tensor(double)",
    TensorProto.BFLOAT16: "tensor(bfloat16)",
}
ELEM_OF = {text: elem for elem, text in FLOATS.items()}
KINDS = ("retype_input", "retype_initializer", "cast_main", "cast_subgraph", "cast_function")


def generated_folder() -> Path:
    """Where onnx's generated node models of the installed onnx are kept."""
    from where223.graph.kernels import cache_folder

    return cache_folder() / "onnx-conformance" / onnx.__version__


def generated_node_models(folder: Path | None = None) -> list[Path]:
    """onnx's node test models from its generators, written once under `folder` (a file lock for concurrent
    writers, a marker file when all are written), as `node/<case>/model.onnx`."""
    import fcntl
    import warnings

    folder = generated_folder() if folder is None else folder
    done = folder / "complete"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            from onnx.backend.test.case import node

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the generators' own numpy warnings (reducemin's 1/0)
                cases = node.collect_testcases()
            for case in cases:
                target = folder / "node" / case.name / "model.onnx"
                target.parent.mkdir(parents=True, exist_ok=True)
                onnx.save(case.model, str(target))
            done.write_text(f"{len(cases)}\n")
    return sorted((folder / "node").glob("*/model.onnx"))


def conformance_models(generated: Path | None = None) -> tuple[list[Path], list[Path]]:
    """(the roots model names are relative to, every conformance model): the wheel's, plus generated node
    models (under `generated`) where it ships none."""
    shipped = sorted(DATA.rglob("model.onnx"))
    if (DATA / "node").is_dir():
        return [DATA], shipped
    generated = generated_folder() if generated is None else generated
    return [DATA, generated], sorted(shipped + generated_node_models(generated))


def model_name(path: Path, roots: list[Path]) -> str:
    """A conformance model's name: its folder relative to the root it lies under (`node/test_add`)."""
    root = next(root for root in roots if path.is_relative_to(root))
    return path.parent.relative_to(root).as_posix()


def holds_graphs(node: onnx.NodeProto) -> bool:
    """Whether a node carries subgraphs (If, Loop, Scan)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether a node of the main graph carries subgraphs."""
    return any(holds_graphs(node) for node in model.graph.node)


@dataclass
class Mutant:
    """One float type changed in one place of a conformance model."""

    source: str  # the conformance model's name (its folder under the roots)
    kind: str  # one of KINDS
    where: str  # the value (and subgraph or function) changed
    model: onnx.ModelProto
    call: str | None = None  # for cast_function: the node that calls the function


def _other_float(rng: random.Random, elem: int) -> int:
    return rng.choice(sorted(set(FLOATS) - {elem}))


def _retyped_initializer(init: onnx.TensorProto, elem: int) -> onnx.TensorProto:
    values = numpy_helper.to_array(init).astype(np.float32)
    return helper.make_tensor(init.name, elem, list(init.dims), values.flatten().tolist())


def _retype(model: onnx.ModelProto, rng: random.Random, source: str) -> Mutant | None:
    """A main-graph input or initializer of a float type given another float type."""
    initializers = {init.name for init in model.graph.initializer}
    candidates = [("retype_initializer", init.name, init.data_type) for init in model.graph.initializer]
    candidates += [
        ("retype_input", value.name, value.type.tensor_type.elem_type)
        for value in model.graph.input
        if value.type.HasField("tensor_type") and value.name not in initializers
    ]
    candidates = [c for c in candidates if c[2] in FLOATS]
    if not candidates:
        return None
    kind, name, elem = rng.choice(candidates)
    new = _other_float(rng, elem)
    mutant = copy.deepcopy(model)
    for k, init in enumerate(mutant.graph.initializer):
        if init.name == name:
            mutant.graph.initializer[k].CopyFrom(_retyped_initializer(init, new))
    for value in mutant.graph.input:  # models before IR 4 list their initializers as inputs too
        if value.name == name:
            value.type.tensor_type.elem_type = new
    return Mutant(source, kind, f"{name}: {FLOATS[elem]} -> {FLOATS[new]}", mutant)


def _insert_cast(graph: onnx.GraphProto, index: int, position: int, elem: int) -> str:
    """A Cast to `elem` on input `position` of node `index`, placed just before it; returns the edge's name."""
    node = graph.node[index]
    name = node.input[position]
    cast = helper.make_node("Cast", [name], [f"{name}__mutant"], name="mutant_cast", to=elem)
    node.input[position] = f"{name}__mutant"
    graph.node.insert(index, cast)
    return name


def _cast_on_edge(model: onnx.ModelProto, rng: random.Random, source: str, in_subgraph: bool) -> Mutant | None:
    """A Cast to another float type on one float edge of the main graph or of one subgraph."""
    mutant = copy.deepcopy(model)
    types = model_types(mutant)
    candidates = [
        (path, index, position, ELEM_OF[value_type])
        for path, scope in types.scopes.items()
        if bool(path) == in_subgraph
        for index, node in enumerate(scope.graph.node)
        for position, name in enumerate(node.input)
        if name and (value_type := scope.type_of(name)) in ELEM_OF
    ]
    if not candidates:
        return None
    path, index, position, elem = rng.choice(candidates)
    new = _other_float(rng, elem)
    edge = _insert_cast(types.scopes[path].graph, index, position, new)
    where = f"{path + ': ' if path else ''}{edge} -> {FLOATS[new]}"
    return Mutant(source, "cast_subgraph" if in_subgraph else "cast_main", where, mutant)


def _cast_in_function(model: onnx.ModelProto, rng: random.Random, source: str) -> Mutant | None:
    """One main-graph node wrapped into a model-local function, with a Cast inside it on a float input."""
    types = model_types(model)
    scope = types.scopes[""]
    candidates = [
        (index, position, ELEM_OF[value_type])
        for index, node in enumerate(model.graph.node)
        if node.domain in ("", "ai.onnx") and not holds_graphs(node)
        for position, name in enumerate(node.input)
        if name and (value_type := scope.type_of(name)) in ELEM_OF
    ]
    if not candidates:
        return None
    index, position, elem = rng.choice(candidates)
    new = _other_float(rng, elem)
    mutant = copy.deepcopy(model)
    node = mutant.graph.node[index]
    # formals for the present inputs and outputs only; an omitted optional stays omitted inside
    inner = copy.deepcopy(node)
    inner.name = "wrapped"
    inner.ClearField("input")
    inner.input.extend(f"in{k}" if actual else "" for k, actual in enumerate(node.input))
    inner.ClearField("output")
    inner.output.extend(f"out{k}" if actual else "" for k, actual in enumerate(node.output))
    cast = helper.make_node("Cast", [inner.input[position]], ["in_mutant"], name="mutant_cast", to=new)
    inner.input[position] = "in_mutant"
    formals_in = [f"in{k}" for k, actual in enumerate(node.input) if actual]
    formals_out = [name for name in inner.output if name]
    body = helper.make_function(
        "where223.mutant", "Wrapped", formals_in, formals_out, [cast, inner], list(mutant.opset_import)
    )
    actuals_in = [name for name in node.input if name]
    actuals_out = [name for name in node.output if name]
    call = helper.make_node("Wrapped", actuals_in, actuals_out, name=node.name, domain="where223.mutant")
    mutant.graph.node[index].CopyFrom(call)
    mutant.functions.append(body)
    mutant.opset_import.append(helper.make_opsetid("where223.mutant", 1))
    if mutant.ir_version < 8:  # model-local functions need IR 8
        mutant.ir_version = 8
    where = f"Wrapped({node_label(node, index)}): input {position} -> {FLOATS[new]}"
    return Mutant(source, "cast_function", where, mutant, call=node.name)


def name_every_node(model: onnx.ModelProto) -> None:
    """Give each nameless node a unique name (most conformance nodes have none; ONNX Runtime then names `()`)."""
    nodes = (node for _, graph in subgraphs(model.graph) for node in graph.node)
    for k, node in enumerate(nodes):
        if not node.name:
            node.name = f"n{k}_{node.op_type}"


def casts_allowed(model: onnx.ModelProto) -> bool:
    """Whether a Cast with an integer `to` can be added: the default domain imported at opset 6 or later."""
    return opset_imports(model).get("", 0) >= 6


def mutants_of(path: Path, source: str) -> list[Mutant]:
    """The mutants of one conformance model named `source` (`model_name`), the same on every run (seeded by it)."""
    model = onnx.load(str(path))
    name_every_node(model)
    rng = random.Random(zlib.crc32(source.encode()))
    made = [_retype(model, rng, source)]
    if casts_allowed(model):
        made += [
            _cast_on_edge(model, rng, source, in_subgraph=False),
            _cast_on_edge(model, rng, source, in_subgraph=True),
            _cast_in_function(model, rng, source),
        ]
    return [m for m in made if m is not None]
