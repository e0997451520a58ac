"""How fast `where223 lint` is: on GPT-2 124M next to `onnx.checker`, and on a generated 100,000-node graph
next to ONNX Runtime's own session creation.

Part `124m` builds (once, cached under .cache/) a TorchScript ONNX export of the 124M GPT-2 architecture with
random weights, its weights in a separate .data file, then times lint and
`onnx.checker.check_model(full_check=True)` on the same file; NOTES.md's lint-speed line is `notes_line(record)`.

Part `100k` generates (`build_large_graph`, deterministic) a 100,000-node graph of transformer-like blocks with
small weights inline, in two variants: one with a `Where` bound to float and float16 in its last block, which
ONNX Runtime refuses (its time is then the time to report its first error), and one without it, which it
accepts. On each it times, in interleaved rounds, `lint_model`, ONNX Runtime's session creation (CPU provider,
graph optimisations off), the checker, and `graph/guards.py`'s structure checks alone; the record's
`graph_100k` section states the criterion (`criterion`) and its verdict; NOTES.md quotes `graph_notes_line`.

Lint's phases (loading, typing, the constraint check) are timed inside the very `lint_model` calls whose times
make lint's total, so each phase's median (`lint_phases_s`) is over the same rounds as the total it explains.

Both parts write one record, outputs/benchmarks/lint_speed.json (with the environment), each part with the run it
came from (`run`: commit, machine, start; the 124M part's at the record's top, `graph_100k`'s in it): a run of
both parts is one measurement, and running one part keeps the other's section as recorded, with its own older
run (a kept part recorded before parts carried their run is refused: run both). `benchmarks/environments.py`
times lint and the checker over onnx's many small conformance models. Only part `124m` imports torch and
transformers; the linter itself never does.

    python benchmarks/lint_speed.py [--part all|124m|100k] [--repeats 5] [--rebuild]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import hashlib
import importlib.metadata
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.internal import api_implementation
from onnx import TensorProto, helper, numpy_helper

from where223.graph import guards
from where223.graph import lint as lint_module
from where223.graph.lint import lint_model
from where223.graph.loading import load_model
from where223.graph.nodes import collector_paused
from where223.graph.ort import OrtVerdict, first_message_line, import_onnxruntime, judge_message
from where223.pipeline import environment, paths, portable, records
from where223.pipeline.paths import CACHE

RECORD: Path = paths.OUTPUTS / "benchmarks" / "lint_speed.json"
MODEL_DIR = CACHE / "lint_speed"
MODEL_PATH = MODEL_DIR / "gpt2-124m-random-opset17.onnx"
GRAPH_KEY = "graph_100k"  # the record's section for the generated graph
GRAPH_NODES = 100_000
GRAPH_OPSET = 17
HIDDEN, SEQUENCE = 16, 8  # a block's width and the sequence length: weights of at most 16 x 16 floats
CRITERION = "lint, which reports every violation, takes at most the time ONNX Runtime takes to report its first"


def build_model(path: Path = MODEL_PATH) -> Path:
    """Export GPT2LMHeadModel(GPT2Config()) with random weights at opset 17, weights as external data."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(use_cache=False)).eval()
    input_ids = torch.randint(0, model.config.vocab_size, (1, 16))
    path.parent.mkdir(parents=True, exist_ok=True)
    inline = path.with_suffix(".inline.onnx")
    with torch.no_grad():
        torch.onnx.export(
            model,
            (input_ids,),
            str(inline),
            input_names=["input_ids"],
            output_names=["logits"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}},
            opset_version=17,
        )
    exported = onnx.load(str(inline))
    onnx.save_model(exported, str(path), save_as_external_data=True, location=f"{path.name}.data")
    inline.unlink()
    return path


# lint_model's phases, by the functions of where223.graph.lint it calls for them: loading (parsing, the guards,
# every node read once), typing (onnx's inference, element types only; local functions inlined first), the
# constraint check (with the consequence walk)
LINT_PHASES: dict[str, tuple[str, ...]] = {
    "load": ("open_model",),
    "types": ("inline_local_functions", "model_types", "types_of_loaded"),
    "constraint_check": ("lint_types",),
}


