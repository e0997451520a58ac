"""Rule: a type-binding conflict (one type parameter bound to several types: `Where`'s two values, a
`LayerNormalization` with bf16 activations and float weights), resolved by computing the node in one type and
casting back what leaves it, so every consumer sees the type it saw.

Which type: where the one-model report's eager kernel for the node is given, where eager computed (its one
floating input type; for a kernel handed several, the widest of them, as `native_layer_norm` computes bf16
activations with float weights in float); on a bare model the widest bound type (the smallest type that holds
every bound type exactly), saying that eager was not consulted. `target="output"` keeps the type the node's
outputs carry (the rule before this one, which rounds float weights to bf16), an explicit type forces it."""

from __future__ import annotations

from where223.errors import printable
from where223.graph.dtypes import tensor_type_string
from where223.graph.lint import Violation
from where223.graph.repair._change import RepairError
from where223.graph.repair._eager import EagerKernel
from where223.graph.repair._types import nearest_allowed, widest

NOT_CONSULTED = "eager not consulted"


def choose(violation: Violation, target: str, kernel: EagerKernel | None, eager_given: bool) -> tuple[str, str]:
    """The type the node computes its parameter in, and why."""
    node = printable(violation.node)
    if target not in ("auto", "output"):
        chosen, why = tensor_type_string(target), f"the target asked for, {tensor_type_string(target)}"
    elif target == "output":
        chosen, why = violation.expected or "", "the type the node's outputs carry"
    elif kernel is not None and kernel.floating:
        floating = kernel.floating
        chosen = floating[0] if len(floating) == 1 else widest(floating) or ""
        why = f"{kernel}: computed in {chosen}" + (", as eager's kernel does" if len(floating) > 1 else "")
    else:
        chosen = widest(b.type for b in violation.bindings) or ""
        missing = "no eager kernel recorded for this node" if eager_given else NOT_CONSULTED
        why = f"the widest bound type, {chosen or 'none'} ({missing})"
    if not chosen:
        raise RepairError(f"{node}: no type holds {', '.join(sorted({b.type for b in violation.bindings}))} "
                          f"exactly for {violation.type_param} of {violation.op_type}; not repaired")
    if chosen not in violation.allowed:
        if target not in ("auto", "output"):
            raise RepairError(f"{node}: target {chosen} is not allowed for type parameter {violation.type_param} "
                              f"of {violation.op_type} (allowed: {', '.join(violation.allowed)})")
        nearest = nearest_allowed(chosen, violation.allowed)
        if nearest is None:
            raise RepairError(f"{node}: {chosen} is not allowed for {violation.type_param} of {violation.op_type} "
                              f"and no allowed type holds it exactly (allowed: {', '.join(violation.allowed)})")
        chosen, why = nearest, f"{why}; not allowed there, so in {nearest}, the nearest allowed type that holds it"
    return chosen, why
