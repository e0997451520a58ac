"""The variant study: is one way of writing GPT-2's scale and mask lines trace-correct AND sync-free?

Every measured variant (`MEASURED`, registered in `where223.gpt2.variants`) gets, in one run:
- eager logits under autocast compared bitwise with the unpatched transformers 4.25.1 code, on the preset
  and on a probe model whose head size has a square root the autocast dtype cannot represent;
- the export of the tiny model under autocast: lint verdict, ONNX Runtime's verdict (a type error, or the
  type check passed and then a kernel is missing, or accepted), the dtype-divergence report, and the Casts
  of the attention block;
- eager training steps of the preset (forward and backward under autocast; the optimizer step, the same for
  every variant, is left out), variants interleaved round-robin on one model so that drift hits them alike,
  for as many rounds as `analysis.STOPPING_RULE` needs: step time as a ratio to 4.25; on CUDA,
  `cudaStreamSynchronize` calls, `cudaMemcpy*` runtime calls and host-to-device copies per step from
  torch.profiler; on CPU those are "not measured", and
  the host-made tensors per step (each becomes a host-to-device copy on a GPU) are counted instead.

The eager parts need only torch and transformers 4.25.1 (plus this package's pure-Python modules), so
`benchmarks/bench_variants_gpu.py` runs them on a GPU machine alone; onnx, onnxruntime and the linter are
imported only by the export checks. What only reads the rows (tracing levels, sync cost, the recommendation,
the table) is `where223.study.variants.analysis`, which imports no torch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from where223.eager.precision import autocast
from where223.gpt2 import models, variants
from where223.graph.ort import judge
from where223.pipeline import environment, paths, portable, records
from where223.pipeline.params import ParameterError, check_choice, check_range, resolve_amp_dtype, resolve_device
from where223.study.variants.analysis import (
    BASELINE,
    MIN_ROUNDS,
    NOT_MEASURED,
    ORT_STATUSES,
    STABLE_ROUNDS,
    STOPPING_RULE,
    TRACING_LEVELS,
    recommend,
    timing_decisions,
    timing_pairs,
    timing_rows,
    timing_settled,
    trace_correct,
    tracing_level,
)
from where223.study.variants.record import output_path

MEASURED: tuple[str, ...] = (
    "4.25",
    "4.24",
    "4.26",
    "float+masked_fill",
    "float+full_device_cast",
    "full_cast+full_device_cast",
    "float+where_scalar",
    "float_cast+masked_fill",
    "full_const+masked_fill",
    "full_const+full_device_cast",
)
# Why the other scale x mask combinations of variants.SCALES x variants.MASKS are not measured.
SKIPPED: dict[str, str] = {
    "scale 'tensor' with a new mask": (
        "torch.tensor(..., device=cuda) copies its value from the host on every layer, which PR 20061 "
        "removed; kept only in the historic 4.24"
    ),
    "masks 'tensor_to', 'full_to', 'full_to_cast' with a new scale": (
        "a host tensor moved with .to(device) is a host-to-device copy on every layer; kept only in the "
        "historic 4.24, 4.25 and 4.26"
    ),
    "scale 'full' with a new mask": (
        "torch.full of a traced size exports as ConstantOfShape(bfloat16/float16) and a float Div whatever "
        "the mask; 'full_cast+full_device_cast' measures that scale family with a copy-free, cast mask"
    ),
    "scale 'full_const' with the host-copying masks or 'where_scalar'": (
        "the scale is then right and the mask line brings back the copies or the double-typed fill value "
        "the other measured variants already show"
    ),
    "scale 'full_cast' or 'float_cast' with other masks": (
        "the cast back already types the scores; the mask then only adds or removes a tensor, which the "
        "measured masks already show"
    ),
    "mask 'full_device_cast' with scale 'float_cast', 'where_scalar' with other scales": (
        "the same lines as a measured variant plus one redundant cast, or the same double-typed fill value"
    ),
}
_HOST_FACTORIES = frozenset({"full", "zeros", "ones", "empty", "arange", "scalar_tensor"})


@dataclass(frozen=True)
class StudySettings:
    """Resolved parameters of one study run."""

    device: str
    amp_dtype: str
    preset: str
    batch_size: int
    seq_len: int
    steps: int
    warmup: int
    profile_steps: int
    seed: int
    export: bool
    variants: tuple[str, ...] = MEASURED

    @classmethod
    def resolve(
        cls,
        *,
        device: str = "auto",
        amp_dtype: str = "auto",
        preset: str = "gpt2",
        batch_size: int = 1,
        seq_len: int = 16,
        steps: int = 20,
        warmup: int = 2,
        profile_steps: int = 3,
        seed: int = 0,
        export: bool = True,
        names: Sequence[str] = MEASURED,
    ) -> StudySettings:
        """Check every parameter, resolve 'auto'; the baseline is always measured (ratios need it)."""
        resolved = resolve_device(device)
        check_choice("preset", preset, sorted(models.PRESETS))
        unknown = [name for name in names if name not in variants.VARIANTS]
        if unknown:
            raise ParameterError(f"unknown attention variant(s) {unknown}; registered: {sorted(variants.VARIANTS)}")
        chosen = (BASELINE, *(name for name in dict.fromkeys(names) if name != BASELINE))
        return cls(
            device=resolved,
            amp_dtype=resolve_amp_dtype(amp_dtype, resolved),
            preset=preset,
            batch_size=check_range("batch_size", batch_size, 1, 4096),
            seq_len=check_range("seq_len", seq_len, 2, models.make_config(preset).n_positions),
            steps=check_range("steps", steps, 1, 100_000),
            warmup=check_range("warmup", warmup, 0, 1000),
            profile_steps=check_range("profile_steps", profile_steps, 1, 1000),
            seed=check_range("seed", seed, 0, 2**31 - 1),
            export=export,
            variants=chosen,
        )


def head_size(preset: str) -> int:
    """The attention head size of a model preset (n_embd / n_head)."""
    config = models.make_config(preset)
    return config.n_embd // config.n_head


def _batch(preset_vocab: int, batch_size: int, seq_len: int, seed: int, device: str) -> dict[str, torch.Tensor]:
    batch = models.first_batch("synthetic", batch_size, seq_len, preset_vocab, seed)
    return {key: value.to(device) for key, value in batch.items()}


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value for key, value in batch.items() if key != "labels"}


class HostTensorCounter(TorchFunctionMode):
    """Count tensors made from host data or on the host: torch.tensor, and factories without a device.

    On a GPU each such tensor that meets the scores is a host-to-device copy.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "tensor" or (name in _HOST_FACTORIES and kwargs.get("device") is None):
            self.count += 1
        return func(*args, **kwargs)


