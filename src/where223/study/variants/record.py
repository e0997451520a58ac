"""The variant study's records: where they go and their types (standard library only).

Roles (`where223.pipeline.roles`): the step times, their ratios and spreads, how many rounds were timed and why
the timing stopped are timings (the stopping rule decides on times); the step times the recommendation rests on
are in `timing_reasons`, apart from the `reasons` that decide (records before that split quote them in `reasons`:
there a decimal number is a timing). The emulated numerics of each export and eager's largest difference from
4.25.1 are informational: `eager_equal` (bitwise) and ONNX Runtime's verdict decide, and the write-up quotes
neither number. Which variant is recommended, the ranking and the tie decide: the study's rule keeps noise from
deciding them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

from where223.pipeline import paths
from where223.pipeline.record import Environment
from where223.pipeline.roles import TIMING, Informational, Quoting, Within

NUMERICS = Informational("an export's emulated outputs against eager's, shown in notebook 04; not a criterion of "
                         "the recommendation")
_NUMERICS = {f"*.onnx_numerics.{key}": NUMERICS for key in ("magnitude", "max_abs_diff", "spacing", "spacings")}
VARIANT_ROLES = Within({
    **{f"*.{key}": TIMING for key in ("step_times_s", "step_time_median_s", "step_time_ratio", "paired_ratio",
                                      "paired_ratio_spread", "steps_timed")},
    "*.eager_max_abs_diff": Informational("eager logits' largest difference from 4.25.1's: `eager_equal` decides"),
    **_NUMERICS,
    **{pattern.replace("onnx_numerics", "onnx_numerics_probe"): role for pattern, role in _NUMERICS.items()},
})


def output_path(device: str, output_root: str | Path | None = None) -> Path:
    """`outputs/variants/variants-<device>.json` (under `output_root` when given)."""
    return paths.run_dir("variants", output_root or None) / f"variants-{device}.json"


class _Recommendation(TypedDict):
    variant: str | None
    reasons: Annotated[list[str], Quoting("timing", "step-time ratios quoted by a record made before "
                                                    "`timing_reasons` (its words and whole numbers decide)")]
    ranking: list[str]


class Recommendation(_Recommendation, total=False):
    timing_reasons: Annotated[list[str], TIMING]


class VariantsRecord(TypedDict):
    study: str
    settings: dict[str, Any]
    baseline: str
    export_from: str | None
    variants: Annotated[dict[str, dict[str, Any]], VARIANT_ROLES]
    ort_statuses: dict[str, str]
    tracing_levels: list[str]
    skipped: dict[str, str]
    timing: Annotated[dict[str, Any], Within({"rounds": TIMING, "stopped_by": TIMING})]
    recommendation: Recommendation
    environment: Environment


EMULATED_TYPES = "variants/emulated-types.json"
# benchmarks/bench_variants_gpu.py --compare-emulation writes it on a GPU machine (a standalone script, its record
# typed by the script itself); none is committed yet: add its type to RECORDS with the first one
CUDA_EMULATION = "variants/cuda-emulation.json"


class EmulatedTypesRecord(TypedDict):
    """The variants' export columns (types, ONNX Runtime's verdict, divergences, Casts) under CUDA's fp16 autocast
    policy emulated on CPU, beside the CPU bf16 record's; eager and step-time columns not measured."""

    study: str
    label: str
    settings: dict[str, Any]
    not_measured: str
    variants: Annotated[dict[str, dict[str, Any]], Within(_NUMERICS)]
    environment: Environment


RECORDS: dict[str, type] = {"variants/variants-*.json": VariantsRecord, EMULATED_TYPES: EmulatedTypesRecord}
