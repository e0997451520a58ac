"""Rule: a finding inside the function body ONNX Runtime runs for a node (its op has no kernel for the node's types:
Attention-23 with bfloat16 queries and float16 values, whose body's MatMul binds both; SoftmaxCrossEntropyLoss in
bfloat16 before opset 22, whose body's NegativeLogLikelihoodLoss refuses it). The node is computed in the smallest
type that holds every floating type it is given exactly (float for bfloat16 and float16; for one type alone, the
nearest wider one: float for bfloat16): its floating inputs are cast to it and its floating outputs cast back, so
every consumer sees what it saw. The re-lint judges the node again at that type (a kernel, or a body without
findings)."""

from __future__ import annotations

from where223.errors import printable
from where223.graph.dtypes import short_type
from where223.graph.lint import Violation
from where223.graph.repair._change import RepairError
from where223.graph.repair._edit import UNKNOWN, Editor
from where223.graph.repair._types import SUPERTYPES, widest

FLOATING = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")


def apply(violations: list[Violation], editor: Editor) -> int:
    """Compute each node whose function body has a root finding in one floating type; how many nodes were."""
    calls: dict[tuple[str, int], list[Violation]] = {}
    for violation in violations:
        if violation.function_call is not None and violation.root:
            call = violation.function_call
            calls.setdefault((call["subgraph"], call["node_index"]), []).append(violation)
    for (path, index), found in calls.items():
        node = editor.node(path, index)
        label = printable(found[0].function_call["node"])
        given = [editor.type_in(path, value) if value is not None else UNKNOWN for value in node.inputs]
        floating = [t for t in given if t in FLOATING]
        chosen = widest(floating)
        if chosen is not None and set(floating) == {chosen}:  # one type already, refused: the next one holding it
            chosen = next((f"tensor({wider})" for wider in SUPERTYPES.get(short_type(chosen), ())), None)
        if chosen is None:
            raise RepairError(f"{label}: {found[0].message()} in the function body ONNX Runtime runs for it, and no "
                              "type holds its floating inputs exactly; not repaired")
        why = (f"ONNX Runtime runs {node.op_type}'s function body for {', '.join(dict.fromkeys(floating))}, and "
               f"{found[0].op_type} in it refuses them ({found[0].kind}): computed in {chosen}, which holds them")
        for position, value_type in enumerate(given):
            if value_type in FLOATING and value_type != chosen:
                editor.cast_input(path, index, position, chosen, why)
        for position, value in enumerate(node.outputs):
            if editor.type_in(path, value) in FLOATING and editor.type_in(path, value) != chosen:
                editor.cast_output(path, index, position, chosen, why)
    return len(calls)
