"""The torch.fx question, measured: transformers' own fx tracer (`transformers.utils.fx.symbolic_trace`) on GPT-2 with
each real release folder (4.24.0, 4.25.1, 4.26.0; current transformers ships no fx tracer), the traced module run
beside eager under CPU bf16 autocast and under CUDA's fp16 policy emulated on CPU (`where223.cuda_autocast`).

Each release is traced in its own interpreter whose sys.path puts that release's folder first (as
`where223.gpt2.releases` exports with it; `run_release` starts it, `trace_to_file` is its side). Per
release and model configuration the record says whether the tracer traced it, which graph nodes carry a dtype, a
device or a dtype's extreme fixed at trace time (the tracer reads tensors' dtypes from its meta tensors, made in
float32 outside any autocast region), which autocast regions the source has that the graph cannot hold (fx records
calls, not context managers), and per policy whether the traced module's logits have eager's dtype and are bitwise
eager's (same ops on the same kernels in the same order; the tolerance is set here, before any run: none).

Two configurations: GPT-2 as configured (the seed's), and `reorder_and_upcast_attn=True`, whose attention runs its
scores inside `autocast(enabled=False)` in eager; and a probe of that region in little, traced by torch.fx itself
(`PROBE`), for the release's tracer cannot trace that method. Forward runs: eval mode, dropout off.

Training, the seed's question as asked (`train_beside_eager`): each configuration the tracer traces is traced again in
training mode and trained for `TRAINING["steps"]` AdamW steps by the project's one training recipe
(`where223.gpt2.training.train`: autocast around each forward, backward and optimiser outside it) beside eager GPT-2
built from the same seed on the same batches, dropout off (every dropout probability 0) and the generator seeded alike
before each run; each step's loss, every parameter's gradient after the first backward and every parameter after the
last step are compared bitwise (`TRAINING_TOLERANCE`, set here before any run). What a run under each policy compares
is `TRAINING_COMPARES`: under the emulated CUDA policy only the forward is emulated; the backward is plain autograd
on CPU tensors (the emulation covers no backward pass).

Every comparison has a control (`changed_line`): the same comparison on a traced module whose first `torch.matmul`
(in GPT-2 the first layer's attention scores) is multiplied by `CONTROL_FACTOR`. A comparison whose control was not
told apart from eager, or whose eager reference cannot tell modules apart (`reference_problems`), is not judged.
"""

from __future__ import annotations

import inspect
import json
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from where223.gpt2.releases import RELEASES, release_environment
from where223.pipeline import environment, paths
from where223.pipeline.records import write_json
from where223.study.fx.record import (
    FX_RECORD,
    PROBE,
    FxControl,
    FxRecord,
    FxRun,
    FxStepsCompared,
    FxTrace,
    FxTraining,
)

POLICIES = ("bf16", "fp16_cuda_emulated")
CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "as configured": {},
    "reorder_and_upcast_attn": {"reorder_and_upcast_attn": True},
}
SETTINGS = {"preset": "tiny", "seed": 0, "batch_size": 2, "seq_len": 8, "mode": "eval", "dropout": False}
# The training runs: the recipe's AdamW steps on synthetic batches (`where223.gpt2.training`), dropout off
TRAINING = {"steps": 3, "batch_size": 2, "seq_len": 8, "lr": 1e-3, "optimizer": "AdamW", "mode": "train",
            "dropout": False, "problem_type": "single_label_classification"}  # fmt: skip
# Decided before any training run: the traced graph replays the ops eager runs, on the same CPU kernels, in the
# same order, forward and backward, so nothing but bitwise equality is agreement.
TRAINING_TOLERANCE = {
    "kind": "bitwise",
    "max_abs_diff": 0.0,
    "compared": "each step's loss, every parameter's gradient after the first backward and every parameter after "
                "the last AdamW step: torch.equal (same dtype, same bits) with eager's",
}
TOLERANCE = {
    "values": "bitwise equal: the traced graph replays the same ops on the same CPU kernels in the same order",
    "dtypes": "the logits' dtype equal to eager's",
    "training": TRAINING_TOLERANCE,
}
# The control: one line of the traced module changed, by a factor bfloat16 and float16 hold exactly
CONTROL_FACTOR = 1 + 2**-7
CONTROL_CHANGE = ("the traced graph's first torch.matmul (GPT-2: the first layer's attention scores, "
                  "`attn_weights = torch.matmul(query, key.transpose(-1, -2))`) multiplied by 1 + 2**-7")  # fmt: skip