@contextmanager
def _variant(name: str | None) -> Iterator[None]:
    """The variant patched in, or transformers' own code for None."""
    if name is None:
        yield
        return
    with variants.patched_attention(name):
        yield


def _logits(model: torch.nn.Module, batch: dict[str, torch.Tensor], settings: StudySettings) -> torch.Tensor:
    with torch.no_grad(), autocast(settings.device, settings.amp_dtype):
        return model(**_inputs(batch)).logits


def _probe_outputs(probe: torch.nn.Module, batch: dict[str, torch.Tensor], settings: StudySettings):
    """The probe's logits and attention probabilities (these show a change the logits may hide)."""
    with torch.no_grad(), autocast(settings.device, settings.amp_dtype):
        out = probe(**_inputs(batch), output_attentions=True)
    return (out.logits, *out.attentions)


def eager_checks(settings: StudySettings) -> dict[str, dict[str, Any]]:
    """Per variant: logits bitwise equal to unpatched 4.25.1 (preset and probe), host-made tensors/forward."""
    model = models.build_model(settings.preset, settings.seed, dropout=False).to(settings.device).eval()
    batch = _batch(model.config.vocab_size, settings.batch_size, settings.seq_len, settings.seed, settings.device)
    probe, probe_batch = models.probe_model(settings.seed, settings.device)
    reference, probe_reference = _logits(model, batch, settings), _probe_outputs(probe, probe_batch, settings)
    results: dict[str, dict[str, Any]] = {}
    for name in settings.variants:
        counter = HostTensorCounter()
        with _variant(name):
            with counter:
                logits = _logits(model, batch, settings)
            probe_outputs = _probe_outputs(probe, probe_batch, settings)
        results[name] = {
            "eager_equal": bool(torch.equal(logits, reference)),
            "eager_max_abs_diff": float((logits.float() - reference.float()).abs().max()),
            "eager_equal_probe": all(map(torch.equal, probe_outputs, probe_reference)),
            "host_tensors_per_forward": counter.count,
        }
    return results


