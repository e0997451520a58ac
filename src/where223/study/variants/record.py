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
CUDA_EMULATION = "variants/cuda-emulation.json"  # benchmarks/bench_variants_gpu.py --compare-emulation


class EmulatedTypesRecord(TypedDict):
    """The variants' export columns (types, ONNX Runtime's verdict, divergences, Casts) under CUDA's fp16 autocast
    policy emulated on CPU, beside the CPU bf16 record's; eager and step-time columns not measured."""

    study: str
    label: str
    settings: dict[str, Any]
    not_measured: str
    variants: dict[str, dict[str, Any]]
    environment: Environment


class CudaEmulationCheck(TypedDict, total=False):
    """Real CUDA fp16 autocast against the emulation on one machine, graph by graph (written by the GPU script)."""

    description: str
    environment: dict[str, Any]
    device: str
    lists: dict[str, Any] | None
    models: dict[str, dict[str, Any]]
    errors: dict[str, str]
    tracebacks: dict[str, str]
    seconds: float


RECORDS: dict[str, type] = {"variants/variants-*.json": VariantsRecord, EMULATED_TYPES: EmulatedTypesRecord,
                            CUDA_EMULATION: CudaEmulationCheck}
