"""One cell of the class study: a transformers model type built small, put in reduced precision by a recipe,
exported by an exporter in eval mode, judged by ONNX Runtime, and explained.

The sweep's cell entry point (`python -m where223.sweep.cell`) runs it in the stack's own interpreter: today's
(`today` in `spaces/stacks.yaml`: torch 2.14.1, transformers 5, onnx 1.23, onnxruntime 1.32) for
`spaces/classes-today.yaml`, the project's 2022 stack for `spaces/classes-2022.yaml`. Building and feeding are
the architecture sweep's (`where223.study.architectures.run`); then:

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
   |reference|, judged against `TOLERANCE_SPACINGS` of the reduced type's spacing at 1 (set before any run); a
   comparison whose eager outputs are all zero or constant could not have failed, and is `not judged`, never a pass
   (`where223.study.judging`).

Every stage that fails is recorded with its reason.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from where223.graph.ort import refused_node
from where223.outcomes import Outcome
from where223.study.architectures.run import (
    BATCH,
    DEVICE,
    blame_nodes,
    build_and_feed,
    export_module,
    flat_tensors,
    judge_into,
    lint_findings,
    positional,
)
from where223.study.judging import numeric_verdict, reference_facts, undistinguishing
from where223.sweep.exporters import NotApplicable
from where223.sweep.recipes import RECIPES, Recipe
from where223.sweep.stages import describe_error, time_stage, warning_lines
from where223.verdicts import NOT_MEASURED

# The reduced type's significant bits (implicit bit included) and the tolerance, in units of its spacing at 1
# (2**-(bits-1)), on max |eager - graph| / max |eager|: eight spacings, chosen on 2026-12-01 before any cell of
# this study ran, for models two layers deep whose every op rounds its output once.
SIGNIFICANT_BITS: dict[str, int] = {"bf16": 8, "fp16": 11, "fp32": 24}
TOLERANCE_SPACINGS = 8
EVIDENCE_LIMIT = 8  # kernels and emitting calls kept per blamed node
MIXED_LIMIT = 40  # lines with mixed-dtype kernels kept per record
RUN_OUTPUTS_LIMIT = 8


def tolerance(reduced: str) -> float:
    """The relative tolerance for a recipe's reduced type ('bf16', 'fp16'; 'fp32' for none)."""
    return TOLERANCE_SPACINGS * 2.0 ** -(SIGNIFICANT_BITS[reduced] - 1)


def reduced_type(recipe: Recipe) -> str:
    """The reduced type a recipe computes in."""
    return recipe.autocast or recipe.cast or "fp32"


def _numpy(torch: Any, tensor: Any) -> Any:
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def compare_outputs(
    graph_outputs: list[Any], reference: list[Any], reduced: str, execution: str, limit: float | None = None
) -> dict[str, Any]:
    """max |graph - eager| / max |eager| over every floating output, judged against the type's tolerance (or
    `limit`, fixed by the caller before the run)."""
    import numpy as np

    if len(graph_outputs) != len(reference):
        return {"status": NOT_MEASURED, "reason": f"the graph has {len(graph_outputs)} outputs, eager "
                f"{len(reference)}: not joined"}  # fmt: skip
    rows = []
    for index, (measured, expected) in enumerate(zip(graph_outputs, reference, strict=True)):
        expected = np.asarray(expected)
        if expected.dtype.kind != "f" or expected.size == 0:
            continue
        measured = np.asarray(measured, np.float64)
        if measured.shape != expected.shape:
            return {"status": NOT_MEASURED, "reason": f"output {index}: shape {list(measured.shape)} in the "
                    f"graph, {list(expected.shape)} eagerly"}  # fmt: skip
        expected = expected.astype(np.float64)
        finite = np.isfinite(expected)
        if not finite.any():
            continue
        difference = float(np.abs(np.where(finite, measured - expected, 0.0)).max())
        nonfinite_graph = int((~np.isfinite(measured) & finite).sum())
        facts = reference_facts(expected)
        magnitude = facts["max_abs_reference"]
        rows.append({"output": index, "max_abs_diff": difference, **facts,
                     "relative": difference / magnitude if magnitude else difference,
                     "nonfinite_in_graph": nonfinite_graph})  # fmt: skip
    if not rows:
        return {"status": NOT_MEASURED, "reason": "no floating output with finite values"}
    worst = max(rows, key=lambda row: (row["nonfinite_in_graph"] > 0, row["relative"]))
    limit = tolerance(reduced) if limit is None else limit
    within = worst["relative"] <= limit and not any(row["nonfinite_in_graph"] for row in rows)
    # the outputs kept: the first few, and the worst and the first that distinguishes wherever they are (the
    # verdict rests on them, and the rule reads whether any output distinguishes from the record)
    kept = rows[:RUN_OUTPUTS_LIMIT]
    for row in (worst, next((row for row in rows if not undistinguishing([row])), None)):
        if row is not None and row not in kept:
            kept.append(row)
    checked = {"status": "measured", "execution": execution, "reduced": reduced, "tolerance": limit,
               "relative": worst["relative"], "within_tolerance": within, "outputs": kept}
    return judge_numerics(checked)


