"""What a reproduction run is called: its parameters, their defaults, and the folders they name.

Imports no torch, so modules that only read records (the report) find and name runs exactly as the notebooks
do. A run folder spells out the preset, device, precision and path (`tiny-cpu-bf16-onnx_export`), then every
other parameter that differs from its default (`tiny-cpu-bf16-onnx_export-opset14-seq_len8`): a variation
never lands in the default run's folder, and the default runs keep their names.
"""

from __future__ import annotations

from collections.abc import Mapping

from where223.pipeline.paths import join_slugs, slug

EXPORTED_MODEL = "model.onnx"  # the unfixed export a reproduction run leaves in its folder

PATHS: tuple[str, ...] = ("ort_trainer", "ortmodule", "onnx_export")
# Always in the name, in this order.
NAMED_BY: tuple[str, ...] = ("preset", "device", "amp_dtype", "path")
# Notebook 01's defaults (a test keeps them equal); `auto` is resolved before a run is named.
DEFAULTS: dict[str, str | int] = {
    "path": "onnx_export",
    "preset": "tiny",
    "device": "auto",
    "amp_dtype": "auto",
    "batch_size": 2,
    "seq_len": 16,
    "opset": 17,
    "seed": 0,
    "dataset": "synthetic",
    "train_steps": 1,
}
# The parameters that may say `auto` until resolved (a named run never does), and what `auto` resolves to.
AUTO: tuple[str, ...] = ("device", "amp_dtype")
AUTO_RESOLVES_TO: dict[str, tuple[str, ...]] = {"device": ("cpu", "cuda"), "amp_dtype": ("bf16", "fp16")}
# Where a notebook's parameter name differs from the record's.
NOTEBOOK_NAMES: dict[str, str] = {"preset": "model_preset"}


def varied(parameters: Mapping[str, object]) -> dict[str, object]:
    """The parameters outside NAMED_BY whose value differs from the default, sorted by name."""
    unknown = sorted(set(parameters) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown reproduction parameter(s) {unknown}; known: {sorted(DEFAULTS)}")
    return {
        name: value
        for name, value in sorted(parameters.items())
        if name not in NAMED_BY and value != DEFAULTS[name]
    }


def run_name(parameters: Mapping[str, object]) -> str:
    """The run folder of resolved parameters: NAMED_BY's values, then `<name><value>` per varied parameter."""
    missing = [name for name in NAMED_BY if name not in parameters]
    if missing:
        raise ValueError(f"a run name needs {list(NAMED_BY)}; missing: {missing}")
    unresolved = [name for name in AUTO if parameters[name] == "auto"]
    if unresolved:
        raise ValueError(f"resolve {unresolved} before naming a run: 'auto' names no run")
    named = [parameters[name] for name in NAMED_BY]
    return join_slugs(*named, *(f"{name}{value}" for name, value in varied(parameters).items()))


def fix_name(variant: str) -> str:
    """The folder, inside its source run, of notebook 03's fix with attention variant `variant`."""
    return f"fix-{slug(variant)}"


def produced_by(given: Mapping[str, object], parameters: Mapping[str, object]) -> bool:
    """Whether a notebook run with parameters `given` (the rest at their defaults) recorded `parameters`.

    `given` uses the notebooks' names (`model_preset`) and may say `auto`, which matches whatever it can resolve to
    (never fp32 or the emulated CUDA policy, which only a run that names them makes);
    names that are not reproduction parameters (`variant`, `hops`, ...) are ignored.
    """
    notebook_to_record = {notebook: record for record, notebook in NOTEBOOK_NAMES.items()}
    wanted = dict(DEFAULTS)
    for name, value in given.items():
        record_name = notebook_to_record.get(name, name)
        if record_name in DEFAULTS:
            wanted[record_name] = value
    return all(
        (name in AUTO and value == "auto" and parameters.get(name) in AUTO_RESOLVES_TO[name])
        or parameters.get(name) == value
        for name, value in wanted.items()
    )
