"""Reduced-precision kernels emulated on CPU: a bf16 (or fp16) graph made executable by ONNX Runtime's CPU
provider, which lacks most such kernels (Gemm, MatMul, ...).

Each node that reads or writes a reduced-precision tensor is wrapped: its reduced inputs are Cast to float32,
it computes in float32, and each reduced output is Cast back to the reduced type under its old name (float
compute, outputs rounded as a GPU's tensor cores round fp32 accumulation). Every value between nodes keeps its
type, so the interface (graph inputs and outputs) is unchanged. Cast and Constant nodes stay as they are (ONNX
Runtime's CPU provider has their reduced-precision kernels); control-flow nodes stay and their subgraphs are
rewritten; nodes without an onnx schema (custom domains) stay. Attributes that fix a reduced output type (`to`,
`dtype`, a reduced tensor such as ConstantOfShape's `value`) are converted to float32 (exactly: every bf16 and
fp16 number is a float32).

A naive rewrite would also make a graph run whose types ONNX Runtime refuses (the unfixed Where, fed float and
bf16, gets two float inputs), hiding the very type error under study. So the type check comes first: a graph
that ONNX Runtime refuses for types, or in which the linter finds a type-binding conflict, is never emulated
(`EmulationRefused`). onnx and numpy only; onnxruntime is loaded by the functions that run a session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from where223.errors import UsageError
from where223.graph.dtypes import elem_type_name, elem_type_of
from where223.graph.lint import FindingKind, Violation, lint_types
from where223.graph.loading import FreshNames, ModelLike, inline_local_functions, load_model, subgraphs
from where223.graph.ort import OrtJudgement, OrtVerdict, judge, load_session
from where223.graph.schema import signature_for
from where223.graph.types import ModelTypes, Scope, model_types

# the reduced types this pass emulates, with their short names and significant bits (implicit bit included)
SHORT_NAMES: dict[str, str] = {"bfloat16": "bf16", "float16": "fp16"}
SIGNIFICANT_BITS: dict[str, int] = {"bfloat16": 8, "float16": 11, "float": 24}
_SMALLEST_NORMAL: dict[str, float] = {"bfloat16": 2.0**-126, "float16": 2.0**-14, "float": 2.0**-126}
_FLOAT = onnx.TensorProto.FLOAT
_KEPT_OPS = frozenset({"Cast", "Constant"})  # their reduced-precision kernels exist on CPU
_TYPE_ATTRIBUTES = frozenset({"to", "dtype"})


class EmulationRefused(UsageError, ValueError):
    """The graph failed the type check: emulating it would hide a type error, so it is not emulated."""

    def __init__(self, message: str, judgement: OrtJudgement, conflicts: list[Violation]) -> None:
        super().__init__(message)
        self.judgement = judgement
        self.conflicts = conflicts


class EmulationError(RuntimeError):
    """The emulated graph is still not accepted by ONNX Runtime (a gap in this pass, not in the model)."""


@dataclass(frozen=True)
class Emulation:
    """A graph with its reduced-precision kernels emulated, and what the pass did.

    `type_check` is ONNX Runtime's verdict on the graph as given (types accepted, or emulation is refused);
    `emulated_nodes` counts nodes by op type that now compute in float32; `kept_nodes` those touching a
    reduced type that were left as they were (Cast, Constant, control flow, custom ops).
    """

    model: onnx.ModelProto
    reduced_types: tuple[str, ...]
    type_check: OrtJudgement
    emulated_nodes: dict[str, int] = field(default_factory=dict)
    kept_nodes: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How results of this graph are named: 'emulated bf16', or 'no reduced precision' for a float graph."""
        if not self.reduced_types:
            return "no reduced precision"
        return "emulated " + "+".join(SHORT_NAMES[name] for name in self.reduced_types)


def spacing(magnitude: float, element_type: str = "bfloat16") -> float:
    """The distance between adjacent numbers of `element_type` at `magnitude`: 2**(floor(log2|x|) - (p - 1))
    with p significant bits (bfloat16: 8, float16: 11, float: 24); the smallest normal's spacing below it."""
    bits = SIGNIFICANT_BITS[element_type]
    exponent = int(np.floor(np.log2(max(abs(float(magnitude)), _SMALLEST_NORMAL[element_type]))))
    return 2.0 ** (exponent - (bits - 1))


