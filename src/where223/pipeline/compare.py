"""Did a rerun reproduce? The JSON records of two outputs trees compared leaf by leaf, each difference judged by
the role its record type declares for it.

A tree is a folder (`outputs/` by default) or the `outputs/` of a git revision. Its records are its `.json`
files (manifests included), leaving out a run's staging and kept failures; executed notebooks, figures and models
are drawn from the records and are not judged (`compare` says how many of them differ). Each record's type is the
one `where223.pipeline.schema` finds for its place, and its roles are what that type declares
(`where223.pipeline.roles`: `Annotated` markers on its keys, and `Within` tables of path patterns below keys its
type leaves open). Each leaf that differs is one of:

- **environment**: declared the machine, its interpreter and packages, or the code that ran (a call stack's line
  numbers, a traceback): listed apart (another machine, or another commit of where223, is expected to differ);
- **timing**: declared a time, an instant, a speed or what a rule on times decided: listed apart, with its
  relative change;
- **within tolerance**: a measured number declared with a tolerance (its own, or its check's `tolerance`) that
  moved by no more than it;
- **informational**: what is declared informational (measured numbers kept for the reader, and what their
  measurement orders, such as a list worst first; a check's value or verdict carries the finding): listed apart
  with its relative change, never deciding;
- **differs**: everything else: any leaf whose role is not declared (a verdict, an outcome, a count, a name, any
  text, whatever digits it differs in), a measured number beyond its tolerance or no longer a number, a key or
  list item or record present on one side only (except under an environment, a timing or an informational
  role, which covers everything under its key). Any of these means not reproduced.

A text declared `Quoting` is judged with what it quotes set aside (a check's detail line quotes its measurements,
an old variant study's reasons its step times, a call stack its line numbers): the rest of it decides, whole
numbers included. A record no type claims has no roles: every difference in it decides.

A folder compared may come from anyone. It is read as a folder, never through git, so nothing its repository
configures runs, and walked without following links; git runs only on this repository (a revision's outputs/, and
which files of this repository's own outputs/ it would commit), with the commands a repository can configure
switched off (`where223.pipeline.git`). An empty REF, a revision git could read as an option, a gitlink, a file
name that is not UTF-8 or holds a newline, and a tree past the limits below are refused with one line
(CompareError: exit 2); names, keys and values printed are escaped (`where223.errors.printable`).

Standard library only (the records are read, never recomputed), so comparing imports no torch.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from where223 import markdown
from where223.errors import UsageError, printable
from where223.pipeline import roles, schema
from where223.pipeline.git import git as run_git
from where223.pipeline.paths import FAILED, OUTPUTS, ROOT, STAGING

KINDS = ("differs", "within tolerance", "informational", "timing", "environment")
OUTPUTS_FOLDER = OUTPUTS.relative_to(ROOT).as_posix()  # where a repository keeps its outputs: outputs

# What a tree may cost before compare refuses it with one line (exit 2). A folder compared may come from anyone;
# the committed outputs, for scale: 3,800 files and folders, 4 folders deep, 133 MB, the largest record 3.4 MB,
# records nested 9 deep, integers of 11 digits.
FILES_LIMIT = 100_000  # files and folders listed in one tree
FOLDER_DEPTH_LIMIT = 32  # folders inside folders of one tree
FILE_BYTES_LIMIT = 32 * 2**20  # bytes of one file read (a record, a figure, a model)
TREE_BYTES_LIMIT = 2**30  # bytes of all the files read from one tree
DEPTH_LIMIT = 64  # lists and mappings inside each other where two records are compared leaf by leaf
INTEGER_DIGITS_LIMIT = 300  # digits of an integer in a record (past about 308 no float holds it)


class CompareError(UsageError, ValueError):
    """A reference that is neither a folder of records nor a git revision with some, a tree without records, or
    one compare refuses (a name, a gitlink, a record or a tree past a limit)."""


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
        """No leaf that decides differs (see the module's docstring), and no record is missing."""
        return not self.of("differs")

    def summary(self) -> str:
        """One line: the verdict and what it rests on."""
        counts = {kind: len(self.of(kind)) for kind in KINDS}
        head = "reproduced" if self.reproduced else f"not reproduced: {counts['differs']} difference(s) that decide"
        return (
            f"{head} ({self.records} records against {printable(self.reference, None)}); {counts['within tolerance']} "
            f"measured value(s) within tolerance; not judged: {counts['informational']} informational number(s), "
            f"{counts['timing']} timing(s), {counts['environment']} environment field(s), "
            f"{self.artifacts_differing} of {self.artifacts_compared} notebooks, figures and models differing in bytes"
        )


def _excluded(relative: str) -> bool:
    parts = relative.split("/")
    return parts[0] in (STAGING, FAILED) or any(part.startswith(".") for part in parts)


@dataclass
class _Budget:
    """What reading one tree has cost so far, refused with one line past FILES_LIMIT, FILE_BYTES_LIMIT or
    TREE_BYTES_LIMIT."""

    tree: str
    entries: int = 0
    size: int = 0

    def entry(self, count: int = 1) -> None:
        self.entries += count
        if self.entries > FILES_LIMIT:
            raise CompareError(f"{printable(self.tree)}: more than {FILES_LIMIT:,} files and folders to compare "
                               "(FILES_LIMIT)")

    def check(self, name: str, size: int) -> None:
        """Refuse a file of `size` bytes before reading it."""
        if size > FILE_BYTES_LIMIT:
            raise CompareError(f"{printable(self.tree)}: {printable(name)} holds more than {FILE_BYTES_LIMIT:,} "
                               "bytes (FILE_BYTES_LIMIT)")
        if self.size + size > TREE_BYTES_LIMIT:
            raise CompareError(f"{printable(self.tree)}: its files hold more than {TREE_BYTES_LIMIT:,} bytes "
                               "(TREE_BYTES_LIMIT)")

    def read(self, name: str, size: int) -> None:
        """Count a file of `size` bytes read (refused as `check` refuses)."""
        self.check(name, size)
        self.size += size


def _name(tree: str, relative: bytes) -> str:
    """A file's name as text; CompareError for a name that is not UTF-8 or holds a newline."""
    try:
        name = relative.decode("utf-8")
    except UnicodeDecodeError:
        shown = printable(relative.decode("utf-8", "backslashreplace"))
        raise CompareError(f"{printable(tree)}: a file name that is not UTF-8: {shown}") from None
    if "\n" in name:
        raise CompareError(f"{printable(tree)}: a file name with a newline: {printable(name)}")
    return name


def _committable(root: Path) -> set[bytes] | None:
    """The files under `root`'s outputs/ that git would commit (tracked, or untracked and not ignored), by path
    relative to it; None when git cannot say (not a work tree, no git)."""
    prefix = f"{OUTPUTS_FOLDER}/".encode()
    status, listed, _ = run_git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                             prefix.decode(), work_tree=True)
    if status != 0:
        return None
    return {name[len(prefix):] for name in listed.split(b"\0") if name.startswith(prefix)}


