"""The one outcome vocabulary of every sweep cell (standard library only: cells import it in every stack).

Each value is defined in one sentence in `DEFINITIONS` (README's table is checked against it). ONNX Runtime's own
verdict on a graph (`where223.graph.ort.OrtVerdict`) maps onto the first values by name (`from_verdict`); the
others say why there is no verdict.
"""

from __future__ import annotations

from where223.enums import TextEnum


class Outcome(TextEnum):
    """How one sweep cell ended, from ONNX Runtime's acceptance to a cell that never finished."""

    ACCEPTED = "accepted"
    WHERE_TYPE_ERROR = "where_type_error"
    TYPE_ERROR = "type_error"
    MISSING_KERNEL = "missing_kernel"
    OTHER_ERROR = "other_error"
    NOT_EXPORTED = "not_exported"
    NOT_BUILT = "not_built"
    NOT_FED = "not_fed"
    NOT_APPLICABLE = "not_applicable"
    NOT_RUN = "not_run"
    TIMEOUT = "timeout"
    CRASHED = "crashed"

    @property
    def definition(self) -> str:
        """The value's one-sentence definition."""
        return DEFINITIONS[self]

    @property
    def judged(self) -> bool:
        """True when ONNX Runtime gave a verdict on an exported graph (accepted or refused it)."""
        return self in JUDGED

    @property
    def final(self) -> bool:
        """True when a resumed sweep keeps the cell's record (every outcome but `not_run`)."""
        return self is not Outcome.NOT_RUN


DEFINITIONS: dict[Outcome, str] = {
    Outcome.ACCEPTED: "ONNX Runtime created a session for the exported graph and ran it.",
    Outcome.WHERE_TYPE_ERROR: "ONNX Runtime refused the graph because a Where's two value inputs bind T to two "
    "types (the case under study).",
    Outcome.TYPE_ERROR: "ONNX Runtime refused the graph for any other type: a binding on another op, or a type an "
    "input may not have.",
    Outcome.MISSING_KERNEL: "ONNX Runtime accepted the graph's types but its CPU provider has no kernel for one "
    "node.",
    Outcome.OTHER_ERROR: "ONNX Runtime refused the graph for another reason, e.g. an opset it does not support or "
    "a malformed graph.",
    Outcome.NOT_EXPORTED: "The model was built and fed, but the exporter raised.",
    Outcome.NOT_BUILT: "The cell's stack could not be installed or imported, or its model could not be "
    "constructed.",
    Outcome.NOT_FED: "The model was built, but no inputs could be made for it or its eager forward failed.",
    Outcome.NOT_APPLICABLE: "The cell cannot exist, e.g. a dynamo exporter asked of a torch that has none.",
    Outcome.NOT_RUN: "The sweep's deadline passed before the cell finished, so a resumed sweep runs it again.",
    Outcome.TIMEOUT: "The cell, or ONNX Runtime's session creation within it, ran past its time limit and was "
    "stopped.",
    Outcome.CRASHED: "The cell's process, or the sweep worker running it twice, died without leaving a record.",
}
JUDGED: frozenset[Outcome] = frozenset(
    {Outcome.ACCEPTED, Outcome.WHERE_TYPE_ERROR, Outcome.TYPE_ERROR, Outcome.MISSING_KERNEL, Outcome.OTHER_ERROR}
)

# ONNX Runtime accepted the graph's types: it loaded, or it found no kernel for them on this CPU (after the type check)
TYPES_ACCEPTED: frozenset[Outcome] = frozenset({Outcome.ACCEPTED, Outcome.MISSING_KERNEL})


def from_verdict(verdict: str) -> Outcome:
    """The outcome of a cell whose graph ONNX Runtime judged (`OrtVerdict` value, `timeout` included)."""
    return Outcome(str(verdict))