def ort_record(onnx_path: str | Path) -> dict[str, Any]:
    """ONNX Runtime's verdict (CPU) on the graph as the study records it: status, message, type binding."""
    judgement = judge(onnx_path)
    binding = judgement.type_binding
    return {
        "status": judgement.verdict,
        "message": (judgement.message or "")[:500],
        "type_binding": None if binding is None else binding.to_dict(),
    }


def export_checks(name: str, settings: StudySettings, out_dir: Path) -> dict[str, Any]:
    """Export the tiny model with variant `name`; judge the graph: lint, ONNX Runtime, divergence, Casts; and
    measure its reduced-precision logits against eager autocast's (`onnx_numerics`: emulated bf16 on a CPU, see
    `where223.eager.numerics`; device-bound, so never merged from another run's record)."""
    from where223.eager.divergence import divergence_report
    from where223.eager.numerics import numerics_record
    from where223.gpt2.export import export_onnx
    from where223.gpt2.releases import cast_count
    from where223.graph.lint import lint_model

    model = models.build_model("tiny", settings.seed, dropout=False)
    batch = _batch(model.config.vocab_size, 2, 8, settings.seed, "cpu")
    out = out_dir / f"{paths.slug(name)}.onnx"
    with variants.patched_attention(name):
        model.train()
        export_onnx(model, batch, out, 17, settings.device, settings.amp_dtype)
        divergence = divergence_report(model, batch, out, settings.device, settings.amp_dtype)
        eager = _logits(model.eval(), {key: value.to(settings.device) for key, value in batch.items()}, settings)
    lint = lint_model(out)
    first = divergence.first
    return {
        "onnx": portable.path(str(out)),
        "lint_clean": lint.clean,
        "lint_violations": [
            {"op_type": v.op_type, "kind": v.kind, "node": v.node, "message": v.message()} for v in lint.violations
        ],
        "where_type_conflict": any(v.op_type == "Where" for v in lint.violations),
        "ort": ort_record(out),
        "divergences": len(divergence.divergences),
        "attention_divergences": sum("/attn/" in d.graph_node for d in divergence.divergences),
        "first_divergence": None
        if first is None
        else {
            "node": first.graph_node,
            "graph_dtype": first.graph_dtype,
            "eager_dtype": first.eager_dtype,
            "code": first.code,
        },
        "attention_casts": cast_count(out),
        "onnx_numerics": numerics_record(out, batch, eager, settings.device, settings.amp_dtype),
        "onnx_numerics_probe": probe_numerics(name, settings, out.with_name(f"{out.stem}-probe.onnx")),
    }


def probe_numerics(name: str, settings: StudySettings, out: Path) -> dict[str, Any]:
    """The probe exported with variant `name`, its reduced-precision logits against eager autocast's: unlike
    the tiny model's head size 16, the probe's sqrt(20) is inexact in bf16/fp16, so a Div left in float32
    (a dtype divergence) changes the numbers here if anywhere."""
    from where223.eager.numerics import numerics_record
    from where223.gpt2.export import export_onnx

    probe, batch = models.probe_model(settings.seed, "cpu")
    with variants.patched_attention(name):
        export_onnx(probe, batch, out, 17, settings.device, settings.amp_dtype)
        eager = _logits(probe.eval(), {key: value.to(settings.device) for key, value in batch.items()}, settings)
    return numerics_record(out, batch, eager, settings.device, settings.amp_dtype)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


