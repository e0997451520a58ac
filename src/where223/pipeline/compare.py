"""Did a rerun reproduce? The JSON records of two outputs trees compared leaf by leaf, each difference judged by
what kind of value it is.

A tree is a folder (`outputs/` by default) or the `outputs/` of a git revision. Its records are its `.json`
files (manifests included), leaving out a run's staging and kept failures; executed notebooks, figures and models
are drawn from the records and are not judged (`compare` says how many of them differ). Each leaf of a record
that differs is one of:

- **environment**: under an `environment`, `driver_environment`, `cell_environments`, `versions` or `packages`
  key, or a `device_name` / `platform`: listed apart (another machine is expected to differ);
- **timing**: a key that names a time, an instant or a speed (`recorded_at`, `*_s`, `seconds`, `duration`,
  step times and the ratios between them, load averages, and how many rounds the variant study's stopping
  rule timed): listed apart, with its relative change;
- **within tolerance**: the `value` of a check (a mapping with `value`, `tolerance` and `verdict`, as
  verification records hold them) whose change is within the check's own numeric tolerance;
- **untoleranced number**: any other floating-point number, or text that differs only in the numbers it
  quotes (a check's detail line): listed apart with its relative change, not judged, because it has no
  tolerance of its own (the checks' values carry the verdicts; the write-up quotes numbers to three significant
  digits, and the count of those that change there is given);
- **differs**: everything else: a verdict, an outcome, any other text, an integer (a count), a check value
  beyond its tolerance, a key or list item or record present on one side only. Any of these means not
  reproduced.

Standard library only (the records are read, never recomputed), so comparing imports no torch.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from where223 import markdown
from where223.errors import UsageError
from where223.pipeline.paths import FAILED, OUTPUTS, ROOT, STAGING

ENVIRONMENT_KEYS = frozenset({"environment", "driver_environment", "cell_environments", "versions", "packages",
                              "device_name", "platform"})
_TIMING = re.compile(
    r"(^|_)(s|seconds|minutes|duration|at)$|load_average|step_time|paired_ratio|^ratio_lint_to_checker$"
    r"|^timing$|^steps_timed$"  # how long the variant study timed, decided by its stopping rule on times
)
_NUMBER_IN_TEXT = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
KINDS = ("differs", "within tolerance", "untoleranced number", "timing", "environment")
SHOWN_DIGITS = 3  # significant digits the write-up prints a float with


class CompareError(UsageError, ValueError):
    """A reference that is neither a folder of records nor a git revision with some, or a tree without records."""


@dataclass(frozen=True)
class Difference:
    """One leaf that differs: where, its kind (KINDS), the two values as text, and a note (tolerance, change)."""

    record: str
    path: str
    kind: str
    reference: str
    rerun: str
    note: str = ""


@dataclass
class Comparison:
    """Every difference between two trees, and what was compared."""

    reference: str
    rerun: str
    records: int
    differences: list[Difference] = field(default_factory=list)
    artifacts_differing: int = 0
    artifacts_compared: int = 0

    def of(self, kind: str) -> list[Difference]:
        return [difference for difference in self.differences if difference.kind == kind]

    @property
    def reproduced(self) -> bool:
        """No verdict, outcome, text, count or check value beyond its tolerance differs, and no record is missing."""
        return not self.of("differs")

    def summary(self) -> str:
        """One line: the verdict and what it rests on."""
        counts = {kind: len(self.of(kind)) for kind in KINDS}
        shown = sum(1 for d in self.of("untoleranced number") if "changes at 3 digits" in d.note)
        head = "reproduced" if self.reproduced else f"not reproduced: {counts['differs']} difference(s) that decide"
        return (
            f"{head} ({self.records} records against {self.reference}); {counts['within tolerance']} check value(s) "
            f"within tolerance; not judged: {counts['untoleranced number']} other number(s) ({shown} visible at "
            f"{SHOWN_DIGITS} digits), {counts['timing']} timing(s), {counts['environment']} environment field(s), "
            f"{self.artifacts_differing} of {self.artifacts_compared} notebooks, figures and models differing in "
            "bytes"
        )


def _excluded(relative: str) -> bool:
    parts = relative.split("/")
    return parts[0] in (STAGING, FAILED) or any(part.startswith(".") for part in parts)


def folder_files(folder: Path) -> dict[str, bytes]:
    """The files of a folder of outputs, by path relative to it: those git would commit when the folder is in a
    git working tree (its ignored logs and scratch models left out), else all; staging, kept failures and hidden
    files left out either way."""
    listed = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                             "--", "."], capture_output=True, check=False)
    if listed.returncode == 0:
        candidates = [folder / name for name in listed.stdout.decode().split("\0") if name]
    else:
        candidates = sorted(folder.rglob("*"))
    found = {}
    for path in sorted(candidates):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and not _excluded(relative):
            found[relative] = path.read_bytes()
    return found


def revision_files(revision: str, root: Path = ROOT, folder: str = "outputs") -> dict[str, bytes]:
    """The files under `folder` of git revision `revision` of the repository at `root`."""
    def git(*args: str, data: bytes | None = None) -> bytes:
        done = subprocess.run(["git", "-C", str(root), *args], input=data, capture_output=True, check=False)
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            why = f" ({message[-1]})" if message else ""
            raise CompareError(f"{revision}: not a folder, nor a git revision of {root}{why}")
        return done.stdout

    commit = git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").decode().strip()
    names = [name for name in git("ls-tree", "-r", "-z", "--name-only", commit, "--", f"{folder}/").decode()
             .split("\0") if name]
    if not names:
        return {}
    batch = git("cat-file", "--batch", data="".join(f"{commit}:{name}\n" for name in names).encode())
    files, at = {}, 0
    for name in names:
        header_end = batch.index(b"\n", at)
        size = int(batch[at:header_end].split()[2])
        files[name[len(folder) + 1:]] = batch[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
    return {relative: data for relative, data in files.items() if not _excluded(relative)}


def tree_files(reference: str | Path) -> dict[str, bytes]:
    """A folder's files, or else the `outputs/` of a git revision; CompareError when it is neither."""
    path = Path(reference)
    if path.is_dir():
        return folder_files(path)
    return revision_files(str(reference))


