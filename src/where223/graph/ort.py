"""ONNX Runtime's verdict on a model: one loader, one parser of its type-binding message, one enum.

Only the standard library at module level: the version-matrix cells classify errors with this module inside
other Python environments, and record readers name verdicts without loading onnx. onnx and onnxruntime are
imported by `load_session` (and so `judge`) only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from where223.enums import TextEnum

if TYPE_CHECKING:
    from where223.graph.loading import ModelLike


class OrtVerdict(TextEnum):
    """What ONNX Runtime made of a model, from the most specific refusal to the least (declaration order)."""

    ACCEPTED = "accepted"  # a session was created: the graph passed every check
    WHERE_TYPE_ERROR = "where_type_error"  # Where's T bound to two types: the case under study
    TYPE_ERROR = "type_error"  # any other type refusal (a binding on another op, a type not allowed)
    MISSING_KERNEL = "missing_kernel"  # types accepted; this machine's execution provider lacks a kernel
    OTHER_ERROR = "other_error"

    @property
    def types_accepted(self) -> bool:
        """True when the graph passed ONNX Runtime's type check (whether or not it can run here)."""
        return self in (OrtVerdict.ACCEPTED, OrtVerdict.MISSING_KERNEL)


# A type string, parentheses balanced up to three levels deep: tensor(float), seq(tensor(float)), ...
_TYPE = r"[a-z]+\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)"
# ONNX Runtime's wording, e.g. "Type parameter (T) of Optype (Where) bound to different types
# (tensor(float) and tensor(float16) in node (Where_223)." (its parentheses do not balance).
TYPE_BINDING = re.compile(
    r"Type parameter \((?P<type_parameter>[^)]+)\) of Optype \((?P<op_type>[^)]+)\) "
    rf"bound to different types \((?P<first>{_TYPE}) and (?P<second>{_TYPE})\)? "
    r"in node \((?P<node>[^)]*)\)"
)
# Other type refusals: ONNX Runtime's graph check ("Type Error: Type 'tensor(complex128)' of input parameter
# ... is invalid") and the ONNX schema checks its shape inference runs ("... has unsupported type: ...",
# "... has inconsistent type ...", "Element type of inputs are expected to be the same", "... must have same
# type as input ...").
_TYPE_REFUSALS = (
    "Type Error:",
    "has unsupported type",
    "has inconsistent type",
    "Element type of inputs are expected to be the same",
    "must have same type as input",
)
# Types accepted, no kernel here: session creation ("NOT_IMPLEMENTED : Could not find an implementation for
# MatMul(13) node ...") or kernel lookup at partitioning ("Failed to find kernel for ...").
_MISSING_KERNELS = (("NOT_IMPLEMENTED", "Could not find an implementation"), ("Failed to find kernel",))


@dataclass(frozen=True)
class TypeBinding:
    """ONNX Runtime's 'bound to different types' refusal, parsed."""

    op_type: str
    type_parameter: str
    node: str
    bound_types: tuple[str, str]

    @property
    def is_where(self) -> bool:
        """The seed's failure: the Where op's T bound to two types."""
        return self.op_type == "Where" and self.type_parameter == "T"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "op_type": self.op_type,
            "type_parameter": self.type_parameter,
            "node": self.node,
            "bound_types": list(self.bound_types),
        }


@dataclass(frozen=True)
class OrtJudgement:
    """ONNX Runtime's verdict, its error message (None when accepted) and the binding it names, if any."""

    verdict: OrtVerdict
    message: str | None = None
    type_binding: TypeBinding | None = None


def parse_type_binding(message: str) -> TypeBinding | None:
    """The first 'bound to different types' refusal in a message, or None."""
    match = TYPE_BINDING.search(message)
    if match is None:
        return None
    return TypeBinding(
        op_type=match["op_type"],
        type_parameter=match["type_parameter"],
        node=match["node"],
        bound_types=(match["first"], match["second"]),
    )


def judge_message(message: str) -> OrtJudgement:
    """The verdict an ONNX Runtime error message states, with the type binding it names."""
    binding = parse_type_binding(message)
    if binding is not None:
        verdict = OrtVerdict.WHERE_TYPE_ERROR if binding.is_where else OrtVerdict.TYPE_ERROR
        return OrtJudgement(verdict, message, binding)
    if any(marker in message for marker in _TYPE_REFUSALS):
        return OrtJudgement(OrtVerdict.TYPE_ERROR, message)
    if any(all(marker in message for marker in markers) for markers in _MISSING_KERNELS):
        return OrtJudgement(OrtVerdict.MISSING_KERNEL, message)
    return OrtJudgement(OrtVerdict.OTHER_ERROR, message)


def classify(message: str) -> OrtVerdict:
    """The verdict an ONNX Runtime error message states (never ACCEPTED: a message means a refusal)."""
    return judge_message(message).verdict


def load_session(model_or_path: ModelLike, providers: Sequence[str] = ("CPUExecutionProvider",)):
    """An onnxruntime.InferenceSession for a model or a path; raises ONNX Runtime's own error if it refuses."""
    import onnx
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: the refusal itself is raised
    source = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return onnxruntime.InferenceSession(source, options, providers=list(providers))


def judge(model_or_path: ModelLike, providers: Sequence[str] = ("CPUExecutionProvider",)) -> OrtJudgement:
    """Load a model in ONNX Runtime and say what it made of it; a refusal is returned, never raised."""
    try:
        load_session(model_or_path, providers)
    except ImportError:  # a missing onnxruntime is this environment's fault, not the model's
        raise
    except Exception as error:  # ONNX Runtime's exception classes share no base but Exception
        return judge_message(str(error))
    return OrtJudgement(OrtVerdict.ACCEPTED)
