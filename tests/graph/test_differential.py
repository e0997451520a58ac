"""Lint against ONNX Runtime on models no one here wrote: onnx's own conformance models
(`onnx/backend/test/data/**/model.onnx`) and mutants of them this test makes. A wheel that ships no node models
(onnx 1.23's ships only `light`, `pytorch-*`, `real` and `simple`) gets them from onnx's own generators
(`onnx.backend.test.case.node.collect_testcases`), written once per onnx version under
`.cache/onnx-conformance/<version>/node/`.

(a) Lint finds every conformance model clean and complete; ONNX Runtime refuses some, never for their types
(`REFUSAL_REASONS` says why).
(b) Each mutant changes one float type: a main-graph input or initializer retyped, or a Cast to another float
type inserted on one edge of the main graph, of an If/Loop/Scan body, or of a model-local function (the
conformance models hold none, so one node is first wrapped into one); nameless nodes are named first, so
that the two tools' node names can be compared. ONNX Runtime's verdict (`ort.judge`) is the judge: lint flags
exactly the mutants it refuses for their types, and lint's first root is the node ONNX Runtime names. Where
the two legitimately part, `DISAGREEMENTS` names the reason and `_category` recognises the case from both
sides; every other difference fails the test.

The fast test takes a fixed sample of the models; `-m slow` runs them all (about 30 s) and prints the tally.
"""

from __future__ import annotations

import copy
import random
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from where223.graph.lint import FindingKind, LintOutcome, LintReport, lint_model
from where223.graph.loading import node_label, subgraphs
from where223.graph.ort import OrtJudgement, OrtVerdict, judge
from where223.graph.schema import opset_imports
from where223.graph.types import model_types
from where223.pipeline.paths import ROOT

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
GENERATED = ROOT / ".cache" / "onnx-conformance" / onnx.__version__


def generated_node_models(folder: Path = GENERATED) -> list[Path]:
    """onnx's node test models from its generators, written once under `folder` (a file lock for xdist's workers,
    a marker file when all are written), as `node/<case>/model.onnx`."""
    import fcntl
    import warnings

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


def conformance_models() -> tuple[list[Path], list[Path]]:
    """(the roots model names are relative to, every conformance model): the wheel's, plus generated node
    models where it ships none."""
    shipped = sorted(DATA.rglob("model.onnx"))
    if (DATA / "node").is_dir():
        return [DATA], shipped
    return [DATA, GENERATED], sorted(shipped + generated_node_models())


ROOTS, MODELS = conformance_models()
FLOATS = {
    TensorProto.FLOAT: "tensor(float)",
    TensorProto.FLOAT16: "tensor(float16)",
    TensorProto.DOUBLE: "tensor(double)",
    TensorProto.BFLOAT16: "tensor(bfloat16)",
}
ELEM_OF = {text: elem for elem, text in FLOATS.items()}
SAMPLE_EVERY = 10  # the fast test's sample: every tenth model, plus every model with subgraphs
TYPE_REFUSALS = (OrtVerdict.TYPE_ERROR, OrtVerdict.WHERE_TYPE_ERROR)
# where ONNX Runtime's messages name a node, most specific first (inside a function: `node name: `)
ORT_NODE = [re.compile(p) for p in (r"node name: ([^)]*)\)", r"(?:in|of) node \(([^)]*)\)", r"Node \(([^)]*)\)")]


def _name(path: Path) -> str:
    root = next(root for root in ROOTS if path.is_relative_to(root))
    return path.parent.relative_to(root).as_posix()