def _type_check(model: onnx.ModelProto, types: ModelTypes) -> OrtJudgement:
    """ONNX Runtime's verdict, when neither it nor the linter objects to the types; else EmulationRefused."""
    judgement = judge(model)
    conflicts = [v for v in lint_types(types).violations if v.kind == FindingKind.BINDING_CONFLICT]
    if not judgement.verdict.types_accepted or conflicts:
        first = (judgement.message or "").strip().splitlines()
        reasons = [f"ONNX Runtime: {judgement.verdict}" + (f" ({first[0][:300]})" if first else "")]
        reasons += [f"lint: {v.message()}" for v in conflicts[:3]]
        raise EmulationRefused(
            "the graph fails the type check, so it is not emulated (emulation would hide the type error): "
            + "; ".join(reasons),
            judgement,
            conflicts,
        )
    return judgement


def _reduced_attribute(attr: onnx.AttributeProto, reduced: set[int]) -> bool:
    if attr.type == onnx.AttributeProto.INT and attr.name in _TYPE_ATTRIBUTES:
        return attr.i in reduced
    return attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in reduced


def _to_float_attribute(attr: onnx.AttributeProto) -> None:
    """A reduced type attribute made float32, in place (tensor values converted exactly)."""
    if attr.type == onnx.AttributeProto.INT:
        attr.i = _FLOAT
    else:
        attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))


class _Rewriter:
    """Wraps the reduced-precision nodes of every graph of a copy of a model."""

    def __init__(self, model: onnx.ModelProto, types: ModelTypes, reduced: set[int]) -> None:
        self.types = types
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        self.reduced = reduced
        self.reduced_strings = {f"tensor({elem_type_name(elem)})" for elem in reduced}
        self.fresh = FreshNames(self.model).fresh
        self.emulated: Counter[str] = Counter()
        self.kept: Counter[str] = Counter()

    def _touches_reduced(self, node: onnx.NodeProto, scope: Scope) -> bool:
        values = (*node.input, *node.output)
        return any(name and scope.type_of(name) in self.reduced_strings for name in values) or any(
            _reduced_attribute(attr, self.reduced) for attr in node.attribute
        )

    def _keeps(self, node: onnx.NodeProto) -> bool:
        if node.op_type in _KEPT_OPS and node.domain in ("", "ai.onnx"):
            return True
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return True  # control flow: its subgraphs are rewritten on their own
        return signature_for(node, self.types.opsets) is None

    def rewrite_graph(self, path: str, graph: onnx.GraphProto) -> None:
        scope = self.types.scopes[path]
        to_float: dict[str, str] = {}  # reduced value -> its float32 copy in this graph
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            if not self._touches_reduced(node, scope):
                nodes.append(node)
                continue
            if self._keeps(node):
                self.kept[node.op_type] += 1
                nodes.append(node)
                continue
            for position, name in enumerate(node.input):
                if not name or scope.type_of(name) not in self.reduced_strings:
                    continue
                if name not in to_float:
                    to_float[name] = self.fresh(f"{name}_emulated_float32")
                    nodes.append(onnx.helper.make_node(
                        "Cast", [name], [to_float[name]], name=self.fresh(f"{name}/EmulationCastFloat32"), to=_FLOAT
                    ))  # fmt: skip
                node.input[position] = to_float[name]
            for attr in node.attribute:
                if _reduced_attribute(attr, self.reduced):
                    _to_float_attribute(attr)
            rounded = []
            for position, name in enumerate(node.output):
                value_type = scope.type_of(name) if name else None
                if value_type not in self.reduced_strings:
                    continue
                computed = self.fresh(f"{name}_emulated_float32")
                node.output[position] = computed
                rounded.append(onnx.helper.make_node(
                    "Cast", [computed], [name], name=self.fresh(f"{name}/EmulationRound"), to=elem_type_of(value_type)
                ))  # fmt: skip
            nodes.append(node)
            nodes.extend(rounded)
            self.emulated[node.op_type] += 1
        del graph.node[:]
        graph.node.extend(nodes)

    def apply(self) -> onnx.ModelProto:
        # subgraphs first: rebuilding a node list copies its nodes, subgraph attributes included
        for path, graph in reversed(subgraphs(self.model.graph)):
            self.rewrite_graph(path, graph)
        return self.model


def _reduced_types_in(model: onnx.ModelProto, types: ModelTypes, candidates: set[int]) -> tuple[str, ...]:
    found: set[int] = set()
    for scope in types.scopes.values():
        for graph_type in scope.types.maps[0].values():
            found.update(elem for elem in candidates if graph_type == f"tensor({elem_type_name(elem)})")
    for _, graph in subgraphs(model.graph):
        for node in graph.node:
            found.update(elem for elem in candidates for attr in node.attribute if _reduced_attribute(attr, {elem}))
    return tuple(elem_type_name(elem) for elem in sorted(found))


