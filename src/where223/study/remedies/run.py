"""One cell of the remedies study: a model type of the class sweep built, put in reduced precision and exported as
its class cell was (the plain export, judged and explained by every transformers cell's stages,
`where223.study._cell`), then remedied two ways:

1. **repair**: `where223.graph.repair` on the plain export, following the eager kernels the plain export's record
   holds for each blamed node (what `where223 repair --eager record.json` does); the result judged by ONNX
   Runtime's CPU provider and linted;
2. **export-time fix**: the same module exported again inside `where223.fixes` (the TorchScript exporter's
   symbolics overridden, the dynamo exporter's program passed through the fixes), judged, linted and blamed.

Each remedy ONNX Runtime accepts runs against eager (`missing_kernel` ones emulated, as the class study runs them)
with the class study's tolerance, fixed before any run; the repaired and the fixed graphs are compared with each
other (`PAIR_TOLERANCE_FACTOR` times that tolerance, fixed before any run: each is within one tolerance of eager);
and each numeric check runs once more on a control built to fail it: the remedy's graph fed inputs rolled by one
position along their last axis, against eager's outputs for the inputs as they were. A check whose eager outputs
are all zero or constant, or whose control did not fail, could not have failed: it is `not judged`, never a pass
(`where223.study.judging`). When eager's outputs are all zero or constant, the model is built again from its
config with other random weights and inputs (`SEEDS`, at most three in all, each tried recorded in `seeds`).
"""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path
from typing import Any

from where223.outcomes import TYPES_ACCEPTED
from where223.study import judging
from where223.study._cell.build import DEVICE, build_and_feed
from where223.study._cell.numerics import compare_outputs, feeds_of, judge_numerics, reduced_type, run_graph, tolerance
from where223.study._cell.stages import eager_stage, export_stage, judge_into, lint_findings, positional
from where223.sweep import exporters
from where223.sweep.recipes import RECIPES, Recipe
from where223.sweep.stages import describe_error, time_stage
from where223.verdicts import NOT_MEASURED

PAIR_TOLERANCE_FACTOR = 2  # repaired against fixed: each within one tolerance of eager, so at most two apart
# the seeds of a cell's random weights and inputs: 0 (the class study's), then the others only while eager's outputs
# are all zero or constant (a check against them could not fail)
SEEDS = (0, 1, 2)
FIXED = "+fixes"  # the exporters' names with the export-time fixes


def _torchscript_fixed(torch: Any, module: Any, args: tuple[Any, ...], path: Path, **kwargs: Any) -> dict[str, Any]:
    """The sweep's TorchScript export inside `where223.fixes.fixed`."""
    from where223.fixes import fixed

    with fixed("torchscript", exporters.resolve_opset(torch, kwargs["opset"])) as names:
        facts = exporters.torchscript(torch, module, args, path, **kwargs)
    return {**facts, "fixes": names}


def _dynamo_fixed(torch: Any, module: Any, args: tuple[Any, ...], path: Path, *, opset: int | str, mode: str,
                  input_names: list[str], doc_strings: bool = False) -> dict[str, Any]:  # fmt: skip
    """The dynamo export of the program `where223.fixes.fix_program` has passed over."""
    from where223.fixes import export_dynamo_fixed

    module.train(mode == "train")
    return export_dynamo_fixed(torch, module, args, path, opset=opset, input_names=input_names)


for _name, _exporter in (("torchscript", _torchscript_fixed), ("dynamo", _dynamo_fixed)):
    if _name + FIXED not in exporters.EXPORTERS:
        exporters.register(_name + FIXED, _exporter)


def rolled(feeds: dict[str, Any]) -> dict[str, Any]:
    """Every input rolled by one position along its last axis: the numeric checks' control."""
    import numpy as np

    return {name: np.roll(value, 1, axis=-1) if np.ndim(value) else value for name, value in feeds.items()}


