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
(`PROBE`), for the release's tracer cannot trace that method. Eval mode, dropout off, forward only: training steps
(backward, optimiser) are not measured.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from where223.gpt2.releases import RELEASES, release_environment
from where223.pipeline import environment, paths
from where223.pipeline.records import write_json
from where223.study.fx.record import FX_RECORD, PROBE, FxRecord, FxRun, FxTrace

POLICIES = ("bf16", "fp16_cuda_emulated")
CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "as configured": {},
    "reorder_and_upcast_attn": {"reorder_and_upcast_attn": True},
}
SETTINGS = {"preset": "tiny", "seed": 0, "batch_size": 2, "seq_len": 8, "mode": "eval", "dropout": False}
TOLERANCE = {
    "values": "bitwise equal: the traced graph replays the same ops on the same CPU kernels in the same order",
    "dtypes": "the logits' dtype equal to eager's",
}
DESCRIPTION = (
    "transformers' torch.fx tracer on GPT-2 (tiny preset, random weights) with each release folder; the traced "
    "module beside eager under CPU bf16 autocast and under CUDA's fp16 autocast policy emulated on CPU"
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


def _compare(model: Any, traced: Any, inputs: dict[str, Any], policy: str) -> FxRun:
    import torch

    from where223.eager.precision import autocast

    try:
        with torch.no_grad(), autocast("cpu", policy):
            eager = model(**inputs).logits
        with torch.no_grad(), autocast("cpu", policy):
            replayed = traced(**inputs)["logits"]
    except Exception as error:  # recorded: a policy the traced module cannot run under is an answer too
        return FxRun(policy=policy, eager_dtype=None, traced_dtype=None, dtypes_agree=False, max_abs_diff=None,
                     equal=False, error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")  # fmt: skip
    difference = float((eager.float() - replayed.float()).abs().max())
    return FxRun(policy=policy, eager_dtype=str(eager.dtype), traced_dtype=str(replayed.dtype),
                 dtypes_agree=eager.dtype == replayed.dtype, max_abs_diff=difference,
                 equal=bool(eager.dtype == replayed.dtype and torch.equal(eager, replayed)), error=None)  # fmt: skip


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
    """Child side: trace GPT-2 with the imported release (it must be `expect`) in each configuration."""
    import torch
    import transformers
    from torch.fx.proxy import TracerBase
    from transformers import GPT2ForSequenceClassification
    from transformers.models.gpt2 import modeling_gpt2
    from transformers.utils.fx import symbolic_trace

    from where223.gpt2 import models

    if transformers.__version__ != expect:
        raise SystemExit(f"expected transformers {expect}, imported {transformers.__version__}")
    TracerBase.record_stack_traces = True  # every node keeps the Python stack that made it (fx's own option)
    regions = autocast_regions(modeling_gpt2)
    traces = []
    for name, changes in CONFIGURATIONS.items():
        torch.manual_seed(SETTINGS["seed"])
        config = models.make_config(SETTINGS["preset"], dropout=SETTINGS["dropout"])
        config.update(changes)
        model = GPT2ForSequenceClassification(config).eval()
        batch = models.first_batch("synthetic", SETTINGS["batch_size"], SETTINGS["seq_len"], config.vocab_size,
                                   SETTINGS["seed"])  # fmt: skip
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask")}
        entry = FxTrace(release=expect, model=name, config_changes=changes, traced=False, error=None, nodes=0,
                        fixed_at_trace_time=[], autocast_regions_in_source=regions, autocast_nodes_in_graph=0,
                        runs=[])  # fmt: skip
        try:
            traced = symbolic_trace(model, input_names=list(inputs))
        except Exception as error:  # the tracer's refusal is the answer for this release
            entry["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            traces.append(entry)
            continue
        nodes = list(traced.graph.nodes)
        entry.update(traced=True, nodes=len(nodes), fixed_at_trace_time=fixed_at_trace_time(traced),
                     autocast_nodes_in_graph=sum("autocast" in str(node.target) for node in nodes))  # fmt: skip
        entry["runs"] = [_compare(model, traced, inputs, policy) for policy in POLICIES]
        traces.append(entry)
    traces.append(_probe_entry(expect, regions))
    return traces


def _probe_entry(release: str, regions: list[str]) -> FxTrace:
    """The autocast-region probe traced by torch.fx and run beside eager under each policy."""
    import warnings

    import torch
    from torch.fx import symbolic_trace

    torch.manual_seed(SETTINGS["seed"])
    probe = _region_probe(torch).eval()
    inputs = {"input_ids": torch.arange(16).view(2, 8), "attention_mask": torch.ones(2, 8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available": the region still turns CUDA autocast's flag off
        traced = symbolic_trace(probe)
        runs = [_compare(_Logits(probe), traced, inputs, policy) for policy in POLICIES]
    nodes = list(traced.graph.nodes)
    in_graph = sum("autocast" in str(node.target) for node in nodes)
    return FxTrace(release=release, model=PROBE, config_changes={}, traced=True, error=None, nodes=len(nodes),
                   fixed_at_trace_time=fixed_at_trace_time(traced), autocast_regions_in_source=regions,
                   autocast_nodes_in_graph=in_graph, runs=runs)  # fmt: skip


class _Logits:
    """A module returning {"logits": ...} called as the GPT-2 models are (`model(**inputs).logits`)."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __call__(self, **inputs: Any) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.module(**inputs)["logits"])


def run_release(version: str, out: Path, timeout_s: int = TIMEOUT_S) -> list[FxTrace]:
    """Trace with release `version` in its own interpreter; its entries."""
    child = "import sys; from where223.study.fx.run import trace_to_file; trace_to_file(sys.argv[1], sys.argv[2])"
    command = [sys.executable, "-c", child, version, str(out)]
    done = subprocess.run(command, env=release_environment(version), capture_output=True, text=True,
                          timeout=timeout_s, check=False)  # fmt: skip
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"tracing with transformers {version} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def run_study(output_root: Path | None = None, releases: tuple[str, ...] | None = None) -> FxRecord:
    """Trace with each release (default: every release folder setup installs) and write `fx/fx.json`."""
    import tempfile

    chosen = tuple(RELEASES.values()) if releases is None else releases
    traces: list[FxTrace] = []
    with tempfile.TemporaryDirectory() as scratch:
        for version in chosen:
            traces.extend(run_release(version, Path(scratch) / f"{version}.json"))
    record = FxRecord(description=DESCRIPTION, settings={**SETTINGS, "releases": list(chosen),
                      "policies": list(POLICIES), "configurations": CONFIGURATIONS},
                      tolerance=TOLERANCE, traces=traces, environment=environment.describe("cpu"))  # fmt: skip
    write_json(paths.run_dir(Path(FX_RECORD).parent.name, output_root) / Path(FX_RECORD).name, record)
    return record


def trace_to_file(version: str, out: str) -> None:
    """Child side of `run_release`: trace with the imported release and write the entries to `out` (JSON)."""
    Path(out).write_text(json.dumps(trace_here(version)))
