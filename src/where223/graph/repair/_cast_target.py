"""Rule: a wrong Cast target, repaired at its root. A Cast whose target no schema here allows (Cast's own, or its
consumer's) is retargeted, when its `to` read as torch's ScalarType number (the TorchScript exporter's
`Cast(to=15)`: torch's bfloat16, ONNX's complex128), or else the one type its consumers' other inputs bound to the
same parameter carry, is a type both Cast and those consumers allow. No Cast is inserted, so none from or to the
wrong type; what the wrong type made wrong downstream is judged again after the retargeting."""

from __future__ import annotations

import onnx_ir as ir

from where223.graph.dtypes import elem_type_name
from where223.graph.lint import FindingKind, Violation
from where223.graph.repair._edit import Editor
from where223.graph.repair._types import TORCH_SCALAR_TYPES


def _candidates(to: int, refused: str, consumers: list[Violation]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    torch_name = TORCH_SCALAR_TYPES.get(to)
    if torch_name and torch_name != elem_type_name(to):
        found.append((f"tensor({torch_name})", f"`to={to}` is torch's number for {torch_name} and ONNX's for "
                                                f"{elem_type_name(to)}"))  # fmt: skip
    others = {b.type for c in consumers for b in c.bindings if b.io == "input" and b.type != refused}
    if len(others) == 1:
        other = next(iter(others))
        found.append((other, f"its consumers' other inputs are {other}"))
    return found


def _wrong_casts(violations: list[Violation], editor: Editor) -> dict[int, tuple[ir.Node, str, int, str]]:
    """Each Cast node behind a refused type: (node, subgraph path, index, the refused type), by node identity."""
    found: dict[int, tuple[ir.Node, str, int, str]] = {}
    for violation in violations:
        if violation.kind != FindingKind.NOT_ALLOWED or violation.function_call is not None:
            continue  # a finding inside a function body: the function body rule's
        node = editor.node(violation.subgraph, violation.node_index)
        for binding in violation.offending:
            if violation.op_type == "Cast" and binding.io == "output":
                cast, where = node, (violation.subgraph, violation.node_index)
            elif binding.io == "input" and (producer := node.inputs[binding.position].producer()) is not None:
                cast, where = producer, editor.locate(producer)
            else:
                continue
            to = cast.attributes.get("to")
            if (cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx") or where is None or to is None
                    or f"tensor({elem_type_name(to.value)})" != binding.type):
                continue
            found.setdefault(id(cast), (cast, *where, binding.type))
    return found


def apply(violations: list[Violation], editor: Editor) -> int:
    """Retarget the wrong Casts behind `violations` where a candidate type is allowed; how many were."""
    done = 0
    for cast, path, index, refused in _wrong_casts(violations, editor).values():
        out = cast.outputs[0].name
        consumers = [v for v in violations if v.op_type != "Cast" and any(b.name == out for b in v.bindings)]
        consumers += [v for v in violations if v.op_type != "Cast" and v not in consumers
                      and any(label.endswith(cast.name or "\0") for label in v.caused_by)]  # fmt: skip
        own = next((v for v in violations if (v.subgraph, v.node_index) == (path, index)), None)
        for candidate, reason in _candidates(cast.attributes["to"].value, refused, consumers):
            if (own is None or candidate in own.allowed) and all(candidate in c.allowed for c in consumers):
                editor.retarget(path, index, candidate, f"{reason}; {candidate} is allowed where it goes")
                done += 1
                break
    return done