TIMED_STEP = ("one forward and backward pass under autocast, gradients then dropped; the optimizer step, the same "
              "code for every variant, is not run")


def _train_step(model, optimizer, batch: dict[str, torch.Tensor], settings: StudySettings) -> None:
    """One timed step: the forward and backward pass under autocast (no GradScaler: its inf check would add a sync
    of its own), gradients then dropped. The optimizer step is left out: it is the same code for every variant (the
    attention code runs in the forward and backward only), so it would add the same time to each (AdamW over the
    124M parameters, the larger part of a step on CPU in a profile by hand, not recorded) and only dilute the
    ratios between variants."""
    with autocast(settings.device, settings.amp_dtype):
        loss = model(**batch).loss
    loss.backward()
    optimizer.zero_grad(set_to_none=True)


def _training_setup(settings: StudySettings):
    model = models.build_model(settings.preset, settings.seed).to(settings.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = _batch(model.config.vocab_size, settings.batch_size, settings.seq_len, settings.seed, settings.device)
    return model, optimizer, batch


def step_times(settings: StudySettings, setup: tuple | None = None, pairs: set[tuple[str, str]] | None = None
               ) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Seconds per training step of each variant, round-robin on one model, warm-up rounds dropped; and how the
    timing stopped (`ranking.STOPPING_RULE`: once the decisions between variants settle, at `steps` rounds at
    most), as the record states it; `pairs` are the pairs of variants the rule judges (None: every pair).

    Each round starts one variant later than the previous, so no variant always follows the same one.
    """
    model, optimizer, batch = setup or _training_setup(settings)
    names = list(settings.variants)
    judged = names if pairs is None else [name for name in names if name == BASELINE or any(name in p for p in pairs)]
    times: dict[str, list[float]] = {name: [] for name in names}
    history: list[dict[tuple[str, str], int]] = []
    stopped = {"step": TIMED_STEP, "rule": STOPPING_RULE,
               "pairs": sorted(f"{a} / {b}" for a, b in pairs) if pairs is not None else "every pair",
               "max_rounds": settings.steps, "rounds": settings.steps, "stopped_by": "the maximum number of rounds"}
    active = names
    for round_index in range(settings.warmup + settings.steps):
        shift = round_index % len(active)
        for name in active[shift:] + active[:shift]:
            with variants.patched_attention(name):
                _synchronize(settings.device)
                start = time.perf_counter()
                _train_step(model, optimizer, batch, settings)
                _synchronize(settings.device)
                elapsed = time.perf_counter() - start
            if round_index >= settings.warmup:
                times[name].append(elapsed)
        if round_index >= settings.warmup and BASELINE in times:
            history.append(timing_decisions({name: times[name] for name in judged}, pairs=pairs))
            if len(history) >= MIN_ROUNDS:
                active = judged  # the variants of no judged pair keep their MIN_ROUNDS rounds
            if timing_settled(history) and round_index + 1 < settings.warmup + settings.steps:
                stopped.update(rounds=len(history), stopped_by=f"decisions unchanged over {STABLE_ROUNDS} rounds")
                break
    return times, stopped


def count_cuda_events(names: Sequence[str]) -> dict[str, int]:
    """Counts of the events a step's profile must be checked for, from torch.profiler event names."""
    return {
        "stream_synchronize": sum(name == "cudaStreamSynchronize" for name in names),
        "memcpy_calls": sum(name.startswith("cudaMemcpy") for name in names),
        "h2d_copies": sum(name.startswith("Memcpy HtoD") for name in names),
        "kernel_launches": sum(name == "cudaLaunchKernel" for name in names),
    }


def cuda_counts(settings: StudySettings, setup: tuple) -> dict[str, dict[str, float]]:
    """Per variant and step: cudaStreamSynchronize calls, cudaMemcpy* runtime calls, host-to-device copies."""
    from torch.profiler import ProfilerActivity, profile

    model, optimizer, batch = setup
    results: dict[str, dict[str, float]] = {}
    for name in settings.variants:
        with variants.patched_attention(name):
            _train_step(model, optimizer, batch, settings)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(settings.profile_steps):
                    _train_step(model, optimizer, batch, settings)
                torch.cuda.synchronize()
        counts = count_cuda_events([event.name for event in prof.events()])
        if not counts["kernel_launches"]:
            raise RuntimeError("torch.profiler recorded no CUDA runtime calls (is CUPTI available?)")
        results[name] = {key: value / settings.profile_steps for key, value in counts.items()}
    return results


def training_checks(settings: StudySettings, rows: dict[str, dict[str, Any]] | None = None
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per variant: median step time, its ratio to the baseline's, the rounds it was timed for, and the CUDA
    counts (or 'not measured'); and how the timing stopped (`step_times`, judging the pairs `rows`, the eager
    and export columns, make the recommendation depend on; every pair without them), for the record.

    `step_time_ratio` is the ratio of the medians; `paired_ratio` the median over rounds of the variant's
    time over the baseline's in the same round, which a machine whose load changes mid-run (shared CPUs)
    does not move; `paired_ratio_spread` half the interquartile range of those same-round ratios (ranking
    treats differences inside it as ties).
    """
    setup = _training_setup(settings)
    pairs = timing_pairs(rows) if rows is not None and all("eager_equal_probe" in row for row in rows.values()) \
        else None
    times, stopping = step_times(settings, setup, pairs)
    counts = cuda_counts(settings, setup) if settings.device == "cuda" else {}
    base = statistics.median(times[BASELINE])
    paired = timing_rows(times)  # what the stopping rule judged, so the record and the rule agree
    results: dict[str, dict[str, Any]] = {}
    for name in settings.variants:
        median = statistics.median(times[name])
        cuda = counts.get(name, {})
        results[name] = {
            "step_time_median_s": median,
            "step_time_ratio": median / base,
            **paired[name],
            "step_times_s": times[name],
            "steps_timed": len(times[name]),
            "syncs_per_step": cuda.get("stream_synchronize", NOT_MEASURED),
            "memcpy_calls_per_step": cuda.get("memcpy_calls", NOT_MEASURED),
            "h2d_copies_per_step": cuda.get("h2d_copies", NOT_MEASURED),
        }
    return results, stopping


EXPORT_FIELDS: tuple[str, ...] = (
    "onnx",
    "lint_clean",
    "lint_violations",
    "where_type_conflict",
    "ort",
    "divergences",
    "attention_divergences",
    "first_divergence",
    "attention_casts",
)


def merge_export_columns(
    rows: dict[str, dict[str, Any]], earlier: dict[str, Any], settings: StudySettings
) -> dict[str, Any]:
    """Copy the export columns of `earlier` (another run's record) into `rows`, if they can stand for this run's.

    Refused (nothing merged) when `earlier` exported under another autocast precision: its graphs are not the
    ones this run would export. Merged but marked `borrowed` when its torch differs: the verdicts are that
    torch exporter's. Returns the `export_from` entry of the record, which says which of the three happened.
    """
    torch_here = environment.package_versions(("torch",))["torch"]
    torch_there = earlier["environment"]["packages"].get("torch")
    precision_there = earlier["settings"]["amp_dtype"]
    export_from: dict[str, Any] = {"environment": earlier["environment"], "amp_dtype": precision_there}
    if precision_there != settings.amp_dtype:
        export_from["refused"] = (
            f"exported under {precision_there} autocast, this run uses {settings.amp_dtype}: its verdicts are "
            "not this run's graphs; export here (export=True) to fill the columns"
        )
        return export_from
    for name in settings.variants:
        source = earlier["variants"].get(name, {})
        rows[name].update({key: source[key] for key in EXPORT_FIELDS if key in source})
    if torch_there != torch_here:
        export_from["borrowed"] = (
            f"export columns ({', '.join(EXPORT_FIELDS)}) measured with torch {torch_there}; this run has "
            f"torch {torch_here}"
        )
    return export_from


def run_study(
    settings: StudySettings,
    output_root: str | Path | None = None,
    progress: Callable[[str], None] = lambda line: None,
    export_record: str | Path | None = None,
) -> dict[str, Any]:
    """Measure every variant of `settings`, write the JSON record atomically, return it.

    Without `settings.export`, the export columns may come from an earlier record (`export_record`, e.g.
    the CPU run's JSON): the export does not depend on where the eager steps ran.
    """
    from where223.pipeline.params import EMULATED_CUDA_FP16

    if settings.amp_dtype == EMULATED_CUDA_FP16:
        raise ParameterError(f"amp_dtype={EMULATED_CUDA_FP16!r} times no steps (emulated on a CPU they say nothing "
                             "about a GPU): its export columns are `emulated_columns`, notebook 04's last section")
    out = output_path(settings.device, output_root)
    progress(f"eager equality and host-made tensors ({len(settings.variants)} variants, {settings.preset})")
    rows = eager_checks(settings)
    export_from = None
    if settings.export:
        for name in settings.variants:
            progress(f"export {name}")
            rows[name].update(export_checks(name, settings, out.parent / "onnx"))
    elif export_record is not None:
        export_from = merge_export_columns(rows, records.read_json(export_record), settings)
        export_from["path"] = portable.path(str(export_record))
    progress(f"training steps: {settings.warmup} warm-up + at most {settings.steps} timed rounds")
    timed, timing = training_checks(settings, rows)
    for name, row in timed.items():
        rows[name].update(row)
    progress(f"timed {timing['rounds']} rounds: stopped by {timing['stopped_by']}")
    for name, row in rows.items():
        variant = variants.get_variant(name)
        row.update(
            scale=variant.scale,
            mask=variant.mask,
            description=variant.description,
            trace_correct=trace_correct(row),
            tracing_level=tracing_level(row),
        )
    record = {
        "study": "variants",
        "baseline": BASELINE,
        "settings": asdict(settings),
        "environment": environment.describe(settings.device),
        "export_from": export_from,
        "skipped": SKIPPED,
        "ort_statuses": ORT_STATUSES,
        "tracing_levels": TRACING_LEVELS,
        "timing": timing,
        "variants": rows,
        "recommendation": recommend(rows, settings.preset, head_size(settings.preset)),
    }
    for caveat in ("refused", "borrowed"):
        if export_from and caveat in export_from:
            record["recommendation"]["reasons"].append(f"export columns {caveat}: {export_from[caveat]}")
    record = portable.record(record)
    records.write_json(out, record)
    record["path"] = str(out)
    return record


EMULATED_NOT_MEASURED = (
    "eager equality, host-made tensors and step times: emulated on a CPU they say nothing about a GPU; only the "
    "export columns (types, ONNX Runtime's verdict, divergences, Casts) are measured"
)


def emulated_columns(output_root: str | Path | None = None, seed: int = 0,
                     progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Each variant's export columns under CUDA's fp16 autocast policy emulated on CPU
    (`where223.cuda_autocast`), written to `variants/emulated-types.json`: the tiny model exported as the CPU bf16
    study exports it, judged by lint, ONNX Runtime and the divergence report. No step times under emulation."""
    from where223.pipeline.params import EMULATED_CUDA_FP16
    from where223.study.variants.record import EMULATED_TYPES

    settings = StudySettings.resolve(device="cpu", amp_dtype=EMULATED_CUDA_FP16, preset="tiny", seed=seed)
    out = paths.run_dir("variants", output_root) / Path(EMULATED_TYPES).name
    rows: dict[str, dict[str, Any]] = {}
    for name in settings.variants:
        progress(f"export {name} under the emulated CUDA fp16 policy")
        found = export_checks(name, settings, out.parent / "onnx-emulated")
        rows[name] = {key: found[key] for key in (*EXPORT_FIELDS, "onnx_numerics")}
    record = portable.record({
        "study": "variants-emulated",
        "label": "emulated CUDA fp16 autocast on CPU (where223.cuda_autocast), not run on a GPU",
        "settings": asdict(settings),
        "not_measured": EMULATED_NOT_MEASURED,
        "variants": rows,
        "environment": environment.describe("cpu"),
    })
    records.write_json(out, record)
    return record
