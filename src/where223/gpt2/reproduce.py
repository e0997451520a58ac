"""The three ways to meet the Where type-binding error, and the classification of what was caught.

Paths, from the seed's stack down to the bare exporter:
- `ort_trainer`: optimum's ORTTrainer trains GPT-2 with mixed precision (the seed's setting);
- `ortmodule`: ORTModule wraps the model directly, one training forward under autocast;
- `onnx_export`: torch.onnx.export in training mode under autocast, then onnxruntime.InferenceSession.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, get_type_hints

import torch
from transformers import GPT2ForSequenceClassification

from where223.eager.precision import EMULATED_CUDA_FP16, autocast
from where223.gpt2 import models, runs
from where223.gpt2.export import export_onnx, output_to, stable_doc_strings
from where223.gpt2.runs import EXPORTED_MODEL
from where223.graph.ort import OrtVerdict, judge_message, load_session
from where223.pipeline import environment, portable
from where223.pipeline.params import ParameterError, check_choice, check_range, resolve_amp_dtype, resolve_device

PATHS = runs.PATHS
OPSETS = (14, 15, 16, 17)
ORTMODULE_EXPORT = "ortmodule_torch_exported_training.onnx"
# The record's status, from ONNX Runtime's verdict on what the path ran (notebooks and report read it).
REPRODUCED, NOT_REPRODUCED, OTHER_ERROR = "reproduced", "not reproduced", "other error"


@dataclass(frozen=True)
class ReproduceSettings:
    """Resolved parameters of one reproduction run; they build its model, data and batch, and name its folder."""

    path: str
    preset: str
    device: str
    amp_dtype: str
    batch_size: int
    seq_len: int
    opset: int
    seed: int
    dataset: str
    train_steps: int

    @classmethod
    def resolve(
        cls,
        *,
        path: str,
        preset: str,
        device: str,
        amp_dtype: str,
        batch_size: int,
        seq_len: int,
        opset: int,
        seed: int,
        dataset: str = "synthetic",
        train_steps: int = 1,
    ) -> ReproduceSettings:
        """Check every parameter and resolve 'auto'; a bad one fails at once naming the allowed values."""
        check_choice("path", path, PATHS)
        check_choice("model_preset", preset, sorted(models.PRESETS))
        resolved_device = resolve_device(device)
        max_positions = models.make_config(preset).n_positions
        return cls(
            path=path,
            preset=preset,
            device=resolved_device,
            amp_dtype=resolve_amp_dtype(amp_dtype, resolved_device),
            batch_size=check_range("batch_size", batch_size, 1, 4096),
            seq_len=check_range("seq_len", seq_len, 2, max_positions),
            opset=check_choice("opset", opset, OPSETS),
            seed=check_range("seed", seed, 0, 2**31 - 1),
            dataset=dataset,
            train_steps=check_range("train_steps", train_steps, 1, 10_000),
        )

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> ReproduceSettings:
        """The settings of a record's `parameters`: every field, each of its declared type, checked again."""
        types = get_type_hints(cls)
        unknown, missing = sorted(set(parameters) - set(types)), sorted(set(types) - set(parameters))
        if unknown or missing:
            raise ParameterError(f"reproduction parameters: unknown {unknown}, missing {missing}")
        for name, wanted in types.items():
            if type(parameters[name]) is not wanted:
                raise ParameterError(f"parameter {name}={parameters[name]!r} must be of type {wanted.__name__}")
        return cls.resolve(**parameters)

    def run_name(self) -> str:
        """The run's folder name, from its parameters (see `where223.gpt2.runs`)."""
        return runs.run_name(asdict(self))

    def build_model(self, dropout: bool = True) -> GPT2ForSequenceClassification:
        """The run's model, initialised from its seed; `dropout=False` zeroes every dropout."""
        return models.build_model(self.preset, self.seed, dropout=dropout)

    def build_dataset(self, size: int | None = None) -> torch.utils.data.Dataset:
        """The run's data: `size` rows, by default one batch per training step."""
        rows = self.batch_size * self.train_steps if size is None else size
        return models.load_dataset(self.dataset, rows, self.seq_len, self._vocab_size(), self.seed)

    def build_batch(self) -> dict[str, torch.Tensor]:
        """The run's example batch: the first `batch_size` rows of its data."""
        return models.first_batch(self.dataset, self.batch_size, self.seq_len, self._vocab_size(), self.seed)

    def _vocab_size(self) -> int:
        return models.make_config(self.preset).vocab_size


