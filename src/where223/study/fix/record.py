"""The fix study's records: where a verification run writes, and the record types of `verification.json`.

Standard library only (the record types are read by the validator and by record readers that import no torch).

Roles (`where223.pipeline.roles`): a check's value may move by the check's own tolerance (per model where the
tolerance is per model), and its verdict decides; its detail line quotes its measurements (decimal numbers, and
the parameter whose gradient measured worst), and the rest of the line decides. The numbers behind the checks
(every parameter's gradient difference worst first, the fp32 losses, the fixed and repaired graphs' emulated
logits, a per-model check's magnitudes) are informational: the checks built on them decide.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Environment
from where223.pipeline.roles import DECIMAL, Informational, Measured, Quoting, Within

FIXED_MODEL, FP32_MODEL, REPAIRED_MODEL = "model.onnx", "model-fp32.onnx", "repaired.onnx"


CHECK_VALUE = Measured(tolerance_key="tolerance", why="a check's value, which may move by the check's tolerance")
CHECK_DETAIL = Quoting("informational", "a check's measurements as its detail line quotes them (decimal numbers, "
                       "and the parameter whose gradient measured worst)", quotes=DECIMAL + r"|(?<=worst: )[\w.]+")
BEHIND_THE_CHECK = Informational("a measurement a check is built on: the check's value and verdict decide")
PER_MODEL = Within({
    "models.*.spacings": Measured(tolerance_key="tolerance_spacings", why="a model's part of the check's value"),
    **{f"models.*.{key}": BEHIND_THE_CHECK for key in ("magnitude", "max_abs_diff", "spacing", "control_spacings",
                                                        "max_abs_reference", "reference_spread")},
    "dropped.*": Quoting("informational", "the control's measurement that left the model out", quotes=DECIMAL),
})


class _CheckRequired(TypedDict):
    name: str
    question: str
    value: Annotated[Any, CHECK_VALUE]
    tolerance: Any
    verdict: str
    detail: Annotated[str, CHECK_DETAIL]
    not_judged: str
    not_measured: str


class CheckRecord(_CheckRequired, total=False):
    per_model: Annotated[dict[str, Any], PER_MODEL]
    # what where223.study.judging reads of each reference tensor (all zero or constant: the check is not judged)
    reference: Annotated[list[dict[str, Any]], BEHIND_THE_CHECK]


class ControlRecord(TypedDict):
    name: str
    description: str
    breaks: list[str]
    checks: list[CheckRecord]


class VerificationRecord(TypedDict):
    variant: str
    source_run: str
    verdict: str
    verdict_statement: str
    not_measured: list[str]
    checks: list[CheckRecord]
    controls: list[ControlRecord]
    losses: Annotated[dict[str, Any], Within({"eager": BEHIND_THE_CHECK, "ortmodule": BEHIND_THE_CHECK})]
    # every parameter's gradient difference, worst first: the order, too, is the measurement's
    gradients: Annotated[list[Any], BEHIND_THE_CHECK]
    numerics: Annotated[dict[str, Any], Within({f"*.{key}": BEHIND_THE_CHECK
                                                for key in ("magnitude", "max_abs_diff", "spacing", "spacings")})]
    ortmodule_execution: dict[str, Any]
    environment: Environment


RECORDS: dict[str, type] = {"*/fix-*/verification.json": VerificationRecord}