@contextlib.contextmanager
def _phases_timed(seconds: dict[str, float]) -> Iterator[None]:
    """Within the block, each call lint_model makes to a phase's functions adds its seconds to `seconds`."""
    originals = {name: getattr(lint_module, name) for names in LINT_PHASES.values() for name in names}

    def clocked(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[phase] += time.perf_counter() - start

        return call

    for phase, names in LINT_PHASES.items():
        for name in names:
            setattr(lint_module, name, clocked(phase, originals[name]))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(lint_module, name, function)


class PhaseClock:
    """`lint_model(path)` with its phases timed inside the call itself: call it where lint's total is timed, and
    `rounds` holds each call's phases, so the phases come from the same rounds as the total they explain."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rounds: list[dict[str, float]] = []

    def __call__(self) -> object:
        seconds = dict.fromkeys(LINT_PHASES, 0.0)
        with _phases_timed(seconds):
            report = lint_model(self.path)
        self.rounds.append(seconds)
        return report


def phase_summary(rounds: list[dict[str, float]], explains: str) -> dict[str, Any]:
    """The phases of the rounds whose totals `explains` names: each phase's median over those rounds (what the
    record quotes; medians of parts need not add up to the median of the whole) and every round."""
    return {
        "explains": explains,
        "rounds": f"each phase timed inside the same {len(rounds)} lint_model calls as {explains}, its median over "
        "them",
        "median": {phase: round(statistics.median(r[phase] for r in rounds), 3) for phase in LINT_PHASES},
        "runs": {phase: [round(r[phase], 3) for r in rounds] for phase in LINT_PHASES},
    }


def timed(function: Callable[[], object], repeats: int) -> list[float]:
    """Wall-clock seconds of each of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def measure(path: Path, repeats: int) -> dict[str, Any]:
    """The lint result, lint's phases and both tools' timed runs on `path` (seconds rounded to the ms)."""
    report = lint_model(path)
    clock = PhaseClock(path)
    lint_times = timed(clock, repeats)
    checker_times = timed(lambda: onnx.checker.check_model(str(path), full_check=True), repeats)
    lint_s, checker_s = statistics.median(lint_times), statistics.median(checker_times)
    data = path.with_name(f"{path.name}.data")
    return {
        "model": {
            "path": portable.path(str(path)),
            "graph_mib": round(path.stat().st_size / 2**20, 2),
            "weights_mib": round(data.stat().st_size / 2**20),
        },
        "lint_result": {
            "nodes_checked": report.nodes_checked,
            "violations": len(report.violations),
            "unchecked": report.unchecked_count,
            "untyped_values": report.untyped_values,
        },
        "lint_phases_s": phase_summary(clock.rounds, "lint_s"),
        "repeats": repeats,
        "lint_s": {
            "median": round(lint_s, 3),
            "min": round(min(lint_times), 3),
            "runs": [round(t, 3) for t in lint_times],
        },
        "checker_s": {
            "median": round(checker_s, 3),
            "min": round(min(checker_times), 3),
            "runs": [round(t, 3) for t in checker_times],
        },
        "ratio_lint_to_checker": round(lint_s / checker_s, 1),
        "protobuf_backend": api_implementation.Type(),
        "versions": {name: importlib.metadata.version(name) for name in ("onnx", "protobuf", "numpy", "networkx")},
    }


BLOCK_OPS = (  # one transformer-like block, in graph order: 15 nodes
    "LayerNormalization", "MatMul", "Add", "Transpose", "MatMul", "Mul", "Where", "Softmax", "MatMul", "Cast",
    "Cast", "MatMul", "Add", "Relu", "Add",
)


def _node(prefix: str, op: str, inputs: list[str], output: str, name: str, **attributes: Any) -> onnx.NodeProto:
    """A one-output node named `prefix/name`."""
    return helper.make_node(op, inputs, [output], f"{prefix}/{name}", **attributes)