TRAINING_COMPARES = {
    "bf16": "forward under torch.autocast('cpu', torch.bfloat16), the recipe's; backward and AdamW outside it, as the "
            "recipe runs them; eager and traced on the same CPU kernels",
    "fp16_cuda_emulated": "forward under CUDA's fp16 autocast lists applied to CPU tensors (emulated: ops without a "
                          "float16 CPU kernel computed in float32 and rounded); backward: plain autograd on CPU "
                          "kernels of the ops the forward ran, outside any emulation (it covers no backward pass; "
                          "CUDA's backward kernels are not run); no gradient scaler (the recipe has none)",
}  # fmt: skip
DESCRIPTION = (
    "transformers' torch.fx tracer on GPT-2 (tiny preset, random weights) with each release folder; the traced "
    "module beside eager under CPU bf16 autocast and under CUDA's fp16 autocast policy emulated on CPU: forward "
    "logits (eval mode) and a few training steps (losses, gradients, parameters), each with a control"
)
TIMEOUT_S = 600


def _frame(stack_trace: str | None) -> str | None:
    """The innermost frame of a node's stack in transformers' modeling code, as `file.py:line`."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack_trace or "")
    inside = [(Path(file).name, line) for file, line in frames if "/transformers/models/" in file]
    return f"{inside[-1][0]}:{inside[-1][1]}" if inside else None


def fixed_at_trace_time(graph_module: Any) -> list[dict[str, Any]]:
    """The graph's nodes with a dtype, a device or a dtype's lowest value among their arguments: values the
    tracer fixed when it traced, whatever the run's autocast makes of the tensors later."""
    import torch
    from torch.utils._pytree import tree_flatten

    extremes = {torch.finfo(dtype).min: str(dtype) for dtype in (torch.float32, torch.float16, torch.bfloat16)}
    found = []
    for node in graph_module.graph.nodes:
        literals = []
        for value in tree_flatten((node.args, node.kwargs))[0]:
            if isinstance(value, torch.dtype):
                literals.append(str(value))
            elif isinstance(value, torch.device):
                literals.append(f"device {value}")
            elif isinstance(value, float) and value in extremes:
                literals.append(f"{value!r} (torch.finfo({extremes[value]}).min)")
        if literals:
            target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
            found.append({"node": node.name, "op": node.op, "target": target, "literals": literals,
                          "source": _frame(node.stack_trace)})  # fmt: skip
    return found


def autocast_regions(module: Any) -> list[str]:
    """The lines of a modeling module that open an autocast region (`file.py:line: code`)."""
    lines, first = inspect.getsourcelines(module)
    name = Path(inspect.getsourcefile(module) or "?").name
    return [f"{name}:{first + index}: {line.strip()}" for index, line in enumerate(lines) if "autocast(" in line]


def _error(error: BaseException) -> str:
    """An exception as the record holds it: its type and the first line of its message."""
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def changed_line(graph_module: Any) -> str:
    """The control's one changed line, made in `graph_module` (in place, then recompiled): its first `torch.matmul`
    (in GPT-2 the first layer's attention scores) multiplied by CONTROL_FACTOR. Returns where that line is
    (`file.py:line` in transformers' modeling code, else the node's name)."""
    import operator

    import torch

    graph = graph_module.graph
    node = next((node for node in graph.nodes if node.op == "call_function" and node.target is torch.matmul), None)
    if node is None:
        raise ValueError("the traced graph has no torch.matmul for the control to change")
    with graph.inserting_after(node):
        scaled = graph.call_function(operator.mul, (node, CONTROL_FACTOR))
    node.replace_all_uses_with(scaled, delete_user_cb=lambda user: user is not scaled)
    graph_module.recompile()
    return _frame(node.stack_trace) or node.name


