"""Record types every record shares, and those of the pipeline and the benchmarks (standard library only).

`Environment` is what `where223.pipeline.environment.describe` writes into each record; `Manifest` is what a
published run lists (`where223.pipeline.publish`); the benchmark records are those `benchmarks/*.py` write under
`outputs/benchmarks/`. The validator (`where223.pipeline.schema`) finds RECORDS here as in every `record` module.

Each type declares the roles of the leaves that may change when the record is made again faithfully
(`where223.pipeline.roles`): every field of `Environment` is the environment, in whichever record holds one; a
benchmark's times, its machine and its load average are what they are named. What a benchmark concludes from its
times (`target_met`, a criterion's `passed`) decides: on another machine it may not hold.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.roles import ENVIRONMENT, TIMING, Quoting, Role, Within

LOAD = Role("environment", "the machine's load average around the measurement")
# pytest's closing line quotes how long the tests took: `690 passed, 17 warnings in 228.14s (0:03:48)`
PYTEST_TIME = Quoting("timing", "pytest's duration at the end of its closing line; its counts decide",
                      quotes=r"(?<= in )\d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?$")


class Environment(TypedDict):
    python: Annotated[str, ENVIRONMENT]
    platform: Annotated[str, ENVIRONMENT]
    packages: Annotated[dict[str, str | None], ENVIRONMENT]
    device: Annotated[str, ENVIRONMENT]
    device_name: Annotated[str, ENVIRONMENT]


class Manifest(TypedDict):
    run: str
    files: list[str]


class CommandTimes(TypedDict):
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    commands: Annotated[dict[str, dict[str, Any]], Within({
        "*.minutes": TIMING, "*.seconds": TIMING, "*.seconds_min": TIMING, "*.seconds_max": TIMING,
        "*.pytest_summary": PYTEST_TIME, "*.runs[*].seconds": TIMING, "*.runs[*].recorded_at": TIMING,
        "*.runs[*].pytest_summary": PYTEST_TIME, "*.runs[*].load_average_before": LOAD,
        "*.runs[*].load_average_after": LOAD,
    })]


class Environments(TypedDict):
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    setup: Annotated[dict[str, Any], Within({
        "runs[*].seconds": TIMING, "runs[*].cpu_s": TIMING, "runs[*].phases[*].at_s": TIMING,
        "runs[*].load_average_at_end": LOAD,
    })]
    ratios: Annotated[dict[str, Any], Within({"lint_to_checker": TIMING, "setup_pip_to_uv": TIMING})]
    lint_vs_checker: Annotated[dict[str, Any], Within({
        "lint_s": TIMING, "checker_s": TIMING, "ratio_lint_to_checker": TIMING, "highest_per_model_ratios": TIMING,
    })]
    matrix_disk: Annotated[dict[str, Any], Within({"environments.*.seconds": TIMING})]


class ImportBytecode(TypedDict):
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    torch_bytecode_present: bool
    repeat: int
    imports: Annotated[dict[str, dict[str, Any]], Within({
        "*.median_s": TIMING, "*.runs_s": TIMING, "*.ratio_without_to_with": TIMING,
    })]
    not_measured: str


class KernelTableTimes(TypedDict):
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    provider: str
    opsets: list[int]
    repeat: int
    # onnxruntime version -> its table builds and lint's cost
    runtimes: Annotated[dict[str, dict[str, Any]], Within({
        "*.import_s": TIMING, "*.lint.seconds": TIMING, "*.tables.*.median_s": TIMING, "*.tables.*.runs_s": TIMING,
    })]
    not_measured: str


_TIMES_100K = ("checker_s", "guards_s", "guards_share_of_lint", "lint_cpu_s", "lint_phases_s", "lint_s",
               "ort_session_cpu_s", "ort_session_s", "ratio_lint_to_checker", "ratio_lint_to_ort")
_GRAPH_100K = Within({
    "environment": ENVIRONMENT, "recorded_at": TIMING, "load_average_1m": LOAD,
    "criterion.judged.*.lint_median_s": TIMING, "criterion.judged.*.ort_median_s": TIMING,
    **{f"variants.*.{key}": TIMING for key in _TIMES_100K},
})


class LintSpeed(TypedDict):
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    versions: Annotated[dict[str, Any], ENVIRONMENT]
    protobuf_backend: Annotated[str, ENVIRONMENT]
    model: dict[str, Any]
    repeats: int
    lint_s: Annotated[dict[str, Any], TIMING]
    checker_s: Annotated[dict[str, Any], TIMING]
    lint_phases_s: Annotated[dict[str, Any], TIMING]
    lint_result: dict[str, Any]
    ratio_lint_to_checker: Annotated[float, TIMING]
    # the generated 100,000-node graph: lint beside ONNX Runtime's session creation
    graph_100k: Annotated[dict[str, Any], _GRAPH_100K]


class Peers(TypedDict):
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    judge: str
    options: dict[str, Any]
    # the mutants and the sweeps' exports: found, used, left out, ONNX Runtime's verdicts
    corpus: Annotated[dict[str, Any], Within({"seconds": TIMING})]
    # tool -> measured or why not, its scores overall and per part of the corpus
    tools: Annotated[dict[str, dict[str, Any]], Within({
        "*.startup_s": TIMING, "*.scores.median_s": TIMING, "*.by_part.*.median_s": TIMING,
    })]
    comparison: dict[str, Any]  # peer -> what it flags that lint does not, and the reverse
    # every judged model: its verdict, the node ONNX Runtime names, each tool's answer
    models: Annotated[list[dict[str, Any]], Within({"[*].judge_s": TIMING, "[*].tools.*.seconds": TIMING})]
    how: dict[str, str]  # tool -> how it was run and what counts as its flag


# keys that are not Python names: the functional form
SweepEngine = TypedDict("SweepEngine", {
    "description": str, "base": str, "recorded_at": Annotated[str, TIMING],
    "environment": Annotated[dict[str, Any], ENVIRONMENT], "model_types": list[str],
    "configurations": Annotated[dict[str, Any], Within({
        "*.wall_s": TIMING, "*.cell_seconds_sum": TIMING, "*.cells_per_minute": TIMING,
        "*.overhead_per_cell_s": TIMING,
    })],
    "engine-1_over_old-1": Annotated[float, TIMING], "engine-2_over_old-2": Annotated[float, TIMING],
    "engine-1_outcomes_as_old-1": bool, "engine-2_outcomes_as_old-2": bool,
    "speedup_2_workers": Annotated[float, TIMING], "target_speedup": float, "target_met": bool,
    "where_the_time_went": Annotated[dict[str, Any], TIMING],
    "projections": Annotated[dict[str, Any], Within({
        "mean_cell_s": TIMING, "spaces.*.minutes": TIMING, "spaces.*.seconds_per_cell": TIMING,
    })],
    "committed_rebuild": Annotated[dict[str, Any], Within({
        "*.cell_minutes_sum": TIMING, "*.span_minutes": TIMING, "*.workers": ENVIRONMENT,
    })],
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
