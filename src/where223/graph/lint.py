"""Check every node of an ONNX model against its operator schema's type constraints.

Unlike `onnx.checker`, which stops at the first problem of any kind, this reports every type-parameter
violation in every graph and subgraph, and never loads external weight data.

Roots and consequences. One wrong type upstream (a Cast to the wrong float type, say) makes every node it
reaches through type-preserving ops violate too; the report separates the first from the rest. A value's
type *derives from* a violation when the value is an output of that violation's node bound to the violated
type parameter, or an output of any node bound to the same type parameter as an input whose type derives
from it (a Cast's, Shape's or ConstantOfShape's output starts afresh; an op with no schema or with subgraphs
passes every input's derivation to every output, and a subgraph's inputs and its outer-scope reads carry
theirs in). A violation is a *consequence* when at least one of its input values bound to the violated
parameter has a type deriving from another violation, and its remaining input values of that parameter,
taken alone, would not violate it (one type, and an allowed one). Every other violation is a *root*: no input
of its violated parameter owes its type to another violation, or the inputs that do not would violate it even
without them. The test looks at input values, not at `offending`: once a wrong type reaches a node's first
input, the node's output takes that type and `offending` names the node's correct inputs. A consequence's
`caused_by` names the roots its types derive from (`subgraph/node`, or `node` in the main graph). Reports
list roots first, each group in graph order.

Missing kernels. With a provider (`lint_model(..., provider="CPUExecutionProvider")`, `where223 lint --kernels`),
every ai.onnx node without a type violation is also looked up in that provider's kernel table for the installed
ONNX Runtime (`where223.graph.kernels`: one-node models ONNX Runtime itself judged, cached), without loading the
model: a node whose op, schema version and input types have no kernel is a `missing_kernel` finding. These are kept
apart from the type violations (`LintReport.kernels`): `outcome`, `clean` and `violations` mean what they meant.
"""

from __future__ import annotations

from collections import ChainMap, Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from where223.enums import TextEnum
from where223.errors import printable
from where223.graph.loading import ModelLike, inline_local_functions, open_model
from where223.graph.nodes import Node, ReadGraph, collector_paused, node_label
from where223.graph.schema import Signature, formal_pairs, signature_for
from where223.graph.types import ModelTypes, Scope, model_types, types_of_loaded

if TYPE_CHECKING:
    from where223.graph.kernels import KernelTable

UNTYPED_EXAMPLES = 5  # untyped values named in a report
CONSEQUENCES_SHOWN = 5  # consequences named under their root in the text report


class FindingKind(TextEnum):
    """What a violation breaks: one type parameter bound to two types, or a type outside its allowed set; and,
    only when kernels are checked, a node whose types an execution provider has no kernel for (never a
    `Violation`: `LintReport.kernels.missing` holds those)."""

    BINDING_CONFLICT = "type_binding_conflict"
    NOT_ALLOWED = "type_not_allowed"
    MISSING_KERNEL = "missing_kernel"