def _logits_problems(logits: Any) -> list[str]:
    """Why eager's logits cannot tell modules apart: not finite, all zero, or one value throughout; else none."""
    import torch

    values = logits.detach().float()
    if not bool(torch.isfinite(values).all()):
        return ["eager's logits are not all finite"]
    if not bool(values.any()):
        return ["eager's logits are all zero"]
    if bool((values == values.flatten()[0]).all()):
        return ["eager's logits are constant"]
    return []


def _forward(module: Any, inputs: dict[str, Any], policy: str) -> Any:
    import torch

    from where223.eager.precision import autocast

    with torch.no_grad(), autocast("cpu", policy):
        return _Outputs(module)(**inputs).logits


def _same(reference: Any, other: Any) -> tuple[bool, float]:
    """Bitwise equal (same dtype and values) and the max |difference| in float32."""
    import torch

    difference = float((reference.float() - other.float()).abs().max())
    return bool(reference.dtype == other.dtype and torch.equal(reference, other)), difference


def _compare(model: Any, traced: Any, inputs: dict[str, Any], policy: str, control: Any = None,
             changed: str | None = None) -> FxRun:  # fmt: skip
    """Eager's and the traced module's logits under `policy`; with `control` (the traced module with `changed`
    line changed), the same comparison on it."""
    try:
        eager = _forward(model, inputs, policy)
        replayed = _forward(traced, inputs, policy)
    except Exception as error:  # recorded: a policy the traced module cannot run under is an answer too
        return FxRun(policy=policy, eager_dtype=None, traced_dtype=None, dtypes_agree=False, max_abs_diff=None,
                     equal=False, error=_error(error), reference_problems=[], control=None)  # fmt: skip
    equal, difference = _same(eager, replayed)
    checked = None
    if control is not None:
        try:
            control_equal, control_difference = _same(eager, _forward(control, inputs, policy))
            checked = FxControl(changed=changed, equal=control_equal, max_abs_diff=control_difference,
                                failed=not control_equal, error=None)  # fmt: skip
        except Exception as error:  # a control that does not run shows nothing: the comparison is not judged
            checked = FxControl(changed=changed, equal=False, max_abs_diff=None, failed=False, error=_error(error))
    return FxRun(policy=policy, eager_dtype=str(eager.dtype), traced_dtype=str(replayed.dtype),
                 dtypes_agree=eager.dtype == replayed.dtype, max_abs_diff=difference, equal=equal, error=None,
                 reference_problems=_logits_problems(eager), control=checked)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# Training beside eager.

Trained = tuple[Any, dict[str, Any]]  # (where223.gpt2.training.TrainingRun, every parameter after the last step)


def _trained(build: Callable[[], Any], trace: Callable[[Any], Any] | None, data: list[dict[str, Any]], policy: str,
             seed: int, change: bool = False) -> tuple[Trained | None, str | None, str | None]:  # fmt: skip
    """One side's run by the project's recipe: `build()` (traced by `trace` unless None, its line changed if
    `change`) trained on `data` under `policy` from generator seed `seed`; (run and parameters after, None, changed
    line) or (None, error, changed line)."""
    import torch

    from where223.gpt2 import training

    changed = None
    try:
        module = build()
        if trace is not None:
            module = trace(module)
            if change:
                changed = changed_line(module)
        parameters = dict(module.named_parameters())
        torch.manual_seed(seed)
        run = training.train(_Outputs(module), parameters, data, "cpu", policy, lr=TRAINING["lr"])
    except Exception as error:  # recorded: a run that stops is an answer too (which side, which error)
        return None, _error(error), changed
    return (run, {name: parameter.detach().clone() for name, parameter in parameters.items()}), None, changed


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def compare_steps(reference: Trained, other: Trained) -> FxStepsCompared:
    """Two runs compared bitwise: each step's loss, every parameter's first gradient and value after the last step
    (a parameter one run lacks counts as unequal), with the largest differences."""
    run, after = reference
    other_run, other_after = other
    pairs = list(zip(run.losses, other_run.losses, strict=False))
    unequal = [step for step, (a, b) in enumerate(pairs, start=1) if _bits(a) != _bits(b)]
    losses_equal = not unequal and len(run.losses) == len(other_run.losses)
    names = sorted(set(run.first_gradients) | set(other_run.first_gradients))

    def counted(mine: dict[str, Any], theirs: dict[str, Any]) -> tuple[int, float | None, str | None]:
        equal, largest, worst = 0, None, None
        for name in names:
            a, b = mine.get(name), theirs.get(name)
            if a is None or b is None or a.shape != b.shape:
                continue
            same, difference = _same(a, b)
            equal += same
            if largest is None or difference > largest:
                largest, worst = difference, name
        return equal, largest, worst

    gradients_equal, gradient_max, worst = counted(run.first_gradients, other_run.first_gradients)
    after_equal, after_max, _ = counted(after, other_after)
    loss_max = max((abs(a - b) for a, b in pairs), default=None)
    return FxStepsCompared(
        losses_equal=losses_equal, loss_max_abs_diff=loss_max, first_unequal_step=unequal[0] if unequal else None,
        parameters=len(names), gradients_equal=gradients_equal, gradient_max_abs_diff=gradient_max,
        worst_gradient=worst, after_equal=after_equal, after_max_abs_diff=after_max,
        equal=losses_equal and gradients_equal == len(names) and after_equal == len(names))  # fmt: skip


