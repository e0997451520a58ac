"""The repair's driver: lint, apply the rules to the root violations, serialize, lint again, until none is left."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx

from where223.errors import printable
from where223.graph.dtypes import tensor_type_string
from where223.graph.lint import FindingKind, Violation, call_outputs, lint_model, lint_types
from where223.graph.loading import ModelLike, load_model
from where223.graph.repair import _binding, _cast_target, _declared, _function_body, _not_allowed
from where223.graph.repair._change import Change, RepairError
from where223.graph.repair._eager import eager_kernels
from where223.graph.repair._edit import Editor
from where223.graph.types import ModelTypes, model_types

MAX_ROUNDS = 5  # a wrong Cast's round, a declared type's, then the rounds for what they leave, then a last check


def _by_node(violations: list[Violation]) -> list[list[Violation]]:
    """The violations grouped per node and type parameter, in graph order."""
    groups: dict[tuple[str, int, str], list[Violation]] = {}
    for violation in violations:
        groups.setdefault((violation.subgraph, violation.node_index, violation.type_param), []).append(violation)
    return list(groups.values())


def _in_scope(violations: list[Violation], target: str) -> list[Violation]:
    """The violations a repair with `target` resolves: all of them, except under `output`, the rule before these
    (what the fix study was recorded with), which resolves binding conflicts only and leaves other findings."""
    if target == "output":
        return [v for v in violations if v.kind == FindingKind.BINDING_CONFLICT]
    return violations


def _editor(model: onnx.ModelProto, types: ModelTypes) -> Editor:
    try:
        return Editor(model, types)
    except Exception as error:  # onnx-ir refusing a model it cannot represent is a reason, not a crash
        raise RepairError(f"onnx-ir cannot edit this model ({type(error).__name__}: "
                          f"{printable(str(error), 300)}); not repaired") from None


def _round(violations: list[Violation], editor: Editor, target: str, kernels: dict[str, Any], eager: bool) -> None:
    """One round: the wrong Casts behind root violations, else the declared types nodes contradict and the function
    bodies ONNX Runtime would refuse, and every other violation that does not follow from them, by its rule."""
    if target != "output" and _cast_target.apply(violations, editor):
        return  # what a wrong Cast made wrong downstream is judged again after it is retargeted
    first = [v for v in violations if _declared.is_declared(v) or v.function_call is not None]
    if first:
        _declared.apply(violations, editor)
        _function_body.apply(violations, editor)
        labels = {v.label for v in first}
        violations = [v for v in violations if v not in first and not labels.intersection(v.caused_by)]
    for group in _by_node(violations):
        conflict = next((v for v in group if v.kind == FindingKind.BINDING_CONFLICT), None)
        if conflict is not None:
            to_type, why = _binding.choose(conflict, target, kernels.get(conflict.node), eager)
            editor.compute_in(conflict, to_type, why)
            continue
        refused = group[0]
        if target in ("auto", "output"):
            to_type, why = _not_allowed.choose(refused, editor.opset)
        else:
            to_type, why = tensor_type_string(target), f"the target asked for, {tensor_type_string(target)}"
            if to_type not in refused.allowed:
                raise RepairError(f"{printable(refused.node)}: target {to_type} is not allowed for type parameter "
                                  f"{refused.type_param} of {refused.op_type} (allowed: {', '.join(refused.allowed)})")
        editor.compute_in(refused, to_type, why)


def _findings(model: onnx.ModelProto, types: ModelTypes, path: Path | None = None) -> list[Violation]:
    """What lint finds in the model as it is (its function calls unchecked), and the declared types of its calls'
    outputs that a model-local function's body contradicts (found on the model with its functions inlined, put at
    the call: `lint.at_calls`); `path` names the model in errors."""
    found = lint_types(types).violations
    if model.functions:
        calls = call_outputs(model)
        at_call = [v for v in lint_model(model, path=path).violations
                   if v.kind == FindingKind.DECLARED_TYPE and not v.subgraph and v.offending
                   and v.offending[0].name in calls and v.node == calls[v.offending[0].name].node]  # fmt: skip
        found += at_call
    return found


def repair(model: ModelLike, target: str = "auto", eager: str | os.PathLike[str] | dict[str, Any] | None = None,
           path: str | os.PathLike[str] | None = None) -> tuple[onnx.ModelProto, list[Change]]:
    """A copy of `model` in which every type violation lint finds is resolved, and the changes made.

    The rules, in order: a wrong Cast target is retargeted (`_cast_target`); a declared type its node contradicts is
    made true, or corrected where its consumers take the computed type (`_declared`); a node whose function body
    ONNX Runtime would refuse is computed in one floating type (`_function_body`); a type-binding conflict is computed
    in one type and cast back (`_binding`: where eager computed when `eager`, a one-model report from `where223
    explain`, records the node's kernel, else the widest bound type; an ONNX type name forces one;
    `target="output"`, the rule before these, casts to the outputs' type and resolves binding conflicts only,
    leaving other findings in place); a type the schema does not allow is computed in the nearest allowed type that
    holds it and cast back (`_not_allowed`). A model without violations is returned as is, with no changes.
    RepairError (with its reason) when a violation has no rule that resolves it, or violations remain. `path` names
    an in-memory model (read from that file) in errors, also about the model as the rounds edited it.
    """
    original, loaded_from = load_model(model)
    named = loaded_from or (Path(path) if path is not None else None)
    kernels = eager_kernels(eager) if eager is not None else {}
    current, changes = original, []
    for _ in range(MAX_ROUNDS):
        # errors name the file, also about a model the rounds edited: what they refuse came with it (found by the
        # fuzz: a function body reading a value nothing defines, refused once the rule computed the call inline)
        types = model_types(current, named)
        violations = _in_scope(_findings(current, types, named), target)
        if not violations:
            return current, changes
        editor = _editor(current, types)
        _round(violations, editor, target, kernels, eager is not None)
        if not editor.changes:
            break
        changes += editor.changes
        current = editor.result()
    left = _in_scope(_findings(current, model_types(current, named), named), target)
    if not left:
        return current, changes
    raise RepairError("violations remain after the repair: " + "; ".join(v.message() for v in left[:5])
                      + (f" (+{len(left) - 5} more)" if len(left) > 5 else ""))
