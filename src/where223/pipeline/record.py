"""Record types every record shares, and those of the pipeline and the benchmarks (standard library only).

`Environment` is what `where223.pipeline.environment.describe` writes into each record; `Manifest` is what a
published run lists (`where223.pipeline.publish`); the benchmark records are those `benchmarks/*.py` write under
`outputs/benchmarks/`. The validator (`where223.pipeline.schema`) finds RECORDS here as in every `record` module.
"""

from __future__ import annotations

from typing import Any, TypedDict


class Environment(TypedDict):
    python: str
    platform: str
    packages: dict[str, str | None]
    device: str
    device_name: str


class Manifest(TypedDict):
    run: str
    files: list[str]


class CommandTimes(TypedDict):
    environment: dict[str, Any]
    commands: dict[str, dict[str, Any]]


class Environments(TypedDict):
    environment: dict[str, Any]
    recorded_at: str
    setup: dict[str, Any]
    ratios: dict[str, Any]
    lint_vs_checker: dict[str, Any]
    matrix_disk: dict[str, Any]


class ImportBytecode(TypedDict):
    environment: dict[str, Any]
    torch_bytecode_present: bool
    repeat: int
    imports: dict[str, dict[str, Any]]
    not_measured: str


class KernelTableTimes(TypedDict):
    environment: dict[str, Any]
    provider: str
    opsets: list[int]
    repeat: int
    runtimes: dict[str, dict[str, Any]]  # onnxruntime version -> its table builds and lint's cost
    not_measured: str


class LintSpeed(TypedDict):
    environment: dict[str, Any]
    recorded_at: str
    versions: dict[str, Any]
    protobuf_backend: str
    model: dict[str, Any]
    repeats: int
    lint_s: dict[str, Any]
    checker_s: dict[str, Any]
    lint_phases_s: dict[str, Any]
    lint_result: dict[str, Any]
    ratio_lint_to_checker: float
    graph_100k: dict[str, Any]  # the generated 100,000-node graph: lint beside ONNX Runtime's session creation


class Peers(TypedDict):
    environment: dict[str, Any]
    recorded_at: str
    judge: str
    options: dict[str, Any]
    corpus: dict[str, Any]  # the mutants and the sweeps' exports: found, used, left out, ONNX Runtime's verdicts
    tools: dict[str, dict[str, Any]]  # tool -> measured or why not, its scores overall and per part of the corpus
    comparison: dict[str, Any]  # peer -> what it flags that lint does not, and the reverse
    models: list[dict[str, Any]]  # every judged model: its verdict, the node ONNX Runtime names, each tool's answer
    how: dict[str, str]  # tool -> how it was run and what counts as its flag


# keys that are not Python names: the functional form
SweepEngine = TypedDict("SweepEngine", {
    "description": str, "base": str, "recorded_at": str, "environment": dict[str, Any], "model_types": list[str],
    "configurations": dict[str, Any], "engine-1_over_old-1": float, "engine-2_over_old-2": float,
    "engine-1_outcomes_as_old-1": bool, "engine-2_outcomes_as_old-2": bool, "speedup_2_workers": float,
    "target_speedup": float, "target_met": bool, "where_the_time_went": dict[str, Any], "projections": dict[str, Any],
    "committed_rebuild": dict[str, Any],
})

RECORDS: dict[str, type] = {
    "manifests/*.json": Manifest,
    "benchmarks/command_times.json": CommandTimes,
    "benchmarks/environments.json": Environments,
    "benchmarks/import_bytecode.json": ImportBytecode,
    "benchmarks/kernel_table.json": KernelTableTimes,
    "benchmarks/lint_speed.json": LintSpeed,
    "benchmarks/peers.json": Peers,
    "benchmarks/sweep_engine.json": SweepEngine,
}