def training_problems(run: Any) -> tuple[list[str], int]:
    """Why eager's run cannot tell modules apart (losses not finite or the same at every step, gradients not finite
    or all zero), and how many parameters have an all-zero first gradient (their comparison shows nothing)."""
    import math

    import torch

    problems = []
    if not all(math.isfinite(loss) for loss in run.losses):
        problems.append("eager's losses are not all finite")
    elif len(set(run.losses)) < 2:
        problems.append("eager's loss is the same at every step")
    gradients = list(run.first_gradients.values())
    zero = sum(not bool(gradient.any()) for gradient in gradients)
    if not all(bool(torch.isfinite(gradient).all()) for gradient in gradients):
        problems.append("eager's gradients are not all finite")
    elif zero == len(gradients):
        problems.append("eager's gradients are all zero")
    return problems, zero


def train_beside_eager(build: Callable[[], Any], trace: Callable[[Any], Any], data: list[dict[str, Any]],
                       policy: str, seed: int) -> FxTraining:  # fmt: skip
    """Eager (`build()`), the traced module (`trace(build())`) and the control (the traced module with
    `changed_line`) each trained by the recipe on `data` under `policy`, the generator seeded alike; eager's run
    against the traced one and against the control."""
    eager, eager_error, _ = _trained(build, None, data, policy, seed)
    traced, traced_error, _ = _trained(build, trace, data, policy, seed)
    compared = compare_steps(eager, traced) if eager is not None and traced is not None else None
    problems, zero = training_problems(eager[0]) if eager is not None else ([], 0)
    control, control_compared = None, None
    if eager is not None:
        changed_run, control_error, changed = _trained(build, trace, data, policy, seed, change=True)
        control_compared = compare_steps(eager, changed_run) if changed_run is not None else None
        control = FxControl(
            changed=changed, equal=bool(control_compared and control_compared["equal"]),
            max_abs_diff=control_compared["gradient_max_abs_diff"] if control_compared else None,
            failed=control_compared is not None and not control_compared["equal"], error=control_error)  # fmt: skip
    return FxTraining(policy=policy, compares=TRAINING_COMPARES.get(policy, policy), steps=len(data),
                      eager_losses=eager[0].losses if eager is not None else None,
                      traced_losses=traced[0].losses if traced is not None else None, eager_error=eager_error,
                      traced_error=traced_error, compared=compared, zero_reference_gradients=zero,
                      reference_problems=problems, control=control, control_compared=control_compared)  # fmt: skip


