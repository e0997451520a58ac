"""The conversion's driver: plan (`_plan`), apply (`_retype`), check (lint, ONNX Runtime's type check), compare with
the float32 model (`where223.graph.diff`), and while beyond tolerance keep in float32 the converted nodes where the
first departure arises and try again: a bounded search (MAX_ROUNDS; each round keeps at least one more node, or it
stops) that ends with a model within tolerance on the inputs it was given, or with ConvertError and nothing. Where no
converted node is left upstream of the departure, the graph inputs rounded to the reduced type that reach it keep
float32 (a quantizer fed the model's input); from the second half of the rounds, a departing integer (a quantizer's
output) keeps every converted node upstream of every departing integer at once (`_culprits`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import onnx
import onnx.version_converter
import onnx_ir as ir
from onnx_ir.passes.common import LiftConstantsToInitializersPass

from where223.errors import UsageError, printable
from where223.graph.convert._listing import LISTING_TIMEOUT_S, KernelListing, kernel_listing
from where223.graph.convert._plan import Choice, plan
from where223.graph.convert._record import ConversionRecord, ConvertError, KeptNode, SearchRound
from where223.graph.convert._retype import Origin, RetypePass
from where223.graph.diff import (
    DEFAULT_SEED,
    FORMATS,
    TOLERANCE_SPACINGS,
    CannotCompareError,
    Comparator,
    DiffReport,
    Feeds,
)
from where223.graph.dtypes import short_type
from where223.graph.lint import lint_model
from where223.graph.loading import FreshNames, ModelLike, inline_local_functions, load_model
from where223.graph.ort import ORT_TIMEOUT_S, OrtVerdict, judge
from where223.graph.schema import signature
from where223.graph.types import model_types

__all__ = ["convert", "MAX_ROUNDS", "TARGETS", "reduced_target"]

MAX_ROUNDS = 16  # candidates the search tries at most
_FLOATS = frozenset({"float", "float16", "bfloat16", "double"})  # a departure's candidate_type, as diff names it
TARGETS = {"fp16": "tensor(float16)", "float16": "tensor(float16)", "bf16": "tensor(bfloat16)",
           "bfloat16": "tensor(bfloat16)"}  # fmt: skip


def reduced_target(to: str) -> str:
    """'fp16' or 'float16' -> 'tensor(float16)', 'bf16' or 'bfloat16' -> 'tensor(bfloat16)'; UsageError else."""
    found = TARGETS.get(to.strip().lower())
    if found is None:
        raise UsageError(f"--to {printable(to)}: convert makes fp16 or bf16 models")
    return found


def _prepared(model: onnx.ModelProto, path: Path | None) -> onnx.ModelProto:
    """The model with its local functions inlined (onnx's inliner, as lint does) and its Constant nodes lifted into
    initializers (onnx-ir's pass), so that every float32 constant is an initializer the conversion can round."""
    if model.functions:
        model = inline_local_functions(model, path)
    lifted = ir.serde.deserialize_model(model)
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(lifted)
    return ir.serde.serialize_model(lifted)


def _apply(prepared: onnx.ModelProto, choices: list[Choice], to_type: str, keep_io_types: bool, types,
           smallest_normal: float, kept_inputs: frozenset[str] = frozenset()
           ) -> tuple[onnx.ModelProto, RetypePass]:  # fmt: skip
    model = ir.serde.deserialize_model(prepared)
    retype = RetypePass(choices, to_type, keep_io_types, types, FreshNames(prepared), smallest_normal, kept_inputs)
    retype(model)
    return ir.serde.serialize_model(model), retype


def _check(candidate: onnx.ModelProto, provider: str, timeout_s: float | None) -> str:
    """Lint and ONNX Runtime's type check, which the result passes by construction; ConvertError if it does not."""
    report = lint_model(candidate)
    if report.violations:
        raise ConvertError(f"the conversion left a type violation (a bug in where223's convert; nothing written): "
                           f"{report.violations[0].message()}")
    judgement = judge(candidate, (provider,), timeout_s=timeout_s)
    if judgement.verdict == OrtVerdict.TIMEOUT:
        raise CannotCompareError(f"{judgement.message} checking the conversion (--ort-timeout to wait longer)")
    if judgement.verdict != OrtVerdict.ACCEPTED:
        raise ConvertError(f"ONNX Runtime does not load the conversion ({judgement.verdict}; nothing written): "
                           f"{printable((judgement.message or '').strip(), 500)}")
    return str(report.outcome)


def _cast_takes(to_type: str, opset: int) -> bool:
    """Whether Cast at `opset` takes `to_type` in and out (bfloat16 only from opset 13)."""
    cast = signature("Cast", "", opset)
    return cast is not None and all(to_type in cast.allowed(param) for param in ("T1", "T2"))


def _with_boundaries(model: onnx.ModelProto, to_type: str, opset: int) -> tuple[onnx.ModelProto, int | None]:
    """The model at an opset whose Cast takes the reduced type (every boundary between float32 and it is a Cast):
    as it is, or brought by onnx's version converter to the first opset whose Cast does (bfloat16: 13), with the opset
    it came from. ConvertError when no opset does, or the version converter cannot bring the model there."""
    if _cast_takes(to_type, opset):
        return model, None
    newest = onnx.defs.onnx_opset_version()
    since = next((version for version in range(opset + 1, newest + 1) if _cast_takes(to_type, version)), None)
    short = short_type(to_type)
    if since is None:
        raise ConvertError(f"the model's opset {opset} has no Cast to or from {short}, nor has any opset onnx "
                           f"{onnx.__version__} knows; nothing written")
    try:
        upgraded = onnx.version_converter.convert_version(model, since)
    except Exception as error:  # the version converter's errors share no base class
        raise ConvertError(f"the model's opset {opset} has no Cast to or from {short} (Cast takes it from opset "
                           f"{since}), and onnx's version converter cannot bring the model there "
                           f"({type(error).__name__}: {printable(str(error), 300)}); nothing written") from None
    return upgraded, opset


def _upstream_converted(prepared: onnx.ModelProto, choices: list[Choice], value: str,
                        whole: bool = False) -> tuple[set[int], set[str]]:  # fmt: skip
    """The converted nodes nearest upstream of `value` along nodes that keep float32 (with `whole`, every converted
    node upstream of it), and the graph inputs reached along them."""
    producer = {out: index for index, node in enumerate(prepared.graph.node) for out in node.output if out}
    inputs = {v.name for v in prepared.graph.input}
    found, reached, seen, pending = set(), set(), set(), [value]
    while pending:
        name = pending.pop()
        index = producer.get(name)
        if index is None:
            if name in inputs:
                reached.add(name)
            continue
        if index in seen:
            continue
        seen.add(index)
        if choices[index].converted:
            found.add(index)
        if whole or not choices[index].converted:
            pending.extend(prepared.graph.node[index].input)
    return found, reached


def _culprits(report: DiffReport, origins: Mapping[str, Origin], choices: list[Choice],
              prepared: onnx.ModelProto, escalate: bool = False) -> tuple[set[int], set[str]]:  # fmt: skip
    """The converted nodes the first departure arises at: the node computing the departing value, the readers of a
    Cast into the reduced type or of a rounded initializer, the node before a Cast out of it; for a value a float32
    node computes, the converted nodes nearest upstream. And the graph inputs rounded to the reduced type that reach
    that value through float32 nodes alone (a float32 node fed a rounded input: a quantizer, a comparison).

    A departing value that is not a float (a quantizer's integers, a comparison's booleans) is a step function of
    the floats before it: any rounding upstream can move it by a whole step, and a model quantized throughout
    departs at one quantizer after another, a round each (the search's bound ran out on one with 22). With
    `escalate` (the second half of the search's rounds), when the first departure is one, every converted node
    upstream of every departing value that is not a float is kept at once: more than the nearest, but bounded."""
    departure = report.departure
    if departure is None:
        return set(), set()
    if escalate and departure.candidate_type not in _FLOATS:
        nodes, inputs = set(), set()
        for value, _, candidate_type in report.departures or [(departure.value, "", departure.candidate_type)]:
            if candidate_type not in _FLOATS:
                found_nodes, found_inputs = _upstream_converted(prepared, choices, value, whole=True)
                nodes |= found_nodes
                inputs |= found_inputs
        return nodes, _rounded(inputs, origins)
    origin = origins.get(departure.candidate_value)
    if origin is not None and origin.kind == "input":
        return set(), set()  # the input itself, rounded to the reduced type: no node to keep
    if origin is not None and origin.nodes:
        return set(origin.nodes), set()
    nodes, inputs = _upstream_converted(prepared, choices, departure.value)
    return nodes, _rounded(inputs, origins)


def _rounded(inputs: set[str], origins: Mapping[str, Origin]) -> set[str]:
    """The graph inputs among `inputs` that the conversion rounded to the reduced type."""
    return {name for name in inputs if (found := origins.get(name)) is not None and found.kind == "input"}


def convert(
    model: ModelLike,
    to: str = "fp16",
    keep_io_types: bool = False,
    provider: str = "CPUExecutionProvider",
    feeds: Feeds | str | os.PathLike[str] | None = None,
    seed: int = DEFAULT_SEED,
    dims: Mapping[str, int] | None = None,
    timeout_s: float | None = ORT_TIMEOUT_S,
    listing: KernelListing | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[onnx.ModelProto, ConversionRecord]:
    """`where223 convert`: the float32 model converted to fp16 or bf16 (`to`) node by node where the schema and the
    provider's kernel listing allow it, checked (lint, ONNX Runtime's type check) and compared with the float32
    model on `feeds` (an .npz, else generated with `seed` and `dims`); while beyond tolerance, the converted nodes
    where the first departure arises keep float32 and the conversion is tried again (at most MAX_ROUNDS). Returns
    the model and its record. ConvertError when no candidate within tolerance is found (nothing to write);
    NoListingError / UsageError for a provider whose kernels cannot be known here, unreadable input, bad feeds.
    `timeout_s` bounds every ONNX Runtime call (child processes; None runs them here); `say` hears each round."""
    to_type = reduced_target(to)
    if listing is None:
        listing = kernel_listing(provider, timeout_s=None if timeout_s is None else LISTING_TIMEOUT_S)
    source, path = load_model(model, load_weights=True)
    fmt = FORMATS[short_type(to_type)]
    prepared = _prepared(source, path)
    prepared, upgraded_from = _with_boundaries(prepared, to_type, model_types(prepared, shapes=False).opsets.get("", 1))
    types = model_types(prepared, shapes=False)
    comparator = Comparator(source, feeds, seed, dims, provider, timeout_s, label=str(path or "<model>"))
    record = ConversionRecord(str(path) if path else "<model>", short_type(to_type), keep_io_types, provider,
                              listing.onnxruntime_version, types.opsets.get("", 0), upgraded_from=upgraded_from)
    forced: dict[int, str] = {}
    searched: dict[int, int] = {}  # node index -> the round the search kept it in
    kept_inputs: dict[str, str] = {}  # graph input -> why the search keeps it float32
    for round_ in range(1, MAX_ROUNDS + 1):
        choices = plan(prepared, types, to_type, listing, forced, fmt.max_finite, keep_io_types, frozenset(kept_inputs))
        candidate, retype = _apply(prepared, choices, to_type, keep_io_types, types, fmt.smallest_normal,
                                   frozenset(kept_inputs))
        record.lint = _check(candidate, provider, timeout_s)
        report = comparator.compare(candidate, label=f"<conversion, round {round_}>")
        converted = sum(choice.converted for choice in choices)
        if report.within:
            record.rounds.append(SearchRound(round_, converted, True))
            say(record.rounds[-1].format())
            record.converted = [(c.node, c.op_type) for c in choices if c.converted]
            record.kept = [KeptNode(c.node, c.op_type, c.kept, searched.get(c.index, 0)) for c in choices if c.kept]
            record.initializers, record.casts, record.diff = retype.initializers, retype.casts, report
            record.kept_inputs = list(kept_inputs.items())
            return candidate, record
        departure = report.departure
        shown = departure.describe() if departure else "no value of the reference could be matched"
        nodes, inputs = _culprits(report, retype.origins, choices, prepared, escalate=round_ >= MAX_ROUNDS // 2)
        culprits = {i for i in nodes if i not in forced}
        how = ", ".join(departure.comparison.how) if departure and departure.comparison.how else "precision"
        where = f"'{printable(departure.value)}'" if departure else "a value"
        for index in culprits:
            forced[index] = (f"the conversion departs from the float32 model at {where} ({how}; more than "
                             f"{TOLERANCE_SPACINGS} spacings) when it computes in {fmt.name}")
            searched[index] = round_
        # only where no converted node is left to keep: the input's own rounding is then what departs
        inputs = sorted(inputs - kept_inputs.keys()) if not culprits else []
        for name in inputs:
            kept_inputs[name] = (f"rounded to {fmt.name}, it reaches {where} through float32 nodes alone and the "
                                 f"conversion departs there ({how}; more than {TOLERANCE_SPACINGS} spacings)")
        kept = (*(choices[i].node for i in sorted(culprits)), *(f"input '{printable(name)}'" for name in inputs))
        record.rounds.append(SearchRound(round_, converted, False, shown, kept))
        say(record.rounds[-1].format())
        if not kept:
            hint = (" (an input rounded to the reduced type: --keep-io-types keeps inputs in float32)"
                    if departure and departure.kind == "input" and not keep_io_types else "")
            raise ConvertError(f"no conversion within tolerance: round {round_} departs ({shown}) and no converted "
                               f"node it arises at is left to keep in float32{hint}; nothing written")
    raise ConvertError(f"no conversion within tolerance in {MAX_ROUNDS} rounds (kept {len(forced)} node(s) in float32 "
                       "by the search); nothing written")
