"""The class study's explanation for one model of your own: the report the sweep writes for each cell.

    from where223.study.classes.explain import explain
    report = explain("my_models.py:make_model", inputs="my_models.py:make_inputs",
                     recipe="cpu_bf16_autocast", exporter="dynamo", out="explained/")
    report = explain(model_type="electra", recipe="cpu_bf16_autocast", exporter="dynamo", out="explained/")

A model is either a factory (`MODULE:FUNCTION` or `FILE.py:FUNCTION`, returning a `torch.nn.Module`, or a module
and its example inputs) with example inputs (a factory of a dict of named tensors or a tuple of tensors), or a
transformers model type built small from its config with random weights (`config` overrides set last). It runs
under a precision recipe (`where223.sweep.recipes`) with an exporter (`dynamo` or `torchscript`) through
`where223.study.classes.run.explain_module`: exported, judged by ONNX Runtime's CPU provider, linted, blamed,
each blamed node joined with the eager kernels of its source line and the exporter function that emitted it,
and the graph's outputs compared with eager PyTorch's. `out` receives `record.json`, `model.onnx` and
`explanation.md`. `where223 explain` is the command; with `--stack NAME` it runs in a sweep stack's interpreter
(`spaces/stacks.yaml`: `today` is torch 2.14.1 with transformers 5), as a sweep cell does.

A factory is your code, imported and run as you would run it; a model type needs only transformers.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from where223 import markdown
from where223.errors import UsageError, printable
from where223.graph.blame import NO_SOURCE_ADVICE
from where223.outcomes import Outcome
from where223.sweep.recipes import RECIPES
from where223.sweep.stages import time_stage

RUNNER = "where223.study.classes.explain"
REFUSED = frozenset({Outcome.TYPE_ERROR, Outcome.WHERE_TYPE_ERROR})
NO_STACKS = f"the export carries no Python stacks, so no node can be blamed: {NO_SOURCE_ADVICE}"


def load_callable(spec: str) -> Any:
    """`MODULE:NAME` or `FILE.py:NAME` -> the object; UsageError (one line) when it cannot be found."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"{spec!r}: give MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise UsageError(f"{spec!r}: no file {where}")
            loader = importlib.util.spec_from_file_location(f"where223_user_{path.stem}", path)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        return getattr(module, name)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"{spec!r}: {type(error).__name__}: {error}") from None


def _as_named(inputs: Any) -> dict[str, Any]:
    if isinstance(inputs, dict):
        return dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return {f"input_{k}": tensor for k, tensor in enumerate(inputs)}
    return {"input_0": inputs}


def _module_and_inputs(factory: str, inputs: str | None) -> tuple[Any, dict[str, Any], bool]:
    """The user's module, its example inputs by name, and whether they are passed by keyword."""
    made = load_callable(factory)()
    module, example = (made if isinstance(made, tuple) else (made, None))
    if inputs is not None:
        example = load_callable(inputs)()
    if example is None:
        raise UsageError(f"{factory}: returned no example inputs; give --inputs MODULE:FUNCTION")
    return module, _as_named(example), isinstance(example, dict)


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The cell entry (`--runner where223.study.classes.explain`): a factory's module or a model type, in this
    interpreter."""
    import warnings

    warnings.filterwarnings("ignore")
    recipe, exporter = RECIPES[key["recipe"]], key["exporter"]
    opset, mode = key.get("opset", "auto"), key.get("mode", "eval")
    if key.get("factory"):
        from where223.pipeline.environment import describe
        from where223.study.classes.run import DEVICE, explain_module, reduced_type

        record: dict[str, Any] = {
            "model_type": key["model"], "release": stack.get("transformers") or "",
            "settings": {"device": DEVICE, "recipe": recipe.name, "reduced": reduced_type(recipe),
                         "exporter": exporter, "opset": opset, "training": mode == "train"},
            "built": False, "fed": False, "exported": False, "judged": False, "timings_s": {},
            "environment": describe(DEVICE),
        }  # fmt: skip
        timed = functools.partial(time_stage, record)
        module, inputs, by_keyword = _module_and_inputs(key["factory"], key.get("inputs"))
        from where223.study.architectures.run import positional

        wrapped = positional(module, list(inputs), by_keyword)
        record = explain_module(record, timed, wrapped, inputs, onnx_path, recipe, exporter, opset, mode)
    else:
        import transformers

        from where223.study.classes.run import run

        record = run(key["model"], transformers.__version__, onnx_path, recipe, exporter, opset, mode,
                     key.get("config") or {})
    record["subject"] = {k: key.get(k) for k in ("model", "factory", "inputs", "config") if key.get(k)}
    return record


def explain(
    factory: str | None = None,
    *,
    inputs: str | None = None,
    model_type: str | None = None,
    config: dict[str, Any] | None = None,
    recipe: str = "cpu_bf16_autocast",
    exporter: str = "dynamo",
    opset: int | str = "auto",
    out: str | Path = "where223-explained",
    stack: str | None = None,
    timeout_s: float = 900,
) -> dict[str, Any]:
    """Export, judge, lint, blame and explain one model; write `record.json`, `model.onnx` and `explanation.md`
    under `out` and return the record. `stack`: run in that sweep stack's interpreter instead of this one."""
    if (factory is None) == (model_type is None):
        raise UsageError("give a factory (MODULE:FUNCTION) or a transformers model type, not both")
    if recipe not in RECIPES:
        raise UsageError(f"unknown recipe {recipe!r} ({', '.join(RECIPES)})")
    if exporter not in ("dynamo", "torchscript"):
        raise UsageError(f"unknown exporter {exporter!r} (dynamo, torchscript)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = {"model": model_type or factory.rpartition(":")[2], "recipe": recipe, "exporter": exporter,
           "opset": opset, "mode": "eval", "factory": factory, "inputs": inputs, "config": config}  # fmt: skip
    onnx_path = out / "model.onnx"
    if stack is None:
        record = run_cell(key, {}, onnx_path)
    else:
        record = _in_stack(key, stack, out, timeout_s)
    from where223.pipeline import records

    records.write_json(out / "record.json", record)
    (out / "explanation.md").write_text(report(record))
    return record


