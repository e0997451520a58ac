"""Record types every record shares, and those of the pipeline and the benchmarks (standard library only).

`Environment` is what `where223.pipeline.environment.describe` writes into each record; `Manifest` is what a
published run lists (`where223.pipeline.publish`); the benchmark records are those `benchmarks/*.py` write under
`outputs/benchmarks/`. The validator (`where223.pipeline.schema`) finds RECORDS here as in every `record` module.

Each type declares the roles of the leaves that may change when the record is made again faithfully
(`where223.pipeline.roles`): every field of `Environment` is the environment, in whichever record holds one; a
benchmark's times, its machine and its load average are what they are named; the run a benchmark's part came from
(`Run`: its commit, machine and start, or how they were recovered) is the environment too. What a benchmark
concludes from its times (`target_met`, a criterion's `passed`) decides: on another machine it may not hold.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.roles import ENVIRONMENT, FRAMES, TIMING, Informational, Quoting, Role, Within

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


class _Run(TypedDict):
    commit: Annotated[str | None, ENVIRONMENT]
    machine: Annotated[dict[str, Any], ENVIRONMENT]
    started_at: Annotated[str | None, ENVIRONMENT]


class Run(_Run, total=False):
    """The run a part of a benchmark record came from (`where223.pipeline.environment.this_run`), in every part the
    run measured; a part kept from an earlier run keeps its own. `recovered`: the part was recorded before parts
    carried their run, and this one was read from git history (the commit that last wrote the part, the machine
    of the environment it was written with; `started_at` where the record kept the start, else null)."""

    recovered: Annotated[str, ENVIRONMENT]


class Manifest(TypedDict):
    run: str
    files: list[str]


class CommandTimes(TypedDict):
    run: Run  # the run that last wrote the record: its environment; each command keeps the run that timed it
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    commands: Annotated[dict[str, dict[str, Any]], Within({
        "*.run": ENVIRONMENT,
        "*.minutes": TIMING, "*.seconds": TIMING, "*.seconds_min": TIMING, "*.seconds_max": TIMING,
        "*.pytest_summary": PYTEST_TIME, "*.runs[*].seconds": TIMING, "*.runs[*].recorded_at": TIMING,
        "*.runs[*].pytest_summary": PYTEST_TIME, "*.runs[*].load_average_before": LOAD,
        "*.runs[*].load_average_after": LOAD,
    })]


class Environments(TypedDict):
    run: Run
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    setup: Annotated[dict[str, Any], Within({
        "runs[*].seconds": TIMING, "runs[*].cpu_s": TIMING, "runs[*].phases[*].at_s": TIMING,
        "runs[*].load_average_at_end": LOAD,
    })]
    ratios: Annotated[dict[str, Any], Within({"lint_to_checker": TIMING, "setup_pip_to_uv": TIMING})]
    lint_vs_checker: Annotated[dict[str, Any], Within({
        "lint_s": TIMING, "checker_s": TIMING, "ratio_lint_to_checker": TIMING, "highest_per_model_ratios": TIMING,
        "met": TIMING, "lint_parts_apart_s": TIMING, "recorded_at": TIMING, "run": ENVIRONMENT,
        "environment": ENVIRONMENT, "load_average_before": LOAD, "load_average_after": LOAD,
    })]
    matrix_disk: Annotated[dict[str, Any], Within({"environments.*.seconds": TIMING})]


class ImportBytecode(TypedDict):
    run: Run
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    torch_bytecode_present: bool
    repeat: int
    imports: Annotated[dict[str, dict[str, Any]], Within({
        "*.median_s": TIMING, "*.runs_s": TIMING, "*.ratio_without_to_with": TIMING,
    })]
    not_measured: str


class KernelTableTimes(TypedDict):
    run: Run
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    provider: str
    opsets: list[int]
    repeat: int
    # onnxruntime version -> its table builds and lint's cost
    runtimes: Annotated[dict[str, dict[str, Any]], Within({
        "*.import_s": TIMING, "*.lint.seconds": TIMING, "*.tables.*.median_s": TIMING, "*.tables.*.runs_s": TIMING,
    })]
    not_measured: str


_TIMES_100K = ("checker_s", "guards_s", "guards_share_of_lint", "lint_cpu_s", "lint_phases_s.median",
               "lint_phases_s.runs", "lint_s", "ort_session_cpu_s", "ort_session_s", "ratio_lint_to_checker",
               "ratio_lint_to_ort")
_GRAPH_100K = Within({
    "run": ENVIRONMENT, "environment": ENVIRONMENT, "recorded_at": TIMING, "load_average_1m": LOAD,
    "criterion.judged.*.lint_median_s": TIMING, "criterion.judged.*.ort_median_s": TIMING,
    **{f"variants.*.{key}": TIMING for key in _TIMES_100K},
})


class LintSpeed(TypedDict):
    run: Run  # the 124M part's (the record's top level); `graph_100k` carries its own
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    versions: Annotated[dict[str, Any], ENVIRONMENT]
    protobuf_backend: Annotated[str, ENVIRONMENT]
    model: dict[str, Any]
    repeats: int
    lint_s: Annotated[dict[str, Any], TIMING]
    checker_s: Annotated[dict[str, Any], TIMING]
    # each phase's median over the same timed rounds as the total it explains (`explains`), and every round
    lint_phases_s: Annotated[dict[str, Any], Within({"median": TIMING, "runs": TIMING})]
    lint_result: dict[str, Any]
    ratio_lint_to_checker: Annotated[float, TIMING]
    # the generated 100,000-node graph: lint beside ONNX Runtime's session creation
    graph_100k: Annotated[dict[str, Any], _GRAPH_100K]


class Peers(TypedDict):
    run: Run
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


class Fuzz(TypedDict):
    run: Run
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    options: dict[str, Any]  # cases per reader, Hypothesis's seed, jobs, the bounds, the readers run
    contract: str  # what a case must do to pass (tests/fuzz/harness.py)
    totals: dict[str, Any]
    # reader -> the run it came from, cases, past parsing, time, exit statuses, failures by signature (each with
    # what reproduces it)
    readers: Annotated[dict[str, dict[str, Any]], Within({
        "*.run": ENVIRONMENT, "*.seconds": TIMING, "*.setup_s": TIMING, "*.slowest_case_s": TIMING,
        "*.peak_mib": Informational("the largest peak resident memory of a case: measured, bounded at 2 GiB"),
        "*.failures[*].outcome.seconds": TIMING, "*.failures[*].outcome.cpu_seconds": TIMING,
        "*.failures[*].outcome.peak_mib": Informational("the failing case's peak resident memory: measured"),
        "*.failures[*].outcome.stderr": FRAMES,
    })]
    wall_s: Annotated[float, TIMING]



class Mutation(TypedDict):
    """benchmarks/mutation.py: per judged module, its mutants made, killed, survived, equivalent and timed out."""

    run: Run  # the run that last wrote the record; each module keeps the run that tested it
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    recorded_at: Annotated[str, TIMING]
    tool: Annotated[dict[str, Any], ENVIRONMENT]  # Cosmic Ray's version, and what our own mutator adds
    score_rule: str
    target_score: float
    operators: dict[str, Any]  # the selective set of Cosmic Ray's operators kept
    seconds: Annotated[float, TIMING]
    # module -> its run, its tests, its counts and score, each survivor and its fate (the test that now kills it,
    # or why it is equivalent); a mutant times out by the machine's speed (3 x the unmutated tests' time)
    modules: Annotated[dict[str, dict[str, Any]], Within({
        "*.run": ENVIRONMENT, "*.environment": ENVIRONMENT, "*.seconds": TIMING, "*.again.run": ENVIRONMENT,
        "*.again.seconds": TIMING,
        "*.baseline_s": TIMING, "*.timeout_s": TIMING, "*.timed_out": TIMING, "*.timed_out_mutants": TIMING,
    })]

class _SweepEngineRequired(TypedDict):
    description: str
    recorded_at: Annotated[str, TIMING]
    run: Run
    environment: Annotated[dict[str, Any], ENVIRONMENT]
    space: str
    cells: list[str]
    load_wait: Annotated[dict[str, Any], Within({"waited_s": TIMING, "load_average_at_start": LOAD})]
    # per configuration (cold-1, warm-1, ...): its times, the cells' outcomes and which engine ran them
    configurations: Annotated[dict[str, Any], Within({
        "*.wall_s": TIMING, "*.cell_seconds_sum": TIMING, "*.cells_per_minute": TIMING,
        "*.overhead_per_cell_s": TIMING, "*.median_cell_overhead_s": TIMING, "*.median_build_s": TIMING,
        "*.server_starts_s": TIMING, "*.load_average_before": LOAD, "*.load_average_after": LOAD,
    })]
    # what a warm server imports: its times; its threads and the torch operations run while importing decide
    preload: Annotated[dict[str, Any], Within({"torch_import_s": TIMING, "imported": TIMING, "import_s": TIMING})]
    class_space: Annotated[dict[str, Any], Within({
        "*.seconds_per_cell": TIMING, "*.worker_hours": TIMING, "*.hours": TIMING,
    })]
    committed_rebuild: Annotated[dict[str, Any], Within({
        "*.cell_minutes_sum": TIMING, "*.span_minutes": TIMING, "*.workers": ENVIRONMENT,
    })]


class SweepEngine(_SweepEngineRequired, total=False):
    """`benchmarks/sweep_engine.py`: warm workers against cold ones on the same cells (the ratios are there when
    both configurations they compare ran)."""

    warm_over_cold: Annotated[dict[str, Any], Within({"workers": TIMING})]
    speedup_2_workers: Annotated[float, TIMING]
    target_speedup: float
    target_met: bool
    where_the_time_went: Annotated[dict[str, Any], TIMING]


RECORDS: dict[str, type] = {
    "manifests/*.json": Manifest,
    "benchmarks/command_times.json": CommandTimes,
    "benchmarks/environments.json": Environments,
    "benchmarks/fuzz.json": Fuzz,
    "benchmarks/import_bytecode.json": ImportBytecode,
    "benchmarks/kernel_table.json": KernelTableTimes,
    "benchmarks/lint_speed.json": LintSpeed,
    "benchmarks/mutation.json": Mutation,
    "benchmarks/peers.json": Peers,
    "benchmarks/sweep_engine.json": SweepEngine,
}
