"""Operator signatures: the typing part of onnx's schemas, looked up once per op, domain and opset."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import onnx
import onnx.defs

from where223.graph.nodes import Node


@dataclass(frozen=True)
class Formal:
    """One formal input or output of an operator schema."""

    name: str
    type_str: str  # a type parameter such as 'T', or a literal type such as 'tensor(int64)'
    variadic: bool
    homogeneous: bool


@dataclass(frozen=True)
class Signature:
    """The typing part of an operator schema, in plain Python (cached per op, domain and opset)."""

    op_type: str
    domain: str
    since_version: int
    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    constraints: tuple[tuple[str, tuple[str, ...]], ...]  # (type parameter, allowed type strings)

    def allowed(self, type_str: str) -> tuple[str, ...]:
        """The types a formal's type_str admits: its constraint's list, or the literal type itself."""
        return self._constraint_map.get(type_str, (type_str,))

    def admitted(self, type_str: str) -> frozenset[str]:
        """`allowed` as a set, built once per signature and type parameter."""
        found = self._admitted_sets.get(type_str)
        return frozenset((type_str,)) if found is None else found

    def pairing(self, inputs: int, outputs: int) -> tuple[tuple[tuple[int, Formal], ...], ...]:
        """`formal_pairs` of a node with this many inputs and outputs, every name present, as (position, formal)
        for the inputs, then for the outputs: built once per signature and count (a node's empty names are for
        its caller to skip)."""
        key = (inputs, outputs)
        found = self._pairings.get(key)
        if found is None:
            found = self._pairings[key] = tuple(
                tuple((position, formal) for position, _, formal in formal_pairs(["-"] * count, formals))
                for count, formals in ((inputs, self.inputs), (outputs, self.outputs))
            )
        return found

    @functools.cached_property
    def _pairings(self) -> dict[tuple[int, int], tuple[tuple[tuple[int, Formal], ...], ...]]:
        return {}

    @functools.cached_property
    def _constraint_map(self) -> dict[str, tuple[str, ...]]:
        return dict(self.constraints)

    @functools.cached_property
    def _admitted_sets(self) -> dict[str, frozenset[str]]:
        return {param: frozenset(types) for param, types in self.constraints}


def _formal(param: onnx.defs.OpSchema.FormalParameter) -> Formal:
    return Formal(
        name=param.name,
        type_str=param.type_str,
        variadic=param.option == onnx.defs.OpSchema.FormalParameterOption.Variadic,
        homogeneous=param.is_homogeneous,
    )


@functools.cache
def op_schema(op_type: str, domain: str, opset: int) -> onnx.defs.OpSchema | None:
    """onnx's schema of an op at an opset of its domain, None when onnx has none (or the opset is no C++ int, which
    `guards.check_opsets` refuses in a model before this is asked)."""
    if not onnx.defs.has(op_type, domain) or not 0 <= opset < 2**31:
        return None
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


# Operators that ONNX Runtime runs as their function body (its CPU provider has no kernel of their own), with the
# body's operators that take the same type parameter `T`: an operator's schema may allow a type its body's do not.
# SoftmaxCrossEntropyLoss (opset 13 on) allows bfloat16, but its body is LogSoftmax then NegativeLogLikelihoodLoss
# (onnx/defs/math/defs.cc, its context-dependent function), which allows bfloat16 only from opset 22: ONNX Runtime
# refuses the expanded node ("... of operator (NegativeLogLikelihoodLoss) ... is invalid"; retribert's bf16 loss).
FUNCTION_BODY_OPS: dict[str, tuple[str, ...]] = {
    "SoftmaxCrossEntropyLoss": ("LogSoftmax", "NegativeLogLikelihoodLoss"),
}


def _narrowed_by_body(op_type: str, domain: str, opset: int, constraints: tuple[tuple[str, tuple[str, ...]], ...]
                      ) -> tuple[tuple[str, tuple[str, ...]], ...]:  # fmt: skip
    """`constraints` with `T` limited to what every operator of the op's function body allows for its `T`."""
    body = FUNCTION_BODY_OPS.get(op_type, ()) if domain == "" else ()
    narrowed = []
    for param, types in constraints:
        for inner in body if param == "T" else ():
            inner_sig = signature(inner, domain, opset)
            if inner_sig is not None:
                types = tuple(t for t in types if t in inner_sig.admitted("T"))
        narrowed.append((param, types))
    return tuple(narrowed)


@functools.cache
def signature(op_type: str, domain: str, opset: int) -> Signature | None:
    """The signature onnx registers for an op at an opset of its domain, None when it has none; for an operator run
    as its function body (`FUNCTION_BODY_OPS`), `T` allows only what the body's operators allow."""
    schema = op_schema(op_type, domain, opset)
    if schema is None:
        return None
    constraints = tuple((c.type_param_str, tuple(c.allowed_type_strs)) for c in schema.type_constraints)
    return Signature(
        op_type=op_type,
        domain=domain,
        since_version=schema.since_version,
        inputs=tuple(_formal(p) for p in schema.inputs),
        outputs=tuple(_formal(p) for p in schema.outputs),
        constraints=_narrowed_by_body(op_type, domain, opset, constraints),
    )


def signature_for(node: onnx.NodeProto | Node, opsets: dict[str, int]) -> Signature | None:
    """The signature of a node's op at the model's opset, None for ops onnx does not know (the node as a protobuf
    or as `nodes.read_graphs` read it)."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    version = opsets.get(domain)
    return None if version is None else signature(node.op_type, domain, version)


def formal_pairs(actual: Sequence[str], formals: tuple[Formal, ...]) -> list[tuple[int, str, Formal]]:
    """(position, name, formal) for each present actual input or output.

    A trailing variadic formal takes all remaining names; empty names (omitted optionals) and names
    beyond the schema's formals are left out.
    """
    if len(actual) <= len(formals):  # the common case: every name has its own formal
        return [(position, name, formals[position]) for position, name in enumerate(actual) if name]
    pairs = []
    for position, name in enumerate(actual):
        if position < len(formals):
            formal = formals[position]
        elif formals and formals[-1].variadic:
            formal = formals[-1]
        else:
            break
        if name:
            pairs.append((position, name, formal))
    return pairs


def opset_imports(model: onnx.ModelProto) -> dict[str, int]:
    """Domain -> opset version, with 'ai.onnx' folded into ''."""
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
