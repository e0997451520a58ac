"""The variant study's records: where they go and their types (standard library only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from where223.pipeline import paths
from where223.pipeline.record import Environment


def output_path(device: str, output_root: str | Path | None = None) -> Path:
    """`outputs/variants/variants-<device>.json` (under `output_root` when given)."""
    return paths.run_dir("variants", output_root or None) / f"variants-{device}.json"


class VariantsRecord(TypedDict):
    study: str
    settings: dict[str, Any]
    baseline: str
    export_from: str | None
    variants: dict[str, dict[str, Any]]
    ort_statuses: dict[str, str]
    tracing_levels: list[str]
    skipped: dict[str, str]
    timing: dict[str, Any]
    recommendation: dict[str, Any]
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
    variants: dict[str, dict[str, Any]]
    environment: Environment


RECORDS: dict[str, type] = {"variants/variants-*.json": VariantsRecord, EMULATED_TYPES: EmulatedTypesRecord}
