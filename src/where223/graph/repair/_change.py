"""What a repair did (a `Change` per Cast inserted or retargeted) and why it stopped (its two errors)."""

from __future__ import annotations

from dataclasses import dataclass

from where223.errors import Finding, printable


class RepairError(Finding, RuntimeError):
    """The model cannot be repaired: a violation no rule resolves (its reason given), or violations remain."""


class RepairRefused(Finding, RuntimeError):
    """ONNX Runtime refuses the model (or did not judge it within its time): the repaired one, written; or one in
    which lint found nothing to repair, nothing written."""


@dataclass(frozen=True)
class Change:
    """One edit: a Cast inserted for a node's input (`cast_input`) or behind its output (`cast_output`), a Cast
    node's target changed (`retarget_cast`), or a declared type of a node's output corrected to the type the node
    computes (`redeclare`), with the rule's reason (`why`)."""

    kind: str
    node: str
    subgraph: str
    value: str
    position: int
    from_type: str
    to_type: str
    cast_node: str
    new_value: str
    why: str = ""

    def __str__(self) -> str:
        node, value, new_value, cast = map(printable, (self.node, self.value, self.new_value, self.cast_node))
        where = f" [{printable(self.subgraph)}]" if self.subgraph else ""
        because = f" ({printable(self.why)})" if self.why else ""
        if self.kind == "cast_input":
            return (f"{node}{where}: input {self.position} '{value}' {self.from_type} -> {self.to_type} via Cast "
                    f"'{cast}' (new value '{new_value}'){because}")
        if self.kind == "retarget_cast":
            return f"{node}{where}: Cast target {self.from_type} -> {self.to_type} for '{value}'{because}"
        if self.kind == "redeclare":
            return (f"{node}{where}: output {self.position} '{value}' declared {self.from_type} -> {self.to_type}"
                    f"{because}")
        return (f"{node}{where}: output {self.position} now '{new_value}' {self.from_type}, cast back to "
                f"{self.to_type} as '{value}' by Cast '{cast}'{because}")