def _text(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, sort_keys=True)[:80]


_ABSENT = object()


def _is_environment(keys: list[str]) -> bool:
    return any(key in ENVIRONMENT_KEYS for key in keys)


def _is_timing(keys: list[str]) -> bool:
    return any(_TIMING.search(key) for key in keys if not key.startswith("["))


def _relative(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


def _shown_alike(a: float, b: float) -> bool:
    return f"{a:.{SHOWN_DIGITS}g}" == f"{b:.{SHOWN_DIGITS}g}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _tolerance_at(tolerance: Any, keys: list[str]) -> float | None:
    """The numeric tolerance of a check for the part of its value at `keys` (a per-model tolerance by model)."""
    for key in keys:
        if isinstance(tolerance, Mapping):
            tolerance = tolerance.get(key)
    return float(tolerance) if _number(tolerance) else None


def _leaves(reference: Any, rerun: Any, keys: list[str], check: Mapping[str, Any] | None
            ) -> Iterator[tuple[list[str], Any, Any, Mapping[str, Any] | None]]:
    """Every pair of differing leaves, with its keys and the check it lies in (None outside checks)."""
    if type(reference) is type(rerun) and reference == rerun:  # equal subtrees hold no differing leaf (C speed)
        return
    if isinstance(reference, Mapping) and isinstance(rerun, Mapping):
        if {"value", "tolerance", "verdict"} <= set(reference):
            check = reference
        for key in sorted(set(reference) | set(rerun)):
            yield from _leaves(reference.get(key, _ABSENT), rerun.get(key, _ABSENT), [*keys, str(key)], check)
    elif isinstance(reference, list) and isinstance(rerun, list) and len(reference) == len(rerun):
        for index, (a, b) in enumerate(zip(reference, rerun, strict=True)):
            yield from _leaves(a, b, [*keys, f"[{index}]"], check)
    elif reference != rerun and not (_number(reference) and _number(rerun) and reference == rerun):
        yield keys, reference, rerun, check


def judge(record: str, keys: list[str], reference: Any, rerun: Any, check: Mapping[str, Any] | None) -> Difference:
    """The kind of one differing leaf (see the module's docstring)."""
    path = ".".join(keys).replace(".[", "[")
    a, b = _text(reference), _text(rerun)
    if _is_environment(keys):
        return Difference(record, path, "environment", a, b)
    numbers = _number(reference) and _number(rerun)
    if _is_timing(keys):
        note = f"relative change {_relative(reference, rerun):.2g}" if numbers else ""
        return Difference(record, path, "timing", a, b, note)
    if numbers and check is not None and "value" in keys:
        inside = keys[keys.index("value") + 1 :] if "value" in keys else []
        tolerance = _tolerance_at(check.get("tolerance"), inside)
        if tolerance is not None:
            change = abs(reference - rerun)
            kind = "within tolerance" if change <= tolerance else "differs"
            return Difference(record, path, kind, a, b, f"change {change:.3g}, check tolerance {tolerance:g}")
    if numbers and (isinstance(reference, float) or isinstance(rerun, float)):
        if math.isnan(reference) and math.isnan(rerun):
            return Difference(record, path, "untoleranced number", a, b, "both NaN")
        shown = "shown alike" if _shown_alike(reference, rerun) else f"changes at {SHOWN_DIGITS} digits"
        return Difference(record, path, "untoleranced number", a, b,
                          f"relative change {_relative(reference, rerun):.2g}, {shown}")
    if (isinstance(reference, str) and isinstance(rerun, str)
            and _NUMBER_IN_TEXT.sub("#", reference) == _NUMBER_IN_TEXT.sub("#", rerun)):
        return Difference(record, path, "untoleranced number", a, b, "text that differs only in its numbers")
    return Difference(record, path, "differs", a, b)


def compare_files(reference: dict[str, bytes], rerun: dict[str, bytes], reference_name: str, rerun_name: str
                  ) -> Comparison:
    """Compare two trees' files: records leaf by leaf, the other files by presence (and bytes, not judged)."""
    records = sorted(name for name in set(reference) | set(rerun) if name.endswith(".json"))
    if not any(name.endswith(".json") for name in reference):
        raise CompareError(f"{reference_name}: no records (.json files) to compare against")
    if not any(name.endswith(".json") for name in rerun):
        raise CompareError(f"{rerun_name}: no records (.json files) to compare")
    comparison = Comparison(reference_name, rerun_name, len(records))
    for name in records:
        if name not in rerun or name not in reference:
            side = "the rerun" if name not in rerun else "the reference"
            comparison.differences.append(Difference(name, "", "differs", "(present)" if name in reference
                                                     else "(absent)", "(present)" if name in rerun else "(absent)",
                                                     f"missing from {side}"))
            continue
        if reference[name] == rerun[name]:  # the same bytes: no leaf differs
            continue
        try:
            old, new = json.loads(reference[name]), json.loads(rerun[name])
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            comparison.differences.append(Difference(name, "", "differs", "", "", f"not valid JSON: {error}"))
            continue
        for keys, a, b, check in _leaves(old, new, [], None):
            comparison.differences.append(judge(name, keys, a, b, check))
    artifacts = sorted(name for name in set(reference) | set(rerun) if not name.endswith(".json"))
    comparison.artifacts_compared = len(artifacts)
    comparison.artifacts_differing = sum(1 for name in artifacts if reference.get(name) != rerun.get(name))
    return comparison


def compare(reference: str | Path = "HEAD", rerun: Path = OUTPUTS) -> Comparison:
    """Compare the records of `rerun` (a folder, `outputs/` by default) with those of `reference`: a folder, or a
    git revision whose `outputs/` is read from the repository (default HEAD, the committed outputs)."""
    if not Path(rerun).is_dir():
        raise CompareError(f"{rerun}: no such outputs folder")
    return compare_files(tree_files(reference), folder_files(Path(rerun)), str(reference), str(rerun))


def table(comparison: Comparison, kinds: tuple[str, ...] = KINDS, limit: int = 40) -> str:
    """The differences as a Markdown table, the deciding ones first, at most `limit` rows per kind."""
    rows: list[list[str]] = []
    for kind in kinds:
        found = comparison.of(kind)
        for difference in found[:limit]:
            rows.append([kind, difference.record, difference.path or "(the record)", difference.reference,
                         difference.rerun, difference.note])
        if len(found) > limit:
            rows.append([kind, f"… {len(found) - limit} more", "", "", "", ""])
    header = ["kind", "record", "field", "reference", "rerun", "note"]
    return "\n".join(markdown.table(header, rows)) if rows else "no differences"
