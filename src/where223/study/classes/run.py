"""One cell of the class study: a transformers model type built small, put in reduced precision by a recipe,
exported by an exporter in eval mode, judged by ONNX Runtime, and explained.

The sweep's cell entry point (`python -m where223.sweep.cell`) runs it in the stack's own interpreter: today's
(`today` in `spaces/stacks.yaml`: torch 2.14.1, transformers 5, onnx 1.23, onnxruntime 1.32) for
`spaces/classes-today.yaml`, the project's 2022 stack for `spaces/classes-2022.yaml`. Its stages are every
transformers cell's (`where223.study._cell`): built and fed as the architecture sweep builds them (`_cell.build`),
then (`_cell.stages.explain_module`):

1. the recipe prepares model and inputs (`where223.sweep.recipes`) and the model runs once eagerly under it,
   with a dispatch mode below autocast recording every kernel's input and output dtypes by source line
   (`where223.eager.kernels`): the reference outputs and the eager side of each explanation;
2. the export runs with the exporter's emitting functions recorded (`where223.eager.emitters`: the TorchScript
   exporter's symbolic calls, the dynamo exporter's torchlib dispatch);
3. ONNX Runtime's CPU provider judges the file; lint lists every violation with the schema constraint it breaks;
   blame gives each refused or conflicting node's source line; each blamed node gets the eager kernels of its
   line and the function that emitted it;
4. an accepted model runs once in ONNX Runtime against the eager outputs, a `missing_kernel` one with its
   reduced-precision kernels emulated (`where223.graph.emulate`); the difference is max |difference| over max
   |reference|, judged against `TOLERANCE_SPACINGS` of the reduced type's spacing at 1 (set before any run,
   `_cell.numerics`); a comparison whose eager outputs are all zero or constant could not have failed, and is
   `not judged`, never a pass (`where223.study.judging`).

Every stage that fails is recorded with its reason.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

from where223.study._cell.build import BATCH, DEVICE, build_and_feed
from where223.study._cell.numerics import reduced_type
from where223.study._cell.stages import explain_module, positional
from where223.sweep.recipes import RECIPES, Recipe
from where223.sweep.stages import time_stage


def run(
    model_type: str,
    release: str,
    onnx_path: Path,
    recipe: Recipe,
    exporter: str,
    opset: int | str = "auto",
    mode: str = "eval",
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one model type (its config's attributes `overrides` set last) through every stage and return its record
    (failures are recorded, not raised)."""
    from where223.pipeline.environment import describe

    record: dict[str, Any] = {
        "model_type": model_type,
        "release": release,
        "settings": {"device": DEVICE, "recipe": recipe.name, "reduced": reduced_type(recipe), "exporter": exporter,
                     "opset": opset, "training": mode == "train", "batch": BATCH},  # fmt: skip
        "built": False,
        "fed": False,
        "exported": False,
        "judged": False,
        "timings_s": {},
    }
    timed = functools.partial(time_stage, record)

    import transformers

    record["environment"] = describe(DEVICE)
    record["transformers_version"] = transformers.__version__
    if transformers.__version__ != release:
        raise RuntimeError(f"PYTHONPATH gives transformers {transformers.__version__}, not {release}")
    model, inputs = build_and_feed(record, timed, model_type, mode, overrides)
    if model is None or inputs is None:
        return record
    return explain_module(record, timed, positional(model, list(inputs)), inputs, onnx_path, recipe, exporter, opset,
                          mode)


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The sweep engine's entry (`runner: where223.study.classes.run` in spaces/classes-*.yaml): model type
    `key["model"]` in the stack whose facts are `stack`. The export's warnings are recorded, not printed."""
    warnings.filterwarnings("ignore")
    return run(key["model"], stack["transformers"], onnx_path, RECIPES[key["recipe"]], key["exporter"],
               key["opset"], key["mode"])