def build_large_graph(nodes: int = GRAPH_NODES, violation_at: int | None = -1, seed: int = 0) -> onnx.ModelProto:
    """A deterministic opset-17 model of exactly `nodes` nodes: blocks of BLOCK_OPS (layer norm, a projection,
    attention scores masked by `Where` and softmaxed, a float16 round trip through `Cast`, an output projection,
    a residual), each with its own small float weights inline, then a tail of `Relu`s to the exact count.

    With `violation_at`, a block index (-1 the last), that block's `Where` gets a float16 fill value beside its
    float scores, so its `T` is bound to float and float16 (the project's bug) and ONNX Runtime refuses the model
    at that node; everything after it is typed as ONNX Runtime would type it (Where's output takes the scores'
    type), so lint finds that one violation. With None the model is valid and ONNX Runtime accepts it.
    """
    blocks, tail = divmod(nodes, len(BLOCK_OPS))
    wrong_block = None
    if violation_at is not None:
        if not -blocks <= violation_at < blocks:
            raise ValueError(f"no block {violation_at} in {nodes} nodes: there are {blocks} blocks of {len(BLOCK_OPS)}")
        wrong_block = violation_at % blocks
    rng = np.random.default_rng(seed)
    weights: list[onnx.TensorProto] = []

    def weight(name: str, array: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(array, name))
        return name

    def floats(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    mask = weight("causal_mask", np.tril(np.ones((SEQUENCE, SEQUENCE), dtype=bool)))
    graph_nodes: list[onnx.NodeProto] = []
    x = "hidden_states"
    for b in range(blocks):
        p = f"/blocks.{b}"
        wrong = b == wrong_block
        fill = np.array(np.finfo(np.float16 if wrong else np.float32).min, dtype=np.float16 if wrong else np.float32)
        w = {
            "ln_scale": weight(f"{p}.ln.weight", 1 + floats(HIDDEN) / 10),
            "ln_bias": weight(f"{p}.ln.bias", floats(HIDDEN) / 10),
            "w_in": weight(f"{p}.attn.in_proj.weight", floats(HIDDEN, HIDDEN) / 4),
            "b_in": weight(f"{p}.attn.in_proj.bias", floats(HIDDEN) / 10),
            "scale": weight(f"{p}.attn.scale", np.array(HIDDEN**-0.5, dtype=np.float32)),
            "fill": weight(f"{p}.attn.mask_value", fill),
            "w_out": weight(f"{p}.attn.out_proj.weight", floats(HIDDEN, HIDDEN) / 4),
            "b_out": weight(f"{p}.attn.out_proj.bias", floats(HIDDEN) / 10),
        }
        out = f"{p}/residual"
        node = functools.partial(_node, p)
        graph_nodes += [
            node("LayerNormalization", [x, w["ln_scale"], w["ln_bias"]], f"{p}/ln", "ln/LayerNormalization", axis=-1),
            node("MatMul", [f"{p}/ln", w["w_in"]], f"{p}/q", "attn/in_proj/MatMul"),
            node("Add", [f"{p}/q", w["b_in"]], f"{p}/qb", "attn/in_proj/Add"),
            node("Transpose", [f"{p}/qb"], f"{p}/kt", "attn/Transpose", perm=[0, 2, 1]),
            node("MatMul", [f"{p}/qb", f"{p}/kt"], f"{p}/scores", "attn/MatMul"),
            node("Mul", [f"{p}/scores", w["scale"]], f"{p}/scaled", "attn/Mul"),
            node("Where", [mask, f"{p}/scaled", w["fill"]], f"{p}/masked", "attn/Where"),
            node("Softmax", [f"{p}/masked"], f"{p}/probs", "attn/Softmax", axis=-1),
            node("MatMul", [f"{p}/probs", f"{p}/qb"], f"{p}/ctx", "attn/MatMul_1"),
            node("Cast", [f"{p}/ctx"], f"{p}/ctx16", "attn/Cast", to=TensorProto.FLOAT16),
            node("Cast", [f"{p}/ctx16"], f"{p}/ctx32", "attn/Cast_1", to=TensorProto.FLOAT),
            node("MatMul", [f"{p}/ctx32", w["w_out"]], f"{p}/o", "attn/out_proj/MatMul"),
            node("Add", [f"{p}/o", w["b_out"]], f"{p}/ob", "attn/out_proj/Add"),
            node("Relu", [f"{p}/ob"], f"{p}/act", "act/Relu"),
            node("Add", [x, f"{p}/act"], out, "Add"),
        ]
        x = out
    for t in range(tail):
        graph_nodes.append(helper.make_node("Relu", [x], [f"/tail.{t}"], f"/tail.{t}/Relu"))
        x = f"/tail.{t}"
    graph = helper.make_graph(
        graph_nodes,
        f"where223-lint-speed-{nodes}",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, SEQUENCE, HIDDEN])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, SEQUENCE, HIDDEN])],
        weights,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", GRAPH_OPSET)], producer_name="where223-lint-speed", ir_version=8
    )
    return model