def _in_stack(key: dict[str, Any], name: str, out: Path, timeout_s: float) -> dict[str, Any]:
    from where223.pipeline.paths import ROOT
    from where223.sweep import stacks, worker

    stack = stacks.load_stacks().stack(name)
    prepared = stacks.prepare(stack)
    if prepared.python is None:
        raise UsageError(f"stack {name} could not be built: {prepared.error}")
    facts = stacks.describe(stack)
    record = worker.run_cell(key, prepared.python, ROOT / "src", out.resolve() / "work", timeout_s,
                             path=prepared.path, stack=facts, runner=RUNNER)  # fmt: skip
    produced = out / "work" / "model.onnx"
    if produced.is_file():
        produced.replace(out / "model.onnx")
    return record


def _versions(record: dict[str, Any]) -> dict[str, str]:
    packages = (record.get("environment") or {}).get("packages") or {}
    names = ("torch", "transformers", "onnx", "onnxruntime", "onnxruntime-training-cpu", "onnxscript")
    return {name: packages[name] for name in names if packages.get(name)}


def _cut(text: Any, limit: int = 160) -> str:
    return printable(str(text), limit)


def report(record: dict[str, Any]) -> str:
    """The record as Markdown: verdict, each violation with its constraint, each blamed node with its source,
    eager kernels and emitter, and the eager comparison."""
    from where223.study.classes.analysis import evidence, refusal

    settings = record.get("settings") or {}
    subject = record.get("subject") or {"model": record.get("model_type")}
    lines = [
        f"# where223 explain: {_cut(subject.get('factory') or subject.get('model'))}",
        "",
        f"Recipe `{settings.get('recipe')}`, exporter `{settings.get('exporter')}`, opset "
        f"{record.get('onnx_opset', settings.get('opset'))}; "
        + ", ".join(f"{name} {version}" for name, version in _versions(record).items()) + ".",
        "",
        f"**ONNX Runtime: {record.get('outcome')}**"
        + (f" — {_cut(((record.get('ort') or {}).get('message') or '').splitlines()[0], 400)}"
           if (record.get("ort") or {}).get("message") else ""),  # fmt: skip
        "",
    ]
    error = record.get("error")
    if error:
        lines += [f"Stopped at `{error.get('stage')}`: {_cut(error.get('message'), 400)}", ""]
    findings = (record.get("lint") or {}).get("findings") or []
    if findings:
        rows = [[_cut(f.get("node"), 80), f.get("op_type"), f.get("kind"), f.get("type_param") or "",
                 ", ".join(b["type"] for b in f.get("offending") or []), "root" if f.get("root", True) else "follows"]
                for f in findings[:40]]  # fmt: skip
        lines += [f"Lint: {len(findings)} violation(s) (first 40):", "",
                  *markdown.table(["node", "op", "kind", "parameter", "offending types", ""], rows), ""]
    blamed = record.get("blame") or []
    if record.get("outcome") in REFUSED:
        item = evidence(record)
        found = refusal(record) or {}
        lines += [f"Refused node: `{_cut(found.get('node'))}` ({found.get('operator')}, {found.get('kind')})."]
        if item.get("source"):
            lines.append(f"Source: `{item['source']}`: {markdown.code(_cut(item.get('code') or ''))}.")
        elif record.get("exported"):
            lines.append(f"Source: not recorded — {NO_STACKS}.")
        for kernel in item.get("eager_kernels") or []:
            lines.append(f"- eager `{kernel['op']}` handed {'/'.join(kernel['inputs'])}, returned "
                         f"{'/'.join(kernel['outputs'])}" + (" (mixed dtypes)" if kernel.get("mixed") else ""))
        if item.get("emitter"):
            emitter = item["emitter"]
            lines.append(f"- emitted by `{emitter.get('function') or emitter.get('target')}`")
        lines.append("")
    elif blamed and not any(b.get("source") for b in blamed):
        lines += [f"Blame: {NO_STACKS}.", ""]
    numerics = record.get("numerics")
    if numerics:
        if numerics.get("status") == "measured":
            verdict = "within" if numerics["within_tolerance"] else "outside"
            lines += [f"Against eager PyTorch ({numerics['execution']}): max |difference| / max |eager| = "
                      f"{numerics['relative']:.3g}, {verdict} the tolerance {numerics['tolerance']:.3g} "
                      f"({numerics['reduced']}).", ""]  # fmt: skip
        else:
            lines += [f"Against eager PyTorch: not measured ({_cut(numerics.get('reason'), 300)}).", ""]
    lines += ["Record: `record.json` (every field); graph: `model.onnx`.", ""]
    return "\n".join(lines)


def summary_json(record: dict[str, Any]) -> str:
    """One line of JSON: outcome, refused node and operator, numerics status."""
    from where223.study.classes.analysis import refusal

    found = refusal(record) or {}
    return json.dumps({"outcome": record.get("outcome"), "node": found.get("node"),
                       "operator": found.get("operator"), "numerics": (record.get("numerics") or {}).get("status")})
