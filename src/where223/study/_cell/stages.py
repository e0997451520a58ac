"""The stages every transformers cell runs after building (`where223.study._cell.build`): the architecture, class and
remedies studies' cells and `where223 explain`, for any module called as `module(*inputs.values())`.

1. the recipe prepares model and inputs (`where223.sweep.recipes`) and the model runs once eagerly under it, with a
   dispatch mode below autocast recording every kernel's input and output dtypes by source line
   (`where223.eager.kernels`): the reference outputs and the eager side of each explanation (`eager_stage`);
2. the export runs under the recipe as `where223.gpt2.export.export_onnx` exports GPT-2, with the Python stacks in
   the nodes' doc strings (`export_module`), its warnings recorded and, where asked, the exporter's emitting
   functions (`where223.eager.emitters`: the TorchScript exporter's symbolic calls, the dynamo exporter's torchlib
   dispatch) (`export_into`);
3. ONNX Runtime's CPU provider judges the file (`judge_into`); lint lists every violation with the schema
   constraint it breaks (`lint_findings`); blame gives each refused or conflicting node's source line
   (`blame_nodes`); each blamed node gets the eager kernels of its line and the function that emitted it
   (`export_stage`);
4. an accepted model runs once in ONNX Runtime against the eager outputs (`where223.study._cell.numerics`).

Every stage that fails is recorded with its reason, never raised. torch, onnx and transformers are imported inside
the functions: the stack's own releases, in its interpreter.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from where223 import files
from where223.graph.ort import refused_node
from where223.outcomes import Outcome, from_verdict
from where223.pipeline import portable
from where223.study._cell.numerics import as_numpy, numerics_stage
from where223.sweep.exporters import EXPORTERS, NotApplicable
from where223.sweep.recipes import RECIPES, Recipe
from where223.sweep.stages import describe_error, warning_lines

Timed = Callable[[str, Callable[[], Any]], Any]  # `where223.sweep.stages.time_stage` bound to a record

BLAME_LIMIT = 50  # blamed nodes kept per record (distinct source lines are what the groups use)
EVIDENCE_LIMIT = 8  # kernels and emitting calls kept per blamed node
MIXED_LIMIT = 40  # lines with mixed-dtype kernels kept per record
_TORCH_FILE = re.compile(r"(^|[/\\])torch[/\\]")


def flat_tensors(output: Any) -> list[Any]:
    """Every tensor in a model's output (ModelOutput, tuples, lists, dicts), in order."""
    import torch

    if isinstance(output, torch.Tensor):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [tensor for item in output for tensor in flat_tensors(item)]
    return []


