"""Fuzz cases for the ONNX reader: valid seeds mutated in their structure (element types, dims, attributes,
functions, subgraphs, external-data keys, opsets, names, cycles), then sometimes in their bytes, run through
`where223 lint` (and `--kernels`), `blame`, `draw` and `repair`.

A case is drawn as a recipe (plain data: the seed's name, the mutations, the byte edits, the command), so that a
failure is reproduced by `build(recipe, folder)` from the same seeds, and is saved with the model's bytes too.
Structural mutations keep the file a valid protobuf, so most cases get past parsing to the guards and the tools;
byte edits (on about one case in four) try the parser itself.
"""

from __future__ import annotations

import copy
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper

from tests.fuzz.harness import Case

SEED_LIMIT_BYTES = 64 * 2**10  # conformance models above this size are left out (speed, not coverage)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
ELEM_TYPES = [0, 1, 2, 7, 9, 10, 11, 16, 17, 19, 21, 23, 25, 26, 27, 40, 999, -1, -7, 2**31 - 1, -(2**31)]
BIG_INTS = [0, 1, -1, 2, 7, 255, 2**15, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**31), -(2**63)]
ODD_TEXT = ["", " ", "\n", "a\nb", "\x1b[31mred", "\x00", "é", "名前", "\u202egnp.exe", "../../etc/passwd",
            "/proc/self/environ", "x" * 5000, "Where_223", "w", "x", "y", "cond", "local.functions", "ai.onnx",
            "com.microsoft", "ai.onnx.ml", "%s%n{0}", "\ud800"]
OPS = ["Where", "Cast", "Add", "If", "Loop", "Scan", "Reshape", "Constant", "MatMul", "Conv", "LayerNormalization",
       "Identity", "Neg", "Concat", "Clip", "ConstantOfShape", "Expand", "Range", "Tile", "Gather", "NoSuchOp", "",
       "where", "Sequence", "SequenceConstruct", "Optional", "loop", "f", "f0"]
LOCATIONS = ["weights.bin", "../outside.bin", "/etc/hostname", "/proc/self/environ", "", ".", "..", "sub",
             "sub/inner.bin", "link.bin", "loop.bin", "missing.bin", "a\x00b", "x" * 300, "weights.bin/..",
             "/dev/zero", "fifo.bin", "//weights.bin", "./weights.bin"]
EXTERNAL_KEYS = ["location", "offset", "length", "checksum", "basepath", "", "extra"]
EXTERNAL_VALUES = ["0", "1", "-1", "8", "4", "4096", "abc", "", "99999999999999999999", "1e3", " 8", "0x10", "٣"]
COMMANDS = ["lint", "lint-json", "lint-sarif", "lint-github", "lint-kernels", "blame", "draw", "repair"]

Recipe = dict[str, Any]


# --- seeds ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    name: str
    model: onnx.ModelProto
    external: bool = False  # the seed's weights lie in weights.bin beside it


def _hostile_seeds() -> dict[str, Seed]:
    from tests.graph import hostile

    builders = {
        "where_conflict": hostile.where_conflict,
        "where_conflict_stack": lambda: hostile.where_conflict(
            "/proc/self/environ(1): f\n/etc/passwd(2): g\n../../x.py(3): h\n" + __file__ + "(40): seeds"),
        "recursive_function": hostile.recursive_function,
        "mutually_recursive": hostile.mutually_recursive_functions,
        "doubling_functions": lambda: hostile.doubling_functions(21),
        "unknown_element_type": hostile.unknown_element_type,
        "huge_opset": hostile.huge_opset,
        "future_opset": hostile.future_opset,
        "cycle": hostile.cycle,
        "self_loop": lambda: hostile.cycle(self_loop=True),
        "unsorted": hostile.unsorted_but_acyclic,
        "duplicate_names": hostile.duplicate_names,
    }
    seeds = {f"hostile:{name}": Seed(f"hostile:{name}", build()) for name, build in builders.items()}
    external = hostile.where_conflict()
    external.graph.input.remove(next(v for v in external.graph.input if v.name == "x"))
    weight = helper.make_tensor("x", TensorProto.FLOAT, [2], b"\x00\x00\x80\x3f" * 2, raw=True)
    onnx.external_data_helper.set_external_data(weight, location="weights.bin", offset=0, length=8)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    external.graph.initializer.append(weight)
    seeds["hostile:external_weight"] = Seed("hostile:external_weight", external, external=True)
    return seeds


