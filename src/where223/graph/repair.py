"""Resolve type-binding conflicts by inserting Cast nodes, re-linting the result (`where223 repair` then loads
it in ONNX Runtime).

Each input that breaks a type binding gets a Cast to the target type (by default the type the node's
outputs already carry, else the majority of the bound values). With an explicit target that differs
from an output's type, the output is renamed and cast back, so every consumer still sees its old type.
One Cast is shared by every node in a graph that needs the same value in the same type.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from where223.errors import Finding, UsageError, printable
from where223.files import temporary_folder
from where223.graph.dtypes import elem_type_of, short_type, tensor_type_string
from where223.graph.lint import Binding, FindingKind, Violation, lint_model, lint_types
from where223.graph.loading import FreshNames, ModelLike, load_model, subgraphs
from where223.graph.types import model_types

_EXTERNAL_DATA_THRESHOLD = 2**31 - 2**20  # protobuf's 2 GiB limit, with headroom for the graph


class RepairError(Finding, RuntimeError):
    """The model cannot be repaired by Cast insertion (or binding conflicts remain after it)."""


class RepairRefused(Finding, RuntimeError):
    """The repaired model is written, and ONNX Runtime refuses it (or did not judge it within its time)."""


@dataclass(frozen=True)
class Change:
    """One Cast inserted for one node's input (`cast_input`) or behind its output (`cast_output`)."""

    kind: str
    node: str
    subgraph: str
    value: str
    position: int
    from_type: str
    to_type: str
    cast_node: str
    new_value: str

    def __str__(self) -> str:
        node, value, new_value, cast = map(printable, (self.node, self.value, self.new_value, self.cast_node))
        where = f" [{printable(self.subgraph)}]" if self.subgraph else ""
        if self.kind == "cast_input":
            return (
                f"{node}{where}: input {self.position} '{value}' {self.from_type} -> "
                f"{self.to_type} via Cast '{cast}' (new value '{new_value}')"
            )
        return (
            f"{node}{where}: output {self.position} now '{new_value}' {self.from_type}, cast back "
            f"to {self.to_type} as '{value}' by Cast '{cast}'"
        )


def _cast(source: str, target: str, names: FreshNames) -> onnx.NodeProto:
    value = names.fresh(f"{source}_where223_{short_type(target)}")
    return onnx.helper.make_node(
        "Cast", [source], [value], name=names.fresh(f"{value}/Cast"), to=elem_type_of(target)
    )


def _target_for(violation: Violation, target: str) -> str:
    chosen = violation.expected if target == "output" else tensor_type_string(target)
    if chosen is None or chosen not in violation.allowed:
        raise RepairError(
            f"{printable(violation.node)}: target {chosen} is not allowed for type parameter {violation.type_param} "
            f"of {violation.op_type} (allowed: {', '.join(violation.allowed)})"
        )
    for binding in violation.bindings:
        if not binding.type.startswith("tensor("):
            raise RepairError(f"{printable(violation.node)}: {binding} is not a tensor, Cast cannot convert it")
    return chosen