def _region_probe(torch: Any) -> Any:
    """GPT-2's `_upcast_and_reordered_attn` in little: the scores computed in float32 inside
    `torch.cuda.amp.autocast(enabled=False)`, the region that transformers' tracer cannot trace in GPT-2 itself
    (it fails on that method's `float(value.size(-1))`), traced here by torch.fx, whose tracer HF's extends."""

    class AutocastRegion(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, input_ids, attention_mask):
            hidden = self.linear(torch.nn.functional.one_hot(input_ids % 8, 8).float())
            with torch.cuda.amp.autocast(enabled=False):
                scores = torch.matmul(hidden.float(), hidden.float().transpose(-1, -2))
            return {"logits": scores * attention_mask.unsqueeze(-1)}

    return AutocastRegion()


def trace_here(expect: str) -> list[FxTrace]:
    """Child side: trace GPT-2 with the imported release (it must be `expect`) in each configuration; run each traced
    configuration beside eager (forward, eval mode) and train it beside eager (`train_beside_eager`)."""
    import torch
    import transformers
    from torch.fx.proxy import TracerBase
    from transformers import GPT2ForSequenceClassification
    from transformers.models.gpt2 import modeling_gpt2
    from transformers.utils.fx import symbolic_trace

    from where223.gpt2 import models, training

    if transformers.__version__ != expect:
        raise SystemExit(f"expected transformers {expect}, imported {transformers.__version__}")
    TracerBase.record_stack_traces = True  # every node keeps the Python stack that made it (fx's own option)
    regions = autocast_regions(modeling_gpt2)
    seed = SETTINGS["seed"]
    traces = []
    for name, changes in CONFIGURATIONS.items():
        torch.manual_seed(seed)
        config = models.make_config(SETTINGS["preset"], dropout=SETTINGS["dropout"])
        config.update(changes)
        model = GPT2ForSequenceClassification(config).eval()
        batch = models.first_batch("synthetic", SETTINGS["batch_size"], SETTINGS["seq_len"], config.vocab_size,
                                   seed)  # fmt: skip
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask")}
        entry = FxTrace(release=expect, model=name, config_changes=changes, traced=False, error=None, nodes=0,
                        fixed_at_trace_time=[], autocast_regions_in_source=regions, autocast_nodes_in_graph=0,
                        runs=[], training=[])  # fmt: skip
        try:
            traced = symbolic_trace(model, input_names=list(inputs))
        except Exception as error:  # the tracer's refusal is the answer for this release
            entry["error"] = _error(error)
            traces.append(entry)
            continue
        nodes = list(traced.graph.nodes)
        entry.update(traced=True, nodes=len(nodes), fixed_at_trace_time=fixed_at_trace_time(traced),
                     autocast_nodes_in_graph=sum("autocast" in str(node.target) for node in nodes))  # fmt: skip
        control = symbolic_trace(model, input_names=list(inputs))
        changed = changed_line(control)
        entry["runs"] = [_compare(model, traced, inputs, policy, control, changed) for policy in POLICIES]

        def build(changes: dict[str, Any] = changes) -> Any:
            torch.manual_seed(seed)
            config = models.make_config(SETTINGS["preset"], dropout=TRAINING["dropout"])
            config.update(changes)
            config.problem_type = TRAINING["problem_type"]  # what eager sets on its first loss; the tracer asks
            return GPT2ForSequenceClassification(config).train()

        def trace(module: Any) -> Any:
            return symbolic_trace(module, input_names=["input_ids", "attention_mask", "labels"])

        rows = models.load_dataset("synthetic", TRAINING["steps"] * TRAINING["batch_size"], TRAINING["seq_len"],
                                   config.vocab_size, seed)  # fmt: skip
        data = training.batches(rows, TRAINING["batch_size"], TRAINING["steps"])
        entry["training"] = [train_beside_eager(build, trace, data, policy, seed) for policy in POLICIES]
        traces.append(entry)
    traces.append(_probe_entry(expect, regions))
    return traces


