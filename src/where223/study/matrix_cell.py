"""One cell of the version matrix, run inside one torch environment with one transformers side folder.

Builds a tiny GPT-2 from `GPT2Config` (random weights, nothing downloaded), exports it to ONNX under
`torch.autocast("cpu", torch.bfloat16)` with the TorchScript-based or the dynamo-based exporter, then
loads and runs it with onnxruntime's CPU provider, and writes one JSON record with the outcome: ONNX
Runtime's verdict (`where223.graph.ort.OrtVerdict`) or `not_applicable`.

Imports only the stdlib, torch, transformers, onnx, onnxruntime, `where223.pipeline`, `where223.graph.ort`
(standard library only) and (lazily, optional) `where223.graph.lint`, so it runs in any of the matrix
environments, Python 3.10's among them (torch 1.12.1; hence `where223.enums.TextEnum`, not 3.11's StrEnum).
That is why it is a worker entry point (`python -m`), not a `where223`
command: the driver (`where223 matrix`) runs it with each torch environment's own interpreter, one subprocess
per cell, where only this module's imports are installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from where223.enums import TextEnum
from where223.graph.ort import OrtJudgement, OrtVerdict, TypeBinding, judge, judge_message, load_session
from where223.pipeline import records
from where223.pipeline.environment import package_versions

MESSAGE_LIMIT = 20_000
OPSET = 17  # the TorchScript exporter's opset, as notebook 01's export; lower where a torch cannot export it
OPSET_FOR_TORCH: dict[str, int] = {"1.12.1": 16}  # torch 1.12's exporter stops at opset 16
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


class CellState(TextEnum):
    """Outcomes of a cell that are not ONNX Runtime's verdict: it gave none."""

    NOT_APPLICABLE = "not_applicable"  # the stack cannot be installed, imported or exported with
    NOT_RUN = "not_run"  # not run yet (a deadline, an install that may pass on a retry)


class NotApplicable(Exception):
    """The cell cannot be run with these versions (the message says why)."""


def stage(name: str) -> None:
    """Announce a stage on stderr, so the driver can tell where a crashed cell died."""
    print(f"WHERE223_STAGE {name}", file=sys.stderr, flush=True)


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


def describe_error(exc: BaseException, where: str) -> dict[str, Any]:
    """Exception type and message verbatim (capped), its cause chain, and the traceback tail."""
    message = str(exc)
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + f"\n... [{len(str(exc)) - MESSAGE_LIMIT} more characters]"
    causes = []
    seen = {id(exc)}
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen and len(causes) < 5:
        seen.add(id(cause))
        causes.append({"type": type(cause).__name__, "message": str(cause)[:MESSAGE_LIMIT]})
        cause = cause.__cause__ or cause.__context__
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "stage": where,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": message,
        "causes": causes,
        "traceback_tail": "\n".join(tb.strip().splitlines()[-25:]),
    }


def warning_lines(caught: Sequence[warnings.WarningMessage], limit: int = 10) -> list[str]:
    """Distinct `Category: first line` of the warnings an export raised, in order, at most `limit`."""
    lines: list[str] = []
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).strip().splitlines()[0] if str(w.message).strip() else ''}"
        if text not in lines:
            lines.append(text)
    return lines[:limit]


def classify(error: dict[str, Any]) -> OrtJudgement:
    """ONNX Runtime's most specific verdict in an error or its causes (the Where error first)."""
    found = [judge_message(text) for text in [error["message"], *(c["message"] for c in error.get("causes", []))]]
    return min(found, key=lambda judgement: list(OrtVerdict).index(judgement.verdict))


def record_failure(record: dict[str, Any], error: dict[str, Any]) -> None:
    """File a failed cell: its error, ONNX Runtime's verdict as the outcome, and the type binding named."""
    judgement = classify(error)
    record["error"] = error
    record["outcome"] = judgement.verdict
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


def export_opset(torch_version: str) -> int:
    """The opset the TorchScript exporter is asked for with this torch (`torch_version` as requested)."""
    return OPSET_FOR_TORCH.get(torch_version, OPSET)


def _torchscript_export(torch: Any, model: Any, ids: Any, path: Path) -> dict[str, Any]:
    opset = export_opset(torch.__version__.split("+")[0])
    kwargs: dict[str, Any] = {
        "training": torch.onnx.TrainingMode.TRAINING,
        "opset_version": opset,
        "do_constant_folding": False,
        "input_names": ["input_ids"],
        "output_names": ["logits"],
    }
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.onnx.export(model, (ids,), str(path), **kwargs)
    api = "torch.onnx.export(dynamo=False)" if "dynamo" in kwargs else "torch.onnx.export"
    return {"api": api, "training": "TrainingMode.TRAINING", "opset_requested": opset}