def _holds_graphs(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _has_subgraphs(model: onnx.ModelProto) -> bool:
    return any(_holds_graphs(node) for node in model.graph.node)


@dataclass
class Mutant:
    """One float type changed in one place of a conformance model."""

    source: str  # the conformance model's folder under onnx/backend/test/data
    kind: str  # retype_input, retype_initializer, cast_main, cast_subgraph, cast_function
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
        if node.domain in ("", "ai.onnx") and not _holds_graphs(node)
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


def _name_every_node(model: onnx.ModelProto) -> None:
    """Give each nameless node a unique name (most conformance nodes have none; ONNX Runtime then names `()`)."""
    nodes = (node for _, graph in subgraphs(model.graph) for node in graph.node)
    for k, node in enumerate(nodes):
        if not node.name:
            node.name = f"n{k}_{node.op_type}"


def _casts_allowed(model: onnx.ModelProto) -> bool:
    """Whether a Cast with an integer `to` can be added: the default domain imported at opset 6 or later."""
    return opset_imports(model).get("", 0) >= 6


def mutants_of(path: Path) -> list[Mutant]:
    """The mutants of one conformance model, the same on every run (seeded by its folder's name)."""
    model = onnx.load(str(path))
    _name_every_node(model)
    source = _name(path)
    rng = random.Random(zlib.crc32(source.encode()))
    made = [_retype(model, rng, source)]
    if _casts_allowed(model):
        made += [
            _cast_on_edge(model, rng, source, in_subgraph=False),
            _cast_on_edge(model, rng, source, in_subgraph=True),
            _cast_in_function(model, rng, source),
        ]
    return [m for m in made if m is not None]


@dataclass
class Comparison:
    """What lint and ONNX Runtime made of one mutant."""

    mutant: Mutant
    lint: LintReport
    ort: OrtJudgement

    @property
    def lint_outcome(self) -> LintOutcome:
        return self.lint.outcome

    @property
    def lint_root(self) -> str | None:
        """The first root's node."""
        return self.lint.violations[0].node if self.lint.violations else None

    @property
    def ort_node(self) -> str | None:
        """The node ONNX Runtime's message names, if any."""
        if self.ort.type_binding is not None:
            return self.ort.type_binding.node
        for pattern in ORT_NODE:
            found = pattern.search(self.ort.message or "")
            if found:
                return found[1]
        return None

    @property
    def ort_op_type(self) -> str | None:
        """The op type of the node ONNX Runtime names, looked up in the mutant (for a function's call: the op
        the function wraps)."""
        model, name = self.mutant.model, self.ort_node
        if name is not None and name == self.mutant.call:
            model, name = onnx.ModelProto(graph=onnx.GraphProto(node=model.functions[0].node)), "wrapped"
        nodes = [node for _, graph in subgraphs(model.graph) for node in graph.node]
        nodes += [node for function in model.functions for node in function.node]  # a refusal inside a function
        return next((node.op_type for node in nodes if node.name == name), None)

    @property
    def lint_flags(self) -> bool:
        return self.lint_outcome == LintOutcome.VIOLATIONS

    @property
    def ort_refuses_types(self) -> bool:
        return self.ort.verdict in TYPE_REFUSALS

    def same_node(self) -> bool:
        """Lint's first root is ONNX Runtime's node (onnx's inliner suffixes `__N` to inlined nodes' names)."""
        if self.ort_node is None or self.lint_root is None:
            return False
        suffix = r"(__\d+)?" if self.mutant.kind == "cast_function" else ""
        return re.fullmatch(re.escape(self.ort_node) + suffix, self.lint_root) is not None


# Where lint and ONNX Runtime legitimately part: the reason, and how to recognise the case. Each is checked
# in full (lint's side and ONNX Runtime's message), so a new kind of difference fails the test.
DISAGREEMENTS: dict[str, str] = {
    "ort_names_another_root": (
        "ONNX Runtime names another of lint's roots: the mutated value reaches several nodes through nodes "
        "that do not violate, each a root, and ONNX Runtime's topological order visits them in another order "
        "than the file's"
    ),
    "ort_names_the_call": (
        "the refusal is at a model-local function's output, which ONNX Runtime reports at the call node; lint "
        "inlines the function first and names the node inside it that produces that output"
    ),
    "output_not_allowed": (
        "lint also checks outputs against the allowed types, and its first root is the inserted Cast, whose "
        "output type (bfloat16) its opset's Cast does not list; ONNX Runtime checks inputs only and names the "
        "Cast's consumer, which lint lists as a consequence of the Cast"
    ),
    "declared_vs_inferred": (
        "ONNX Runtime refuses a declared graph-output type that contradicts the type an operator's inference "
        "function derives, where no type parameter links the two (SplitToSequence's seq(T), SequenceAt's and "
        "OptionalGetElement's element type, Bernoulli's output without `dtype`, an If's outputs and its "
        "branches'; DequantizeLinear-23's output follows `output_dtype`, else x_scale's type; RMSNormalization-23's "
        "schema gives Y scale's type V, its inference X's type T); lint checks type-parameter bindings and allowed "
        "sets only"
    ),
    "function_body_binds": (
        "ONNX Runtime has no kernel for the operator at these types and expands the operator's function body "
        "(onnx's own definition, e.g. Attention-23's), whose nameless nodes (a MatMul) bind types that the "
        "operator's schema keeps apart (Attention's V in T2, Q and K in T1); lint checks the operator against its "
        "schema, not its body"
    ),
}


# ops whose output type follows from an input's only through their inference function, not a shared type parameter
INFERENCE_ONLY_LINKS = {"SplitToSequence", "SequenceAt", "Optional", "OptionalGetElement", "Bernoulli", "If",
                        "DequantizeLinear", "RMSNormalization"}
AGREEMENTS = ("accepted_by_both", "refused_by_both")  # the second: lint's first root is ONNX Runtime's node


def _has_function_body(model: onnx.ModelProto) -> bool:
    """Whether a node of the model (or of its local functions) is an operator that onnx defines by a function body."""
    nodes = [node for _, graph in subgraphs(model.graph) for node in graph.node]
    nodes += [node for function in model.functions for node in function.node]
    imports = opset_imports(model)
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, imports.get("", 1))
        except onnx.defs.SchemaError:
            continue
        if schema.has_function or schema.has_context_dependent_function:
            return True
    return False