_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _entries(folder: int, budget: _Budget) -> list[tuple[bytes, bool, bool]]:
    """A folder's entries, sorted: name, whether a folder, whether a regular file (a link is neither)."""
    try:
        with os.scandir(folder) as listing:
            entries = [(os.fsencode(entry.name), entry.is_dir(follow_symlinks=False),
                        entry.is_file(follow_symlinks=False)) for entry in listing]
    except OSError:  # gone or unreadable meanwhile: nothing in it is compared
        return []
    budget.entry(len(entries))
    return sorted(entries)


def _read(folder: int, name: bytes, relative: str, budget: _Budget) -> bytes | None:
    """A regular file's bytes, opened inside `folder` without following a link; None when it is not one (any
    more)."""
    try:
        handle = os.open(name, _OPEN_FILE, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOENT):  # replaced by a link, or removed, since it was listed
            return None
        raise CompareError(f"{printable(budget.tree)}: {printable(relative)}: cannot read ({error.strerror})"
                           ) from None
    with open(handle, "rb") as file:
        status = os.fstat(handle)
        if not stat.S_ISREG(status.st_mode):
            return None
        budget.check(relative, status.st_size)
        data = file.read(FILE_BYTES_LIMIT + 1)  # no more, should it have grown since
    budget.read(relative, len(data))
    return data