def judge_numerics(checked: dict[str, Any]) -> dict[str, Any]:
    """`checked` (a measured comparison, its control in it where it has one) with the verdict of
    `where223.study.judging` and why it is not judged ("" when it is), in place."""
    checked["verdict"], checked["not_judged"] = numeric_verdict(checked)
    return checked


def run_graph(onnx_path: Path, feeds: dict[str, Any], verdict: str) -> tuple[list[Any], str]:
    """The graph's outputs on `feeds`: as it is when accepted, emulated when a kernel is missing here."""
    import onnx

    from where223.graph.emulate import emulate_reduced_precision, emulated_outputs, run_float_boundary

    model = onnx.load(str(onnx_path))
    names = [value.name for value in model.graph.input]
    fed = {name: feeds[name] for name in names if name in feeds}
    if verdict == Outcome.ACCEPTED:
        results = run_float_boundary(model, fed)
        return list(results.values()), "ONNX Runtime CPU"
    emulation = emulate_reduced_precision(model)
    results = emulated_outputs(emulation, fed)
    return list(results.values()), emulation.label


def _evidence(record: dict[str, Any], table: Any, emitters: Any, onnx_path: Path) -> None:
    """Each blamed node's eager kernels (by its source line) and the exporter function that emitted it."""
    blamed = record.get("blame") or []
    if not blamed:
        return
    nodes: dict[str, Any] = {}
    if emitters.exporter == "dynamo":
        import onnx

        from where223.graph.loading import subgraphs

        model = onnx.load(str(onnx_path), load_external_data=False)
        nodes = {node.name: node for _, graph in subgraphs(model.graph) for node in graph.node}
    from where223.eager.emitters import emitter_of

    for entry in blamed:
        source = entry.get("source")
        entry["eager_kernels"] = table.at(source)[:EVIDENCE_LIMIT] if source else []
        if emitters.exporter == "dynamo":
            node = nodes.get(entry.get("node", ""))
            entry["emitter"] = emitter_of(node, emitters) if node is not None else None
        else:
            calls = emitters.at(source, entry.get("op_type"))
            entry["emitter"] = calls[0] if calls else None
            entry["emitter_calls"] = calls[:EVIDENCE_LIMIT]


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


def explain_module(
    record: dict[str, Any],
    timed: Callable[[str, Callable[[], Any]], Any],
    module: Any,
    inputs: dict[str, Any],
    onnx_path: Path,
    recipe: Recipe,
    exporter: str,
    opset: int | str = "auto",
    mode: str = "eval",
) -> dict[str, Any]:
    """Every stage after building, for any module called as `module(*inputs.values())` that returns its outputs:
    the recipe, the eager run with its kernels, the export with its emitters, the judgement, lint, blame with
    evidence, and the graph's outputs against eager. Fills `record` (failures recorded, not raised)."""
    module, inputs, reference, table = eager_stage(record, timed, module, inputs, recipe, mode)
    if export_stage(record, timed, module, inputs, onnx_path, recipe, exporter, opset, mode, table):
        numerics_stage(record, timed, onnx_path, inputs, reference, recipe)
    return record


def eager_stage(
    record: dict[str, Any],
    timed: Callable[[str, Callable[[], Any]], Any],
    module: Any,
    inputs: dict[str, Any],
    recipe: Recipe,
    mode: str = "eval",
) -> tuple[Any, dict[str, Any], list[Any] | None, Any]:
    """The recipe applied, and the eager run under it with every kernel's dtypes recorded: (module, inputs as the
    recipe made them, the reference outputs as numpy arrays or None when eager failed, the kernel table)."""
    import torch

    from where223.eager.kernels import KernelTable, record_kernels

    record["built"] = record["fed"] = True
    module, inputs = recipe.prepare(torch, module, inputs)
    record["inputs"] = {name: {"shape": list(t.shape), "dtype": str(t.dtype)} for name, t in inputs.items()}
    module.train(mode == "train")
    reference: list[Any] | None = None
    table = KernelTable()
    try:
        outputs, table = timed(
            "eager", lambda: record_kernels(lambda: module(*inputs.values()), recipe.context(torch))
        )
        reference = [_numpy(torch, t) for t in flat_tensors(outputs)]
        mixed = table.mixed_lines()
        record["eager"] = {"kernel_calls": table.calls, "lines": len(table.lines),
                           "mixed_lines": dict(list(mixed.items())[:MIXED_LIMIT]), "mixed_line_count": len(mixed)}
    except Exception as exc:  # noqa: BLE001 - eager failing under the recipe is a result; the export still runs
        record["eager"] = {"error": describe_error(exc, "eager")}
    return module, inputs, reference, table


