"""The class study's explanation for one model of your own: the report the sweep writes for each cell.

    from where223.study.classes.explain import explain
    report = explain("my_models.py:make_model", inputs="my_models.py:make_inputs",
                     recipe="cpu_bf16_autocast", exporter="dynamo", out="explained/")
    report = explain(model_type="electra", recipe="cpu_bf16_autocast", exporter="dynamo", out="explained/")

A model is either a factory (`MODULE:FUNCTION` or `FILE.py:FUNCTION`, returning a `torch.nn.Module`, or a module
and its example inputs) with example inputs (a factory of a dict of named tensors or a tuple of tensors), or a
transformers model type built small from its config with random weights (`config` overrides set last). It runs
under a precision recipe (`where223.sweep.recipes`) with an exporter (`dynamo` or `torchscript`) through
`where223.study._cell.stages.explain_module`: exported, judged by ONNX Runtime's CPU provider, linted, blamed,
each blamed node joined with the eager kernels of its source line and the exporter function that emitted it,
and the graph's outputs compared with eager PyTorch's. `out` receives `record.json`, `model.onnx` and
`explanation.md`. `where223 explain` is the command; with `--stack NAME` it runs in a sweep stack's interpreter
(`spaces/stacks.yaml`: `today` is torch 2.14.1 with transformers 5), as a sweep cell does.

A factory is your code, imported and run as you would run it; a model type needs only transformers.

What is not as asked raises `UsageError` before anything is exported: an opset that is not `auto` or a whole
number from 1, a factory that cannot be loaded, or one that returns something other than a `torch.nn.Module`
(or a module and its example inputs), inputs that are not tensors. A factory that raises, or a model type whose
config cannot make a model, is recorded (`not_built`, with the error), as the sweep records it: `stopped(record)`
says in one line why such a model never reached ONNX Runtime's judgement.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

from where223 import markdown
from where223.errors import UsageError, printable
from where223.graph.blame import NO_SOURCE_ADVICE
from where223.outcomes import Outcome
from where223.sweep.recipes import RECIPES
from where223.sweep.stages import describe_error, time_stage

RUNNER = "where223.study.classes.explain"
REFUSED = frozenset({Outcome.TYPE_ERROR, Outcome.WHERE_TYPE_ERROR})
USAGE_ERROR = f"{UsageError.__module__}.{UsageError.__qualname__}: "  # its last traceback line, from a cell
ACCEPTED = frozenset({Outcome.ACCEPTED, Outcome.MISSING_KERNEL})  # the types accepted (a missing kernel is CPU's)
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
    except UsageError:
        raise
    except Exception as error:  # noqa: BLE001 - a module that cannot be imported (a syntax error, say) is a bad spec
        raise UsageError(f"{printable(spec)}: {type(error).__name__}: {printable(str(error), 300)}") from None


def opset_of(value: int | str) -> int | str:
    """`auto`, or the opset as a whole number from 1 to 999 (ONNX's are in the twenties); UsageError (one line)
    otherwise."""
    if value == "auto":
        return value
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not re.fullmatch(r"[0-9]{1,3}", text) or int(text) < 1:
        raise UsageError(f"opset {printable(str(value), 40)!r}: give a whole number from 1 to 999 (e.g. 17), or auto")
    return int(text)


def _as_named(inputs: Any) -> dict[str, Any]:
    if isinstance(inputs, dict):
        return dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return {f"input_{k}": tensor for k, tensor in enumerate(inputs)}
    return {"input_0": inputs}


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {printable(repr(value), 60)}"


def _is_torch(value: Any, kind: str) -> bool:
    """Whether `value` is a `torch.nn.Module` (`kind` "module") or a `torch.Tensor`, without importing torch: a
    factory that made one has imported it."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module if kind == "module" else torch.Tensor)


def _module_of(factory: str, made: Any) -> tuple[Any, Any]:
    """The module (and example inputs, or None) a factory returned; UsageError when it is not a module."""
    if _is_torch(made, "module"):
        return made, None
    if isinstance(made, tuple) and len(made) == 2 and _is_torch(made[0], "module"):
        return made
    raise UsageError(f"{printable(factory)}: returned {_kind(made)}, not a torch.nn.Module (or a module and its "
                     "example inputs)")


def _checked_inputs(spec: str, example: Any) -> dict[str, Any]:
    """Example inputs by name; UsageError when they are not a tensor, a tuple or list of tensors, or a dict of
    them."""
    named = _as_named(example)
    wrong = {name: value for name, value in named.items() if not _is_torch(value, "tensor")}
    if wrong or not named:
        which = f"{next(iter(wrong))} is {_kind(next(iter(wrong.values())))}" if wrong else "none given"
        raise UsageError(f"{printable(spec)}: example inputs are tensors (a dict or tuple of them): {which}")
    return named


def _module_and_inputs(record: dict[str, Any], factory: str, inputs: str | None) -> tuple[Any, dict[str, Any], bool]:
    """The user's module, its example inputs by name, and whether they are passed by keyword; (None, {}, False)
    with the record's outcome and error set when the factory (`not_built`) or the inputs' factory (`not_fed`)
    raised."""
    build, feed = load_callable(factory), load_callable(inputs) if inputs is not None else None
    try:
        made = build()
    except Exception as exc:  # noqa: BLE001 - a factory that raises is a model that cannot be built: a result
        record.update(outcome=Outcome.NOT_BUILT, error=describe_error(exc, "build"))
        return None, {}, False
    module, example = _module_of(factory, made)
    record["built"] = True
    if feed is not None:
        try:
            example = feed()
        except Exception as exc:  # noqa: BLE001 - inputs that cannot be made: recorded as the sweep records them
            record.update(outcome=Outcome.NOT_FED, error=describe_error(exc, "feed"))
            return None, {}, False
    if example is None:
        raise UsageError(f"{printable(factory)}: returned no example inputs; give --inputs MODULE:FUNCTION")
    return module, _checked_inputs(inputs or factory, example), isinstance(example, dict)


def run_cell(key: dict[str, Any], stack: dict[str, Any], onnx_path: Path) -> dict[str, Any]:
    """The cell entry (`--runner where223.study.classes.explain`): a factory's module or a model type, in this
    interpreter."""
    import warnings

    warnings.filterwarnings("ignore")
    recipe, exporter = RECIPES[key["recipe"]], key["exporter"]
    opset, mode = key.get("opset", "auto"), key.get("mode", "eval")
    if key.get("factory"):
        from where223.pipeline.environment import describe
        from where223.study._cell.build import DEVICE
        from where223.study._cell.numerics import reduced_type
        from where223.study._cell.stages import explain_module, positional

        record: dict[str, Any] = {
            "model_type": key["model"], "release": stack.get("transformers") or "",
            "settings": {"device": DEVICE, "recipe": recipe.name, "reduced": reduced_type(recipe),
                         "exporter": exporter, "opset": opset, "training": mode == "train"},
            "built": False, "fed": False, "exported": False, "judged": False, "timings_s": {},
            "environment": describe(DEVICE),
        }  # fmt: skip
        timed = functools.partial(time_stage, record)
        module, inputs, by_keyword = _module_and_inputs(record, key["factory"], key.get("inputs"))
        if module is not None:
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
    opset = opset_of(opset)
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


def stopped(record: dict[str, Any]) -> str | None:
    """Why the model never reached ONNX Runtime's verdict on its types, in one line (its outcome, the stage that
    stopped it and the error's first and last lines); None when ONNX Runtime accepted or refused the types."""
    outcome = record.get("outcome")
    if outcome in ACCEPTED or outcome in REFUSED:
        return None
    error = record.get("error") or {}
    message = error.get("message") or record.get("reason") or (record.get("ort") or {}).get("message") or ""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    text = " … ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else "no cause recorded"
    stage = f" at {error['stage']}" if error.get("stage") else ""
    return printable(f"{outcome or 'no outcome'}{stage}: {text}", 400)


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
    if record.get("outcome") == Outcome.CRASHED:  # a usage error in the stack's interpreter: the same one line here
        last = ((record.get("error") or {}).get("message") or "").strip().rpartition("\n")[2]
        if last.startswith(USAGE_ERROR):
            raise UsageError(last.removeprefix(USAGE_ERROR))
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
    from where223.study.classes.refusals import evidence, refusal

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
            from where223.study.judging import numeric_verdict
            from where223.verdicts import NOT_JUDGED

            verdict = "within" if numerics["within_tolerance"] else "outside"
            said, reason = numeric_verdict(numerics)
            judged = f" — not judged: {reason}" if said == NOT_JUDGED else ""
            lines += [f"Against eager PyTorch ({numerics['execution']}): max |difference| / max |eager| = "
                      f"{numerics['relative']:.3g}, {verdict} the tolerance {numerics['tolerance']:.3g} "
                      f"({numerics['reduced']}){judged}.", ""]  # fmt: skip
        else:
            lines += [f"Against eager PyTorch: not measured ({_cut(numerics.get('reason'), 300)}).", ""]
    lines += ["Record: `record.json` (every field)" + ("; graph: `model.onnx`." if record.get("exported") else "."), ""]
    return "\n".join(lines)


def summary_json(record: dict[str, Any]) -> str:
    """One line of JSON: outcome, refused node and operator, numerics status."""
    from where223.study.classes.refusals import refusal

    found = refusal(record) or {}
    return json.dumps({"outcome": record.get("outcome"), "node": found.get("node"),
                       "operator": found.get("operator"), "numerics": (record.get("numerics") or {}).get("status")})