def _category(c: Comparison) -> str:
    """One of AGREEMENTS, a key of DISAGREEMENTS, or 'unexplained'."""
    if not c.lint_flags and not c.ort_refuses_types and c.lint_outcome != LintOutcome.INCOMPLETE:
        return "accepted_by_both"
    if c.lint_flags and c.ort_refuses_types and c.same_node():
        return "refused_by_both"
    message = c.ort.message or ""
    if (
        not c.lint_flags
        and c.ort_refuses_types
        and ("does not match expected type" in message or "has inconsistent type" in message)
        and c.ort_op_type in INFERENCE_ONLY_LINKS
    ):
        return "declared_vs_inferred"
    if (
        not c.lint_flags
        and c.ort_refuses_types
        and c.ort_node == ""
        and c.ort_op_type is None
        and _has_function_body(c.mutant.model)
    ):
        return "function_body_binds"
    if c.lint_flags and c.ort_refuses_types:
        first = c.lint.violations[0]
        if c.ort_node in {v.node for v in c.lint.roots}:
            return "ort_names_another_root"
        if (
            c.mutant.kind == "cast_function"
            and c.ort_node == c.mutant.call
            and "does not match expected type" in message
            and re.fullmatch(r"(wrapped|mutant_cast)(__\d+)?", first.node)
        ):
            return "ort_names_the_call"
        followers = {v.node for v in c.lint.violations if first.label in v.caused_by}
        if (
            first.op_type == "Cast"
            and first.kind == FindingKind.NOT_ALLOWED
            and all(b.io == "output" for b in first.offending)
            and c.ort_node in followers
        ):
            return "output_not_allowed"
    return "unexplained"


def compare(mutant: Mutant) -> Comparison:
    """Lint's and ONNX Runtime's verdicts on a mutant."""
    return Comparison(mutant, lint_model(mutant.model), judge(mutant.model))


def _sample() -> list[Path]:
    """The fast test's models: every SAMPLE_EVERY-th, plus every model with subgraphs."""
    with_subgraphs = [p for p in MODELS if _has_subgraphs(onnx.load(str(p), load_external_data=False))]
    return sorted({*MODELS[::SAMPLE_EVERY], *with_subgraphs})


# why ONNX Runtime refuses a conformance model as it is (none of them for its types), by a phrase of its message
REFUSAL_REASONS = {
    "unregistered training op (ai.onnx.preview.training)": "is not a registered function/op",
    "batchwise recurrent layout unsupported (GRU, LSTM, RNN with layout=1)": "Batchwise recurrent operations",
    "StringNormalizer needs the en_US.UTF-8 locale": "Failed to construct locale",
}