class LintOutcome(TextEnum):
    """What a lint run established: violations, none with every node checked, or none among those checked."""

    CLEAN = "clean"  # no violation, every node checked and every value at them typed
    VIOLATIONS = "violations"  # at least one violation (whatever could not be checked)
    INCOMPLETE = "incomplete"  # no violation found, but some nodes unchecked or values untyped


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
    root: bool = True  # False for a consequence of other violations (see the module's docstring)
    caused_by: list[str] = field(default_factory=list)  # a consequence's roots, as `label`s

    @property
    def label(self) -> str:
        """The node, prefixed with its subgraph path when it is inside one: how `caused_by` names it."""
        return f"{self.subgraph}/{self.node}" if self.subgraph else self.node

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
class MissingKernel:
    """A node whose op, schema version and input types the provider's kernel table says have no kernel."""

    node: str
    node_index: int
    op_type: str
    since_version: int
    binding: dict[str, str]  # the type parameters its inputs bind, as the table keys them
    subgraph: str
    provider: str
    onnxruntime: str
    kind: FindingKind = FindingKind.MISSING_KERNEL

    @property
    def label(self) -> str:
        """The node, prefixed with its subgraph path when it is inside one."""
        return f"{self.subgraph}/{self.node}" if self.subgraph else self.node

    def message(self) -> str:
        """One line: which kernel is missing, where."""
        where = f" in subgraph {printable(self.subgraph)}" if self.subgraph else ""
        types = ", ".join(f"{param}={value}" for param, value in sorted(self.binding.items()))
        return (
            f"No {self.provider} kernel for {self.op_type}({self.since_version}) at {types} in onnxruntime "
            f"{self.onnxruntime}: node ({printable(self.node)}){where}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return asdict(self)


@dataclass
class KernelCheck:
    """What the kernel table said about a model's nodes (see the module's docstring)."""

    provider: str
    onnxruntime: str
    nodes_checked: int = 0  # nodes looked up in the table
    missing: list[MissingKernel] = field(default_factory=list)
    unknown: dict[str, int] = field(default_factory=dict)  # "Op(since)" -> nodes the table has no answer for
    type_refused: dict[str, int] = field(default_factory=dict)  # "Op(since)" -> nodes whose types the schema
    # allows and ONNX Runtime's type check refuses all the same (counted, not reported as missing kernels)
    not_checked: int = 0  # nodes with a violation, an untyped or non-tensor input, or another domain
    table: str | None = None  # the cache file the table lives in

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        record = asdict(self)
        record["missing"] = [m.to_dict() for m in self.missing]
        return record

    def format(self) -> str:
        """The report's kernel section."""
        head = (
            f"kernels ({self.provider}, onnxruntime {self.onnxruntime}): {self.nodes_checked} node(s) looked up, "
            f"{len(self.missing)} missing, {sum(self.unknown.values())} unknown, {self.not_checked} not looked up"
        )
        lines = [head, *(f"  {m.kind}: {m.message()}" for m in self.missing)]
        if self.unknown:
            ops = ", ".join(f"{printable(op)} x{n}" for op, n in sorted(self.unknown.items()))
            lines.append(f"  unknown (no one-node model, or refused for another reason): {ops}")
        if self.type_refused:
            ops = ", ".join(f"{printable(op)} x{n}" for op, n in sorted(self.type_refused.items()))
            lines.append(f"  types the schema allows, refused by ONNX Runtime's type check: {ops}")
        return "\n".join(lines)


@dataclass
class LintReport:
    """Every violation in a model, with what could not be checked."""

    model_path: str | None
    opset: int | None
    opset_imports: dict[str, int]
    nodes_checked: int
    unchecked: dict[str, int]  # "domain:op_type" -> nodes with no onnx schema (custom ops, local functions)
    untyped_values: int  # values at checked nodes whose type no source could determine
    violations: list[Violation] = field(default_factory=list)  # lint_model: roots first; lint_types: graph order
    inlined_functions: int = 0  # model-local functions inlined before checking (their nodes get new names)
    untyped_examples: list[str] = field(default_factory=list)  # the first few untyped values, as `subgraph/name`
    notes: list[str] = field(default_factory=list)  # how the check was made, e.g. newest known schemas used
    kernels: KernelCheck | None = None  # missing kernels, when a provider was asked for (apart from `violations`)

    @property
    def clean(self) -> bool:
        """The one definition of "lint clean", everywhere in this project: no finding of any kind (binding
        conflict or type not allowed), every node checked and every value at them typed (`outcome` CLEAN)."""
        return self.outcome == LintOutcome.CLEAN

    @property
    def complete(self) -> bool:
        """True when every node had a schema and every value at them a type."""
        return not self.unchecked and self.untyped_values == 0

    @property
    def outcome(self) -> LintOutcome:
        """Violations first; without any, clean only when the check was complete."""
        if self.violations:
            return LintOutcome.VIOLATIONS
        return LintOutcome.CLEAN if self.complete else LintOutcome.INCOMPLETE

    @property
    def roots(self) -> list[Violation]:
        """The violations that follow from no other."""
        return [v for v in self.violations if v.root]

    @property
    def unchecked_count(self) -> int:
        """How many nodes had no schema to check against."""
        return sum(self.unchecked.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        record = asdict(self)
        if not self.notes:  # records written before notes existed stay valid
            del record["notes"]
        if self.kernels is None:  # so do records of runs that checked no kernels
            del record["kernels"]
        else:
            record["kernels"] = self.kernels.to_dict()
        record["violations"] = [v.to_dict() for v in self.violations]
        record["clean"] = self.clean
        record["complete"] = self.complete
        record["outcome"] = str(self.outcome)
        return record

    def format(self) -> str:
        """A human-readable report: the type check, then the kernel section when kernels were checked."""
        text = self._format_types()
        return text if self.kernels is None else f"{text}\n{self.kernels.format()}"

    def _format_types(self) -> str:
        head = (
            f"{self.model_path or '<model>'}: opset {self.opset}, {self.nodes_checked} nodes checked, "
            f"{self.unchecked_count} unchecked, {self.untyped_values} untyped values"
        )
        lines = [head, *(f"  note: {note}" for note in self.notes)]
        if self.inlined_functions:
            inlined = f"  {self.inlined_functions} model-local function(s) inlined first"
            lines.append(f"{inlined}: node names are the inliner's")
        if self.unchecked:
            ops = ", ".join(f"{printable(op)} x{n}" for op, n in sorted(self.unchecked.items()))
            lines.append(f"  unchecked (no onnx schema): {ops}")
        if not self.complete:
            lines.append(self._incomplete_line())
        if not self.violations:
            lines.append("no type-constraint violations" if self.complete else "no violation among the nodes checked")
            return "\n".join(lines)
        roots = self.roots
        consequences = len(self.violations) - len(roots)
        lines.append(f"{len(self.violations)} violation(s): {len(roots)} root(s), {consequences} consequence(s)")
        following: dict[str, list[Violation]] = {}
        for v in self.violations:
            if not v.root:
                following.setdefault(v.caused_by[0], []).append(v)
        for v in roots:
            lines.append(f"  {v.kind}: {v.message()}")
            for b in v.bindings:
                mark = "  <-- offending" if b in v.offending else ""
                lines.append(f"      {b}{mark}")
            if v.kind == FindingKind.NOT_ALLOWED:
                lines.append(f"      allowed: {', '.join(v.allowed)}")
            after = following.pop(v.label, [])
            if after:
                named = ", ".join(dict.fromkeys(printable(c.label) for c in after[:CONSEQUENCES_SHOWN]))
                more = ", ..." if len(after) > CONSEQUENCES_SHOWN else ""
                lines.append(f"      + {len(after)} consequence(s): {named}{more}")
        return "\n".join(lines)

    def _incomplete_line(self) -> str:
        """How much could not be checked, with a few untyped values named."""
        examples = ", ".join(printable(name) for name in self.untyped_examples)
        more = ", ..." if self.untyped_values > len(self.untyped_examples) else ""
        named = f" (e.g. {examples}{more})" if examples else ""
        return (
            f"incomplete: {self.untyped_values} value(s) untyped{named}, "
            f"{self.unchecked_count} node(s) unchecked"
        )


def _expected_type(bindings: list[Binding]) -> str:
    """The type a conflicting parameter resolves to: the outputs' common type, else the majority."""
    output_types = {b.type for b in bindings if b.io == "output"}
    if len(output_types) == 1:
        return output_types.pop()
    counts = Counter(b.type for b in bindings)
    ordered = sorted(bindings, key=lambda b: (b.io != "input", b.position))
    return max(dict.fromkeys(b.type for b in ordered), key=lambda t: counts[t])


Verdict = tuple[bool, tuple[int, ...], tuple[int, ...]]  # clean at a glance; positions of untyped inputs, outputs
_CLEAN: Verdict = (True, (), ())  # the verdict of almost every node (compared by identity: one object)
_IN_FULL: Verdict = (False, (), ())  # not clean at a glance: `_node_violations` looks
_UNCHECKED: Any = object()  # an op onnx has no schema for (a sentinel: no tuple, which constants may share)


def _verdict(sig: Signature, input_types: tuple[str | None, ...], output_types: tuple[str | None, ...]) -> Verdict:
    """Whether a node of `sig` whose values carry these types (None: untyped, or a name left empty) is clean at a
    glance, with the positions of its values without a type: every type parameter bound to one type, an admitted
    one. A node that is not is looked at in full by `_node_violations` (a parameter of a heterogeneous variadic
    may take several types)."""
    bound: dict[str, str] = {}  # type parameter -> the first type bound to it
    untyped: tuple[list[int], list[int]] = ([], [])
    pairings = sig.pairing(len(input_types), len(output_types))
    for types, pairs, missing in zip((input_types, output_types), pairings, untyped, strict=True):
        for position, formal in pairs:
            value_type = types[position]
            if value_type is None:
                missing.append(position)
                continue
            first = bound.get(formal.type_str)
            if first is None:
                if value_type not in sig.admitted(formal.type_str):
                    return _IN_FULL
                bound[formal.type_str] = value_type
            elif first != value_type:
                return _IN_FULL
    return (True, tuple(untyped[0]), tuple(untyped[1])) if untyped[0] or untyped[1] else _CLEAN


def _node_violations(node: Node, index: int, sig: Signature, scope: Scope) -> tuple[list[Violation], list[str]]:
    """A node that `_verdict` did not find clean at a glance, in full: every value bound to each type parameter,
    then its violations."""
    by_param: dict[str, list[tuple[str, int, str, str]]] = {}  # Binding's fields, built only when reported
    homogeneous: dict[str, bool] = {}
    untyped: list[str] = []
    for io, actual, formals in (("input", node.inputs, sig.inputs), ("output", node.outputs, sig.outputs)):
        for position, name, formal in formal_pairs(actual, formals):
            value_type = scope.type_of(name)
            if value_type is None:
                untyped.append(name)
                continue
            by_param.setdefault(formal.type_str, []).append((io, position, name, value_type))
            homogeneous[formal.type_str] = homogeneous.get(formal.type_str, True) and formal.homogeneous

    def violation(param: str, kind: FindingKind, bindings: list[Binding], offending: list[Binding]) -> Violation:
        return Violation(
            node=node_label(scope.graph.node[index], index),
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
    """Check every node of every scope of an already-typed model; violations in graph order, each marked
    root or consequence (`lint_model` lists the roots first)."""
    report = LintReport(
        model_path=model_path,
        opset=(types.declared_opsets or types.opsets).get(""),
        opset_imports=dict(types.declared_opsets or types.opsets),
        nodes_checked=0,
        unchecked={},
        untyped_values=0,
        notes=list(types.notes),
    )
    unchecked: Counter[str] = Counter()
    signatures: dict[tuple[str, str], Signature | None] = {}  # signature_for, once per op of the model
    # (domain, op, its values' types) -> its verdict: a large graph repeats a few blocks, so the check runs once
    # per kind of node and every other node is a lookup (`_verdict`)
    verdicts: dict[tuple[Any, ...], Verdict] = {}

    def judged(key: tuple[Any, ...]) -> Verdict:
        domain, op_type = key[0], key[1]
        if (domain, op_type) not in signatures:
            signatures[(domain, op_type)] = signature_for(Node(op_type, domain, [], [], ()), types.opsets)
        sig = signatures[(domain, op_type)]
        verdict = verdicts[key] = _UNCHECKED if sig is None else _verdict(sig, key[2], key[3])
        return verdict

    for scope in types.scopes.values():
        maps = scope.types.maps
        type_of = maps[0].get if len(maps) == 1 else scope.type_of  # "" is never typed: an omitted value is None
        known = verdicts.get
        keys = [(domain, op_type, tuple(map(type_of, inputs)), tuple(map(type_of, outputs)))
                for op_type, domain, inputs, outputs, _ in scope.nodes]  # fmt: skip
        every = [known(key) or judged(key) for key in keys]  # in bulk: almost every node is a lookup
        report.nodes_checked += len(every)
        for index in (i for i, verdict in enumerate(every) if verdict is not _CLEAN):
            node, verdict = scope.nodes[index], every[index]
            if verdict is _UNCHECKED:
                unchecked[f"{node.domain or 'ai.onnx'}:{node.op_type}"] += 1
                report.nodes_checked -= 1
                continue
            clean, untyped_inputs, untyped_outputs = verdict
            if clean:
                untyped = [node.inputs[p] for p in untyped_inputs if node.inputs[p]]
                untyped += [node.outputs[p] for p in untyped_outputs if node.outputs[p]]
            else:
                found, untyped = _node_violations(node, index, signatures[(node.domain, node.op_type)], scope)
                report.violations.extend(found)
            if untyped:
                report.untyped_values += len(untyped)
                room = UNTYPED_EXAMPLES - len(report.untyped_examples)
                report.untyped_examples.extend(f"{scope.path}/{n}" if scope.path else n for n in untyped[:room])
    report.unchecked = dict(unchecked)
    if report.violations:
        _mark_consequences(types, report.violations)
    return report


_NONE: frozenset[str] = frozenset()


def _follows_from_others(violation: Violation, derived: ChainMap[str, frozenset[str]]) -> frozenset[str]:
    """The roots a violation follows from (see the module's docstring); empty when it is a root."""
    inputs = [b for b in violation.bindings if b.io == "input"]
    inherited = [b for b in inputs if derived.get(b.name)]
    own_types = {b.type for b in inputs if not derived.get(b.name)}
    alone_fine = own_types <= set(violation.allowed) and (
        violation.kind != FindingKind.BINDING_CONFLICT or len(own_types) <= 1
    )
    if not inherited or not alone_fine:
        return _NONE
    return frozenset().union(*(derived[b.name] for b in inherited))


def _mark_consequences(types: ModelTypes, violations: list[Violation]) -> None:
    """Set `root` and `caused_by` on each violation, walking the dataflow in graph order."""
    at_node: dict[tuple[str, int], list[Violation]] = {}
    for v in violations:
        at_node.setdefault((v.subgraph, v.node_index), []).append(v)
    order = {label: position for position, label in enumerate(v.label for v in violations)}
    # with every violation in the main graph, nothing derives from one before the first: the walk starts there
    start = 0 if any(v.subgraph for v in violations) else min(v.node_index for v in violations)
    main = types.scopes[""]
    _trace(ReadGraph("", main.graph, main.nodes), ChainMap(), at_node, types.opsets, order, start)


def _trace(
    read: ReadGraph,
    derived: ChainMap[str, frozenset[str]],  # value name -> the roots its type derives from
    at_node: dict[tuple[str, int], list[Violation]],
    opsets: dict[str, int],
    order: dict[str, int],  # violation label -> its position in graph order
    start: int = 0,  # the first node that any violation may reach
) -> None:
    maps, own = derived.maps, derived.maps[0]  # derived.get and derived[...] = without ChainMap's per-call cost
    path, nodes = read.path, read.nodes
    main, own_get, seen = len(maps) == 1, own.get, own.__contains__
    violated = {index for at, index in at_node if at == path}
    for index in range(start, len(nodes)):
        node = nodes[index]
        from_inputs = _NONE
        if not main or any(map(own_get, node.inputs)):  # in the main graph, a test in C of whether any input derives
            for name in node.inputs:
                if name:
                    for values in maps:
                        found = values.get(name)
                        if found is not None:
                            if found:
                                from_inputs = found if not from_inputs else from_inputs | found
                            break
        from_bodies: frozenset[str] = _NONE
        if not from_inputs and not node.bodies and index not in violated:
            # the common case: nothing reaches this node, so each output it types derives from nothing; in the
            # main graph a name derives from nothing when absent, so only a name seen before is set
            if main and not any(map(seen, node.outputs)):
                continue
            sig = signature_for(node, opsets)
            outputs = node.outputs if sig is None else (name for _, name, _ in formal_pairs(node.outputs, sig.outputs))
            for out in outputs:
                own[out] = _NONE
            continue
        for body in node.bodies:
            inner = derived.new_child({value.name: from_inputs for value in body.read.graph.input})
            _trace(body.read, inner, at_node, opsets, order)
            from_bodies = from_bodies.union(*(inner.get(value.name, _NONE) for value in body.read.graph.output))
        rooted_params: dict[str, frozenset[str]] = {}
        for v in at_node.get((path, index), []):
            roots = _follows_from_others(v, derived)
            v.root = not roots
            v.caused_by = sorted(roots, key=lambda label: order.get(label, len(order)))
            if v.root:
                rooted_params[v.type_param] = rooted_params.get(v.type_param, _NONE) | {v.label}
        sig = signature_for(node, opsets)
        if sig is None or node.bodies:
            everything = from_inputs.union(from_bodies, *rooted_params.values())
            for out in node.outputs:
                derived[out] = everything
            continue
        by_param: dict[str, frozenset[str]] = dict(rooted_params)
        for _, name, formal in formal_pairs(node.inputs, sig.inputs):
            by_param[formal.type_str] = by_param.get(formal.type_str, _NONE) | derived.get(name, _NONE)
        for _, name, formal in formal_pairs(node.outputs, sig.outputs):
            derived[name] = by_param.get(formal.type_str, _NONE)


def check_kernels(types: ModelTypes, violations: list[Violation], table: KernelTable) -> KernelCheck:
    """Look every ai.onnx node without a violation up in a provider's kernel table (probing what it lacks, then
    saving it); the nodes whose entry says `missing`, in graph order."""
    from where223.graph.kernels import KernelStatus, node_binding

    check = KernelCheck(table.provider, table.onnxruntime_version)
    violated = {(v.subgraph, v.node_index) for v in violations}
    unknown: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    opset = types.opsets.get("")
    for scope in types.scopes.values():
        for index, node in enumerate(scope.graph.node):
            if opset is None or node.domain not in ("", "ai.onnx") or (scope.path, index) in violated:
                check.not_checked += 1
                continue
            binding = node_binding(node, opset, scope.type_of)
            if binding is None:
                check.not_checked += 1
                continue
            since, entry = table.status(node.op_type, opset, binding)
            check.nodes_checked += 1
            if entry.status == KernelStatus.UNKNOWN:
                unknown[f"{node.op_type}({since})"] += 1
            elif entry.status == KernelStatus.TYPE_REFUSED:
                refused[f"{node.op_type}({since})"] += 1
            elif entry.status == KernelStatus.MISSING:
                check.missing.append(MissingKernel(
                    node=node_label(node, index), node_index=index, op_type=node.op_type, since_version=since,
                    binding=dict(binding), subgraph=scope.path, provider=table.provider,
                    onnxruntime=table.onnxruntime_version,
                ))  # fmt: skip
    check.unknown, check.type_refused = dict(unknown), dict(refused)
    try:
        table.save()
        check.table = table.path_text()
    except OSError:  # a cache folder that cannot be written: the answers stand, the next run probes again
        check.table = None
    return check


def lint_model(
    model_or_path: ModelLike, provider: str | None = None, kernel_cache: Path | None | bool = None
) -> LintReport:
    """Lint a model (or the .onnx file at a path; weights are not loaded).

    With `provider` (an execution provider of the installed onnxruntime, e.g. "CPUExecutionProvider"), nodes are
    also looked up in its kernel table (`report.kernels`; `kernel_cache` as `where223.graph.kernels.kernel_table`
    takes it). The provider is checked before the model is read: a UsageError for one this onnxruntime lacks.

    Model-local functions (the dynamo exporter puts whole modules in them) are inlined first with onnx's
    own inliner, so that the nodes inside them are checked at their call sites' types. Raises
    `UnreadableModelError` for a file that is not a model and `MalformedModelError` when onnx's inliner or
    shape inference fails on it.
    """
    table = None
    if provider is not None:
        from where223.graph.kernels import kernel_table

        table = kernel_table(provider, kernel_cache)
    with collector_paused():
        opened = open_model(model_or_path)
        model, path = opened.model, opened.path
        functions = len(model.functions)
        if functions:  # the inlined model is a new one: model_types passes it through the guards again
            types = model_types(inline_local_functions(model, path), path, shapes=False)
        else:
            types = types_of_loaded(model, path, opened.graphs, shapes=False)
        report = lint_types(types, str(path) if path else None)
    report.violations.sort(key=lambda v: not v.root)  # roots first; stable, so graph order within each group
    report.inlined_functions = functions
    if table is not None:
        report.kernels = check_kernels(types, report.violations, table)
    return report

