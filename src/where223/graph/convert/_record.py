"""What a conversion did: the nodes it converted and those it kept in float32 with why, the Casts and rounded
initializers, each round of the search, and the final comparison with the float32 model; and why it stopped."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from where223.errors import Finding, printable
from where223.graph.convert._initializers import InitializerConversion
from where223.graph.diff import DiffReport

__all__ = ["ConvertError", "KeptNode", "SearchRound", "ConversionRecord"]


class ConvertError(Finding, RuntimeError):
    """No conversion within tolerance was found (the search's bound reached, or nothing left to keep), or a result
    failed the checks it is built to pass; nothing is written (exit 1)."""


@dataclass(frozen=True)
class KeptNode:
    """A node that computes in float32 in the result, and why: a rule (`round` 0) or the search (its round)."""

    node: str
    op_type: str
    reason: str
    round: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type, "reason": self.reason, "round": self.round}


@dataclass(frozen=True)
class SearchRound:
    """One candidate of the search: how many nodes it converted, whether it was within tolerance, and if not its
    first departure and the nodes kept in float32 for the next round."""

    round: int
    converted: int
    within: bool
    departure: str | None = None
    kept: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "converted": self.converted, "within": self.within,
                "departure": self.departure, "kept": list(self.kept)}  # fmt: skip

    def format(self) -> str:
        if self.within:
            return f"round {self.round}: {self.converted} node(s) converted, within tolerance"
        kept = f"; kept in float32: {', '.join(map(printable, self.kept))}" if self.kept else ""
        return f"round {self.round}: {self.converted} node(s) converted, beyond tolerance ({self.departure}){kept}"


@dataclass
class ConversionRecord:
    """`convert`'s record (see the package's docstring)."""

    source: str
    to_type: str
    keep_io_types: bool
    provider: str
    onnxruntime: str
    opset: int  # the result's (the model's own, or the one it was upgraded to: `upgraded_from`)
    converted: list[tuple[str, str]] = field(default_factory=list)  # (node, op type)
    kept: list[KeptNode] = field(default_factory=list)
    initializers: list[InitializerConversion] = field(default_factory=list)
    casts: int = 0
    rounds: list[SearchRound] = field(default_factory=list)
    lint: str = ""
    diff: DiffReport | None = None
    output: str | None = None
    upgraded_from: int | None = None  # the model's own opset, where Cast there does not take the reduced type
    kept_inputs: list[tuple[str, str]] = field(default_factory=list)  # (graph input, why) float32 by the search

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "output": self.output, "to": self.to_type, "keep_io_types": self.keep_io_types,
            "provider": self.provider, "onnxruntime": self.onnxruntime, "opset": self.opset,
            "opset_upgraded_from": self.upgraded_from,
            "converted": [{"node": n, "op_type": op} for n, op in self.converted],
            "kept": [k.to_dict() for k in self.kept],
            "kept_inputs": [{"input": name, "reason": why} for name, why in self.kept_inputs],
            "initializers": [i.to_dict() for i in self.initializers], "casts": self.casts,
            "rounds": [r.to_dict() for r in self.rounds], "lint": self.lint,
            "diff": self.diff.to_dict() if self.diff else None,
        }  # fmt: skip

    def format(self) -> str:
        io = "float32 inputs and outputs kept" if self.keep_io_types else f"inputs and outputs in {self.to_type}"
        lines = [f"converted {printable(self.source)}" + (f" -> {printable(self.output)}" if self.output else "")
                 + f": {self.to_type} for {self.provider} (onnxruntime {self.onnxruntime}), opset {self.opset}, {io}"]
        if self.upgraded_from is not None:
            lines.append(f"  opset {self.upgraded_from} -> {self.opset} by onnx's version converter: Cast takes "
                         f"{self.to_type} only from opset {self.opset}")
        ops = Counter(op for _, op in self.converted)
        shown = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())) or "none"
        lines.append(f"  {len(self.converted)} node(s) compute in {self.to_type}: {shown}")
        lines.append(f"  {len(self.kept)} node(s) keep float32:")
        for kept in self.kept:
            by = f" (search, round {kept.round})" if kept.round else ""
            lines.append(f"    {printable(kept.node)} ({kept.op_type}){by}: {kept.reason}")
        for name, why in self.kept_inputs:
            lines.append(f"  input '{printable(name)}' keeps float32 (search): {why}")
        lines.append(f"  {self.casts} Cast(s) at the boundaries between float32 and {self.to_type}")
        for cost in self.initializers:
            lines.append(f"  initializer '{printable(cost.name)}' rounded to {self.to_type} ({cost.elements} value(s): "
                         f"{cost.overflowed} overflowed, {cost.flushed} flushed to zero, {cost.subnormal} subnormal)")
        lines += [f"  search {r.format()}" for r in self.rounds]
        lines.append(f"  lint: {self.lint}; ONNX Runtime loads it")
        if self.diff is not None:
            lines += ["  " + line for line in self.diff.format().splitlines()]
        return "\n".join(lines)