def positional(model: Any, names: Sequence[str], by_keyword: bool = True) -> Any:
    """`model` as a module called with tensors in `names` order that returns a flat tuple of tensors; the tensors
    are passed to `model` by those names, or as they come (`by_keyword=False`)."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> tuple[Any, ...]:
            if not by_keyword:
                return tuple(flat_tensors(self.model(*tensors)))
            return tuple(flat_tensors(self.model(**dict(zip(names, tensors, strict=True)))))

    return Positional()


def export_module(
    module: Any,
    inputs: dict[str, Any],
    out: Path,
    recipe: Recipe = RECIPES["cpu_bf16_autocast"],
    exporter: str = "torchscript",
    opset: int | str = 17,
    mode: str = "train",
) -> dict[str, Any]:
    """Export `module(*inputs.values())` as `where223.gpt2.export.export_onnx` exports GPT-2 (Python stacks in the
    nodes' doc strings), for any module, with `exporter` under `recipe` (inputs already prepared by it)."""
    import torch

    from where223.gpt2.export import output_to, stable_doc_strings

    out.parent.mkdir(parents=True, exist_ok=True)
    with files.atomic_model_path(out) as partial:  # external weights keep the names the model gives them
        with recipe.context(torch), output_to(out.with_suffix(".log")):
            facts = EXPORTERS[exporter](
                torch, module, tuple(inputs.values()), partial, opset=opset, mode=mode, input_names=list(inputs),
                doc_strings=True,
            )  # fmt: skip
        if exporter == "torchscript":
            stable_doc_strings(partial)
    return facts


def judge_into(record: dict[str, Any], timed: Timed, onnx_path: Path) -> None:
    """ONNX Runtime's verdict on the exported file, timed, into the record: `judged`, `outcome` and `ort`."""
    from where223.graph.ort import judge

    judgement = timed("judge", lambda: judge(onnx_path))
    record["judged"] = True
    record["outcome"] = from_verdict(judgement.verdict)
    record["ort"] = {
        "verdict": judgement.verdict,
        "message": (judgement.message or "")[:2000] or None,
        "type_binding": judgement.type_binding.to_dict() if judgement.type_binding else None,
    }


def lint_findings(onnx_path: Path) -> dict[str, Any]:
    """Every lint finding (roots first where lint marks them) and the report's counts."""
    from where223.graph.lint import lint_model

    report = lint_model(onnx_path)
    record = report.to_dict()
    findings = record.pop("violations")
    roots = [f for f in findings if f.get("root", True)]
    record["findings"] = roots + [f for f in findings if not f.get("root", True)]
    record["violations"] = len(findings)
    record["roots"] = len(roots)
    return record


def blame_nodes(onnx_path: Path, findings: list[dict[str, Any]], named_by_ort: str | None) -> list[dict[str, Any]]:
    """The innermost frame outside torch (file:line, code) of the node ONNX Runtime names and of each type-binding
    conflict's node (the model's line; a functional such as `layer_norm` is torch's own and names no model)."""
    from where223.eager.divergence import source_code
    from where223.graph.blame import blame
    from where223.graph.lint import FindingKind

    conflicts = [f for f in findings if f["kind"] == FindingKind.BINDING_CONFLICT]
    targets = {finding["node"]: finding for finding in conflicts[:BLAME_LIMIT]}
    if named_by_ort and named_by_ort not in targets:
        targets[named_by_ort] = next((f for f in findings if f["node"] == named_by_ort), {})
    blamed = []
    for node, finding in targets.items():
        try:
            result = blame(onnx_path, node)
        except (KeyError, ValueError, LookupError) as exc:  # a node the refusal names but the graph lacks
            blamed.append({"node": node, "ort_node": node == named_by_ort, "source": None, "error": str(exc)})
            continue
        frames = result.model_frames
        outside_torch = [frame for frame in frames if not _TORCH_FILE.search(frame.file)]
        top = (outside_torch or frames or [None])[0]
        source_file = portable.text(top.file) if top else None
        blamed.append(
            {
                "node": node,
                "op_type": result.op_type,
                "ort_node": node == named_by_ort,
                "kind": finding.get("kind"),
                "types": sorted({b["type"] for b in finding.get("bindings", [])}),
                "source": f"{source_file}:{top.line}" if top else None,
                "function": top.function if top else None,
                "code": (top.code or source_code(source_file, top.line)) if top else None,
            }
        )
    return blamed



def export_into(
    record: dict[str, Any],
    timed: Timed,
    module: Any,
    inputs: dict[str, Any],
    onnx_path: Path,
    recipe: Recipe,
    exporter: str,
    opset: int | str,
    mode: str,
    emitters: bool = False,
) -> tuple[bool, Any]:
    """`export_module` timed into `record["export"]`, its warnings into `export_warnings` and, with `emitters`, the
    exporter's emitting calls (by its base name: `dynamo+fixes` records dynamo's) into `emitters`; then `exported`
    and `onnx_bytes`, or the outcome (`not_applicable` with its reason, `not_exported` with its error). (Whether the
    model was exported, the emitters recorded or None.)"""
    if emitters:
        from where223.eager.emitters import recording

        watch: Any = recording(exporter.split("+")[0])
    else:
        watch = contextlib.nullcontext()
    try:
        with warnings.catch_warnings(record=True) as caught, watch as recorded:
            warnings.simplefilter("always")
            try:
                record["export"] = timed(
                    "export", lambda: export_module(module, inputs, onnx_path, recipe, exporter, opset, mode)
                )
            finally:
                record["export_warnings"] = warning_lines(caught)
        if emitters:
            record["emitters"] = recorded.to_dict()
    except NotApplicable as exc:
        record["outcome"] = Outcome.NOT_APPLICABLE
        record["reason"] = str(exc)
        return False, None
    except Exception as exc:  # noqa: BLE001 - a failed export is the measurement
        record["outcome"] = Outcome.NOT_EXPORTED
        record["error"] = describe_error(exc, "export")
        return False, None
    record["exported"] = True
    record["onnx_bytes"] = onnx_path.stat().st_size
    return True, recorded


def lint_and_blame(
    record: dict[str, Any], timed: Timed, onnx_path: Path, evidence: Callable[[], None] | None = None
) -> None:
    """Lint (`record["lint"]`) and blame (`record["blame"]`) of a judged export, each recorded or the reason it could
    not be computed; `evidence` runs after blame, its failure recorded as blame's."""
    try:
        record["lint"] = timed("lint", lambda: lint_findings(onnx_path))
    except Exception as exc:  # noqa: BLE001 - a tool failing on a foreign model is a finding too
        record["lint"] = {"error": describe_error(exc, "lint")}
    try:
        findings = record["lint"].get("findings", [])
        named = refused_node(record["ort"]["message"])
        record["blame"] = timed("blame", lambda: blame_nodes(onnx_path, findings, named))
        if evidence is not None:
            evidence()
    except Exception as exc:  # noqa: BLE001
        record["blame_error"] = describe_error(exc, "blame")


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



def explain_module(
    record: dict[str, Any],
    timed: Timed,
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
    timed: Timed,
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
        reference = [as_numpy(torch, t) for t in flat_tensors(outputs)]
        mixed = table.mixed_lines()
        record["eager"] = {"kernel_calls": table.calls, "lines": len(table.lines),
                           "mixed_lines": dict(list(mixed.items())[:MIXED_LIMIT]), "mixed_line_count": len(mixed)}
    except Exception as exc:  # noqa: BLE001 - eager failing under the recipe is a result; the export still runs
        record["eager"] = {"error": describe_error(exc, "eager")}
    return module, inputs, reference, table



def export_stage(
    record: dict[str, Any],
    timed: Timed,
    module: Any,
    inputs: dict[str, Any],
    onnx_path: Path,
    recipe: Recipe,
    exporter: str,
    opset: int | str,
    mode: str,
    table: Any,
) -> bool:
    """The export with its emitters recorded (`export_into`), the judgement, lint, and blame with evidence; whether
    the model was exported."""
    exported, emitters = export_into(record, timed, module, inputs, onnx_path, recipe, exporter, opset, mode,
                                     emitters=True)  # fmt: skip
    if not exported:
        return False
    _opset_of(record, onnx_path)
    judge_into(record, timed, onnx_path)
    lint_and_blame(record, timed, onnx_path, lambda: _evidence(record, table, emitters, onnx_path))
    return True


def _opset_of(record: dict[str, Any], onnx_path: Path) -> None:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    record["onnx_opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    record["ir_version"] = model.ir_version

