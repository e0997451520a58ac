"""Check every node of an ONNX model against its operator schema's type constraints.

Unlike `onnx.checker`, which stops at the first problem of any kind, this reports every type-parameter
violation in every graph and subgraph, and never loads external weight data.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import onnx

from where223.errors import printable
from where223.graph.loading import ModelLike, load_model, node_label
from where223.graph.schema import Signature, formal_pairs, signature_for
from where223.graph.types import ModelTypes, Scope, model_types


class FindingKind(StrEnum):
    """What a violation breaks: one type parameter bound to two types, or a type outside its allowed set."""

    BINDING_CONFLICT = "type_binding_conflict"
    NOT_ALLOWED = "type_not_allowed"


@dataclass(frozen=True)
class Binding:
    """One input or output bound to a type parameter, with the type it carries."""

    io: str  # "input" or "output"
    position: int
    name: str
    type: str

    def __str__(self) -> str:
        return f"{self.io} {self.position} '{printable(self.name)}': {self.type}"


@dataclass
class Violation:
    """A type parameter of one node that its values break.

    `bindings` lists every value bound to the parameter; `offending` the ones that break it: for a
    conflict those whose type differs from `expected` (the type the node's outputs carry, else the
    majority, ties to the earliest position), for a disallowed type those outside `allowed`.
    """

    node: str
    node_index: int
    op_type: str
    domain: str
    type_param: str
    kind: FindingKind
    bindings: list[Binding]
    offending: list[Binding]
    allowed: list[str]
    subgraph: str
    expected: str | None = None

    def message(self) -> str:
        """One line in ONNX Runtime's own wording."""
        where = f" in subgraph {printable(self.subgraph)}" if self.subgraph else ""
        if self.kind == FindingKind.BINDING_CONFLICT:
            types = " and ".join(dict.fromkeys(b.type for b in self.bindings))
            return (
                f"Type parameter ({self.type_param}) of Optype ({self.op_type}) bound to different types "
                f"({types}) in node ({printable(self.node)}){where}"
            )
        types = ", ".join(dict.fromkeys(b.type for b in self.offending))
        return (
            f"Type ({types}) of Optype ({self.op_type}) not allowed for type parameter "
            f"({self.type_param}) in node ({printable(self.node)}){where}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return asdict(self)


@dataclass
class LintReport:
    """Every violation in a model, with what could not be checked."""

    model_path: str | None
    opset: int | None
    opset_imports: dict[str, int]
    nodes_checked: int
    unchecked: dict[str, int]  # "domain:op_type" -> nodes with no onnx schema (custom ops, local functions)
    untyped_values: int  # values at checked nodes whose type no source could determine
    violations: list[Violation] = field(default_factory=list)
    inlined_functions: int = 0  # model-local functions inlined before checking (their nodes get new names)

    @property
    def clean(self) -> bool:
        """True when no violation was found."""
        return not self.violations

    @property
    def unchecked_count(self) -> int:
        """How many nodes had no schema to check against."""
        return sum(self.unchecked.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        record = asdict(self)
        record["violations"] = [v.to_dict() for v in self.violations]
        record["clean"] = self.clean
        return record

    def format(self) -> str:
        """A human-readable report."""
        head = (
            f"{self.model_path or '<model>'}: opset {self.opset}, {self.nodes_checked} nodes checked, "
            f"{self.unchecked_count} unchecked, {self.untyped_values} untyped values"
        )
        lines = [head]
        if self.inlined_functions:
            inlined = f"  {self.inlined_functions} model-local function(s) inlined first"
            lines.append(f"{inlined}: node names are the inliner's")
        if self.unchecked:
            ops = ", ".join(f"{printable(op)} x{n}" for op, n in sorted(self.unchecked.items()))
            lines.append(f"  unchecked (no onnx schema): {ops}")
        if self.clean:
            lines.append("no type-constraint violations")
            return "\n".join(lines)
        lines.append(f"{len(self.violations)} violation(s):")
        for v in self.violations:
            lines.append(f"  {v.kind}: {v.message()}")
            for b in v.bindings:
                mark = "  <-- offending" if b in v.offending else ""
                lines.append(f"      {b}{mark}")
            if v.kind == FindingKind.NOT_ALLOWED:
                lines.append(f"      allowed: {', '.join(v.allowed)}")
        return "\n".join(lines)


def _expected_type(bindings: list[Binding]) -> str:
    """The type a conflicting parameter resolves to: the outputs' common type, else the majority."""
    output_types = {b.type for b in bindings if b.io == "output"}
    if len(output_types) == 1:
        return output_types.pop()
    counts = Counter(b.type for b in bindings)
    ordered = sorted(bindings, key=lambda b: (b.io != "input", b.position))
    return max(dict.fromkeys(b.type for b in ordered), key=lambda t: counts[t])


def _check_node(
    node: onnx.NodeProto, index: int, sig: Signature, scope: Scope
) -> tuple[list[Violation], int]:
    """The violations of one node and how many of its values had no known type."""
    by_param: dict[str, list[tuple[str, int, str, str]]] = {}  # Binding's fields, built only when reported
    homogeneous: dict[str, bool] = {}
    untyped = 0
    for io, actual, formals in (("input", node.input, sig.inputs), ("output", node.output, sig.outputs)):
        for position, name, formal in formal_pairs(actual, formals):
            value_type = scope.type_of(name)
            if value_type is None:
                untyped += 1
                continue
            by_param.setdefault(formal.type_str, []).append((io, position, name, value_type))
            homogeneous[formal.type_str] = homogeneous.get(formal.type_str, True) and formal.homogeneous

    def violation(param: str, kind: FindingKind, bindings: list[Binding], offending: list[Binding]) -> Violation:
        return Violation(
            node=node_label(node, index),
            node_index=index,
            op_type=node.op_type,
            domain=node.domain,
            type_param=param,
            kind=kind,
            bindings=bindings,
            offending=offending,
            allowed=list(sig.allowed(param)),
            subgraph=scope.path,
            expected=_expected_type(bindings) if kind == FindingKind.BINDING_CONFLICT else None,
        )

    found = []
    for param, values in by_param.items():
        types = {value_type for *_, value_type in values}
        if (len(types) == 1 or not homogeneous[param]) and types <= sig.admitted(param):
            continue  # the common case, checked without building a Binding
        bindings = [Binding(*value) for value in values]
        if homogeneous[param] and len(types) > 1:
            conflict = violation(param, FindingKind.BINDING_CONFLICT, bindings, [])
            conflict.offending = [b for b in bindings if b.type != conflict.expected]
            found.append(conflict)
        outside = [b for b in bindings if b.type not in sig.admitted(param)]
        if outside:
            found.append(violation(param, FindingKind.NOT_ALLOWED, bindings, outside))
    return found, untyped


def lint_types(types: ModelTypes, model_path: str | None = None) -> LintReport:
    """Check every node of every scope of an already-typed model."""
    report = LintReport(
        model_path=model_path,
        opset=types.opsets.get(""),
        opset_imports=dict(types.opsets),
        nodes_checked=0,
        unchecked={},
        untyped_values=0,
    )
    unchecked: Counter[str] = Counter()
    for scope in types.scopes.values():
        for index, node in enumerate(scope.graph.node):
            sig = signature_for(node, types.opsets)
            if sig is None:
                unchecked[f"{node.domain or 'ai.onnx'}:{node.op_type}"] += 1
                continue
            found, untyped = _check_node(node, index, sig, scope)
            report.violations.extend(found)
            report.untyped_values += untyped
            report.nodes_checked += 1
    report.unchecked = dict(unchecked)
    return report


def lint_model(model_or_path: ModelLike) -> LintReport:
    """Lint a model (or the .onnx file at a path; weights are not loaded).

    Model-local functions (the dynamo exporter puts whole modules in them) are inlined first with onnx's
    own inliner, so that the nodes inside them are checked at their call sites' types.
    """
    model, path = load_model(model_or_path)
    functions = len(model.functions)
    if functions:
        import onnx.inliner

        model = onnx.inliner.inline_local_functions(model)
    report = lint_types(model_types(model), str(path) if path else None)
    report.inlined_functions = functions
    return report

