"""One cell of the version matrix, run inside one torch environment with one transformers side folder.

Builds a tiny GPT-2 from `GPT2Config` (random weights, nothing downloaded), exports it to ONNX under a precision
recipe (`where223.sweep.recipes`; the matrix's is `torch.autocast("cpu", torch.bfloat16)`) with one of
`where223.sweep.exporters`, then loads and runs it with onnxruntime's CPU provider, and returns one record with
the outcome (`where223.outcomes.Outcome`): ONNX Runtime's verdict, or the stage that gave none.

Imports only the stdlib, torch, transformers, onnx, onnxruntime, `where223.pipeline`, `where223.graph.ort`
(standard library only) and (lazily, optional) `where223.graph.lint`, so it runs in any of the matrix
environments, Python 3.10's among them (torch 1.12.1; hence `where223.enums.TextEnum`, not 3.11's StrEnum).
The sweep's cell entry point (`python -m where223.sweep.cell`, model `gpt2-tiny`) runs it with each stack's
own interpreter, one subprocess per cell, where only these imports are installed.
"""

from __future__ import annotations

import functools
import inspect
import platform
import warnings
from pathlib import Path
from typing import Any

from where223.graph.ort import OrtJudgement, OrtVerdict, TypeBinding, judge, judge_message, load_session
from where223.outcomes import Outcome, from_verdict
from where223.pipeline.environment import package_versions
from where223.sweep.exporters import EXPORTERS, NotApplicable, resolve_opset
from where223.sweep.recipes import RECIPES, Recipe
from where223.sweep.stages import MESSAGE_LIMIT, describe_error, time_stage, warning_lines

PACKAGES = (
    "torch",
    "transformers",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "onnxruntime-training-cpu",
    "numpy",
    "huggingface-hub",
    "safetensors",
    "protobuf",
)
TINY_CONFIG: dict[str, int] = {
    "vocab_size": 256,
    "n_positions": 32,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 2,
}


def binding_record(binding: TypeBinding, message: str) -> dict[str, Any]:
    """A type binding as the cells record it: op, parameter, node, element and ONNX types, the message."""
    return {
        "op_type": binding.op_type,
        "param": binding.type_parameter,
        "node": binding.node,
        "types": [t.removeprefix("tensor(").removesuffix(")") for t in binding.bound_types],
        "onnx_types": list(binding.bound_types),
        "message": message,
    }


def classify(error: dict[str, Any]) -> OrtJudgement:
    """ONNX Runtime's most specific verdict in an error or its causes (the Where error first)."""
    found = [judge_message(text) for text in [error["message"], *(c["message"] for c in error.get("causes", []))]]
    return min(found, key=lambda judgement: list(OrtVerdict).index(judgement.verdict))


def record_failure(record: dict[str, Any], error: dict[str, Any]) -> None:
    """File a failed cell: its error, ONNX Runtime's verdict as the outcome, and the type binding named."""
    judgement = classify(error)
    record["error"] = error
    record["outcome"] = from_verdict(judgement.verdict)
    record["ort"] = {
        "verdict": judgement.verdict,
        "message": (judgement.message or "")[:MESSAGE_LIMIT] or None,
        "type_binding": judgement.type_binding.to_dict() if judgement.type_binding else None,
    }
    binding = judgement.type_binding
    if binding is not None and binding.is_where:
        record["where_error"] = binding_record(binding, judgement.message)
    elif binding is not None:
        error["type_binding"] = binding_record(binding, judgement.message)


