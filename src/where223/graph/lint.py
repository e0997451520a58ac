"""Check every node of an ONNX model against its operator schema's type constraints.

Unlike `onnx.checker`, which stops at the first problem of any kind, this reports every type-parameter
violation in every graph and subgraph, and never loads external weight data.

Declared types are claims. A type a graph declares for a value (its outputs, its value_info; a subgraph's and a
model-local function's outputs alike) is checked against what the node producing the value computes: a Cast's `to`,
the attribute that types ConstantOfShape, EyeLike, the random ops and Constant, the type parameter its inputs bind,
an If's then_branch, else onnx's inference of the node alone. A contradiction is a `declared_type_mismatch` at the node
ONNX Runtime names ("Type (tensor(float16)) of output arg (y) of node (Cast_1) does not match expected type
(tensor(float))"): a function's call for its outputs (the function inlined, its own value_info left out as ONNX Runtime
leaves it), the If for an else_branch that declares another type than its then_branch, the Loop, Scan or SequenceMap
whose body declares an input of another type than the node gives it. The declared type stays the value's type
downstream: the consumers are judged at the type the converter meant.

Operators ONNX Runtime defines. The ops of its own domains (`com.microsoft`) are checked against the schemas the
installed onnxruntime registers (`schema.runtime_registry`); where it lists none (onnxruntime-training 1.19), they are
left unchecked and counted, as before. Function bodies: an ai.onnx op that onnx defines by a function (context-dependent
ones included, Attention-23's) runs as that body where the runtime's CPU kernel list has no kernel for the node's op,
schema version and types; lint then checks the body onnx builds for the node (`schema.function_body`, onnx's inliner)
and reports what it finds at subgraph `<node>/function body` (`Violation.function_call` names the node; ONNX Runtime
names the body's nodes `()`). Where the runtime lists no kernels, those nodes are checked against their own schemas
(and SoftmaxCrossEntropyLoss's `T` narrowed to its body's, `schema.FALLBACK_FUNCTION_BODY_OPS`), and a note says so.

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
`caused_by` names the roots its types derive from (`subgraph/node`, or `node` in the main graph). A declared type
its node contradicts is a root unless an input it binds derives from another violation (and its other inputs alone
would bind the declared type); the value it declares derives from it, so a consumer judged wrong at the declared
type is its consequence. A finding inside a function body is a root. Reports list roots first, each group in graph
order.

Missing kernels. With a provider (`lint_model(..., provider="CPUExecutionProvider")`, `where223 lint --kernels`),
every ai.onnx node without a type violation is also looked up in that provider's kernel table for the installed
ONNX Runtime (`where223.graph.kernels`: one-node models ONNX Runtime itself judged, cached), without loading the
model: a node whose op, schema version and input types have no kernel is a `missing_kernel` finding. These are kept
apart from the type violations (`LintReport.kernels`): `outcome`, `clean` and `violations` mean what they meant.
"""

from __future__ import annotations

import copy
import functools
from collections import ChainMap, Counter
from dataclasses import asdict, dataclass, field
from itertools import compress, repeat
from operator import is_, itemgetter, not_
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import onnx
import onnx.shape_inference

from where223.enums import TextEnum
from where223.errors import printable
from where223.graph.dtypes import elem_type_of, tensor_type, type_string
from where223.graph.loading import ModelLike, inline_local_functions, open_model
from where223.graph.nodes import Node, ReadGraph, collector_paused, node_label, subgraph_path
from where223.graph.schema import (
    Signature,
    body_version,
    formal_pairs,
    from_runtime,
    function_body,
    op_schema,
    runs_as_function_body,
    runtime_registry,
    signature_for,
)
from where223.graph.types import ModelTypes, Scope, constant_type, model_types, types_of_loaded

if TYPE_CHECKING:
    from where223.graph.kernels import KernelTable

UNTYPED_EXAMPLES = 5  # untyped values named in a report
NO_KERNEL_LIST = "lists no kernels"  # the note of a report made where the installed onnxruntime lists none
_OUTPUTS, _BODIES = itemgetter(3), itemgetter(4)  # a read node's outputs and subgraphs (`nodes.Node`)
CONSEQUENCES_SHOWN = 5  # consequences named under their root in the text report