class _Editor:
    """Collects Cast insertions on a copy of a model, then splices them into the node lists."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        self.graphs = dict(subgraphs(self.model.graph))
        self.names = FreshNames(self.model)
        self.before: dict[tuple[str, int], list[onnx.NodeProto]] = {}
        self.after: dict[tuple[str, int], list[onnx.NodeProto]] = {}
        self.shared: dict[tuple[str, str, str], onnx.NodeProto] = {}
        self.changes: list[Change] = []

    def cast_input(self, violation: Violation, binding: Binding, to_type: str) -> None:
        """Feed the node a Cast of the input (one Cast per value and type in a graph)."""
        key = (violation.subgraph, binding.name, to_type)
        if key not in self.shared:
            self.shared[key] = _cast(binding.name, to_type, self.names)
            self.before.setdefault((violation.subgraph, violation.node_index), []).append(self.shared[key])
        cast = self.shared[key]
        node = self.graphs[violation.subgraph].node[violation.node_index]
        node.input[binding.position] = cast.output[0]
        self.changes.append(
            Change("cast_input", violation.node, violation.subgraph, binding.name, binding.position,
                   binding.type, to_type, cast.name, cast.output[0])
        )  # fmt: skip

    def cast_output(self, violation: Violation, binding: Binding, to_type: str) -> None:
        """Rename the output (now of `to_type`) and cast it back under its old name and type."""
        renamed = self.names.fresh(f"{binding.name}_where223_{short_type(to_type)}")
        node = self.graphs[violation.subgraph].node[violation.node_index]
        node.output[binding.position] = renamed
        cast = onnx.helper.make_node(
            "Cast", [renamed], [binding.name], name=self.names.fresh(f"{binding.name}/Cast"),
            to=elem_type_of(binding.type),
        )  # fmt: skip
        self.after.setdefault((violation.subgraph, violation.node_index), []).append(cast)
        self.changes.append(
            Change("cast_output", violation.node, violation.subgraph, binding.name, binding.position,
                   to_type, binding.type, cast.name, renamed)
        )  # fmt: skip

    def apply(self) -> onnx.ModelProto:
        """The edited model, each Cast placed next to the node it serves."""
        # subgraphs first: rebuilding a node list copies its nodes, subgraph attributes included
        for path, graph in reversed(self.graphs.items()):
            if not any(k[0] == path for k in (*self.before, *self.after)):
                continue
            nodes = []
            for index, node in enumerate(graph.node):
                nodes.extend(self.before.get((path, index), []))
                nodes.append(node)
                nodes.extend(self.after.get((path, index), []))
            del graph.node[:]
            graph.node.extend(nodes)
        return self.model


def repair(model: ModelLike, target: str = "output") -> tuple[onnx.ModelProto, list[Change]]:
    """A copy of `model` with Casts resolving every type-binding conflict, and the changes made.

    `target` is 'output' (each node's output type, else the majority) or an ONNX element type name
    such as 'float' or 'tensor(float16)'. A model without binding conflicts is returned as is, with no
    changes. Other findings (a type outside a parameter's allowed set) cannot be cured by a Cast at the
    conflict and are left in place: `lint_model` on the result still lists them. Raises RepairError when
    the target is not allowed or a binding conflict survives the Casts.
    """
    original, _ = load_model(model)
    report = lint_types(model_types(original))
    conflicts = [v for v in report.violations if v.kind == FindingKind.BINDING_CONFLICT]
    if not conflicts:
        return original, []
    editor = _Editor(original)
    for violation in conflicts:
        to_type = _target_for(violation, target)
        for binding in violation.bindings:
            if binding.type != to_type:
                cast = editor.cast_input if binding.io == "input" else editor.cast_output
                cast(violation, binding, to_type)
    repaired = editor.apply()
    left = [v for v in lint_model(repaired).violations if v.kind == FindingKind.BINDING_CONFLICT]
    if left:
        raise RepairError("Casts inserted but binding conflicts remain: " + "; ".join(v.message() for v in left))
    return repaired, editor.changes


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Write a model atomically into an existing folder: its weights inline when they fit protobuf's limit,
    else beside it as PATH.data.

    The files are written into a temporary folder beside `path` (`where223.files.temporary_folder`, removed
    however the write ends, and by the next write into the folder when a killed process left it), then renamed
    into place (the weights first), so a reader never finds a half-written model and a failed write leaves the
    old one intact. A symlink at `path` is replaced by the file, not written through.
    """
    path = Path(path)
    external = model.ByteSize() > _EXTERNAL_DATA_THRESHOLD
    with temporary_folder(path) as staging:
        onnx.save_model(model, str(staging / path.name), save_as_external_data=external, location=f"{path.name}.data")
        if external:
            os.replace(staging / f"{path.name}.data", path.with_name(f"{path.name}.data"))
        os.replace(staging / path.name, path)
    return path


ORT_TIMEOUT_S = 60.0  # default time ONNX Runtime may take to create a session for a repaired model


def repair_file(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    target: str = "output",
    ort_timeout_s: float = ORT_TIMEOUT_S,
    say: Callable[[str], None] = print,
) -> list[Change]:
    """`where223 repair`: repair the model at `source` into `output`, re-lint it and have ONNX Runtime judge it
    (in a child process, within `ort_timeout_s`), saying each step's result through `say`; returns the changes.

    Nothing is written when there is nothing to repair. RepairError (exit 1) when the model cannot be repaired,
    RepairRefused (exit 1, the file written) when ONNX Runtime refuses the result or takes too long; UsageError for
    a target that names no ONNX type; UnreadableModelError for an input that cannot be read.
    """
    from where223.graph.ort import OrtVerdict, judge

    if target != "output":
        try:
            tensor_type_string(target)
        except ValueError as error:
            raise UsageError(f"--to: {error}") from error
    model, _ = load_model(source, load_weights=True)
    repaired, changes = repair(model, target=target)
    if not changes:
        say(f"{source}: no type-binding conflicts; nothing changed, nothing written")
        return changes
    save_model(repaired, output)
    say(f"repaired {source} -> {output}: {len(changes)} change(s)")
    for change in changes:
        say(f"  {change}")
    relinted = lint_model(output)
    remaining = relinted.violations
    if remaining:
        left = f"; {len(remaining)} other finding(s) left in place:"
    else:
        left = ", clean" if relinted.clean else ", no other finding among the nodes checked"
    say(f"re-lint: no type-binding conflict left{left}")
    for violation in remaining:
        say(f"  {violation.message()}")
    judgement = judge(output, timeout_s=ort_timeout_s)
    if judgement.verdict == OrtVerdict.MISSING_KERNEL:
        say("ONNX Runtime accepts the repaired model's types; this machine cannot execute it: "
            + printable((judgement.message or "").strip(), 2000))
    elif judgement.verdict == OrtVerdict.TIMEOUT:
        raise RepairRefused(f"{output} is written but unchecked: {judgement.message} (--ort-timeout to wait longer)")
    elif judgement.verdict != OrtVerdict.ACCEPTED:
        raise RepairRefused(f"ONNX Runtime refuses the repaired model: {judgement.message}")
    else:
        say("ONNX Runtime loads the repaired model")
    return changes
