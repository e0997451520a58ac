"""`where223 repair`: a model file repaired into another, re-linted and judged by ONNX Runtime; the atomic save."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from where223.errors import UsageError, printable
from where223.files import atomic_model_path
from where223.graph.dtypes import tensor_type_string
from where223.graph.lint import lint_model
from where223.graph.loading import load_model
from where223.graph.ort import ORT_TIMEOUT_S
from where223.graph.repair._binding import NOT_CONSULTED
from where223.graph.repair._change import Change, RepairRefused
from where223.graph.repair._repair import repair

_EXTERNAL_DATA_THRESHOLD = 2**31 - 2**20  # protobuf's 2 GiB limit, with headroom for the graph


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str], keep_mode: bool = False) -> Path:
    """Write a model atomically into an existing folder: its weights inline when they fit protobuf's limit,
    else beside it as PATH.data.

    The files are written into a temporary folder beside `path` (`where223.files.atomic_model_path`, removed
    however the write ends, and by the next write into the folder when a killed process left it), then renamed
    into place (the weights first), so a reader never finds a half-written model and a failed write leaves the
    old one intact. A symlink at `path` is replaced by the file, not written through. With `keep_mode`, a file
    replaced passes on its permissions, owner and group (where this process may set them).
    """
    path = Path(path)
    external = model.ByteSize() > _EXTERNAL_DATA_THRESHOLD
    with atomic_model_path(path, keep_mode=keep_mode) as partial:
        onnx.save_model(model, str(partial), save_as_external_data=external, location=f"{path.name}.data")
    return path


def repair_file(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    target: str = "auto",
    ort_timeout_s: float = ORT_TIMEOUT_S,
    say: Callable[[str], None] = print,
    eager: str | os.PathLike[str] | dict[str, Any] | None = None,
    written: Callable[[Path], None] = lambda path: None,
    reference: str | os.PathLike[str] | None = None,
    feeds: str | os.PathLike[str] | None = None,
) -> list[Change]:
    """`where223 repair`: repair the model at `source` into `output`, re-lint it and have ONNX Runtime judge it
    (in a child process, within `ort_timeout_s`), saying each step's result through `say`; returns the changes.

    Nothing is written when there is nothing to repair (ONNX Runtime judges the model all the same: RepairRefused,
    exit 1, with its message when it refuses it), or when a violation cannot be repaired (RepairError,
    exit 1, with its reason). The output is written atomically; a file it replaces (the input itself, in place)
    passes on its permissions, owner and group where this process may set them. `written` is told the output
    as soon as it is in place, before the re-lint and ONNX Runtime's check. RepairRefused (exit 1, the file
    written) when ONNX Runtime refuses the result or takes too long; UsageError for a target that names no ONNX
    type or an unreadable eager report; UnreadableModelError for an input that cannot be read.

    With `reference` (the float32 model), the repaired model is then compared with it (`where223.graph.diff`, on
    `feeds` or generated inputs, each run within `ort_timeout_s`): RepairRefused (exit 1, the file written) beyond
    tolerance; a reference that cannot be read is refused (UsageError) before anything is written.
    """
    from where223.graph.ort import OrtVerdict, first_message_line, judge

    if target not in ("auto", "output"):
        try:
            tensor_type_string(target)
        except ValueError as error:
            raise UsageError(f"--to: {error}") from error
    if reference is not None:
        load_model(reference)  # unreadable: refused before anything is written
    model, _ = load_model(source, load_weights=True)
    repaired, changes = repair(model, target=target, eager=eager, path=source)
    if not changes:  # nothing lint finds to repair: ONNX Runtime still judges the model before that is said
        judgement = judge(source, timeout_s=ort_timeout_s)
        if judgement.verdict == OrtVerdict.TIMEOUT:
            raise RepairRefused(f"{source}: no type violation lint finds, and ONNX Runtime did not judge it: "
                                f"{judgement.message} (--ort-timeout to wait longer); nothing written")
        if not judgement.verdict.types_accepted:
            raise RepairRefused(f"{source}: no type violation lint finds, yet ONNX Runtime refuses the model: "
                                f"{first_message_line(judgement.message or '')}; nothing changed, nothing written")
        runs = "loads it" if judgement.verdict == OrtVerdict.ACCEPTED else "accepts its types"
        say(f"{source}: no type violation; nothing changed, nothing written (ONNX Runtime {runs})")
        return changes
    written(save_model(repaired, output, keep_mode=True))
    say(f"repaired {source} -> {output}: {len(changes)} change(s)")
    for change in changes:
        say(f"  {change}")
    if any(NOT_CONSULTED in change.why for change in changes):
        say("eager was not consulted: conflicts were computed in their widest bound type (give --eager with the "
            "record.json of `where223 explain` to compute where eager PyTorch did)")
    relinted = lint_model(output)
    if relinted.violations:  # only under --to output, which resolves binding conflicts alone
        say(f"re-lint: no type-binding conflict left; {len(relinted.violations)} other finding(s) left in place:")
        for violation in relinted.violations:
            say(f"  {violation.message()}")
    else:
        say("re-lint: no violation left" + (", clean" if relinted.clean else " among the nodes checked"))
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
    if reference is not None:
        _compare_with_reference(reference, output, feeds, ort_timeout_s, say, judgement.verdict == OrtVerdict.ACCEPTED)
    return changes


def _compare_with_reference(reference: str | os.PathLike[str], output: str | os.PathLike[str],
                            feeds: str | os.PathLike[str] | None, timeout_s: float, say: Callable[[str], None],
                            runs_here: bool) -> None:  # fmt: skip
    """`diff` the repaired model against the float32 reference; RepairRefused beyond tolerance."""
    from where223.graph.diff import diff

    if not runs_here:
        say("not compared with the reference: this machine cannot run the repaired model")
        return
    report = diff(reference, output, feeds, timeout_s=timeout_s)
    for line in report.format().splitlines():
        say(f"diff: {line}")
    if not report.within:
        first = report.departure.describe() if report.departure else "no value could be matched to locate it"
        raise RepairRefused(f"{output} is written, and departs from the reference {reference} beyond tolerance: "
                            f"{first}")