class FindingKind(TextEnum):
    """What a violation breaks: one type parameter bound to two types, a type outside its allowed set, or a declared
    type (a graph's output or value_info) that contradicts what the value's producer computes; and, only when
    kernels are checked, a node whose types an execution provider has no kernel for (never a `Violation`:
    `LintReport.kernels.missing` holds those)."""

    BINDING_CONFLICT = "type_binding_conflict"
    NOT_ALLOWED = "type_not_allowed"
    DECLARED_TYPE = "declared_type_mismatch"
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
    majority, ties to the earliest position), for a disallowed type those outside `allowed`, for a declared type
    the outputs whose declared type is not `expected`, the type the node computes there (`computed_by` says how:
    a Cast's `to`, an attribute, the parameter its inputs bind, onnx's inference, an If's then_branch).

    A finding inside the function body ONNX Runtime runs for a node (its op has no kernel for the node's types) is
    the body's node, at subgraph `<the node's label>/function body` (nested under the node's own subgraph), with
    `function_call` naming the node that runs it (`subgraph`, `node`, `node_index`, `op_type`).
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
    computed_by: str | None = None  # a declared type's finding: how the node's own type was found
    function_call: dict[str, Any] | None = None  # a finding inside a function body: the node that runs it

    @property
    def label(self) -> str:
        """The node, prefixed with its subgraph path when it is inside one: how `caused_by` names it."""
        return f"{self.subgraph}/{self.node}" if self.subgraph else self.node

    def message(self) -> str:
        """One line in ONNX Runtime's own wording."""
        where = f" in subgraph {printable(self.subgraph)}" if self.subgraph else ""
        if self.kind == FindingKind.DECLARED_TYPE:
            out = self.offending[0] if self.offending else self.bindings[0]
            arg = "output arg" if out.io == "output" else "body input"
            return (
                f"Type ({out.type}) of {arg} ({printable(out.name)}) of node ({printable(self.node)}) does not "
                f"match expected type ({self.expected}){where}"
            )
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
        """A JSON-ready record (`computed_by` and `function_call` only where they are set: records of findings
        without them stay as they were)."""
        record = asdict(self)
        for optional in ("computed_by", "function_call"):
            if record[optional] is None:
                del record[optional]
        return record


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
            elif v.kind == FindingKind.DECLARED_TYPE:
                gives = "computes" if not v.offending or v.offending[0].io == "output" else "gives its body"
                lines.append(f"      the node {gives} {v.expected} ({printable(v.computed_by or '')})")
            if v.function_call:
                call = v.function_call
                lines.append(f"      in the function body ONNX Runtime runs for {printable(call['op_type'])} node "
                             f"({printable(call['node'])}): no kernel for its types")
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


class _BodyVerdict(tuple):
    """A node clean by its schema (a `Verdict`, untyped positions and all) of an op onnx defines by a function body:
    `runs` whether ONNX Runtime runs the body for its types (None: the runtime lists no kernels to say)."""

    runs: bool | None


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
    then its violations. A parameter its inputs bind to one type and a declared output to another is a declared
    type the node contradicts (ONNX Runtime binds parameters from inputs, and infers its outputs from them)."""
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
            bound = {b.type for b in bindings if b.io == "input"}
            contradicting = [b for b in bindings if b.io == "output" and b.type not in bound]
            if len(bound) == 1 and all(b.name in scope.declared for b in contradicting):
                declared = violation(param, FindingKind.DECLARED_TYPE, bindings, contradicting)
                declared.expected, declared.computed_by = next(iter(bound)), f"{param}, as its inputs bind it"
                found.append(declared)
            else:
                conflict = violation(param, FindingKind.BINDING_CONFLICT, bindings, [])
                conflict.offending = [b for b in bindings if b.type != conflict.expected]
                found.append(conflict)
        outside = [b for b in bindings if b.type not in sig.admitted(param)]
        if outside:
            found.append(violation(param, FindingKind.NOT_ALLOWED, bindings, outside))
    return found, untyped


# --- declared types ------------------------------------------------------------------------------------------

# ai.onnx operators whose output type an attribute gives: (the attribute, the type without it: an element type, or
# None for the first input's type)
_TYPING_ATTRIBUTES: dict[str, tuple[str, int | None]] = {
    "ConstantOfShape": ("value", onnx.TensorProto.FLOAT),
    "EyeLike": ("dtype", None),
    "RandomNormal": ("dtype", onnx.TensorProto.FLOAT),
    "RandomUniform": ("dtype", onnx.TensorProto.FLOAT),
    "RandomNormalLike": ("dtype", None),
    "RandomUniformLike": ("dtype", None),
    "Multinomial": ("dtype", onnx.TensorProto.INT32),
    "Bernoulli": ("dtype", None),
    "LayerNormalization": ("stash_type", onnx.TensorProto.FLOAT),  # its Mean and InvStdDev (Y is its input's type)
}


# (op, domain, schema version, which inputs are untyped, outputs) -> `_undecided_outputs`, once per process
_UNDECIDED: dict[tuple[Any, ...], tuple[int, ...]] = {}


def _undecided_outputs(sig: Signature, input_types: tuple[str | None, ...], n_outputs: int) -> tuple[int, ...]:
    """The output positions whose type no typed input of the node decides through a type parameter and more than
    one type could be (the binding check speaks for the others: a parameter its inputs bind, or one type)."""
    inputs, outputs = sig.pairing(len(input_types), n_outputs)
    bound = {formal.type_str for position, formal in inputs if input_types[position] is not None and formal.homogeneous}
    return tuple(position for position, formal in outputs
                 if (formal.type_str not in bound or not formal.homogeneous) and len(sig.allowed(formal.type_str)) > 1)


def _computed_type(proto: onnx.NodeProto, index: int, position: int, scope: Scope, types: ModelTypes,
                   sig: Signature) -> tuple[str, str] | None:  # fmt: skip
    """The type a node computes for its output at `position`, and how it was found; None where nothing here decides
    it (no rule, inference failing, a Loop's or Scan's outputs)."""
    op_type = proto.op_type
    if sig.domain == "":
        attributes = {a.name: a for a in proto.attribute}
        if op_type == "Cast":
            to = attributes.get("to")
            if to is None or to.type != onnx.AttributeProto.INT:
                return None
            text = type_string(tensor_type(to.i))
            return (text, f"its `to` is {text}") if text else None
        if op_type == "Constant":
            found = constant_type(proto)
            text = type_string(found) if found is not None else None
            return (text, "its value") if text else None
        if op_type in _TYPING_ATTRIBUTES:
            name, default = _TYPING_ATTRIBUTES[op_type]
            attribute = attributes.get(name)
            if attribute is not None and attribute.type == onnx.AttributeProto.TENSOR:
                elem = attribute.t.data_type
            elif attribute is not None and attribute.type == onnx.AttributeProto.INT:
                elem = attribute.i
            else:
                elem = default
            if elem is None:
                text = scope.type_of(proto.input[0]) if proto.input else None
                return (text, f"without `{name}`, its input's type") if text else None
            text = type_string(tensor_type(elem))
            return (text, f"its `{name}` gives {text}" if attribute is not None else f"`{name}` unset gives {text}"
                    ) if text else None  # fmt: skip
        if op_type == "If":
            branch = types.scopes.get(subgraph_path(scope.path, proto, index, "then_branch"))
            if branch is None or position >= len(branch.graph.output):
                return None
            text = branch.type_of(branch.graph.output[position].name)
            return (text, "its then_branch's output") if text else None
        if op_type in ("Loop", "Scan"):
            return None
    if from_runtime(sig):
        return None
    present = [name for name in proto.input if name]
    if not all(scope.proto(name) is not None for name in present):
        return None
    try:
        inferred = onnx.shape_inference.infer_node_outputs(
            op_schema(sig.op_type, sig.domain, types.opsets[sig.domain]), proto,
            {name: scope.proto(name) for name in present},
            opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in types.opsets.items()])
    except Exception:  # onnx's inference of the node alone fails: nothing decided
        return None
    found = inferred.get(proto.output[position])
    text = type_string(found) if found is not None else None
    return (text, "onnx's inference of the node") if text else None


def _declared_violations(scope: Scope, types: ModelTypes, keys: list[tuple[Any, ...]],
                         signatures: dict[tuple[str, str], Signature | None]) -> list[Violation]:  # fmt: skip
    """Each output a graph declares whose type the node producing it computes otherwise, where no type parameter
    its inputs bind decides it (`_node_violations` speaks for those)."""
    declared, nodes = scope.declared, scope.nodes
    hits = compress(range(len(nodes)), map(not_, map(declared.keys().isdisjoint, map(_OUTPUTS, nodes))))
    found = []
    for index in hits:
        key, node = keys[index], nodes[index]
        sig = signatures.get((node.domain, node.op_type))
        if sig is None:
            continue
        shape = (sig.op_type, sig.domain, sig.since_version, tuple(map(is_, key[2], repeat(None))), len(node.outputs))
        undecided = _UNDECIDED.get(shape)
        if undecided is None:
            undecided = _UNDECIDED[shape] = _undecided_outputs(sig, key[2], len(node.outputs))
        for position in undecided:
            name = node.outputs[position]
            claim = declared.get(name)
            if claim is None:
                continue
            proto = scope.graph.node[index]
            computed = _computed_type(proto, index, position, scope, types, sig)
            if computed is None or computed[0] == claim:
                continue
            formal = sig.pairing(len(node.inputs), len(node.outputs))[1]
            param = next((f.type_str for p, f in formal if p == position), "")
            declared_binding = Binding("output", position, name, claim)
            found.append(Violation(
                node=node_label(proto, index), node_index=index, op_type=node.op_type, domain=node.domain,
                type_param=param, kind=FindingKind.DECLARED_TYPE, bindings=[declared_binding],
                offending=[declared_binding], allowed=list(sig.allowed(param)), subgraph=scope.path,
                expected=computed[0], computed_by=computed[1],
            ))  # fmt: skip
    return found


def _given_types(node: Node, scope: Scope, opset: int) -> list[str | None]:
    """The type each input of a Loop's, Scan's or SequenceMap's body is given by the node (None where nothing here
    says): a Loop's iteration count and condition, then its carried values; a Scan's state values, then one slice
    of each scanned tensor (its element type); each of SequenceMap's inputs, a sequence's element."""
    def of(name: str) -> str | None:
        return scope.type_of(name) if name else None

    if node.op_type == "Loop":
        return ["tensor(int64)", "tensor(bool)", *map(of, node.inputs[2:])]
    if node.op_type == "Scan":  # before opset 9, its first input is the batch's sequence lengths
        return [*map(of, node.inputs if opset >= 9 else node.inputs[1:])]
    if node.op_type == "SequenceMap":
        given = [*map(of, node.inputs)]
        return [t[4:-1] if t is not None and t.startswith("seq(") else t for t in given]
    return []


def _holder_finding(proto: onnx.NodeProto, index: int, path: str, binding: Binding, expected: str, how: str
                    ) -> Violation:  # fmt: skip
    """A declared type of a node's subgraph that the node contradicts, at the node."""
    return Violation(
        node=node_label(proto, index), node_index=index, op_type=proto.op_type, domain=proto.domain, type_param="",
        kind=FindingKind.DECLARED_TYPE, bindings=[binding], offending=[binding], allowed=[], subgraph=path,
        expected=expected, computed_by=how,
    )  # fmt: skip


def _holder_violations(scope: Scope, types: ModelTypes) -> list[Violation]:
    """Where a node's subgraphs contradict what the node computes or gives them: an If whose else_branch declares
    another type for an output than its then_branch (ONNX Runtime infers the If's output from the then_branch and
    refuses the other: "Mismatched tensor element type"); a Loop's, Scan's or SequenceMap's body declaring an input
    of another type than the node gives it ("Tensor element type mismatch", naming the node)."""
    nodes, found, opset = scope.nodes, [], types.opsets.get("", 0)
    for index in compress(range(len(nodes)), map(_BODIES, nodes)):
        node = nodes[index]
        if node.op_type not in ("If", "Loop", "Scan", "SequenceMap") or node.domain not in ("", "ai.onnx"):
            continue
        proto = scope.graph.node[index]
        finding = functools.partial(_holder_finding, proto, index, scope.path)
        if node.op_type == "If":
            then, other = (types.scopes.get(subgraph_path(scope.path, proto, index, branch))
                           for branch in ("then_branch", "else_branch"))  # fmt: skip
            if then is None or other is None:
                continue
            for position, (ours, theirs) in enumerate(zip(then.graph.output, other.graph.output, strict=False)):
                expected, claim = then.type_of(ours.name), other.type_of(theirs.name)
                if expected is not None and claim is not None and expected != claim:
                    found.append(finding(Binding("output", position, theirs.name, claim), expected,
                                         f"its then_branch's output {position}; the else_branch declares {claim}"))
            continue
        body = types.scopes.get(subgraph_path(scope.path, proto, index, "body"))
        if body is None:
            continue
        for position, (value, given) in enumerate(zip(body.graph.input, _given_types(node, scope, opset),
                                                      strict=False)):  # fmt: skip
            claim = type_string(value.type) if value.HasField("type") else None
            if claim is None or given is None or not claim.startswith("tensor(") or claim == given:
                continue
            found.append(finding(Binding("input", position, value.name, claim), given,
                                 f"its body's input {position} is given {given}"))
    return found


def _runs_as_body(sig: Signature, key: tuple[Any, ...], opset: int | None) -> bool | None:
    """`schema.runs_as_function_body` for a node whose values carry the key's types (False when one is untyped)."""
    if opset is None or sig.domain != "" or body_version(sig.op_type, opset) is None:
        return False
    binding: dict[str, str] = {}
    pairings = sig.pairing(len(key[2]), len(key[3]))
    for value_types, pairs in zip((key[2], key[3]), pairings, strict=True):
        for position, formal in pairs:
            if value_types[position] is not None:
                binding.setdefault(formal.type_str, value_types[position])
    return runs_as_function_body(sig, opset, binding)


FUNCTION_BODY = "function body"  # the last part of the subgraph path of a finding inside one
_BODY_DOMAIN = "where223.function_body"  # the domain a node is called in to have onnx's inliner expand its body
_BODY_DEPTH = 4  # function bodies checked inside function bodies, at most
_BODY_CACHE_SIZE = 256
BODY_CHECKS = 64  # distinct function bodies built and checked per model, at most (a model may hold many such nodes)
_body_cache: dict[tuple[Any, ...], list[Violation]] = {}  # (op, opset, input types, attributes) -> its findings


def _body_violations(proto: onnx.NodeProto, index: int, scope: Scope, types: ModelTypes, depth: int,
                     budget: list[int]) -> list[Violation] | None:  # fmt: skip
    """The findings inside the function body onnx builds for a node (at the model's ai.onnx opset, its inputs
    typed as here), as the subgraph `<node>/function body` of the node's graph: the body is the one ONNX Runtime
    runs when it has no kernel for the node's types. The same op, types and attributes are checked once per
    process; None, unchecked, when the model's `budget` (bodies left to build) is spent."""
    opset = types.opsets[""]
    input_types = [scope.proto(name) if name else None for name in proto.input]
    key = (proto.op_type, opset, tuple(scope.type_of(name) if name else None for name in proto.input),
           tuple(a.SerializeToString() for a in proto.attribute))  # fmt: skip
    found = _body_cache.get(key)
    if found is None:
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        found = _check_body(proto, opset, input_types, depth, budget)
        if len(_body_cache) >= _BODY_CACHE_SIZE:
            _body_cache.clear()
        _body_cache[key] = found
    label = node_label(proto, index)
    path = f"{scope.path}/{label}/{FUNCTION_BODY}" if scope.path else f"{label}/{FUNCTION_BODY}"
    call = {"subgraph": scope.path, "node": label, "node_index": index, "op_type": proto.op_type}
    placed = []
    for template in found:
        v = copy.deepcopy(template)
        v.subgraph = f"{path}/{v.subgraph}" if v.subgraph else path
        v.caused_by = [f"{path}/{label_}" for label_ in v.caused_by]
        v.function_call = call  # the node of this model that runs the body (a nested body's own call is inside it)
        placed.append(v)
    return placed


def _check_body(proto: onnx.NodeProto, opset: int, input_types: list[onnx.TypeProto | None], depth: int,
                budget: list[int]) -> list[Violation]:  # fmt: skip
    """`lint_types` of a one-node model whose node onnx's inliner has replaced by its function body."""
    body = function_body(proto, opset, input_types)
    if body is None:
        return []
    body.domain, body.name = _BODY_DOMAIN, proto.op_type
    call = onnx.NodeProto()
    call.CopyFrom(proto)
    call.domain = _BODY_DOMAIN
    inputs = [onnx.helper.make_value_info(name, _unshaped(t)) for name, t in zip(proto.input, input_types, strict=True)
              if name and t is not None]  # fmt: skip
    outputs = [onnx.helper.make_empty_tensor_value_info(name) for name in proto.output if name]
    graph = onnx.helper.make_graph([call], "function_body", inputs, outputs)
    opsets = [onnx.helper.make_opsetid("", opset), onnx.helper.make_opsetid(_BODY_DOMAIN, 1)]
    model = onnx.helper.make_model(graph, opset_imports=opsets, functions=[body])
    try:
        expanded = inline_local_functions(model)
        body_types = types_of_loaded(expanded, shapes=False)
    except Exception:  # a body onnx cannot expand or type here: nothing found in it
        return []
    return lint_types(body_types, _depth=depth + 1, _budget=budget).violations


def _unshaped(proto: onnx.TypeProto) -> onnx.TypeProto:
    """A type without its shape (a body is checked for its types alone)."""
    found = onnx.TypeProto()
    found.CopyFrom(proto)
    if found.HasField("tensor_type"):
        found.tensor_type.ClearField("shape")
    return found


@functools.cache
def allowed_types(op_type: str, opset: int, param: str) -> tuple[str, ...]:
    """The types a type parameter of an ai.onnx op admits as ONNX Runtime runs the op at an opset: its signature's
    (`schema.signature`), less each type for which the runtime runs the op's function body (no CPU kernel for it)
    and lint finds the body refusing it (every input of the parameter given the type, each other required input its
    parameter's first allowed type, the attributes their defaults). Where the runtime lists no kernels, the
    signature's as narrowed by `schema.FALLBACK_FUNCTION_BODY_OPS`. What the export-time fixes decide by."""
    sig = signature_for(Node(op_type, "", [], [], ()), {"": opset})
    if sig is None:
        return ()
    allowed = sig.allowed(param)
    if body_version(op_type, opset) is None or runtime_registry().kernels is None:
        return allowed
    schema = op_schema(op_type, "", opset)
    kept = []
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    required = [formal for formal in schema.inputs if formal.option != optional]
    outputs = [f"out{k}" for k, formal in enumerate(schema.outputs) if formal.option != optional]
    for candidate in allowed:
        types = [candidate if formal.type_str == param else
                 next((t for t in sig.allowed(formal.type_str) if t.startswith("tensor(")), None)
                 for formal in required]  # fmt: skip
        binding = {formal.type_str: t for formal, t in zip(required, types, strict=True) if t is not None}
        if None not in types and runs_as_function_body(sig, opset, binding):
            node = onnx.helper.make_node(op_type, [f"in{k}" for k in range(len(types))], outputs)
            if _check_body(node, opset, [tensor_type(elem_type_of(t)) for t in types], 0, [BODY_CHECKS]):
                continue
        kept.append(candidate)
    return tuple(kept)


def lint_types(types: ModelTypes, model_path: str | None = None, *, _depth: int = 0,
               _budget: list[int] | None = None) -> LintReport:
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
    unchecked: dict[str, int] = {}  # counted as a Counter would (one is dearer to make than a dict, per model)
    signatures: dict[tuple[str, str], Signature | None] = {}  # signature_for, once per op of the model
    # (domain, op, its values' types) -> its verdict: a large graph repeats a few blocks, so the check runs once
    # per kind of node and every other node is a lookup (`_verdict`)
    verdicts: dict[tuple[Any, ...], Verdict] = {}
    opset = types.opsets.get("")
    unknown_bodies: dict[str, int] = {}  # ops that may run as their body, where the runtime lists no kernels
    # function bodies left to build (shared with the bodies checked inside bodies); nodes whose body was not built
    budget, unbuilt = _budget if _budget is not None else [BODY_CHECKS], 0

    def judged(key: tuple[Any, ...]) -> Verdict:
        domain, op_type = key[0], key[1]
        if (domain, op_type) not in signatures:
            signatures[(domain, op_type)] = signature_for(Node(op_type, domain, [], [], ()), types.opsets)
        sig = signatures[(domain, op_type)]
        verdict = _UNCHECKED if sig is None else _verdict(sig, key[2], key[3])
        if verdict is not _UNCHECKED and verdict[0] and _depth < _BODY_DEPTH:
            runs = _runs_as_body(sig, key, opset)
            if runs is not False:
                verdict = _BodyVerdict(verdict)
                verdict.runs = runs
        verdicts[key] = verdict
        return verdict

    for scope in types.scopes.values():
        maps = scope.types.maps
        type_of = maps[0].get if len(maps) == 1 else scope.type_of  # "" is never typed: an omitted value is None
        known = verdicts.get
        keys = [(domain, op_type, tuple(map(type_of, inputs)), tuple(map(type_of, outputs)))
                for op_type, domain, inputs, outputs, _ in scope.nodes]  # fmt: skip
        every = [known(key) or judged(key) for key in keys]  # in bulk: almost every node is a lookup
        report.nodes_checked += len(every)
        found_here: list[Violation] = []
        for index in (i for i, verdict in enumerate(every) if verdict is not _CLEAN):
            node, verdict = scope.nodes[index], every[index]
            if verdict is _UNCHECKED:
                op = f"{node.domain or 'ai.onnx'}:{node.op_type}"
                unchecked[op] = unchecked.get(op, 0) + 1
                report.nodes_checked -= 1
                continue
            clean, untyped_inputs, untyped_outputs = verdict
            if type(verdict) is _BodyVerdict:
                if verdict.runs is None:
                    unknown_bodies[node.op_type] = unknown_bodies.get(node.op_type, 0) + 1
                elif not any(node.inputs[p] for p in untyped_inputs):  # every input it has typed: the body's too
                    found = _body_violations(scope.graph.node[index], index, scope, types, _depth, budget)
                    if found is None:
                        unbuilt += 1
                    else:
                        found_here.extend(found)
            if clean:
                untyped = [node.inputs[p] for p in untyped_inputs if node.inputs[p]]
                untyped += [node.outputs[p] for p in untyped_outputs if node.outputs[p]]
            else:
                found, untyped = _node_violations(node, index, signatures[(node.domain, node.op_type)], scope)
                found_here.extend(found)
            if untyped:
                report.untyped_values += len(untyped)
                room = UNTYPED_EXAMPLES - len(report.untyped_examples)
                report.untyped_examples.extend(f"{scope.path}/{n}" if scope.path else n for n in untyped[:room])
        if scope.declared:
            found_here.extend(_declared_violations(scope, types, keys, signatures))
        if len(types.scopes) > 1:
            found_here.extend(_holder_violations(scope, types))
        found_here.sort(key=lambda v: (v.function_call or {}).get("node_index", v.node_index))  # graph order, stable
        report.violations.extend(found_here)
    report.unchecked = unchecked
    if unknown_bodies:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(unknown_bodies.items()))
        report.notes.append(
            f"{runtime_registry().describe()} {NO_KERNEL_LIST}: the nodes of operators onnx defines by a function "
            f"body ({ops}) were checked against their own schemas, not through the body ONNX Runtime runs where it "
            "has no kernel for their types")
    if unbuilt:
        report.notes.append(f"the function bodies of {unbuilt} node(s) were not checked: {BODY_CHECKS} distinct "
                            "bodies were built for this model, the most lint builds")
    if report.violations:
        _mark_consequences(types, report.violations)
    return report


_NONE: frozenset[str] = frozenset()


def _follows_from_others(violation: Violation, derived: ChainMap[str, frozenset[str]]) -> frozenset[str]:
    """The roots a violation follows from (see the module's docstring); empty when it is a root."""
    inputs = [b for b in violation.bindings if b.io == "input"]
    inherited = [b for b in inputs if derived.get(b.name)]
    own_types = {b.type for b in inputs if not derived.get(b.name)}
    if violation.kind == FindingKind.DECLARED_TYPE:  # its other inputs alone would bind what the output declares
        alone_fine = own_types <= {b.type for b in violation.offending}
    else:
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


def _without_function_value_info(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model, or a copy whose functions declare no value_info (onnx's inliner would copy it into the graph as
    declared types; ONNX Runtime ignores a function's value_info)."""
    if not any(len(function.value_info) for function in model.functions):
        return model
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    for function in bare.functions:
        del function.value_info[:]
    return bare


class CallOutput(NamedTuple):
    """An output of a node of the main graph that calls a model-local function."""

    node: str  # the call's label
    node_index: int
    position: int
    op_type: str
    domain: str


def call_outputs(model: onnx.ModelProto) -> dict[str, CallOutput]:
    """Each output of the main graph's calls of model-local functions, by name (onnx's inliner keeps these names)."""
    local = {(function.domain, function.name) for function in model.functions}
    found: dict[str, CallOutput] = {}
    for index, node in enumerate(model.graph.node):
        if (node.domain, node.op_type) in local:
            for position, name in enumerate(node.output):
                if name:
                    found[name] = CallOutput(node_label(node, index), index, position, node.op_type, node.domain)
    return found


def at_calls(violations: list[Violation], calls: dict[str, CallOutput]) -> None:
    """Each declared type of a call's output that the function's body contradicts, put at the call (ONNX Runtime
    infers the call's outputs from the body and names the call): node, op, index and output position the call's,
    `computed_by` naming the body's node."""
    for v in violations:
        if v.kind != FindingKind.DECLARED_TYPE or v.subgraph or not v.offending:
            continue
        call = calls.get(v.offending[0].name)
        if call is None:
            continue
        inner = v.node
        claim = Binding("output", call.position, v.offending[0].name, v.offending[0].type)
        v.node, v.node_index, v.op_type, v.domain = call.node, call.node_index, call.op_type, call.domain
        v.bindings, v.offending, v.allowed, v.type_param = [claim], [claim], [], ""
        v.computed_by = f"the function's body: its node ({inner}) computes it from {v.computed_by}"


def lint_model(
    model_or_path: ModelLike, provider: str | None = None, kernel_cache: Path | None | bool = None,
    path: Path | None = None,
) -> LintReport:
    """Lint a model (or the .onnx file at a path; weights are not loaded).

    With `provider` (an execution provider of the installed onnxruntime, e.g. "CPUExecutionProvider"), nodes are
    also looked up in its kernel table (`report.kernels`; `kernel_cache` as `where223.graph.kernels.kernel_table`
    takes it). The provider is checked before the model is read: a UsageError for one this onnxruntime lacks.

    Model-local functions (the dynamo exporter puts whole modules in them) are inlined first with onnx's
    own inliner, so that the nodes inside them are checked at their call sites' types; a function's own value_info
    is left out (ONNX Runtime reads none), and a declared type of a call's output that the function's body
    contradicts is reported at the call, as ONNX Runtime reports it (`call_outputs`). Raises
    `UnreadableModelError` for a file that is not a model and `MalformedModelError` when onnx's inliner or
    shape inference fails on it; `path` names an in-memory model (read from that file) in them.
    """
    table = None
    if provider is not None:
        from where223.graph.kernels import kernel_table

        table = kernel_table(provider, kernel_cache)
    with collector_paused():
        opened = open_model(model_or_path)
        model, path = opened.model, opened.path or path
        functions = len(model.functions)
        if functions:  # the inlined model is a new one: model_types passes it through the guards again
            types = model_types(inline_local_functions(_without_function_value_info(model), path), path, shapes=False)
        else:
            types = types_of_loaded(model, path, opened.graphs, shapes=False)
        report = lint_types(types, str(path) if path else None)
        if functions:
            at_calls(report.violations, call_outputs(model))
    if len(report.violations) > 1:
        report.violations.sort(key=lambda v: not v.root)  # roots first; stable, so graph order within each group
    report.inlined_functions = functions
    if table is not None:
        report.kernels = check_kernels(types, report.violations, table)
    return report

