"""One architecture of the sweep: build a transformers model type small, export it as notebook 01 does, judge it.

The sweep's cell entry point (`python -m where223.sweep.cell`, any model of `spaces/model_types-4.25.1.txt`) runs
it in a fresh interpreter per cell with a time limit, so a hang or a crash costs one architecture, with the
stack's transformers release first on PYTHONPATH, which no running process can do. Under the matrix's recipe
(`cpu_bf16_autocast`) and exporter (`torchscript`) it runs every transformers cell's stages (`where223.study._cell`):

1. builds the model type's causal-LM head (else its base model) from `CONFIG_MAPPING[model_type]()` with
   random weights, shrunk generically by config attribute names (`_cell.build.shrink_config`): widths divided by
   `WIDTH_DIVISOR` (heads kept, so head sizes stay whole), layers and stage depths cut, vocabularies capped,
   images made small, with `OVERRIDES` where that breaks an architecture's own invariants; when the shrunk
   model cannot be built or run, only depths and vocabularies are cut (`SHRINK_LEVELS`);
2. feeds it what its forward accepts (`_cell.build.model_inputs`: token ids, pixel values, audio features or
   values, trajectories, decoder ids for encoder-decoders) and runs it once in fp32;
3. exports it on CPU under bf16 autocast in training mode at opset 17 with the Python stacks kept in the nodes'
   doc strings (`where223.gpt2.export`'s settings, for any module and inputs: `_cell.stages.export_module`);
4. asks ONNX Runtime (`where223.graph.ort.judge`), lints the graph, blames every type-binding conflict's node,
   and, its own stage, joins the eager dtypes with the graph (`where223.eager.divergence`).

Every stage that fails is recorded with its reason; the record is written only when the cell ends.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

from where223.study._cell.build import BATCH, DEVICE, build_and_feed
from where223.study._cell.stages import Timed, export_into, judge_into, lint_and_blame, positional
from where223.sweep.recipes import RECIPES, Recipe
from where223.sweep.stages import describe_error, time_stage

DIVERGENCE_LIMIT = 50


def run(
    model_type: str,
    release: str,
    onnx_path: Path,
    recipe: Recipe = RECIPES["cpu_bf16_autocast"],
    exporter: str = "torchscript",
    opset: int | str = 17,
    mode: str = "train",
) -> dict[str, Any]:
    """Run one architecture through every stage and return its record (failures are recorded, not raised)."""
    from where223.pipeline.environment import describe

    record: dict[str, Any] = {
        "model_type": model_type,
        "release": release,
        "settings": {
            "device": DEVICE,
            "amp_dtype": recipe.amp_dtype,
            "recipe": recipe.name,
            "exporter": exporter,
            "opset": opset,
            "training": mode == "train",
            "batch": BATCH,
        },  # fmt: skip
        "built": False,
        "fed": False,
        "exported": False,
        "judged": False,
        "timings_s": {},
    }

    timed = functools.partial(time_stage, record)

    import torch
    import transformers

    record["environment"] = describe(DEVICE)
    record["transformers_version"] = transformers.__version__
    if transformers.__version__ != release:
        raise RuntimeError(f"PYTHONPATH gives transformers {transformers.__version__}, not {release}")
    model, inputs = build_and_feed(record, timed, model_type)
    if model is None or inputs is None:
        return record
    record["built"] = record["fed"] = True
    model, inputs = recipe.prepare(torch, model, inputs)
    record["inputs"] = {name: {"shape": list(t.shape), "dtype": str(t.dtype)} for name, t in inputs.items()}
    module = positional(model, list(inputs))
    if not export_into(record, timed, module, inputs, onnx_path, recipe, exporter, opset, mode)[0]:
        return record
    judge_into(record, timed, onnx_path)
    _diagnose(record, timed, module, inputs, onnx_path, recipe)
    return record


def _diagnose(
    record: dict[str, Any],
    timed: Timed,
    module: Any,
    inputs: dict[str, Any],
    onnx_path: Path,
    recipe: Recipe,
) -> None:
    """Lint, blame and divergence: each recorded, or the reason it could not be computed."""
    from where223.eager.divergence import divergence_report

    lint_and_blame(record, timed, onnx_path)
    try:
        report = timed(
            "divergence",
            lambda: divergence_report(module, tuple(inputs.values()), onnx_path, DEVICE, recipe.amp_dtype),
        )
        divergence = report.to_dict()
        divergence["divergences"] = divergence["divergences"][:DIVERGENCE_LIMIT]
        record["divergence"] = divergence
    except Exception as exc:  # noqa: BLE001
        record["divergence"] = {"error": describe_error(exc, "divergence")}


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The sweep engine's entry (`runner: where223.study.architectures.run` in spaces/architectures.yaml): model
    type `key["model"]` in the stack whose facts are `stack`. The export's warnings are recorded, not printed."""
    warnings.filterwarnings("ignore")
    return run(key["model"], stack["transformers"], onnx_path, RECIPES[key["recipe"]], key["exporter"],
               key["opset"], key["mode"])