def check_numerics(path: Path, outcome: str, inputs: dict[str, Any], reference: list[Any] | None,
                   recipe: Recipe) -> dict[str, Any]:  # fmt: skip
    """A remedy's outputs against eager's, and its control (rolled inputs) that must fail the same check."""
    if outcome not in TYPES_ACCEPTED:
        return {"status": NOT_MEASURED, "reason": f"ONNX Runtime's verdict is {outcome}: nothing to run"}
    if reference is None:
        return {"status": NOT_MEASURED, "reason": "eager PyTorch did not run the model under the recipe"}
    reduced = reduced_type(recipe)
    try:
        outputs, execution = run_graph(path, feeds_of(inputs), outcome)
        checked = compare_outputs(outputs, reference, reduced, execution)
        control_outputs, _ = run_graph(path, rolled(feeds_of(inputs)), outcome)
        control = compare_outputs(control_outputs, reference, reduced, execution)
    except Exception as exc:  # noqa: BLE001 - a graph that cannot be run here is not measured, with why
        return {"status": NOT_MEASURED, "reason": f"{type(exc).__name__}: {str(exc)[:400]}"}
    relative = control.get("relative")
    finite = relative is None or math.isfinite(relative)  # a graph's NaN on the rolled inputs: failed, no number
    checked["control"] = {"built": "inputs rolled by one along their last axis",
                          "relative": relative if finite else None, "nonfinite": not finite,
                          "fails_as_built": control.get("within_tolerance") is False}  # fmt: skip
    checked["outputs_for_pair"] = outputs  # dropped before the record is written
    return judge_numerics(checked)


def reference_verdict(reference: list[Any] | None) -> str:
    """Why eager's outputs cannot tell one graph from another (`judging.undistinguishing` over the floating outputs
    with a finite value, as `compare_outputs` compares them), "" when they can or eager did not run."""
    import numpy as np

    if reference is None:
        return ""
    rows = [judging.reference_facts(value) for value in map(np.asarray, reference)
            if value.dtype.kind == "f" and value.size and np.isfinite(value).any()]  # fmt: skip
    return judging.undistinguishing(rows)


def reseeded(model: Any, inputs: dict[str, Any], seed: int) -> tuple[Any, dict[str, Any]]:
    """The model built again from its config with torch seeded `seed` (other random weights), in the same mode, and
    its inputs drawn again from a generator seeded `seed`: floating ones normal with each input's mean and standard
    deviation, integer ones uniform over each input's range (token ids stay in theirs, a mask of ones stays ones),
    boolean ones as they were."""
    import torch

    torch.manual_seed(seed)
    fresh = type(model)(model.config)
    fresh.train(model.training)
    generator = torch.Generator().manual_seed(seed)
    drawn = {}
    for name, value in inputs.items():
        if value.is_floating_point():
            normal = torch.randn(value.shape, generator=generator)
            spread = float(value.float().std()) if value.numel() > 1 else 1.0
            drawn[name] = (normal * spread + float(value.float().mean())).to(value.dtype)
        elif value.dtype == torch.bool or not value.numel():
            drawn[name] = value
        else:
            drawn[name] = torch.randint(int(value.min()), int(value.max()) + 1, value.shape, generator=generator,
                                        dtype=value.dtype)  # fmt: skip
    return fresh, drawn


def seeded_eager_stage(record: dict[str, Any], timed: Any, model: Any, inputs: dict[str, Any], recipe: Recipe,
                       mode: str) -> tuple[Any, dict[str, Any], list[Any] | None, Any]:  # fmt: skip
    """The class study's eager stage on the model as built (seed 0), then, while eager's outputs are all zero or
    constant, on the model and inputs drawn again with the next of `SEEDS`; each seed tried and what its outputs
    were recorded in `record["seeds"]`, the cell going on with the last."""
    tried: list[dict[str, Any]] = []
    for seed in SEEDS:
        if seed:
            model, inputs = reseeded(model, inputs, seed)
        stage = eager_stage(record, timed, positional(model, list(inputs)), inputs, recipe, mode)
        why = reference_verdict(stage[2])
        tried.append({"seed": seed, "reference": why or ("distinguishes" if stage[2] is not None else
                                                         "eager did not run")})  # fmt: skip
        if not why:
            break
    record["seeds"] = tried
    return stage