def _judged_accepting(paths: list[Path]) -> tuple[list[Path], dict[str, str]]:
    """(a) on `paths`: lint finds every model complete and without violation, and ONNX Runtime refuses none
    for its types. Returns the models whose types ONNX Runtime accepts and, for the others, the reason."""
    accepting, refused = [], {}
    for path in paths:
        report = lint_model(path)
        assert report.outcome == LintOutcome.CLEAN, (_name(path), report.format())
        judgement = judge(path)
        assert judgement.verdict not in TYPE_REFUSALS, _name(path)
        if judgement.verdict.types_accepted:
            accepting.append(path)
            continue
        reasons = [reason for reason, phrase in REFUSAL_REASONS.items() if phrase in (judgement.message or "")]
        assert len(reasons) == 1, (_name(path), judgement.message)
        refused[_name(path)] = reasons[0]
    return accepting, refused


def _tally(paths: list[Path]) -> tuple[Counter[tuple[str, str]], list[Comparison]]:
    """(b) on `paths`: each mutant's category by kind, and the comparisons no category explains."""
    tally: Counter[tuple[str, str]] = Counter()
    unexplained = []
    for path in paths:
        for mutant in mutants_of(path):
            comparison = compare(mutant)
            category = _category(comparison)
            assert category in (*AGREEMENTS, *DISAGREEMENTS, "unexplained"), category
            tally[mutant.kind, category] += 1
            if category == "unexplained":
                unexplained.append(comparison)
    return tally, unexplained


def _describe(c: Comparison) -> str:
    return (
        f"{c.mutant.source} {c.mutant.kind} ({c.mutant.where}): lint {c.lint_outcome} at {c.lint_root}, "
        f"ONNX Runtime {c.ort.verdict} at {c.ort_node}: {(c.ort.message or '')[:200]}"
    )


def test_there_is_material():
    assert len(MODELS) > 1000 and len(_sample()) > 140


def test_mutants_are_the_same_on_every_run():
    path = next(p for p in MODELS if _name(p) == "node/test_range_float_type_positive_delta_expanded")
    first, second = mutants_of(path), mutants_of(path)
    assert [m.kind for m in first] == ["retype_input", "cast_main", "cast_subgraph", "cast_function"]
    assert [m.model.SerializeToString() for m in first] == [m.model.SerializeToString() for m in second]


def test_lint_and_onnx_runtime_agree_on_a_sample():
    accepting, refused = _judged_accepting(_sample())
    assert refused
    tally, unexplained = _tally(accepting)
    assert unexplained == [], "\n".join(map(_describe, unexplained))
    for kind in ("retype_input", "cast_main", "cast_subgraph", "cast_function"):
        assert tally[kind, "refused_by_both"] >= 3, tally
    assert sum(n for (_, category), n in tally.items() if category == "accepted_by_both") >= 20, tally
    agreeing = sum(n for (_, category), n in tally.items() if category in AGREEMENTS)
    assert agreeing >= 0.6 * sum(tally.values()), tally


def test_a_lint_that_misses_violations_is_caught(monkeypatch):
    """Control: a lint that checks nothing leaves every type refusal unexplained."""
    import where223.graph.lint as lint

    path = next(p for p in MODELS if _name(p) == "node/test_range_float_type_positive_delta_expanded")
    monkeypatch.setattr(lint, "_check_node", lambda node, index, sig, scope: ([], []))
    comparisons = [compare(m) for m in mutants_of(path)]
    refused = [c for c in comparisons if c.ort_refuses_types]
    assert refused and all(_category(c) == "unexplained" for c in refused)


def test_a_root_at_the_wrong_node_is_caught():
    """Control: lint's verdict with another node as its first root is no agreement."""
    path = next(p for p in MODELS if _name(p) == "node/test_add")
    comparison = next(c for c in map(compare, mutants_of(path)) if c.mutant.kind == "cast_main")
    assert _category(comparison) == "refused_by_both"
    comparison.lint.violations[0].node = "some_other_node"
    assert _category(comparison) == "unexplained"


@pytest.mark.slow
def test_lint_and_onnx_runtime_agree_on_every_conformance_model():
    accepting, refused = _judged_accepting(MODELS)
    tally, unexplained = _tally(accepting)
    print(f"{len(MODELS)} models, {len(refused)} refused by ONNX Runtime: {dict(Counter(refused.values()))}")
    print(f"{sum(tally.values())} mutants: {dict(sorted(tally.items()))}")
    assert unexplained == [], "\n".join(map(_describe, unexplained))