def folder_files(folder: Path, root: Path | None = None) -> dict[str, bytes]:
    """The files of a folder of outputs, by path relative to it; staging, kept failures and hidden files left out.

    The folder is read as a folder: walked without following a link (a link to a file or a folder, inside it or
    out of it, is left out) and never handed to git, so nothing its own repository configures runs. Only `root`'s
    own outputs/ is also listed by git (run on `root` as `_git` runs it), so that what `root`'s .gitignore ignores
    (logs, scratch models) is left out there as before. One-line refusals (CompareError): a name that is not UTF-8
    or holds a newline, and what passes FILES_LIMIT, FOLDER_DEPTH_LIMIT, FILE_BYTES_LIMIT or TREE_BYTES_LIMIT.
    `root` is this repository (ROOT) unless named."""
    tree, root = str(folder), ROOT if root is None else root
    committable = _committable(root) if Path(folder).resolve() == (Path(root) / OUTPUTS_FOLDER).resolve() else None
    budget = _Budget(tree)
    try:
        top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the folder named: a link to one too
    except OSError as error:
        raise CompareError(f"{printable(tree)}: cannot read ({error.strerror})") from None
    found: dict[str, bytes] = {}
    stack = [(top, b"", 0, iter(_entries(top, budget)))]
    try:
        while stack:
            handle, prefix, depth, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(stack.pop()[0])
                continue
            name, is_folder, is_file = entry
            relative = prefix + name
            if name.startswith(b".") or (depth == 0 and name in (STAGING.encode(), FAILED.encode())):
                continue
            if is_folder:
                if depth + 1 > FOLDER_DEPTH_LIMIT:
                    raise CompareError(f"{printable(tree)}: folders nested more than {FOLDER_DEPTH_LIMIT} deep "
                                       "(FOLDER_DEPTH_LIMIT)")
                try:
                    inner = os.open(name, _OPEN_FOLDER, dir_fd=handle)
                except OSError:  # replaced by a link or removed since it was listed, or unreadable: left out
                    continue
                stack.append((inner, relative + b"/", depth + 1, iter(())))  # first: closed should listing it fail
                stack[-1] = (inner, relative + b"/", depth + 1, iter(_entries(inner, budget)))
            elif is_file and (committable is None or relative in committable):
                text = _name(tree, relative)
                data = _read(handle, name, text, budget)
                if data is not None:
                    found[text] = data
    finally:
        for handle, *_ in stack:
            os.close(handle)
    return dict(sorted(found.items()))