def _probe_entry(release: str, regions: list[str]) -> FxTrace:
    """The autocast-region probe traced by torch.fx and run beside eager under each policy, with its control."""
    import warnings

    import torch
    from torch.fx import symbolic_trace

    torch.manual_seed(SETTINGS["seed"])
    probe = _region_probe(torch).eval()
    inputs = {"input_ids": torch.arange(16).view(2, 8), "attention_mask": torch.ones(2, 8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available": the region still turns CUDA autocast's flag off
        traced = symbolic_trace(probe)
        control = symbolic_trace(probe)
        changed = changed_line(control)
        runs = [_compare(probe, traced, inputs, policy, control, changed) for policy in POLICIES]
    nodes = list(traced.graph.nodes)
    in_graph = sum("autocast" in str(node.target) for node in nodes)
    return FxTrace(release=release, model=PROBE, config_changes={}, traced=True, error=None, nodes=len(nodes),
                   fixed_at_trace_time=fixed_at_trace_time(traced), autocast_regions_in_source=regions,
                   autocast_nodes_in_graph=in_graph, runs=runs, training=[])  # fmt: skip


class _Outputs:
    """A module called as the recipe calls GPT-2 (`module(**inputs).loss`, `.logits`), whether it returns a model
    output or, traced, a dict."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __call__(self, **inputs: Any) -> Any:
        from types import SimpleNamespace

        outputs = self.module(**inputs)
        return SimpleNamespace(**outputs) if isinstance(outputs, dict) else outputs


def _start_release(version: str, out: Path) -> subprocess.Popen:
    """Start tracing with release `version` in its own interpreter: its entries go to `out`, its stderr beside it
    (a file, not a pipe: interpreters run side by side, and a full pipe would stall one)."""
    child = "import sys; from where223.study.fx.run import trace_to_file; trace_to_file(sys.argv[1], sys.argv[2])"
    with out.with_suffix(".stderr").open("w") as stderr:
        return subprocess.Popen([sys.executable, "-c", child, version, str(out)], env=release_environment(version),
                                stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip


def _finish_release(process: subprocess.Popen, version: str, out: Path, timeout_s: int) -> list[FxTrace]:
    """Wait for a started release's interpreter; its entries."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(f"tracing with transformers {version} took more than {timeout_s} s") from None
    if process.returncode != 0 or not out.is_file():
        stderr = out.with_suffix(".stderr").read_text(errors="replace")
        raise RuntimeError(f"tracing with transformers {version} failed:\n{stderr[-3000:]}")
    return json.loads(out.read_text())


def run_release(version: str, out: Path, timeout_s: int = TIMEOUT_S) -> list[FxTrace]:
    """Trace with release `version` in its own interpreter; its entries."""
    return _finish_release(_start_release(version, out), version, out, timeout_s)


def run_study(output_root: Path | None = None, releases: tuple[str, ...] | None = None) -> FxRecord:
    """Trace with each release (default: every release folder setup installs), their interpreters side by side, and
    write `fx/fx.json` (entries in release order)."""
    import tempfile

    chosen = tuple(RELEASES.values()) if releases is None else releases
    traces: list[FxTrace] = []
    with tempfile.TemporaryDirectory() as scratch:
        outs = [Path(scratch) / f"{version}.json" for version in chosen]
        started = [_start_release(version, out) for version, out in zip(chosen, outs, strict=True)]
        try:
            for process, version, out in zip(started, chosen, outs, strict=True):
                traces.extend(_finish_release(process, version, out, TIMEOUT_S))
        finally:
            for process in started:  # one release failed: the others' interpreters end with it
                if process.poll() is None:
                    process.kill()
                    process.wait()
    record = FxRecord(description=DESCRIPTION, settings={**SETTINGS, "releases": list(chosen),
                      "policies": list(POLICIES), "configurations": CONFIGURATIONS, "training": TRAINING,
                      "control": {"change": CONTROL_CHANGE, "factor": CONTROL_FACTOR}},
                      tolerance=TOLERANCE, traces=traces, environment=environment.describe("cpu"))  # fmt: skip
    write_json(paths.run_dir(Path(FX_RECORD).parent.name, output_root) / Path(FX_RECORD).name, record)
    return record


def trace_to_file(version: str, out: str) -> None:
    """Child side of `run_release`: trace with the imported release and write the entries to `out` (JSON). One
    thread: the releases' interpreters run side by side, and the tiny model gains nothing from more (eager and
    traced run with the same thread count, so every comparison stays like for like)."""
    import torch

    torch.set_num_threads(1)
    Path(out).write_text(json.dumps(trace_here(version)))