def emulate_reduced_precision(
    model_or_path: ModelLike, reduced_types: Sequence[str] = ("bfloat16", "float16")
) -> Emulation:
    """The model with every reduced-precision node computing in float32 and rounding its outputs back.

    Model-local functions are inlined first. Then the type check: raises EmulationRefused when ONNX Runtime
    refuses the graph's types or the linter finds a type-binding conflict. A graph with no value of a reduced
    type is returned as it is.
    Raises EmulationError when ONNX Runtime's CPU provider still cannot load the emulated graph.
    """
    model, path = load_model(model_or_path, load_weights=True)
    if model.functions:  # the nodes inside model-local functions need emulating at their call sites' types
        model = inline_local_functions(model, path)
    types = model_types(model)
    judgement = _type_check(model, types)
    reduced = {elem_type_of(name) for name in reduced_types}
    found = _reduced_types_in(model, types, reduced)
    if not found:
        return Emulation(model, (), judgement)
    rewriter = _Rewriter(model, types, reduced)
    emulated = rewriter.apply()
    after = judge(emulated)
    if after.verdict != OrtVerdict.ACCEPTED:
        raise EmulationError(
            f"the emulated graph is still not accepted by ONNX Runtime's CPU provider: {after.verdict} "
            f"({(after.message or '').strip()[:300]})"
        )
    return Emulation(emulated, found, judgement, dict(rewriter.emulated), dict(rewriter.kept))


def without_dropout(model_or_path: ModelLike) -> onnx.ModelProto:
    """A copy in which every Dropout (training-mode exports keep theirs) passes its input through: its
    `training_mode` input is dropped, so it defaults to false, as in eager `eval()`."""
    model, _ = load_model(model_or_path, load_weights=True)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for _, graph in subgraphs(copy.graph):
        for node in graph.node:
            if node.op_type == "Dropout" and node.domain in ("", "ai.onnx") and len(node.input) > 2:
                del node.input[2:]
    return copy


def _float_boundary(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str], dict[str, str]]:
    """A copy whose reduced-precision graph inputs and outputs are float32 (numpy has no bfloat16), with the
    new names of those inputs and outputs: each such input is Cast to its type on entry (rounding there), each
    such output is copied to float32 (exactly)."""
    boundary = onnx.ModelProto()
    boundary.CopyFrom(model)
    graph, fresh = boundary.graph, FreshNames(boundary).fresh
    reduced = {elem_type_of(name) for name in SHORT_NAMES}
    inputs, outputs, entry, exits = {}, {}, [], []
    for value in graph.input:
        elem = value.type.tensor_type.elem_type
        if value.type.HasField("tensor_type") and elem in reduced:
            inputs[value.name] = fresh(f"{value.name}_float32")
            entry.append(onnx.helper.make_node(
                "Cast", [inputs[value.name]], [value.name], name=fresh(f"{value.name}/BoundaryCast"), to=elem
            ))  # fmt: skip
            value.name = inputs[value.name]
            value.type.tensor_type.elem_type = _FLOAT
    for value in graph.output:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type in reduced:
            outputs[value.name] = fresh(f"{value.name}_float32")
            exits.append(onnx.helper.make_node(
                "Cast", [value.name], [outputs[value.name]], name=fresh(f"{value.name}/BoundaryCast"), to=_FLOAT
            ))  # fmt: skip
            value.name = outputs[value.name]
            value.type.tensor_type.elem_type = _FLOAT
    nodes = [*entry, *graph.node, *exits]
    del graph.node[:]
    graph.node.extend(nodes)
    return boundary, inputs, outputs


def run_float_boundary(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    output_names: Sequence[str] | None = None,
    providers: Sequence[str] = ("CPUExecutionProvider",),
) -> dict[str, np.ndarray]:
    """Run a model in ONNX Runtime, feeding float32 for its reduced-precision inputs (rounded on entry) and
    reading its reduced-precision outputs as float32 (exactly); results keyed by the model's output names."""
    boundary, inputs, outputs = _float_boundary(model)
    session = load_session(boundary, providers)
    fed = {inputs.get(name, name): np.asarray(array, np.float32) if name in inputs else array
           for name, array in feeds.items()}  # fmt: skip
    names = list(output_names or [value.name for value in model.graph.output])
    results = session.run([outputs.get(name, name) for name in names], fed)
    return dict(zip(names, results, strict=True))


def emulated_outputs(
    emulation: Emulation, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Run an emulated graph on ONNX Runtime's CPU provider; reduced-precision outputs come back as float32."""
    return run_float_boundary(emulation.model, feeds, output_names)