def graph_facts(path: Path) -> dict[str, Any]:
    """Opset, IR version, producer, node and Where counts (graph and local functions) of an exported file."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - an unreadable file is recorded as such
        return {"error": f"{type(exc).__name__}: {exc}", "bytes": path.stat().st_size}
    opsets = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    ops = [n.op_type for n in model.graph.node]
    function_ops = [n.op_type for f in model.functions for n in f.node]
    return {
        "ir_version": model.ir_version,
        "opset": opsets.get("ai.onnx"),
        "opset_imports": opsets,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "nodes": len(ops),
        "where_nodes": ops.count("Where"),
        "where_node_names": [n.name for n in model.graph.node if n.op_type == "Where"],
        "functions": len(model.functions),
        "function_nodes": len(function_ops),
        "where_nodes_in_functions": function_ops.count("Where"),
        "bytes": path.stat().st_size,
    }


def lint_report(path: Path, full: bool) -> dict[str, Any]:
    """The where223 lint verdict of an exported file (the whole report when `full`), or why there is none."""
    try:
        from where223.graph.lint import lint_model
    except ImportError as exc:
        return {"available": False, "reason": f"lint unavailable: {exc}"}
    try:
        report = lint_model(path).to_dict()
    except Exception as exc:  # noqa: BLE001 - any lint failure is recorded, never fatal to the cell
        return {"available": True, "error": f"{type(exc).__name__}: {exc}"}
    violations = report.get("violations", [])
    summary = [
        {
            "kind": v.get("kind"),
            "op_type": v.get("op_type"),
            "node": v.get("node"),
            "type_param": v.get("type_param"),
            "types": sorted({b.get("type") for b in v.get("bindings", [])}),
        }
        for v in violations
    ]
    result: dict[str, Any] = {"available": True, "violations": len(violations), "summary": summary}
    if full:
        result["report"] = report
    return result


def _import_stack() -> tuple[Any, Any]:
    """torch and transformers, with GPT-2's modeling module loaded (transformers imports lazily)."""
    import torch
    import transformers
    from transformers.models.gpt2 import modeling_gpt2  # noqa: F401 - forces the lazy import now

    return torch, transformers


def _export(
    torch: Any, model: Any, ids: Any, path: Path, exporter: str, recipe: Recipe, opset: int | str, mode: str
) -> dict[str, Any]:
    """Export the tiny model with `exporter` under `recipe` (a whole-model recipe casts it first)."""
    module, inputs = recipe.prepare(torch, model, {"input_ids": ids})
    with recipe.context(torch):
        return EXPORTERS[exporter](
            torch, module, tuple(inputs.values()), path, opset=opset, mode=mode, input_names=list(inputs)
        )


def _tiny_model(torch: Any, transformers: Any) -> Any:
    """A deterministic tiny GPT-2 (random weights) that returns logits only, in training mode."""

    class LogitsOnly(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any) -> Any:
            return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]

    torch.manual_seed(0)
    config = transformers.GPT2Config(**TINY_CONFIG, use_cache=False)
    model = LogitsOnly(transformers.GPT2LMHeadModel(config))
    model.train()
    return model