def _conftest_seeds() -> dict[str, Seed]:
    from tests.graph import conftest

    model = conftest._model(conftest.conflicts_nodes(), conftest.CONFLICT_OUTPUTS)
    return {"graph-tests:conflicts": Seed("graph-tests:conflicts", model)}


def conformance_paths(limit: int = SEED_LIMIT_BYTES) -> list[Path]:
    """onnx's own conformance models shipped with the installed wheel, small ones only, in a stable order."""
    from where223.graph.mutants import DATA

    return [path for path in sorted(DATA.rglob("model.onnx")) if path.stat().st_size <= limit]


def committed_paths() -> list[Path]:
    """The committed exports of the tiny GPT-2 (outputs/tiny-*/model.onnx): real exporter output with stacks."""
    from where223.pipeline.paths import OUTPUTS

    return sorted(OUTPUTS.glob("tiny-*/model.onnx"))


@functools.cache
def seeds(sample: int | None = None) -> dict[str, Seed]:
    """Every seed by name (`sample`: the hand-made ones and that many conformance models and their mutants)."""
    from where223.graph.mutants import DATA, mutants_of

    found = {**_hostile_seeds(), **_conftest_seeds()}
    paths = conformance_paths()
    if sample is not None:
        paths = paths[:: max(1, len(paths) // sample)][:sample]
    for index, path in enumerate(paths):
        name = f"conformance:{path.parent.relative_to(DATA).as_posix()}"
        found[name] = Seed(name, onnx.load(str(path), load_external_data=False))
        if index % 10 == 0:  # the differential test's one-float-type mutants of every tenth model
            for mutant in mutants_of(path, name):
                key = f"mutant:{name}:{mutant.kind}"
                found[key] = Seed(key, mutant.model)
    if sample is None:
        for path in committed_paths():
            name = f"committed:{path.parent.name}"
            found[name] = Seed(name, onnx.load(str(path), load_external_data=False))
    return found


# --- mutations ------------------------------------------------------------------------------------------------


def _graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    """The main graph and every subgraph, function bodies as graphs of their own are not included."""
    from where223.graph.loading import subgraphs

    return [graph for _, graph in subgraphs(model.graph)]


def _values(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [v for g in _graphs(model) for v in (*g.input, *g.output, *g.value_info)]


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    nodes = [n for g in _graphs(model) for n in g.node]
    return nodes + [n for f in model.functions for n in f.node]


def _initializers(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for g in _graphs(model) for t in g.initializer]


def _pick(items: list[Any], pick: int) -> Any:
    return items[pick % len(items)] if items else None


def _clamp(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


def _elem_type(model, pick, value):
    values = [v for v in _values(model) if v.type.HasField("tensor_type")]
    target = _pick(values, pick)
    if target is not None:
        target.type.tensor_type.elem_type = _clamp(value, INT32)


def _dims(model, pick, value):
    kind, number, text = value
    values = [v for v in _values(model) if v.type.HasField("tensor_type")]
    target = _pick(values, pick)
    if target is None:
        return
    shape = target.type.tensor_type.shape
    if kind == "clear":
        target.type.tensor_type.ClearField("shape")
    elif kind == "rank":
        for _ in range(number % 70):
            shape.dim.add().dim_value = 1
    elif not shape.dim:
        shape.dim.add().dim_value = _clamp(number, INT64)
    elif kind == "value":
        _pick(list(shape.dim), pick).dim_value = _clamp(number, INT64)
    else:
        _pick(list(shape.dim), pick).dim_param = text


def _tensor(value) -> onnx.TensorProto:
    data_type, dims, raw = value
    tensor = TensorProto(name="t", data_type=_clamp(data_type, INT32), raw_data=raw)
    tensor.dims.extend(_clamp(d, INT64) for d in dims)
    return tensor


def _initializer(model, pick, value):
    target = _pick(_initializers(model), pick)
    if target is None:
        model.graph.initializer.append(_tensor(value))
        return
    data_type, dims, raw = value
    target.data_type = _clamp(data_type, INT32)
    if dims:
        del target.dims[:]
        target.dims.extend(_clamp(d, INT64) for d in dims)
    if raw:
        for name in ("float_data", "int32_data", "int64_data", "double_data", "string_data", "uint64_data"):
            target.ClearField(name)
        target.raw_data = raw


_ATTRIBUTE_TYPES = [AttributeProto.FLOAT, AttributeProto.INT, AttributeProto.STRING, AttributeProto.TENSOR,
                    AttributeProto.GRAPH, AttributeProto.FLOATS, AttributeProto.INTS, AttributeProto.STRINGS,
                    AttributeProto.TENSORS, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR,
                    AttributeProto.TYPE_PROTO, AttributeProto.UNDEFINED]


def _attribute(model, pick, value):
    kind, name, number, text, blob = value
    node = _pick(_nodes(model), pick)
    if node is None:
        return
    existing = list(node.attribute)
    attr = _pick(existing, pick // 7) if existing and kind != "add" else node.attribute.add()
    if kind == "add" or not attr.name:
        attr.name = name
    if kind == "retype":
        attr.type = _ATTRIBUTE_TYPES[number % len(_ATTRIBUTE_TYPES)]
    elif kind == "int":
        attr.type, attr.i = AttributeProto.INT, _clamp(number, INT64)
    elif kind == "ints":
        attr.type = AttributeProto.INTS
        attr.ints.extend([_clamp(number, INT64)] * (abs(number) % 3000 + 1))
    elif kind == "float":
        attr.type, attr.f = AttributeProto.FLOAT, [float("nan"), float("inf"), -0.0, 1e308][number % 4]
    elif kind == "string":
        attr.type, attr.s = AttributeProto.STRING, blob
    elif kind == "tensor":
        attr.type = AttributeProto.TENSOR
        attr.t.CopyFrom(_tensor((number, [number % 5], blob)))
    elif kind == "graph":
        attr.type = AttributeProto.GRAPH
        inner = helper.make_node(text or "Identity", ["x"], ["g_out"], name="inner")
        attr.g.CopyFrom(helper.make_graph([inner], "g", [], [helper.make_tensor_value_info("g_out", 1, None)]))
    elif kind == "ref":
        attr.ref_attr_name = text
    elif kind == "delete":
        node.attribute.remove(attr)


def _op_type(model, pick, value):
    op_type, domain = value
    node = _pick(_nodes(model), pick)
    if node is None:
        return
    node.op_type = op_type
    if domain is not None:
        node.domain = domain


def _node_io(model, pick, value):
    kind, text = value
    node = _pick(_nodes(model), pick)
    if node is None:
        return
    if kind == "add_input":
        node.input.append(text)
    elif kind == "drop_input" and node.input:
        del node.input[-1]
    elif kind == "rename_input" and node.input:
        node.input[pick % len(node.input)] = text
    elif kind == "add_output":
        node.output.append(text)
    elif kind == "drop_output" and node.output:
        del node.output[-1]
    elif kind == "rename_output" and node.output:
        node.output[pick % len(node.output)] = text
    elif kind == "name":
        node.name = text
    elif kind == "doc":
        node.doc_string = text


def _opset(model, pick, value):
    kind, version, domain = value
    if kind == "version" and model.opset_import:
        _pick(list(model.opset_import), pick).version = _clamp(version, INT64)
    elif kind == "domain" and model.opset_import:
        _pick(list(model.opset_import), pick).domain = domain
    elif kind == "add":
        model.opset_import.append(helper.make_opsetid(domain, _clamp(version, INT64)))
    elif kind == "clear":
        model.ClearField("opset_import")
    elif kind == "ir":
        model.ir_version = _clamp(version, INT64)


def _function(model, pick, value):
    kind, name, calls, depth = value
    opsets = [helper.make_opsetid("", 17)]
    domain = "local.fuzz"
    if kind == "recursive_via_subgraph":
        call = helper.make_node(name, ["a"], ["b"], domain=domain)
        branch = helper.make_graph([call], "then", [], [helper.make_tensor_value_info("b", 1, None)])
        node = helper.make_node("If", ["c"], ["b"], then_branch=branch, else_branch=branch)
        body = [node]
        inputs = ["a", "c"]
    elif kind == "chain":
        for k in range(depth % 40):
            inner = [helper.make_node(f"{name}{k + 1}", ["a" if j == 0 else f"t{j}"], [f"t{j + 1}"], domain=domain)
                     for j in range(calls % 4 + 1)]
            inner[-1].output[0] = "b"
            model.functions.append(helper.make_function(domain, f"{name}{k}", ["a"], ["b"], inner, opsets))
        body, inputs = [helper.make_node("Neg", ["a"], ["b"])], ["a"]
        name = f"{name}{depth % 40}"
    elif kind == "arity":
        body, inputs = [helper.make_node("Add", ["a", "a"], ["b"])], ["a"] * (calls % 3)
    elif kind == "attribute_ref":
        body = [helper.make_node("Cast", ["a"], ["b"])]
        body[0].attribute.append(AttributeProto(name="to", ref_attr_name="to", type=AttributeProto.INT))
        inputs = ["a"]
    else:  # an undefined callee
        body, inputs = [helper.make_node("nowhere", ["a"], ["b"], domain=domain)], ["a"]
    function = helper.make_function(domain, name, inputs, ["b"], body, opsets, attributes=["to"])
    model.functions.append(function)
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, 1))
    model.ir_version = max(model.ir_version, 8)
    target = _pick(list(model.graph.node), pick)
    if target is not None:  # the function called by a main-graph node, on that node's values
        target.op_type, target.domain = name, domain


def _subgraph(model, pick, value):
    kind, depth = value
    nodes = list(model.graph.node)
    target = _pick(nodes, pick)
    if target is None:
        return
    if kind == "wrap_in_if":
        inner = copy.deepcopy(target)
        outputs = [helper.make_tensor_value_info(o, 0, None) for o in target.output]
        passing = [helper.make_node("Identity", [target.input[0] if target.input else "cond"], [o])
                   for o in target.output]
        for level in range(depth % 40 + 1):  # each level holds the one below once: linear, not exponential
            then_branch = helper.make_graph([inner], "then", [], outputs)
            else_branch = helper.make_graph(passing, "else", [], outputs)
            inner = helper.make_node("If", [target.input[0] if target.input else "cond"], list(target.output),
                                     then_branch=then_branch, else_branch=else_branch, name=f"if{level}")
        target.CopyFrom(inner)
    elif kind == "cycle_inside":
        loop = [helper.make_node("Neg", ["p"], ["q"]), helper.make_node("Neg", ["q"], ["p"])]
        branch = helper.make_graph(loop, "cyclic", [], [helper.make_tensor_value_info("q", 1, None)])
        model.graph.node.append(helper.make_node("If", ["cond"], ["if_q"], then_branch=branch, else_branch=branch))
    elif kind == "loop_body":
        body = helper.make_graph([helper.make_node("Identity", ["v"], ["v_out"])], "body",
                                 [helper.make_tensor_value_info("v", 1, None)] * (depth % 4),
                                 [helper.make_tensor_value_info("v_out", 1, None)])
        model.graph.node.append(helper.make_node("Loop", ["", ""], ["loop_out"], body=body))
    elif kind == "graphs_attribute":
        attr = target.attribute.add(name="branches", type=AttributeProto.GRAPHS)
        attr.graphs.extend(helper.make_graph([], f"g{k}", [], []) for k in range(depth % 5))


def _external(model, pick, value):
    kind, key, text = value
    tensors = _initializers(model)
    target = _pick(tensors, pick)
    if target is None:
        return
    if kind == "make":
        for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
            target.ClearField(name)
        del target.external_data[:]
        target.external_data.add(key="location", value=text or "weights.bin")
        target.data_location = TensorProto.EXTERNAL
    elif kind == "set":
        entry = next((e for e in target.external_data if e.key == key), None) or target.external_data.add()
        entry.key, entry.value = key, text
        target.data_location = TensorProto.EXTERNAL
    elif kind == "duplicate":
        target.external_data.add(key=key, value=text)
    elif kind == "location_default":
        target.data_location = TensorProto.DEFAULT


def _types(model, pick, value):
    target = _pick(_values(model), pick)
    if target is None:
        return
    if value == "empty":
        target.type.Clear()
    elif value == "sequence":
        target.type.sequence_type.elem_type.tensor_type.elem_type = 1
    elif value == "map":
        target.type.map_type.key_type = 7
        target.type.map_type.value_type.tensor_type.elem_type = 1
    elif value == "optional":
        target.type.optional_type.elem_type.tensor_type.elem_type = 10
    elif value == "sparse":
        target.type.sparse_tensor_type.elem_type = 1
    elif value == "denotation":
        target.type.denotation = "\x1b[2J"


def _graph_io(model, pick, value):
    graph = model.graph
    if value == "drop_outputs":
        graph.ClearField("output")
    elif value == "drop_inputs":
        graph.ClearField("input")
    elif value == "duplicate_input" and graph.input:
        graph.input.append(copy.deepcopy(_pick(list(graph.input), pick)))
    elif value == "cycle" and len(graph.node) >= 2:
        first, last = graph.node[0], graph.node[-1]
        if first.input and last.output:
            first.input[0] = last.output[0]
    elif value == "no_graph":
        model.ClearField("graph")
    elif value == "metadata":
        model.metadata_props.add(key="pkg.torch.onnx.stack_trace" * 3, value="\x00" * 10 + "é" * 10)
    elif value == "sparse_initializer":
        sparse = graph.sparse_initializer.add()
        sparse.values.CopyFrom(helper.make_tensor("sv", TensorProto.FLOAT, [2], [1.0, 2.0]))
        sparse.indices.CopyFrom(helper.make_tensor("si", TensorProto.INT64, [2], [2**40, -5]))
        sparse.dims.extend([3])
    elif value == "many_nodes":
        source = graph.input[0].name if graph.input else "x"
        for k in range(5000):
            graph.node.append(helper.make_node("Identity", [source if k == 0 else f"chain{k - 1}"], [f"chain{k}"]))


_texts = st.one_of(st.sampled_from(ODD_TEXT), st.text(max_size=12))
_ints = st.one_of(st.sampled_from(BIG_INTS), st.integers(-(2**70), 2**70))
MUTATIONS = {
    "elem_type": (_elem_type, st.one_of(st.sampled_from(ELEM_TYPES), st.integers(-50, 50))),
    "dims": (_dims, st.tuples(st.sampled_from(["value", "param", "clear", "rank"]), _ints, _texts)),
    "initializer": (_initializer, st.tuples(st.sampled_from(ELEM_TYPES), st.lists(_ints, max_size=4),
                                            st.binary(max_size=24))),
    "attribute": (_attribute, st.tuples(
        st.sampled_from(["retype", "int", "ints", "float", "string", "tensor", "graph", "ref", "delete", "add"]),
        st.sampled_from(["to", "axis", "then_branch", "body", "value", "perm", "", "keepdims", "x" * 300]),
        _ints, st.sampled_from(OPS), st.binary(max_size=16))),
    "op_type": (_op_type, st.tuples(st.one_of(st.sampled_from(OPS), _texts),
                                    st.one_of(st.none(), st.sampled_from(["", "ai.onnx", "com.microsoft",
                                                                          "local.functions", "\x00", "ai.onnx.ml"])))),
    "node_io": (_node_io, st.tuples(st.sampled_from(["add_input", "drop_input", "rename_input", "add_output",
                                                     "drop_output", "rename_output", "name", "doc"]), _texts)),
    "opset": (_opset, st.tuples(st.sampled_from(["version", "domain", "add", "clear", "ir"]), _ints,
                                st.sampled_from(["", "ai.onnx", "ai.onnx.ml", "com.microsoft", "local.functions",
                                                 "local.fuzz", "ai.onnx.preview.training", "\x1b"]))),
    "function": (_function, st.tuples(st.sampled_from(["recursive_via_subgraph", "chain", "arity", "attribute_ref",
                                                       "undefined"]),
                                      st.sampled_from(["f", "g", "Where", "Identity", "loop"]),
                                      st.integers(0, 8), st.integers(0, 100))),
    "subgraph": (_subgraph, st.tuples(st.sampled_from(["wrap_in_if", "cycle_inside", "loop_body",
                                                       "graphs_attribute"]), st.integers(0, 200))),
    "external": (_external, st.tuples(st.sampled_from(["make", "set", "set", "duplicate", "location_default"]),
                                      st.sampled_from(EXTERNAL_KEYS),
                                      st.one_of(st.sampled_from(LOCATIONS), st.sampled_from(EXTERNAL_VALUES)))),
    "types": (_types, st.sampled_from(["empty", "sequence", "map", "optional", "sparse", "denotation"])),
    "graph_io": (_graph_io, st.sampled_from(["drop_outputs", "drop_inputs", "duplicate_input", "cycle", "no_graph",
                                             "metadata", "sparse_initializer", "many_nodes"])),
}
BYTE_EDITS = ("flip", "insert", "delete", "truncate", "duplicate", "overwrite", "invalid_utf8")


def mutate(model: onnx.ModelProto, mutations: list[list[Any]]) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of `model` with `mutations` applied in order; those protobuf refuses are skipped (listed)."""
    mutant = copy.deepcopy(model)
    skipped = []
    for kind, pick, value in mutations:
        try:
            MUTATIONS[kind][0](mutant, pick, value)
        except (ValueError, TypeError, IndexError, DecodeError) as error:  # what protobuf refuses: no such model
            skipped.append(f"{kind}: {type(error).__name__}")
    return mutant, skipped


def edit_bytes(data: bytes, edits: list[list[Any]], marker: bytes | None = None) -> bytes:
    """`data` with byte edits applied in order (offsets taken modulo the length)."""
    buffer = bytearray(data)
    for kind, at, blob in edits:
        where = at % (len(buffer) + 1)
        if kind == "flip" and buffer:
            buffer[where % len(buffer)] ^= 1 << (at % 8)
        elif kind == "insert":
            buffer[where:where] = blob
        elif kind == "delete":
            del buffer[where : where + max(1, len(blob))]
        elif kind == "truncate":
            del buffer[where:]
        elif kind == "duplicate":
            buffer[where:where] = buffer[where : where + 64]
        elif kind == "overwrite":
            buffer[where : where + len(blob)] = blob
        elif kind == "invalid_utf8" and marker is not None:
            buffer = bytearray(bytes(buffer).replace(marker, b"\xff\xfe\xfd\xfc\xfb\xfa"[: len(marker)]))
    return bytes(buffer)


MARKER = "ZQZQZQ"  # a node name replaced by invalid UTF-8 in the serialized model


@st.composite
def recipes(draw, names: list[str]) -> Recipe:
    """A case of the ONNX reader: seed, mutations, byte edits (one case in four), command, node pick."""
    mutation = st.one_of(*(st.tuples(st.just(kind), st.integers(0, 2**16), strategy)
                           for kind, (_, strategy) in MUTATIONS.items()))
    edits = st.lists(st.tuples(st.sampled_from(BYTE_EDITS), st.integers(0, 2**20), st.binary(min_size=1, max_size=9)),
                     min_size=1, max_size=3)
    recipe = {
        "seed": draw(st.sampled_from(names)),
        "mutations": [list(m) for m in draw(st.lists(mutation, max_size=4))],
        "bytes": [list(e) for e in draw(edits)] if draw(st.integers(0, 3)) == 3 else [],
        "command": draw(st.sampled_from(COMMANDS)),
        "node": draw(st.integers(0, 2**16)),
        "node_text": draw(st.one_of(st.none(), _texts)),
        "hops": draw(st.integers(0, 6)),
        "to": draw(st.sampled_from(["auto", "auto", "output", "float", "bfloat16", "float16", "nonsense", "string"])),
    }
    return recipe


def _files_around(folder: Path) -> None:
    """What external-data locations may name beside a model: weights, a folder, links in and out, a FIFO."""
    (folder / "weights.bin").write_bytes(b"\x00\x00\x80\x3f" * 4)
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "inner.bin").write_bytes(b"\x00\x00\x80\x3f" * 2)
    (folder.parent / "outside.bin").write_bytes(b"\x00\x00\x80\x3f" * 2)
    for link, target in (("link.bin", "/etc/hostname"), ("loop.bin", "loop.bin")):
        if not os.path.lexists(folder / link):
            os.symlink(target, folder / link)
    if not os.path.lexists(folder / "fifo.bin"):
        os.mkfifo(folder / "fifo.bin")


def build(recipe: Recipe, folder: Path, all_seeds: dict[str, Seed], cache: Path | None = None
          ) -> tuple[Case, bytes, bool]:
    """The case a recipe describes, its model written into `folder/model/`: (case, the model's bytes, whether they
    parse as a ModelProto). `cache` is the kernel cache folder `lint --kernels` uses (WHERE223_CACHE)."""
    seed = all_seeds[recipe["seed"]]
    model, _ = mutate(seed.model, recipe["mutations"])
    marker = None
    if any(edit[0] == "invalid_utf8" for edit in recipe["bytes"]):
        nodes = _nodes(model)
        if nodes:
            _pick(nodes, recipe["node"]).name = MARKER
            marker = MARKER.encode()
    data = edit_bytes(model.SerializeToString(), recipe["bytes"], marker)
    parsed = onnx.ModelProto()
    try:
        parsed.ParseFromString(data)
        parses = True
    except DecodeError:
        parses = False
    model_dir = folder / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    _files_around(model_dir)
    path = model_dir / "model.onnx"
    path.write_bytes(data)
    command = recipe["command"]
    names = [str(path)]
    env = {}
    codes = {0, 1, 2}
    if command.startswith("lint"):
        argv = ["lint", str(path)]
        codes = {0, 1, 2, 3}
        if command == "lint-kernels":
            argv.append("--kernels")
            codes.add(4)
            if cache is not None:
                env["WHERE223_CACHE"] = str(cache)
                names.append(str(cache))
        elif command != "lint":
            argv += ["--format", command.split("-", 1)[1]]
    elif command in ("blame", "draw"):
        node_names = [n.name for n in (_nodes(parsed) if parses else []) if isinstance(n.name, str)]
        node = recipe["node_text"] if recipe["node_text"] is not None else (_pick(node_names, recipe["node"]) or "")
        names.append(node)
        if command == "blame":
            argv = ["blame", str(path), node]
        else:
            stem = folder / "figure"
            argv = ["draw", str(path), *([node] if recipe["node_text"] is not None or node_names else []),
                    "--hops", str(recipe["hops"]), "--stem", str(stem)]
            names.append(str(stem))
    else:
        output = folder / "repaired.onnx"
        argv = ["repair", str(path), str(output), "--ort-timeout", "5", "--to", recipe["to"]]
        names += [str(output), recipe["to"]]
    case = Case("onnx", argv, tuple(names), frozenset(codes), env=env)
    return case, data, parses
