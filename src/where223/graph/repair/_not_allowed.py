"""Rule: a type its operator's schema does not allow at the model's opset (bf16 into `Conv` or `Einsum` before
opset 22), resolved by computing the node in the nearest allowed type that holds it exactly (float for bf16 and
fp16) and casting what leaves it back; the change says what that costs (the Casts, the wider arithmetic) and
from which opset, if any, the schema would allow the type itself (not taken: raising a model's opset changes
every node's version, and a runtime may have no kernel for the type there)."""

from __future__ import annotations

import onnx.defs

from where223.errors import printable
from where223.graph.lint import Violation
from where223.graph.repair._change import RepairError
from where223.graph.repair._types import nearest_allowed, widest
from where223.graph.schema import signature


def allowing_opset(violation: Violation, opset: int) -> int | None:
    """The first opset after `opset` at which the operator's schema allows every type bound to the violation's
    parameter, None when none up to the installed onnx's newest does."""
    domain = "" if violation.domain in ("", "ai.onnx") else violation.domain
    bound = {b.type for b in violation.bindings}
    for version in range(opset + 1, onnx.defs.onnx_opset_version() + 1):
        sig = signature(violation.op_type, domain, version)
        if sig is not None and bound <= set(sig.allowed(violation.type_param)):
            return version
    return None


def choose(violation: Violation, opset: int) -> tuple[str, str]:
    """The type the node computes its parameter in, and why (with the cost and the opset alternative)."""
    refused = sorted({b.type for b in violation.offending})
    base = widest(b.type for b in violation.bindings)
    chosen = nearest_allowed(base, violation.allowed) if base else None
    if chosen is None:
        raise RepairError(f"{printable(violation.node)}: {', '.join(refused)} is not allowed for "
                          f"{violation.type_param} of {violation.op_type} at opset {opset} and no allowed type holds "
                          f"it exactly (allowed: {', '.join(violation.allowed)}); not repaired")
    casts = sum(1 for b in violation.bindings if b.type != chosen)
    later = allowing_opset(violation, opset)
    alternative = (f"; opset {later} would allow {', '.join(refused)} (not raised)" if later
                   else "; no opset of the installed onnx allows it")
    why = (f"{', '.join(refused)} is not allowed for {violation.type_param} of {violation.op_type} at opset {opset}: "
           f"computed in {chosen}, the nearest allowed type that holds it, at the cost of {casts} Cast(s) and "
           f"{chosen} arithmetic{alternative}")
    return chosen, why
