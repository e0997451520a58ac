"""A graph's outputs against eager PyTorch's, as every transformers cell judges them: the graph run once in ONNX
Runtime (an accepted one on its CPU provider's kernels, a `missing_kernel` one with its reduced-precision kernels
emulated, `where223.graph.emulate`) on the inputs eager ran on; the difference is max |difference| over max
|reference|, judged against `TOLERANCE_SPACINGS` of the reduced type's spacing at 1 (set before any run); a
comparison whose eager outputs are all zero or constant could not have failed, and is `not judged`, never a pass
(`where223.study.judging`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from where223.outcomes import Outcome
from where223.study.judging import numeric_verdict, reference_facts, undistinguishing
from where223.sweep.recipes import Recipe
from where223.verdicts import NOT_MEASURED

# The reduced type's significant bits (implicit bit included) and the tolerance, in units of its spacing at 1
# (2**-(bits-1)), on max |eager - graph| / max |eager|: eight spacings, chosen on 2026-12-01 before any cell of
# the class study ran, for models two layers deep whose every op rounds its output once.
SIGNIFICANT_BITS: dict[str, int] = {"bf16": 8, "fp16": 11, "fp32": 24}
TOLERANCE_SPACINGS = 8
RUN_OUTPUTS_LIMIT = 8


def tolerance(reduced: str) -> float:
    """The relative tolerance for a recipe's reduced type ('bf16', 'fp16'; 'fp32' for none)."""
    return TOLERANCE_SPACINGS * 2.0 ** -(SIGNIFICANT_BITS[reduced] - 1)


def reduced_type(recipe: Recipe) -> str:
    """The reduced type a recipe computes in."""
    return recipe.autocast or recipe.cast or "fp32"


def as_numpy(torch: Any, tensor: Any) -> Any:
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


def feeds_of(inputs: dict[str, Any]) -> dict[str, Any]:
    """The recipe's inputs as numpy arrays, by name: what the graph is fed."""
    import torch

    return {name: as_numpy(torch, t) for name, t in inputs.items()}


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