def status_of(verdict: OrtVerdict) -> str:
    """A run's status: the Where error reproduced, not reproduced (the path ran), or another error."""
    if verdict == OrtVerdict.WHERE_TYPE_ERROR:
        return REPRODUCED
    return NOT_REPRODUCED if verdict == OrtVerdict.ACCEPTED else OTHER_ERROR


def call_stack(error: BaseException) -> list[str]:
    """The exception's stack as `file:line:function`, outermost first."""
    return [
        f"{portable.path(frame.filename)}:{frame.lineno}:{frame.name}"
        for frame in traceback.extract_tb(error.__traceback__)
    ]


@contextlib.contextmanager
def ortmodule_environment(opset: int) -> Iterator[None]:
    """Make ORTModule fail loudly (no silent fallback to PyTorch) and export at `opset`."""
    wanted = {"ORTMODULE_FALLBACK_POLICY": "FALLBACK_DISABLE", "ORTMODULE_ONNX_OPSET_VERSION": str(opset)}
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ortmodule_debug_options(save_dir: Path):
    """ORTModule options that save the exported graph with its Python stacks (verbose export)."""
    from onnxruntime.training.ortmodule import DebugOptions, LogLevel

    save_dir.mkdir(parents=True, exist_ok=True)
    # Below WARNING, ORTModule exports with verbose=True: every node keeps its source stack.
    return DebugOptions(log_level=LogLevel.INFO, save_onnx=True, onnx_prefix="ortmodule", save_path=str(save_dir))


def _run_onnx_export(settings: ReproduceSettings, model: torch.nn.Module, batch: dict, run_dir: Path) -> Path:
    model.train()
    exported = export_onnx(model, batch, run_dir / EXPORTED_MODEL, settings.opset, settings.device,
                           settings.amp_dtype)
    load_session(exported)
    return exported


def _run_ortmodule(settings: ReproduceSettings, model: torch.nn.Module, batch: dict, run_dir: Path) -> Path:
    from onnxruntime.training.ortmodule import ORTModule

    with ortmodule_environment(settings.opset), output_to(run_dir / "ortmodule.log", fds=(1, 2)):
        wrapped = ORTModule(model.to(settings.device), debug_options=ortmodule_debug_options(run_dir))
        wrapped.train()
        inputs = {key: value.to(settings.device) for key, value in batch.items()}
        with autocast(settings.device, settings.amp_dtype):
            loss = wrapped(**inputs).loss
        loss.backward()
    return run_dir


@contextlib.contextmanager
def _ortmodule_defaults_to(debug_options) -> Iterator[None]:
    """optimum builds `ORTModule(self.model)` itself; make that call use our debug options for a while."""
    from onnxruntime.training.ortmodule import ORTModule

    original_init = ORTModule.__init__

    def init_with_debug_options(self, module, debug_options_given=None):
        original_init(self, module, debug_options_given or debug_options)

    ORTModule.__init__ = init_with_debug_options
    try:
        yield
    finally:
        ORTModule.__init__ = original_init


def _under(context: Callable[[], contextlib.AbstractContextManager], function):
    """`function` called inside a new `context()` on every call."""

    def wrapped(*args, **kwargs):
        with context():
            return function(*args, **kwargs)

    return wrapped


