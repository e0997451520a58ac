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
that the two tools' node names can be compared (the models and the mutants: `where223.graph.mutants`, which
benchmarks/peers.py shares). ONNX Runtime's verdict (`ort.judge`) is the judge: lint flags
exactly the mutants it refuses for their types, and lint's first root is the node ONNX Runtime names. Where
the two legitimately part, `DISAGREEMENTS` names the reason and `_category` recognises the case from both
sides; every other difference fails the test.

The fast test takes a fixed sample of the models; `-m slow` runs them all (about 30 s) and prints the tally.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest

from where223.graph.lint import FindingKind, LintOutcome, LintReport, lint_model
from where223.graph.loading import subgraphs
from where223.graph.mutants import Mutant, conformance_models, has_subgraphs, model_name
from where223.graph.mutants import mutants_of as _mutants_of
from where223.graph.ort import OrtJudgement, OrtVerdict, judge, refused_operator, resolution_refusal

ROOTS, MODELS = conformance_models()
SAMPLE_EVERY = 10  # the fast test's sample: every tenth model, plus every model with subgraphs
TYPE_REFUSALS = (OrtVerdict.TYPE_ERROR, OrtVerdict.WHERE_TYPE_ERROR)
# where ONNX Runtime's messages name a node, most specific first (inside a function: `node name: `)
ORT_NODE = [re.compile(p) for p in (r"node name: ([^)]*)\)", r"(?:in|of) node \(([^)]*)\)", r"Node \(([^)]*)\)")]


def _name(path: Path) -> str:
    return model_name(path, ROOTS)


def mutants_of(path: Path) -> list[Mutant]:
    """The mutants of one conformance model (`where223.graph.mutants`), named as this test names it."""
    return _mutants_of(path, _name(path))


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

    @property
    def ort_operator(self) -> str | None:
        """The operator ONNX Runtime's message names (a binding's, or the one its type check refused)."""
        if self.ort.type_binding is not None:
            return self.ort.type_binding.op_type
        return refused_operator(self.ort.message)

    def same_node(self) -> bool:
        """Lint's first root is ONNX Runtime's node (onnx's inliner suffixes `__N` to inlined nodes' names). Inside the
        function body ONNX Runtime runs for a node, ONNX Runtime names the body's node by an empty name and its
        operator, or names the node that runs the body (refused while inferring it)."""
        if self.ort_node is None or self.lint_root is None:
            return False
        suffix = r"(__\d+)?" if self.mutant.kind == "cast_function" else ""
        first = self.lint.violations[0]
        if first.function_call is not None:
            if self.ort_node == "":
                return self.ort_operator == first.op_type
            return re.fullmatch(re.escape(self.ort_node) + suffix, first.function_call["node"]) is not None
        resolving = resolution_refusal(self.ort.message)
        if first.kind == FindingKind.DECLARED_TYPE and resolving and resolving[0] == self.lint_root:
            return True  # a declared type at a function's call: ONNX Runtime names the call, then the node inside
        return re.fullmatch(re.escape(self.ort_node) + suffix, self.lint_root) is not None


# Where lint and ONNX Runtime legitimately part: the reason, and how to recognise the case. Each is checked
# in full (lint's side and ONNX Runtime's message), so a new kind of difference fails the test.
DISAGREEMENTS: dict[str, str] = {
    "ort_names_another_root": (
        "ONNX Runtime names another of lint's roots: the mutated value reaches several nodes through nodes "
        "that do not violate, each a root, and ONNX Runtime's topological order visits them in another order "
        "than the file's"
    ),
    "output_not_allowed": (
        "lint also checks outputs against the allowed types, and its first root is the inserted Cast, whose "
        "output type (bfloat16) its opset's Cast does not list; ONNX Runtime checks inputs only and names the "
        "Cast's consumer, which lint lists as a consequence of the Cast"
    ),
}


AGREEMENTS = ("accepted_by_both", "refused_by_both")  # the second: lint's first root is ONNX Runtime's node


def _category(c: Comparison) -> str:
    """One of AGREEMENTS, a key of DISAGREEMENTS, or 'unexplained'."""
    if not c.lint_flags and not c.ort_refuses_types and c.lint_outcome != LintOutcome.INCOMPLETE:
        return "accepted_by_both"
    if c.lint_flags and c.ort_refuses_types and c.same_node():
        return "refused_by_both"
    if c.lint_flags and c.ort_refuses_types:
        first = c.lint.violations[0]
        if c.ort_node in {v.node for v in c.lint.roots}:
            return "ort_names_another_root"
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
    with_subgraphs = [p for p in MODELS if has_subgraphs(onnx.load(str(p), load_external_data=False))]
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
    monkeypatch.setattr(lint, "_verdict", lambda sig, input_types, output_types: lint._CLEAN)
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