def plain_export(torch: Any, model: Any, ids: Any, path: Path, recipe: Recipe) -> dict[str, Any]:
    """The TorchScript exporter with its defaults (eval mode, constant folding) at the cell's opset, under the
    same autocast, as a user's first `torch.onnx.export` call: the names of its Where nodes and ONNX Runtime's
    verdict. The names show how this exporter names nodes outside the training-mode export."""
    opset = resolve_opset(torch, "auto")
    kwargs: dict[str, Any] = {"opset_version": opset}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with recipe.context(torch):
                torch.onnx.export(model, (ids,), str(path), **kwargs)
        judgement = judge(path)
    except Exception as exc:  # noqa: BLE001 - recorded; the cell's own outcome stands
        return {"opset_requested": opset, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    facts = graph_facts(path)
    result: dict[str, Any] = {
        "api": "torch.onnx.export (defaults: eval mode, constant folding)",
        "opset_requested": opset,
        "nodes": facts.get("nodes"),
        "where_node_names": facts.get("where_node_names", []),
        "outcome": judgement.verdict,
    }
    if judgement.type_binding is not None:
        result["type_binding"] = binding_record(judgement.type_binding, judgement.message or "")
    return result


def run(
    torch_requested: str,
    transformers_requested: str,
    exporter: str,
    onnx_path: Path,
    recipe: Recipe = RECIPES["cpu_bf16_autocast"],
    opset: int | str = "auto",
    mode: str = "train",
) -> dict[str, Any]:
    """Run one cell and return its record (never raises for a failure of the stack under test)."""
    record: dict[str, Any] = {
        "cell": f"{torch_requested}-{transformers_requested}-{exporter}",
        "torch_requested": torch_requested,
        "transformers_requested": transformers_requested,
        "exporter": exporter,
        "python": platform.python_version(),
        "versions": package_versions(PACKAGES),
        "model": {"config": TINY_CONFIG, "input_shape": [2, 16], "recipe": recipe.to_dict()},
        "recorded_by": "cell",
        "timings_s": {},
    }

    timed = functools.partial(time_stage, record)

    try:
        torch, transformers = timed("import", _import_stack)
        record["torch_version"] = torch.__version__
        record["transformers_version"] = transformers.__version__
        record["transformers_path"] = str(Path(transformers.__file__).parent)
        model = timed("build", lambda: _tiny_model(torch, transformers))
    except Exception as exc:  # noqa: BLE001 - an incompatible stack is a result, not a crash
        record["outcome"] = Outcome.NOT_BUILT
        record["error"] = describe_error(exc, "import/build")
        record["reason"] = (
            f"transformers {transformers_requested} cannot be imported or build GPT-2 with torch "
            f"{torch_requested}: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        )
        return record
    if record["transformers_version"] != transformers_requested:
        raise RuntimeError(
            f"PYTHONPATH gives transformers {record['transformers_version']}, not {transformers_requested}"
        )
    ids = torch.randint(0, TINY_CONFIG["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    current = "export"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                record["export"] = timed(
                    "export", lambda: _export(torch, model, ids, onnx_path, exporter, recipe, opset, mode)
                )
            finally:
                record["export_warnings"] = warning_lines(caught)
        record["graph"] = graph_facts(onnx_path)
        current = "load"
        session = timed("load", lambda: load_session(onnx_path))
        current = "run"
        feeds = {session.get_inputs()[0].name: ids.numpy()}
        outputs = timed("run", lambda: session.run(None, feeds))
        record["run"] = {"outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs]}
        record["outcome"] = Outcome.ACCEPTED
        record["ort"] = {"verdict": OrtVerdict.ACCEPTED, "message": None, "type_binding": None}
    except NotApplicable as exc:
        record["outcome"] = Outcome.NOT_APPLICABLE
        record["reason"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - every failure of export/load/run is the measurement
        if current == "export":
            record["outcome"] = Outcome.NOT_EXPORTED
            record["error"] = describe_error(exc, current)
        else:
            record_failure(record, describe_error(exc, current))
    if onnx_path.is_file():
        if "graph" not in record:
            record["graph"] = graph_facts(onnx_path)
        # the whole lint report where the graph failed otherwise than with the Where error
        full = record["outcome"] in (Outcome.TYPE_ERROR, Outcome.MISSING_KERNEL, Outcome.OTHER_ERROR)
        record["lint"] = timed("lint", lambda: lint_report(onnx_path, full))
    if exporter == "torchscript" and record["outcome"] not in (Outcome.NOT_APPLICABLE, Outcome.NOT_EXPORTED):
        plain = onnx_path.with_name("plain.onnx")
        record["plain_export"] = timed("plain_export", lambda: plain_export(torch, model, ids, plain, recipe))
    return record


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The sweep engine's entry (`runner: where223.study.matrix.run` in spaces/matrix.yaml): cell `key` in the stack
    whose facts are `stack`."""
    from where223.sweep.recipes import RECIPES

    return run(stack["torch"], stack["transformers"], key["exporter"], onnx_path, RECIPES[key["recipe"]],
               key["opset"], key["mode"])