def revision_files(revision: str, root: Path | None = None, folder: str = OUTPUTS_FOLDER) -> dict[str, bytes]:
    """The files under `folder` of git revision `revision` of the repository at `root` (git run as `_git` runs it).

    A revision that git could read as an option is refused, so is an empty one; a gitlink (a submodule's commit),
    a name that is not UTF-8 or holds a newline, and what passes FILES_LIMIT, FILE_BYTES_LIMIT or TREE_BYTES_LIMIT
    are one-line refusals (CompareError). Links are left out, as in a folder. `root` is this repository (ROOT)
    unless named."""
    root = ROOT if root is None else root
    if not revision:
        raise CompareError("an empty REF names nothing: give a git revision or a folder (HEAD by default)")
    if revision.startswith("-") or any(char in revision for char in "\0\n"):
        raise CompareError(f"{printable(revision)}: not a folder, nor a git revision (it would read as an option)")

    def git(*args: str, data: bytes | None = None) -> bytes:
        status, output, message = run_git(root, *args, data=data)
        if status != 0:
            why = f" ({message})" if message else ""
            raise CompareError(f"{printable(revision)}: not a folder, nor a git revision of "
                               f"{printable(str(root))}{printable(why)}")
        return output

    commit = git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}").decode().strip()
    budget, prefix, wanted = _Budget(revision), f"{folder}/".encode(), []
    for line in git("ls-tree", "-r", "-z", "-l", "--full-tree", commit, "--", f"{folder}/").split(b"\0"):
        if not line:
            continue
        budget.entry()
        info, _, path = line.partition(b"\t")
        mode, kind, object_id, size = info.split()
        relative = path[len(prefix):]
        if _excluded(relative.decode(errors="replace")) or mode == b"120000":  # a link: left out, as in a folder
            continue
        name = _name(revision, relative)
        if kind != b"blob":
            raise CompareError(f"{printable(revision)}: {printable(folder)}/{printable(name)} is a {kind.decode()} "
                               "(a gitlink: a submodule's commit), not a file")
        budget.read(name, int(size))
        wanted.append((name, object_id, int(size)))
    if not wanted:
        return {}
    batch = git("cat-file", "--batch", data=b"".join(object_id + b"\n" for _, object_id, _ in wanted))
    files, at = {}, 0
    for name, object_id, size in wanted:
        header_end = batch.index(b"\n", at)
        if batch[at:header_end].split() != [object_id, b"blob", str(size).encode()]:
            raise CompareError(f"{printable(revision)}: git read {printable(name)} otherwise than it listed it")
        files[name] = batch[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
    return files


def tree_files(reference: str | Path, root: Path | None = None) -> dict[str, bytes]:
    """A folder's files, or else the `outputs/` of a git revision of `root`; CompareError when it is neither, or
    empty."""
    if not str(reference):  # Path("") would be the current folder
        raise CompareError("an empty REF names nothing: give a git revision or a folder (HEAD by default)")
    path = Path(reference)
    if path.is_dir():
        return folder_files(path, root)
    return revision_files(str(reference), root)


def _text(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, sort_keys=True)[:80]


_ABSENT = object()


def _relative(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _leaves(reference: Any, rerun: Any, keys: list[roles.Key]) -> Iterator[tuple[list[roles.Key], Any, Any]]:
    """Every pair of differing leaves, with its keys (mapping keys, and list indices as ints)."""
    if type(reference) is type(rerun) and reference == rerun and _same_text(reference, rerun):
        return  # equal subtrees hold no differing leaf (C speed)
    if len(keys) > DEPTH_LIMIT:  # inside more lists and mappings than DEPTH_LIMIT, and not equal there
        raise _Refused(_TOO_DEEP)
    if isinstance(reference, Mapping) and isinstance(rerun, Mapping):
        for key in sorted(set(reference) | set(rerun)):
            yield from _leaves(reference.get(key, _ABSENT), rerun.get(key, _ABSENT), [*keys, str(key)])
    elif isinstance(reference, list) and isinstance(rerun, list) and len(reference) == len(rerun):
        for index, (a, b) in enumerate(zip(reference, rerun, strict=True)):
            yield from _leaves(a, b, [*keys, index])
    elif not _same_leaf(reference, rerun):
        yield keys, reference, rerun


def _same_text(reference: Any, rerun: Any) -> bool:
    """Whether two subtrees Python finds equal are equal as JSON too: Python takes true for 1 and false for 0 (and
    0.0), JSON does not. (1 against 1.0 gives two texts, and the walk below finds them equal as numbers.)"""
    if not isinstance(reference, (Mapping, list)):
        return True  # two leaves of one type that are equal
    try:
        return json.dumps(reference, sort_keys=True) == json.dumps(rerun, sort_keys=True)
    except (RecursionError, ValueError):  # nested past the encoder's depth: the walk refuses it past DEPTH_LIMIT
        return False


def _same_leaf(reference: Any, rerun: Any) -> bool:
    """Two leaves that do not differ: equal values where a boolean is only ever equal to a boolean, numbers equal
    across int and float, or two NaNs."""
    if isinstance(reference, bool) or isinstance(rerun, bool):
        return type(reference) is type(rerun) and reference == rerun
    return reference == rerun or (_nan(reference) and _nan(rerun))


def _path(keys: list[roles.Key]) -> str:
    return "".join(f"[{key}]" if isinstance(key, int) else (f".{key}" if index else str(key))
                   for index, key in enumerate(keys))


def _tolerance(role: roles.Measured, record: Any, keys: list[roles.Key], depth: int, a: float, b: float
               ) -> float | None:
    """The tolerance a Measured role gives the leaf at `keys` (declared at `keys[:depth]`) in the reference
    `record`: the largest of its absolute, its relative (to the larger value) and the number its `tolerance_key`
    holds in the nearest enclosing mapping (read by the keys below the declared place when it is a mapping)."""
    found: list[float] = []
    if role.absolute is not None:
        found.append(role.absolute)
    if role.relative is not None:
        found.append(role.relative * max(abs(a), abs(b)))
    if role.tolerance_key is not None:
        holder, enclosing = record, None
        for key in keys[: depth - 1]:  # the mappings above the declared place, outermost first
            if isinstance(holder, Mapping) and role.tolerance_key in holder:
                enclosing = holder
            holder = holder.get(key) if isinstance(holder, Mapping) else (
                holder[key] if isinstance(holder, list) and isinstance(key, int) and key < len(holder) else None)
        if isinstance(holder, Mapping) and role.tolerance_key in holder:
            enclosing = holder
        tolerance = enclosing.get(role.tolerance_key) if enclosing is not None else None
        for key in keys[depth:]:
            if isinstance(tolerance, Mapping):
                tolerance = tolerance.get(key)
        if _number(tolerance) and not _nan(tolerance):
            found.append(float(tolerance))
    return max(found) if found else None


def judge(record: str, keys: list[roles.Key], reference: Any, rerun: Any, record_type: Any = None,
          reference_record: Any = None) -> Difference:
    """The kind of one differing leaf: by the role `record_type` declares for it (see the module's docstring)."""
    path = _path(keys)
    a, b = _text(reference), _text(rerun)
    found = roles.role_of(record_type, keys) if record_type is not None else None
    if found is None:
        return Difference(record, path, "differs", a, b)
    role, depth = found
    numbers = _number(reference) and _number(rerun)
    change = f"relative change {_relative(reference, rerun):.2g}" if numbers else ""
    if isinstance(role, roles.Role):  # a timing, an environment field, an informational number: all under it
        return Difference(record, path, role.kind, a, b, change)
    if isinstance(role, roles.Quoting):
        if isinstance(reference, str) and isinstance(rerun, str) and role.same_apart_from_quotes(reference, rerun):
            return Difference(record, path, role.kind, a, b, f"differs only in what it quotes: {role.why}")
        return Difference(record, path, "differs", a, b, f"differs beyond what it quotes ({role.why})")
    if not numbers:
        return Difference(record, path, "differs", a, b, "measured, but not a number on both sides")
    tolerance = _tolerance(role, reference_record, keys, depth, reference, rerun)
    if tolerance is None:
        return Difference(record, path, "differs", a, b, "measured, but no numeric tolerance found")
    moved = abs(reference - rerun)
    kind = "within tolerance" if moved <= tolerance else "differs"
    return Difference(record, path, kind, a, b, f"change {moved:.3g}, tolerance {tolerance:.3g}")


class _Refused(Exception):
    """A record compare will not read or compare; compare_files says which, as a CompareError."""


_TOO_DEEP = f"lists and mappings nested more than {DEPTH_LIMIT} deep (DEPTH_LIMIT)"


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > INTEGER_DIGITS_LIMIT:  # before int() spends time on it (or refuses past 4,300)
        raise _Refused(f"an integer of {len(digits.lstrip('-')):,} digits, more than {INTEGER_DIGITS_LIMIT} "
                       "(INTEGER_DIGITS_LIMIT)")
    return int(digits)


def _record(data: bytes) -> Any:
    """A record's JSON; json.JSONDecodeError or UnicodeDecodeError when it is not JSON, _Refused past a limit."""
    try:
        return json.loads(data, parse_int=_integer)
    except RecursionError:  # nested deeper than the parser goes: far past DEPTH_LIMIT
        raise _Refused(_TOO_DEEP) from None


def _type_of(name: str, types_of: Mapping[str, type]) -> type | None:
    """The record type of the record at `name` (None: no type claims it, or two do, and every leaf decides)."""
    try:
        return schema.type_of(name, types_of)
    except ValueError:
        return None


def compare_files(reference: dict[str, bytes], rerun: dict[str, bytes], reference_name: str, rerun_name: str
                  ) -> Comparison:
    """Compare two trees' files: records leaf by leaf, the other files by presence (and bytes, not judged)."""
    records = sorted(name for name in set(reference) | set(rerun) if name.endswith(".json"))
    if not any(name.endswith(".json") for name in reference):
        raise CompareError(f"{printable(reference_name)}: no records (.json files) to compare against")
    if not any(name.endswith(".json") for name in rerun):
        raise CompareError(f"{printable(rerun_name)}: no records (.json files) to compare")
    comparison = Comparison(reference_name, rerun_name, len(records))
    types_of = schema.record_types()
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
            try:
                old, new = _record(reference[name]), _record(rerun[name])
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                comparison.differences.append(Difference(name, "", "differs", "", "", f"not valid JSON: {error}"))
                continue
            record_type = _type_of(name, types_of)
            for keys, a, b in _leaves(old, new, []):
                comparison.differences.append(judge(name, keys, a, b, record_type, old))
        except RecursionError:  # comparing subtrees nested deeper than Python goes
            raise CompareError(f"{printable(name)}: {_TOO_DEEP}") from None
        except _Refused as refused:
            raise CompareError(f"{printable(name)}: {refused}") from None
    artifacts = sorted(name for name in set(reference) | set(rerun) if not name.endswith(".json"))
    comparison.artifacts_compared = len(artifacts)
    comparison.artifacts_differing = sum(1 for name in artifacts if reference.get(name) != rerun.get(name))
    return comparison


def compare(reference: str | Path = "HEAD", rerun: Path = OUTPUTS) -> Comparison:
    """Compare the records of `rerun` (a folder, `outputs/` by default) with those of `reference`: a folder, or a
    git revision whose `outputs/` is read from the repository (default HEAD, the committed outputs)."""
    if not Path(rerun).is_dir():
        raise CompareError(f"{printable(str(rerun))}: no such outputs folder")
    return compare_files(tree_files(reference), folder_files(Path(rerun)), str(reference), str(rerun))


def table(comparison: Comparison, kinds: tuple[str, ...] = KINDS, limit: int = 40) -> str:
    """The differences as a Markdown table, the deciding ones first, at most `limit` rows per kind; names, keys
    and values read from the trees escaped and cut (`where223.errors.printable`)."""
    rows: list[list[str]] = []
    for kind in kinds:
        found = comparison.of(kind)
        for difference in found[:limit]:
            shown = (difference.record, difference.path or "(the record)", difference.reference, difference.rerun,
                     difference.note)
            rows.append([kind, *(printable(text) for text in shown)])
        if len(found) > limit:
            rows.append([kind, f"… {len(found) - limit} more", "", "", "", ""])
    header = ["kind", "record", "field", "reference", "rerun", "note"]
    return "\n".join(markdown.table(header, rows)) if rows else "no differences"
