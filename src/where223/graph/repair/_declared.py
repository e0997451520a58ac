"""Rule: a declared type that contradicts what its node computes (a float16 converter's value_info over a
`Cast(to=FLOAT)` it left, a model-local function's output declared float16 over a float body). The value is made
what every consumer was judged at, its declared type: a Cast is retargeted to it, any other node computes its own type
and a Cast after it gives the declared one. Where a consumer was judged wrong because of the declaration (a
consequence of it), the declaration is corrected to the type the node computes instead; never for an output of the
main graph or of a subgraph, which keep their declared types (the converter's `keep_io_types` intent: the model's
inputs and outputs keep theirs). A subgraph's input declared otherwise than its node gives it (a Loop's body) has the
node's input cast to the declared type; an If's branches declaring two types for one output are refused."""

from __future__ import annotations

from where223.errors import printable
from where223.graph.lint import FindingKind, Violation
from where223.graph.repair._change import RepairError
from where223.graph.repair._edit import Editor

BODY_INPUT_OFFSET = {"Loop": 0, "Scan": 0, "SequenceMap": 0}  # body input k is the node's input k + offset


def is_declared(violation: Violation) -> bool:
    """A declared-type finding this rule resolves (one inside a function body is the function body rule's)."""
    return violation.kind == FindingKind.DECLARED_TYPE and violation.function_call is None


def _interface(editor: Editor, violation: Violation, name: str) -> bool:
    """Whether the value is an output of the graph it is in (the main graph's or a subgraph's)."""
    graph = editor.graphs[violation.subgraph]
    return any(value.name == name for value in graph.outputs)


def apply(violations: list[Violation], editor: Editor) -> int:
    """Resolve every declared-type root among `violations`; how many were."""
    done = 0
    for violation in violations:
        if not is_declared(violation) or not violation.root:
            continue
        claim, computed = violation.offending[0], violation.expected or ""
        node = editor.node(violation.subgraph, violation.node_index)
        where = printable(violation.label)
        if claim.io == "input":  # a body's input: the node's input cast to what the body declares
            if node.op_type not in BODY_INPUT_OFFSET or claim.position >= len(node.inputs):
                raise RepairError(f"{where}: its body declares input {claim.position} {claim.type}, given {computed}; "
                                  "not repaired")
            if node.inputs[claim.position] is None:  # an optional input left out (a Loop's M): nothing to cast
                raise RepairError(f"{where}: its body declares input {claim.position} {claim.type}, given {computed} "
                                  f"for the node's input {claim.position}, which it leaves out; not repaired")
            editor.cast_input(violation.subgraph, violation.node_index, claim.position, claim.type,
                              f"its body declares {claim.type} for input {claim.position}")  # fmt: skip
            done += 1
            continue
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and "else_branch" in (violation.computed_by or ""):
            raise RepairError(f"{where}: its else_branch declares output {claim.position} {claim.type}, its "
                              f"then_branch {computed}; not repaired")
        consequences = [v for v in violations if violation.label in v.caused_by]
        if consequences and not _interface(editor, violation, claim.name):
            why = (f"the node computes {computed}; {len(consequences)} consumer(s) judged wrong at the declared "
                   f"{claim.type} ({', '.join(printable(v.label) for v in consequences[:3])}) take it as computed")
            editor.redeclare(violation.subgraph, violation.node_index, claim.position, computed, why)
        elif node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
            editor.set_cast_to(violation.subgraph, violation.node_index, claim.type,
                               f"its output is declared {claim.type} and every consumer takes it so")  # fmt: skip
        else:
            how = printable(violation.computed_by or "")
            editor.cast_output(violation.subgraph, violation.node_index, claim.position, computed,
                               f"the node computes {computed} ({how}); its output is declared {claim.type} and every "
                               "consumer takes it so")  # fmt: skip
        done += 1
    return done
