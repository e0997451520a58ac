"""Operator signatures: the typing part of onnx's schemas, looked up once per op, domain and opset; for the ops of
ONNX Runtime's own domains (`com.microsoft`), the schemas the installed onnxruntime registers; and which ai.onnx ops
ONNX Runtime runs as their function body (no CPU kernel for their types), with the body onnx builds for a node."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


# Where the installed onnxruntime lists no kernels (`RuntimeRegistry.kernels` is None: onnxruntime-training 1.19 has no
# `get_all_opkernel_def`), lint cannot tell which operators ONNX Runtime runs as their function body: it falls back to
# the one case known before that list was read, with the body's operators that take the same type parameter `T` (an
# operator's schema may allow a type its body's do not). SoftmaxCrossEntropyLoss (opset 13 on) allows bfloat16, but
# its body is LogSoftmax then NegativeLogLikelihoodLoss (onnx/defs/math/defs.cc, its context-dependent function),
# which allows bfloat16 only from opset 22: ONNX Runtime refuses the expanded node ("... of operator
# (NegativeLogLikelihoodLoss) ... is invalid"; retribert's bf16 loss). With the list, lint checks the body itself
# (`function_body`, `runs_as_function_body`) and this table is not read.
FALLBACK_FUNCTION_BODY_OPS: dict[str, tuple[str, ...]] = {
    "SoftmaxCrossEntropyLoss": ("LogSoftmax", "NegativeLogLikelihoodLoss"),
}


def _narrowed_by_body(op_type: str, domain: str, opset: int, constraints: tuple[tuple[str, tuple[str, ...]], ...]
                      ) -> tuple[tuple[str, tuple[str, ...]], ...]:  # fmt: skip
    """`constraints` with `T` limited to what every operator of the op's function body allows for its `T`, where the
    fallback applies (`FALLBACK_FUNCTION_BODY_OPS`)."""
    body = FALLBACK_FUNCTION_BODY_OPS.get(op_type, ()) if domain == "" else ()
    if not body or runtime_registry().kernels is not None:
        return constraints
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
    """The signature onnx registers for an op at an opset of its domain; for an op of a domain onnx does not define
    (ONNX Runtime's `com.microsoft` contrib ops), the one the installed onnxruntime registers (`runtime_registry`);
    None when neither has one. Without the runtime's kernel list, an operator of `FALLBACK_FUNCTION_BODY_OPS` allows
    for `T` only what its body's operators allow."""
    schema = op_schema(op_type, domain, opset)
    if schema is None:
        return _runtime_signature(op_type, domain, opset) if domain else None
    constraints = tuple((c.type_param_str, tuple(c.allowed_type_strs)) for c in schema.type_constraints)
    return Signature(
        op_type=op_type,
        domain=domain,
        since_version=schema.since_version,
        inputs=tuple(_formal(p) for p in schema.inputs),
        outputs=tuple(_formal(p) for p in schema.outputs),
        constraints=_narrowed_by_body(op_type, domain, opset, constraints),
    )


# --- what the installed ONNX Runtime registers -------------------------------------------------------------------


@dataclass(frozen=True)
class KernelDef:
    """One CPU kernel ONNX Runtime registers: the schema versions it serves and the types each parameter may take."""

    first: int
    last: int
    types: tuple[tuple[str, frozenset[str]], ...]

    def serves(self, since_version: int, binding: dict[str, str]) -> bool:
        """Whether a node of that schema version, its parameters bound as `binding`, finds this kernel (a parameter
        the node leaves unbound, an omitted optional input, constrains nothing: ONNX Runtime's own matching)."""
        return self.first <= since_version <= self.last and all(
            binding[param] in allowed for param, allowed in self.types if param in binding)


@dataclass(frozen=True)
class RuntimeRegistry:
    """The operator schemas and CPU kernels the installed onnxruntime lists (`get_all_operator_schema`,
    `get_all_opkernel_def` of its binding); None for a list it does not expose (onnxruntime-training 1.19 exposes
    neither), or for both when no onnxruntime can be imported (`version` None)."""

    version: str | None
    schemas: dict[tuple[str, str], tuple[Any, ...]] | None  # (domain, op) -> its schemas, oldest first
    kernels: dict[tuple[str, str], tuple[KernelDef, ...]] | None  # (domain, op) -> its CPU kernels

    def describe(self) -> str:
        """`onnxruntime 1.19.2`, or `onnxruntime (none installed)`."""
        return f"onnxruntime {self.version}" if self.version else "onnxruntime (none installed)"


@functools.cache
def runtime_registry() -> RuntimeRegistry:
    """What the installed onnxruntime registers, read once per process (onnxruntime imported without its training
    part: `where223.graph.ort.import_onnxruntime`)."""
    from where223.graph.ort import import_onnxruntime

    try:
        onnxruntime = import_onnxruntime()
        from onnxruntime.capi import onnxruntime_pybind11_state as state
    except Exception:  # not installed, or a build that cannot load here: nothing is known of it
        return RuntimeRegistry(None, None, None)
    version = str(getattr(onnxruntime, "__version__", "unknown"))
    schemas: dict[tuple[str, str], list[Any]] | None = None
    if hasattr(state, "get_all_operator_schema"):
        schemas = {}
        for schema in state.get_all_operator_schema():
            domain = "" if schema.domain == "ai.onnx" else schema.domain
            schemas.setdefault((domain, schema.name), []).append(schema)
    kernels: dict[tuple[str, str], list[KernelDef]] | None = None
    if hasattr(state, "get_all_opkernel_def"):
        kernels = {}
        for kernel in state.get_all_opkernel_def():
            if kernel.provider != "CPUExecutionProvider":
                continue
            first, last = kernel.version_range
            types = tuple((param, frozenset(allowed)) for param, allowed in sorted(kernel.type_constraints.items()))
            domain = "" if kernel.domain == "ai.onnx" else kernel.domain
            kernels.setdefault((domain, kernel.op_name), []).append(KernelDef(first, last, types))
    return RuntimeRegistry(
        version,
        None if schemas is None else {key: tuple(sorted(found, key=lambda s: s.since_version))
                                      for key, found in schemas.items()},
        None if kernels is None else {key: tuple(found) for key, found in kernels.items()},
    )  # fmt: skip


def _runtime_formal(param: Any) -> Formal:
    return Formal(name=param.name, type_str=param.typeStr, variadic=param.option.name == "Variadic",
                  homogeneous=bool(param.isHomogeneous))  # fmt: skip


def _runtime_signature(op_type: str, domain: str, opset: int) -> Signature | None:
    """The signature the installed onnxruntime registers for an op of a domain onnx does not define, at an opset of
    that domain: its newest schema not newer than the opset."""
    schemas = runtime_registry().schemas
    found = [s for s in (schemas or {}).get((domain, op_type), ()) if s.since_version <= opset]
    if not found:
        return None
    schema = found[-1]
    return Signature(
        op_type=op_type,
        domain=domain,
        since_version=schema.since_version,
        inputs=tuple(_runtime_formal(p) for p in schema.inputs),
        outputs=tuple(_runtime_formal(p) for p in schema.outputs),
        constraints=tuple((c.type_param_str, tuple(c.allowed_type_strs)) for c in schema.type_constraints),
    )


def from_runtime(sig: Signature) -> bool:
    """Whether a signature is ONNX Runtime's (an op of a domain onnx does not define), not onnx's."""
    return op_schema(sig.op_type, sig.domain, sig.since_version) is None


# --- function bodies -------------------------------------------------------------------------------------------


@functools.cache
def body_version(op_type: str, opset: int) -> int | None:
    """The opset of the function body onnx defines for an ai.onnx op at a model's opset (context-dependent bodies
    included), None when it defines none there."""
    schema = op_schema(op_type, "", opset)
    if schema is None:
        return None
    versions = [*schema.context_dependent_function_opset_versions, *schema.function_opset_versions]
    if not versions and (schema.has_context_dependent_function or schema.has_function):
        versions = [schema.since_version]
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def runs_as_function_body(sig: Signature, opset: int, binding: dict[str, str]) -> bool | None:
    """Whether ONNX Runtime runs a node of an ai.onnx op as the function body onnx defines for it: it has one at this
    opset and the runtime's CPU kernel list has no kernel for the op's schema version at the types its values bind
    (`binding`, type parameter -> type). None when the runtime lists no kernels (see FALLBACK_FUNCTION_BODY_OPS)."""
    if sig.domain != "" or body_version(sig.op_type, opset) is None:
        return False
    kernels = runtime_registry().kernels
    if kernels is None:
        return None
    return not any(kernel.serves(sig.since_version, binding) for kernel in kernels.get(("", sig.op_type), ()))


def function_body(node: onnx.NodeProto, opset: int, input_types: Sequence[onnx.TypeProto | None]
                  ) -> onnx.FunctionProto | None:  # fmt: skip
    """The function body onnx builds for a node of an ai.onnx op at a model's opset (a context-dependent one built
    from the node's attributes and its inputs' types), its ai.onnx opset the model's; None when onnx builds none."""
    version = body_version(node.op_type, opset)
    schema = op_schema(node.op_type, "", opset)
    if version is None or schema is None:
        return None
    try:
        if version in schema.context_dependent_function_opset_versions or (
                schema.has_context_dependent_function and not schema.function_opset_versions):
            types = [(t if t is not None else onnx.TypeProto()).SerializeToString() for t in input_types]
            built = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(), types)
        else:
            built = schema.get_function_with_opset_version(version)
    except Exception:  # onnx could not build it for this node (an attribute or type its builder refuses)
        return None
    body = built if isinstance(built, onnx.FunctionProto) else onnx.FunctionProto.FromString(built)
    if not body.node:
        return None
    del body.opset_import[:]
    body.opset_import.append(onnx.helper.make_opsetid("", opset))
    return body


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