def _run_ort_trainer(settings: ReproduceSettings, model: torch.nn.Module, dataset, run_dir: Path) -> Path:
    from optimum.onnxruntime import ORTTrainer, ORTTrainingArguments

    with tempfile.TemporaryDirectory() as scratch:
        args = ORTTrainingArguments(
            output_dir=scratch,
            per_device_train_batch_size=settings.batch_size,
            max_steps=settings.train_steps,
            bf16=settings.amp_dtype == "bf16",
            fp16=settings.amp_dtype == "fp16",
            no_cuda=settings.device == "cpu",
            seed=settings.seed,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = ORTTrainer(model=model, args=args, train_dataset=dataset, feature="sequence-classification")
        if settings.amp_dtype == EMULATED_CUDA_FP16:
            # transformers' fp16 flag refuses to run on CPU: the emulated policy wraps the loss computation, where
            # the fp16 flag would have put CUDA's autocast (no gradient scaler: the step fails before it needs one)
            trainer.compute_loss = _under(lambda: autocast(settings.device, settings.amp_dtype), trainer.compute_loss)
        with (
            ortmodule_environment(settings.opset),
            _ortmodule_defaults_to(ortmodule_debug_options(run_dir)),
            output_to(run_dir / "ortmodule.log", fds=(1, 2)),
        ):
            trainer.train()
    return run_dir


def keep_exported_model(run_dir: Path) -> Path | None:
    """Leave one `model.onnx` per run: the exporter's graph (ORTModule's later stages are dropped)."""
    target = run_dir / EXPORTED_MODEL
    saved = run_dir / ORTMODULE_EXPORT
    if saved.exists():
        saved.replace(target)
        stable_doc_strings(target)
    for stage in run_dir.glob("ortmodule_*.onnx"):
        stage.unlink()
    return target if target.exists() else None


def reproduce(settings: ReproduceSettings, run_dir: Path) -> dict[str, Any]:
    """Run one path, catch what it raises, and return the record notebook 01 writes as reproduce.json."""
    model = settings.build_model()
    dataset = settings.build_dataset()
    batch = settings.build_batch()
    started = time.perf_counter()
    caught: BaseException | None = None
    try:
        if settings.path == "onnx_export":
            _run_onnx_export(settings, model, batch, run_dir)
        elif settings.path == "ortmodule":
            _run_ortmodule(settings, model, batch, run_dir)
        else:
            _run_ort_trainer(settings, model, dataset, run_dir)
    except Exception as error:  # classified below from ONNX Runtime's verdict on its message
        caught = error
    seconds = time.perf_counter() - started
    return build_record(settings, run_dir, caught, seconds)


def build_record(
    settings: ReproduceSettings, run_dir: Path, caught: BaseException | None, seconds: float
) -> dict[str, Any]:
    """The reproduce.json record for what one run caught (or did not)."""
    exported = keep_exported_model(run_dir)
    record: dict[str, Any] = {
        "parameters": asdict(settings),
        "path": settings.path,
        "exported_model": None if exported is None else portable.path(str(exported)),
        "environment": environment.describe(settings.device),
        "timing": {"seconds": round(seconds, 3)},
    }
    if caught is None:
        record.update(status=status_of(OrtVerdict.ACCEPTED), ort_verdict=OrtVerdict.ACCEPTED, error=None, call_stack=[])
        return record
    message = portable.text(str(caught))
    judgement = judge_message(message)
    record["status"] = status_of(judgement.verdict)
    record["ort_verdict"] = judgement.verdict
    record["error"] = {
        "exception": f"{type(caught).__module__}.{type(caught).__name__}",
        "message": message,
        "ort_message": _ort_message(message),
        "type_binding": None if judgement.type_binding is None else judgement.type_binding.to_dict(),
    }
    record["call_stack"] = call_stack(caught)
    return record


def _ort_message(message: str) -> str:
    """The part of a message from ONNX Runtime's `[ONNXRuntimeError]` tag on, or the whole message."""
    index = message.find("[ONNXRuntimeError]")
    return message[index:].strip() if index >= 0 else message.strip()


def save_record(record: dict[str, Any], run_dir: Path) -> Path:
    """Write reproduce.json into the run folder, atomically."""
    from where223.pipeline.records import write_json

    return write_json(run_dir / "reproduce.json", record)


def read_record(settings: ReproduceSettings, run_dir: Path) -> dict[str, Any]:
    """The reproduce.json in `run_dir`, checked to be the record of the run `settings` describe."""
    from where223.pipeline.records import read_json

    record = read_json(run_dir / "reproduce.json")
    recorded = ReproduceSettings.from_parameters(record["parameters"])
    if recorded != settings:
        raise ValueError(f"{portable.path(str(run_dir))} holds the run of {recorded}, not of {settings}")
    return record


def check_outcome(record: dict[str, Any]) -> str:
    """Assert the outcome precisely and say it in one paragraph.

    'reproduced' must be the Where op's T bound to float and a reduced-precision type; 'not reproduced'
    is reported with the versions (a newer stack, for instance) and is not a failure; anything else fails.
    """
    packages = record["environment"]["packages"]
    stack = f"torch {packages['torch']}, transformers {packages['transformers']}"
    if record["status"] == NOT_REPRODUCED:
        return (
            f"NOT REPRODUCED: path {record['path']} ran without error on {stack}. "
            "The Where type-binding failure needs torch <= 2.1 and transformers 4.25.x (see notebook 05)."
        )
    binding = (record.get("error") or {}).get("type_binding")
    if record["status"] != REPRODUCED or binding is None:
        raise AssertionError(f"path {record['path']} failed with another error: {record['error']['message']}")
    assert binding["op_type"] == "Where" and binding["type_parameter"] == "T", binding
    first, second = binding["bound_types"]
    assert first != second and "tensor(float)" in (first, second), binding
    return (
        f"REPRODUCED on {stack}: ONNX Runtime refused node {binding['node']} because its type parameter "
        f"{binding['type_parameter']} was bound to {first} and {second}."
    )