def write_large_graph(path: Path, nodes: int = GRAPH_NODES, violation_at: int | None = -1) -> dict[str, Any]:
    """Write `build_large_graph(nodes, violation_at)` to `path` (weights inline) and describe the file."""
    data = build_large_graph(nodes, violation_at).SerializeToString()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    model = onnx.ModelProto.FromString(data)
    return {
        "path": portable.path(str(path)),
        "mib": round(len(data) / 2**20, 2),
        "sha256": hashlib.sha256(data).hexdigest(),
        "nodes": len(model.graph.node),
        "initializers": len(model.graph.initializer),
        "op_counts": dict(sorted(Counter(node.op_type for node in model.graph.node).items())),
    }


def ort_session(path: Path) -> Any:
    """ONNX Runtime's session on `path` (CPU provider, graph optimisations off), or the error it raised."""
    onnxruntime = import_onnxruntime()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3  # errors only: the refusal itself is raised
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # ONNX Runtime's exception classes share no base but Exception
        return error


def _paused(function: Callable[..., object], *args: Any) -> object:
    """`function(*args)` with Python's collector paused, as `lint_model` runs its walks."""
    with collector_paused():
        return function(*args)


def full_check(path: Path) -> Exception | None:
    """`onnx.checker.check_model(full_check=True)` on `path`: None when it passes, else the error it raised."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:  # onnx raises ValidationError or its shape inference's InferenceError
        return error
    return None


def interleaved(
    functions: dict[str, Callable[[], object]], repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds (this process's, every thread's) of each function's call, `repeats` rounds, each
    round calling every function once in order (a, b, c, a, b, c, ...); a call's result is dropped after its clocks
    stop (teardown is not timed)."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    cpu: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            result = function()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            del result
    return times, cpu


def summary(times: list[float]) -> dict[str, Any]:
    """Median, minimum and every sample of a list of timings, in seconds rounded to the ms."""
    rounded = [round(t, 3) for t in times]
    return {"median": round(statistics.median(times), 3), "min": min(rounded), "runs": rounded}


def first_line(error: Exception | None) -> str | None:
    """The first line of an error's message (None for no error), shortened to 300 characters."""
    if error is None:
        return None
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def criterion(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """CRITERION, judged from the medians on every variant ONNX Runtime refuses: passed when lint's median is at
    most ONNX Runtime's on each of them (and there is at least one)."""
    judged = {
        name: {
            "lint_median_s": variant["lint_s"]["median"],
            "ort_median_s": variant["ort_session_s"]["median"],
            "passed": variant["lint_s"]["median"] <= variant["ort_session_s"]["median"],
        }
        for name, variant in variants.items()
        if variant["ort"]["verdict"] != OrtVerdict.ACCEPTED
    }
    passed = bool(judged) and all(result["passed"] for result in judged.values())
    return {"statement": CRITERION, "judged": judged, "passed": passed}


def graph_environment() -> dict[str, Any]:
    """The environment of the 100k measurement: the project's description, the versions that time it, cores."""
    onnxruntime = import_onnxruntime()
    return {
        **environment.describe(),
        "cpu_count": os.cpu_count(),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "protobuf": importlib.metadata.version("protobuf"),
        "protobuf_backend": api_implementation.Type(),
    }


VARIANTS = {  # name -> the block whose Where is bound to float and float16 (None: no violation)
    "refused_first": 0,
    "refused_last": -1,
    "accepted": None,
}


def measure_graph(folder: Path, repeats: int, nodes: int = GRAPH_NODES, run: dict[str, Any] | None = None
                  ) -> dict[str, Any]:
    """The `graph_100k` section of the run `run` (default: one starting now): every variant of the generated graph
    (VARIANTS) written under `folder`, what each tool made of each, and lint (its phases timed inside the same
    calls), ONNX Runtime, the checker and the guards timed in interleaved rounds."""
    run = run or environment.this_run()
    load_before = os.getloadavg()[0]
    variants: dict[str, dict[str, Any]] = {}
    functions: dict[str, Callable[[], object]] = {}
    clocks: dict[str, PhaseClock] = {}
    for name, violation_at in VARIANTS.items():
        path = folder / f"graph-{nodes}-{name}.onnx"
        model_file = write_large_graph(path, nodes, violation_at)
        report = lint_model(path)
        session = ort_session(path)
        error = isinstance(session, Exception)  # ONNX Runtime's verdict from its own message, by graph/ort.py
        verdict = judge_message(str(session)).verdict if error else OrtVerdict.ACCEPTED
        checked = full_check(path)
        model, _ = load_model(path)
        variants[name] = {
            "violation_in_block": violation_at,
            "model": model_file,
            "lint_result": {
                "nodes_checked": report.nodes_checked,
                "violations": len(report.violations),
                "roots": [v.message() for v in report.roots],
                "outcome": str(report.outcome),
            },
            "ort": {"verdict": str(verdict), "message": first_message_line(str(session)) if error else None},
            "checker": {"passed": checked is None, "message": first_line(checked)},
        }
        del session
        clocks[name] = PhaseClock(path)
        functions |= {
            f"{name}.lint": clocks[name],
            f"{name}.ort": lambda path=path: ort_session(path),
            f"{name}.checker": lambda path=path: full_check(path),
            f"{name}.guards": lambda model=model: _paused(guards.check_structure, model),
        }
    times, cpu = interleaved(functions, repeats)
    for name, variant in variants.items():
        lint_s, ort_s, checker_s, guards_s = (
            statistics.median(times[f"{name}.{tool}"]) for tool in ("lint", "ort", "checker", "guards")
        )
        variant |= {
            "lint_s": summary(times[f"{name}.lint"]),
            "ort_session_s": summary(times[f"{name}.ort"]),
            "checker_s": summary(times[f"{name}.checker"]),
            "guards_s": summary(times[f"{name}.guards"]),
            "lint_phases_s": phase_summary(clocks[name].rounds, "lint_s"),
            "lint_cpu_s": summary(cpu[f"{name}.lint"]),
            "ort_session_cpu_s": summary(cpu[f"{name}.ort"]),
            "ratio_lint_to_ort": round(lint_s / ort_s, 2),
            "ratio_lint_to_checker": round(lint_s / checker_s, 2),
            "guards_share_of_lint": round(guards_s / lint_s, 3),
        }
    return {
        "run": run,
        "nodes": nodes,
        "generator": "benchmarks/lint_speed.py::build_large_graph, seed 0",
        "weights": "small and inline in the .onnx file: every tool reads them with the graph (no external data)",
        "ort_options": "CPUExecutionProvider, graph_optimization_level ORT_DISABLE_ALL, in this process",
        "timed": "lint_model(path); InferenceSession(path); check_model(path, full_check=True); "
        "guards.check_structure(model) on the model loaded once, the collector paused as lint_model pauses it (the "
        "walk lint_model makes when loading: every node read once, for lint's later walks too, and the "
        "topological-order check); CPU seconds are this process's, every thread's (time.process_time), beside the "
        "wall clock",
        "order": "interleaved rounds: " + ", ".join(functions),
        "repeats": repeats,
        "variants": variants,
        "criterion": criterion(variants),
        "environment": graph_environment(),
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def notes_line(record: dict[str, Any]) -> str:
    """NOTES.md's lint-speed bullet, every figure taken from the record (a test keeps NOTES.md equal to it)."""
    lint, checker, versions = record["lint_s"], record["checker_s"], record["versions"]
    return (
        f"- **Lint speed** (`benchmarks/lint_speed.py` -> `outputs/benchmarks/lint_speed.json`): on the 124M "
        f"export, weights not loaded, `lint_model` takes a median {lint['median']:.3f} s over {record['repeats']} "
        f"runs (min {lint['min']:.3f} s) against {checker['median']:.3f} s for "
        f"`onnx.checker.check_model(full_check=True)` ({record['ratio_lint_to_checker']:.1f} x); "
        f"protobuf {versions['protobuf']} "
        f"({record['protobuf_backend']} implementation), onnx {versions['onnx']}, "
        f"{record['environment']['cpu_count']} cores visible."
    )


def graph_notes_line(record: dict[str, Any]) -> str:
    """NOTES.md's bullet on the 100k graph, every figure taken from the record's `graph_100k` section."""
    section = record[GRAPH_KEY]
    first, last, accepted = (section["variants"][name] for name in VARIANTS)
    env, load = section["environment"], section["load_average_1m"]

    def side_by_side(variant: dict[str, Any]) -> str:
        lint, ort = variant["lint_s"]["median"], variant["ort_session_s"]["median"]
        cpu = f", CPU {variant['lint_cpu_s']['median']:.3f} s and {variant['ort_session_cpu_s']['median']:.3f} s"
        return f"{lint:.3f} s against {ort:.3f} s ({variant['ratio_lint_to_ort']:.2f} x{cpu})"

    return (
        f"- **Lint at the runtime's speed** (same record, `{GRAPH_KEY}`): on a generated graph of "
        f"{section['nodes']:,} nodes (transformer-like blocks, small weights inline, read by every tool), medians "
        f"of {section['repeats']} interleaved runs on a shared machine (load average {load['before']:.2f} before, "
        f"{load['after']:.2f} after, on {env['cpu_count']} cores), `lint_model` against ONNX Runtime's session "
        f"creation (CPU, optimisations off; both in one process, CPU seconds beside wall seconds): with one "
        f"`Where` bound to float and float16 in the first block, which "
        f"ONNX Runtime refuses ({first['ort']['verdict']}) and lint finds, {side_by_side(first)}; in the last "
        f"block, {side_by_side(last)}; without it, accepted, {side_by_side(accepted)}. The criterion "
        f"\"{CRITERION}\" {'passed' if section['criterion']['passed'] else 'failed'}. `graph/guards.py`'s walk "
        f"takes {last['guards_s']['median']:.3f} s ({100 * last['guards_share_of_lint']:.0f} % of lint's time, "
        f"last block), `onnx.checker`'s full check {last['checker_s']['median']:.3f} s; onnx {env['onnx']}, "
        f"onnxruntime {env['onnxruntime']}, protobuf {env['protobuf']} ({env['protobuf_backend']})."
    )


def kept_part(kept: dict[str, Any], part: str) -> dict[str, Any]:
    """What a run of `part` alone keeps of the record `kept`: the other part as recorded, with its own run
    (nothing when the record lacks it). A kept part without a run, recorded before parts carried theirs, is
    refused (SystemExit): the record would claim one run for two."""
    if part == "all":
        return {}
    other = {key: value for key, value in kept.items() if key != GRAPH_KEY} if part == "100k" else kept.get(GRAPH_KEY)
    if not other:
        return {}
    if "run" not in other:
        name = "the 124M part" if part == "100k" else f"the {GRAPH_KEY} part"
        raise SystemExit(f"{name} of the record has no run to keep it with (recorded before parts carried theirs): "
                         "measure both parts (--part all)")
    return other if part == "100k" else {GRAPH_KEY: other}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "124m", "100k"), default="all", help="what to measure (default all)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--rebuild", action="store_true", help="export the 124M model again")
    parser.add_argument("--out", type=Path, default=RECORD, help="where to write the record")
    args = parser.parse_args(argv)

    record = kept_part(records.read_json(args.out) if args.out.is_file() else {}, args.part)
    run = environment.this_run()  # one run: every part it measures carries it
    if args.part in ("all", "124m"):
        if args.rebuild or not MODEL_PATH.is_file():
            start = time.perf_counter()
            build_model()
            print(f"exported {MODEL_PATH} in {time.perf_counter() - start:.1f} s")
        record = {
            "run": run,
            **measure(MODEL_PATH, args.repeats),
            "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
            "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            **record,
        }
        result, phases = record["lint_result"], record["lint_phases_s"]["median"]
        print(
            f"lint result: {result['nodes_checked']} nodes checked, {result['violations']} violations, "
            f"{result['unchecked']} unchecked, {result['untyped_values']} untyped values"
        )
        print("lint phases (medians): " + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in phases.items()))
        print(notes_line(record))
    if args.part in ("all", "100k"):
        record[GRAPH_KEY] = measure_graph(MODEL_DIR, args.repeats, run=run)
        for name, variant in record[GRAPH_KEY]["variants"].items():  # every ratio, side by side
            print(
                f"{name}: lint {variant['lint_s']['median']:.3f} s, "
                f"ONNX Runtime {variant['ort_session_s']['median']:.3f} s ({variant['ort']['verdict']}), "
                f"lint / ONNX Runtime {variant['ratio_lint_to_ort']:.2f} x, checker "
                f"{variant['checker_s']['median']:.3f} s, guards {variant['guards_s']['median']:.3f} s; "
                "lint phases (medians) "
                + ", ".join(f"{k} {v:.3f} s" for k, v in variant["lint_phases_s"]["median"].items())
            )
        judged = record[GRAPH_KEY]["criterion"]
        print(f"criterion: {judged['statement']}: {'passed' if judged['passed'] else 'failed'}")
        print(graph_notes_line(record))
    records.write_json(args.out, record)
    print(f"record: {args.out}")


if __name__ == "__main__":
    main()