def repair_stage(record: dict[str, Any], plain: dict[str, Any], source: Path, target: Path) -> None:
    """`where223 repair` of the plain export following its eager kernels, judged and linted, into
    `record["repair"]`."""
    from where223.graph.repair import RepairError, repair, save_model

    stage: dict[str, Any] = {"eager_consulted": True, "timings_s": {}}
    record["repair"] = stage
    timed = functools.partial(time_stage, stage)
    try:
        repaired, changes = timed("repair", lambda: repair(source, eager=plain))
    except RepairError as error:
        stage.update(status="refused", reason=str(error)[:1000])
        return
    except Exception as exc:  # noqa: BLE001 - the tool failing on a foreign model is a finding
        stage.update(status="failed", error=describe_error(exc, "repair"))
        return
    if not changes:
        stage.update(status="nothing_to_repair", changes=[])
        return
    save_model(repaired, target)
    stage.update(status="repaired", changes=[str(change) for change in changes][:40], change_count=len(changes))
    judge_into(stage, timed, target)
    try:
        stage["lint"] = timed("lint", lambda: lint_findings(target))
    except Exception as exc:  # noqa: BLE001
        stage["lint"] = {"error": describe_error(exc, "lint")}


def _pair(repaired: dict[str, Any], fixed: dict[str, Any], reduced: str) -> dict[str, Any]:
    """The repaired graph's outputs against the fixed graph's."""
    left, right = repaired.get("outputs_for_pair"), fixed.get("outputs_for_pair")
    if left is None or right is None:
        return {"status": NOT_MEASURED, "reason": "the repaired and the fixed graph did not both run"}
    import numpy as np

    limit = PAIR_TOLERANCE_FACTOR * tolerance(reduced)
    return compare_outputs(left, [np.asarray(r, np.float64) for r in right], reduced, "both graphs", limit=limit)


def run(model_type: str, release: str, onnx_path: Path, recipe: Recipe, exporter: str, opset: int | str = "auto",
        mode: str = "eval") -> dict[str, Any]:  # fmt: skip
    """Run one model type's plain export, repair and export-time fix, and return its record (failures recorded)."""
    from where223.pipeline.environment import describe

    record: dict[str, Any] = {"model_type": model_type, "release": release,
                              "settings": {"device": DEVICE, "recipe": recipe.name, "reduced": reduced_type(recipe),
                                           "exporter": exporter, "opset": opset, "training": mode == "train"},
                              "timings_s": {}}  # fmt: skip
    timed = functools.partial(time_stage, record)

    import transformers

    record["environment"] = describe(DEVICE)
    if transformers.__version__ != release:
        raise RuntimeError(f"PYTHONPATH gives transformers {transformers.__version__}, not {release}")
    model, inputs = build_and_feed(record, timed, model_type, mode, None)
    if model is None or inputs is None:
        return record
    module, inputs, reference, table = seeded_eager_stage(record, timed, model, inputs, recipe, mode)
    plain: dict[str, Any] = {"timings_s": {}}
    record["plain"] = plain
    if not export_stage(plain, functools.partial(time_stage, plain), module, inputs, onnx_path, recipe, exporter,
                        opset, mode, table):  # fmt: skip
        record["outcome"] = plain.get("outcome")
        return record
    record["outcome"] = plain["outcome"]
    plain_numerics = check_numerics(onnx_path, plain["outcome"], inputs, reference, recipe)
    plain["numerics"] = plain_numerics
    repaired_path = onnx_path.with_name("repaired.onnx")
    repair_stage(record, plain, onnx_path, repaired_path)
    repaired = record["repair"]
    if repaired.get("status") == "repaired":
        repaired["numerics"] = check_numerics(repaired_path, repaired["outcome"], inputs, reference, recipe)
    fixed: dict[str, Any] = {"timings_s": {}}
    record["fixed"] = fixed
    if export_stage(fixed, functools.partial(time_stage, fixed), module, inputs, onnx_path.with_name("fixed.onnx"),
                    recipe, exporter + FIXED, opset, mode, table):  # fmt: skip
        fixed["numerics"] = check_numerics(onnx_path.with_name("fixed.onnx"), fixed["outcome"], inputs, reference,
                                           recipe)  # fmt: skip
    mine = repaired.get("numerics") if repaired.get("status") == "repaired" else plain_numerics
    record["pair"] = _pair(mine or {}, fixed.get("numerics") or {}, reduced_type(recipe))
    for part in (plain, repaired, fixed):
        if isinstance(part.get("numerics"), dict):
            part["numerics"].pop("outputs_for_pair", None)
    return record


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The sweep engine's entry (`runner: where223.study.remedies.run` in spaces/remedies-*.yaml)."""
    warnings.filterwarnings("ignore")
    return run(key["model"], stack["transformers"], onnx_path, RECIPES[key["recipe"]], key["exporter"],
               key["opset"], key["mode"])