def export_stage(
    record: dict[str, Any],
    timed: Callable[[str, Callable[[], Any]], Any],
    module: Any,
    inputs: dict[str, Any],
    onnx_path: Path,
    recipe: Recipe,
    exporter: str,
    opset: int | str,
    mode: str,
    table: Any,
) -> bool:
    """The export with its emitters recorded (by the exporter's base name: `dynamo+fixes` records dynamo's), the
    judgement, lint, and blame with evidence; whether the model was exported."""
    from where223.eager.emitters import recording

    try:
        with warnings.catch_warnings(record=True) as caught, recording(exporter.split("+")[0]) as emitters:
            warnings.simplefilter("always")
            try:
                record["export"] = timed(
                    "export", lambda: export_module(module, inputs, onnx_path, recipe, exporter, opset, mode)
                )
            finally:
                record["export_warnings"] = warning_lines(caught)
        record["emitters"] = emitters.to_dict()
    except NotApplicable as exc:
        record["outcome"] = Outcome.NOT_APPLICABLE
        record["reason"] = str(exc)
        return False
    except Exception as exc:  # noqa: BLE001 - a failed export is the measurement
        record["outcome"] = Outcome.NOT_EXPORTED
        record["error"] = describe_error(exc, "export")
        return False
    record["exported"] = True
    record["onnx_bytes"] = onnx_path.stat().st_size
    _opset_of(record, onnx_path)
    judge_into(record, timed, onnx_path)
    try:
        record["lint"] = timed("lint", lambda: lint_findings(onnx_path))
    except Exception as exc:  # noqa: BLE001 - a tool failing on a foreign model is a finding too
        record["lint"] = {"error": describe_error(exc, "lint")}
    try:
        findings = record["lint"].get("findings", [])
        named = refused_node(record["ort"]["message"])
        record["blame"] = timed("blame", lambda: blame_nodes(onnx_path, findings, named))
        _evidence(record, table, emitters, onnx_path)
    except Exception as exc:  # noqa: BLE001
        record["blame_error"] = describe_error(exc, "blame")
    return True


def feeds_of(inputs: dict[str, Any]) -> dict[str, Any]:
    """The recipe's inputs as numpy arrays, by name: what the graph is fed."""
    import torch

    return {name: _numpy(torch, t) for name, t in inputs.items()}


def numerics_stage(
    record: dict[str, Any],
    timed: Callable[[str, Callable[[], Any]], Any],
    onnx_path: Path,
    inputs: dict[str, Any],
    reference: list[Any] | None,
    recipe: Recipe,
    stage: str = "numerics",
) -> None:
    """An accepted graph's outputs (a `missing_kernel` one's emulated) against eager's, into `record[stage]`."""
    if record.get("outcome") not in (Outcome.ACCEPTED, Outcome.MISSING_KERNEL):
        return
    if reference is None:
        record[stage] = {"status": NOT_MEASURED, "reason": "eager PyTorch did not run the model under the recipe"}
        return
    try:
        graph_outputs, execution = timed(stage, lambda: run_graph(onnx_path, feeds_of(inputs), record["outcome"]))
        record[stage] = compare_outputs(graph_outputs, reference, reduced_type(recipe), execution)
    except Exception as exc:  # noqa: BLE001 - a graph that cannot be run here is not measured, with why
        record[stage] = {"status": NOT_MEASURED, "reason": f"{type(exc).__name__}: {str(exc)[:400]}"}


def _opset_of(record: dict[str, Any], onnx_path: Path) -> None:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    record["onnx_opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    record["ir_version"] = model.ir_version


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The sweep engine's entry (`runner: where223.study.classes.run` in spaces/classes-*.yaml): model type
    `key["model"]` in the stack whose facts are `stack`. The export's warnings are recorded, not printed."""
    warnings.filterwarnings("ignore")
    return run(key["model"], stack["transformers"], onnx_path, RECIPES[key["recipe"]], key["exporter"],
               key["opset"], key["mode"])