def _dynamo_export(torch: Any, model: Any, ids: Any, path: Path) -> dict[str, Any]:
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.onnx.export(model, (ids,), str(path), dynamo=True, input_names=["input_ids"], output_names=["logits"])
        api = "torch.onnx.export(dynamo=True)"
    elif hasattr(torch.onnx, "dynamo_export"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            program = torch.onnx.dynamo_export(model, ids)
        program.save(str(path))
        api = "torch.onnx.dynamo_export"
    else:
        raise NotApplicable(
            f"torch {torch.__version__} has no dynamo-based ONNX exporter "
            "(torch.onnx.dynamo_export arrived in torch 2.1)"
        )
    return {"api": api, "training": "model.train() (the dynamo exporters take no training flag)"}


def plain_export(torch: Any, model: Any, ids: Any, path: Path) -> dict[str, Any]:
    """The TorchScript exporter with its defaults (eval mode, constant folding) at the cell's opset, under the
    same autocast, as a user's first `torch.onnx.export` call: the names of its Where nodes and ONNX Runtime's
    verdict. The names show how this exporter names nodes outside the training-mode export."""
    opset = export_opset(torch.__version__.split("+")[0])
    kwargs: dict[str, Any] = {"opset_version": opset}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast("cpu", dtype=torch.bfloat16):
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


EXPORTS: dict[str, Callable[[Any, Any, Any, Path], dict[str, Any]]] = {
    "torchscript": _torchscript_export,
    "dynamo": _dynamo_export,
}


def run(torch_requested: str, transformers_requested: str, exporter: str, onnx_path: Path) -> dict[str, Any]:
    """Run one cell and return its record (never raises for a failure of the stack under test)."""
    record: dict[str, Any] = {
        "cell": f"{torch_requested}-{transformers_requested}-{exporter}",
        "torch_requested": torch_requested,
        "transformers_requested": transformers_requested,
        "exporter": exporter,
        "python": platform.python_version(),
        "versions": package_versions(PACKAGES),
        "model": {"config": TINY_CONFIG, "input_shape": [2, 16], "autocast": "cpu/bfloat16"},
        "recorded_by": "cell",
        "timings_s": {},
    }

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        stage(name)
        start = time.perf_counter()
        try:
            return fn()
        finally:
            record["timings_s"][name] = round(time.perf_counter() - start, 2)

    try:
        torch, transformers = timed("import", _import_stack)
        record["torch_version"] = torch.__version__
        record["transformers_version"] = transformers.__version__
        record["transformers_path"] = str(Path(transformers.__file__).parent)
        model = timed("build", lambda: _tiny_model(torch, transformers))
    except Exception as exc:  # noqa: BLE001 - an incompatible stack is a result, not a crash
        record["outcome"] = CellState.NOT_APPLICABLE
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
                record["export"] = timed("export", lambda: EXPORTS[exporter](torch, model, ids, onnx_path))
            finally:
                record["export_warnings"] = warning_lines(caught)
        record["graph"] = graph_facts(onnx_path)
        current = "load"
        session = timed("load", lambda: load_session(onnx_path))
        current = "run"
        feeds = {session.get_inputs()[0].name: ids.numpy()}
        outputs = timed("run", lambda: session.run(None, feeds))
        record["run"] = {"outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs]}
        record["outcome"] = OrtVerdict.ACCEPTED
    except NotApplicable as exc:
        record["outcome"] = CellState.NOT_APPLICABLE
        record["reason"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - every failure of export/load/run is the measurement
        record_failure(record, describe_error(exc, current))
    if onnx_path.is_file():
        if "graph" not in record:
            record["graph"] = graph_facts(onnx_path)
        # the whole lint report where the graph failed otherwise than with the Where error
        full = record["outcome"] in (OrtVerdict.TYPE_ERROR, OrtVerdict.MISSING_KERNEL, OrtVerdict.OTHER_ERROR)
        record["lint"] = timed("lint", lambda: lint_report(onnx_path, full))
    if exporter == "torchscript" and record["outcome"] != CellState.NOT_APPLICABLE:
        plain = onnx_path.with_name("plain.onnx")
        record["plain_export"] = timed("plain_export", lambda: plain_export(torch, model, ids, plain))
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m where223.study.matrix_cell`: run one cell and write its JSON record."""
    p = argparse.ArgumentParser(prog="python -m where223.study.matrix_cell", description=__doc__)
    p.add_argument("--torch", required=True, help="the torch version this environment should have")
    p.add_argument("--transformers", required=True, help="the transformers version on PYTHONPATH")
    p.add_argument("--exporter", required=True, choices=sorted(EXPORTS))
    p.add_argument("--onnx", required=True, type=Path, help="where to write the exported model")
    p.add_argument("--out", required=True, type=Path, help="where to write the JSON record")
    args = p.parse_args(argv)
    args.onnx.parent.mkdir(parents=True, exist_ok=True)
    record = run(args.torch, args.transformers, args.exporter, args.onnx)
    record["recorded_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    records.write_json(args.out, record)
    print(f"{record['cell']}: {record['outcome']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