# The seed's own route on the historic stack: ORTModule (its TorchScript export) training ELECTRA for sequence
# classification one step under CPU bf16 autocast, as notebook 01's `ortmodule` path trains GPT-2.
ORTMODULE_MODEL = "electra"
ORTMODULE_OPSET = 17


def ortmodule_route(run_dir: Path, fix: bool, seed: int = 0) -> dict[str, Any]:
    """One training forward and backward of a small ElectraForSequenceClassification (random weights, the
    architecture sweep's shrinking) wrapped in ORTModule under CPU bf16 autocast, fallback to PyTorch disabled,
    inside `where223.fixes.fixed` when `fix`; what ONNX Runtime said, classified as notebook 01 classifies it."""
    import contextlib
    import time

    import torch
    from transformers import CONFIG_MAPPING, ElectraForSequenceClassification

    from where223.eager.precision import autocast
    from where223.fixes import fixed
    from where223.gpt2.export import output_to
    from where223.gpt2.reproduce import call_stack, ortmodule_debug_options, ortmodule_environment
    from where223.graph.ort import judge_message
    from where223.pipeline import environment, portable
    from where223.study._cell.build import shrink_config

    torch.manual_seed(seed)
    config = CONFIG_MAPPING[ORTMODULE_MODEL]()
    changes = shrink_config(config, "small")
    config.num_labels = 2
    model = ElectraForSequenceClassification(config).train()
    generator = torch.Generator().manual_seed(seed)
    batch = {"input_ids": torch.randint(0, config.vocab_size, (2, 16), generator=generator),
             "attention_mask": torch.ones(2, 16, dtype=torch.long),
             "labels": torch.randint(0, 2, (2,), generator=generator)}  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    caught: BaseException | None = None
    names: list[str] = []
    started = time.perf_counter()
    try:
        from onnxruntime.training.ortmodule import ORTModule

        with ortmodule_environment(ORTMODULE_OPSET), output_to(run_dir / "ortmodule.log", fds=(1, 2)):
            wrapped = ORTModule(model, debug_options=ortmodule_debug_options(run_dir))
            # ORTModule registers its own symbolics (layer_norm among them) when it is built: the fixes wrap those
            with contextlib.nullcontext([]) if not fix else fixed("torchscript", ORTMODULE_OPSET) as names:
                with autocast("cpu", "bf16"):
                    loss = wrapped(**batch).loss
                loss.backward()
    except Exception as error:  # noqa: BLE001 - classified from ONNX Runtime's verdict on its message
        caught = error
    for stage in run_dir.glob("ortmodule_*.onnx"):
        stage.unlink()
    record: dict[str, Any] = {"model_type": ORTMODULE_MODEL, "head": "ElectraForSequenceClassification",
                              "config_changes": changes, "fix": fix, "opset": ORTMODULE_OPSET,
                              "fixes": names,
                              "environment": environment.describe("cpu"),
                              "timing": {"seconds": round(time.perf_counter() - started, 3)}}  # fmt: skip
    if caught is None:
        record.update(ort_verdict="accepted", error=None, call_stack=[])
        return record
    message = portable.text(str(caught))
    judgement = judge_message(message)
    index = message.find("[ONNXRuntimeError]")
    record.update(ort_verdict=judgement.verdict,
                  error={"exception": f"{type(caught).__module__}.{type(caught).__name__}",
                         "ort_message": (message[index:] if index >= 0 else message).strip()[:2000],
                         "type_binding": None if judgement.type_binding is None else judgement.type_binding.to_dict()},
                  call_stack=call_stack(caught)[-8:])  # fmt: skip
    return record


def ortmodule_record(run_dir: Path) -> dict[str, Any]:
    """The ORTModule route on ELECTRA as exported and with the fixes (`remedies/ortmodule_electra.json`)."""
    from where223.pipeline import environment

    runs = [ortmodule_route(run_dir / ("fixed" if fix else "plain"), fix) for fix in (False, True)]
    for run in runs:
        run.pop("environment", None)
    return {"description": "ORTModule (fallback disabled) training ElectraForSequenceClassification, built small "
                           "with random weights, one step under CPU bf16 autocast at opset 17: as exported, then "
                           "with where223.fixes in force during ORTModule's export",
            "runs": runs, "environment": environment.describe("cpu")}  # fmt: skip
