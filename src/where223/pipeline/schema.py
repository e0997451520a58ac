"""Record types, checked: the one validator of every JSON record the project publishes under `outputs/`.

A record type is a `TypedDict` (standard library only, so a sweep cell in an older stack's interpreter can use it)
declared in a module named `record` beside the code that writes the record (`where223.study.<question>.record`,
`where223.gpt2.record`, ...). Each such module maps the records it types to their place in the outputs tree:
`RECORDS = {"matrix/cells/*.json": MatrixCellRecord, ...}` (each `/`-separated part a shell pattern, the parts
counted: `*` never spans a folder). `record_types` finds them all by looking for those modules, so a new question's
records are checked the day its package lands.

`problems(value, annotation)` says where a value departs from its type: a key the type requires and the value
lacks, a key the type does not declare (a renamed key is both), a value of another JSON type. Types are checked
as JSON holds them: `float` accepts an `int`, `int` refuses a `bool`; `Any` accepts anything.

`role_problems` checks that every role a record type declares (`where223.pipeline.roles`: what may change on a
faithful rerun, which `where223 compare` reads) names a place that exists: through the TypedDicts as far as they
go (a key they do not have is refuted there), and below `Any` against the records (each pattern must name a place
in at least one record of its type).

`check_records` reads each record as strict JSON (a `NaN`, `Infinity` or `-Infinity` makes it unreadable) and
accepts, on every record type, the top-level `not_representable` list `where223.pipeline.records.write_json` adds
when a value could not be written (each entry a `NotRepresentable`: a JSON Pointer and the value's text; the
value itself is null where it was, which its type may not allow, so a record that has the list is checked with
those places left out).
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from where223.pipeline import roles
from where223.pipeline.records import NOT_REPRESENTABLE, NotRepresentable

SRC = Path(__file__).resolve().parents[1]  # src/where223
RECORD_MODULE = "record"


def _is_typed_dict(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, dict) and hasattr(annotation, "__total__")


def _name(annotation: Any) -> str:
    if annotation is None or annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def problems(value: Any, annotation: Any, where: str = "") -> list[str]:
    """Where `value` departs from `annotation` (a TypedDict, a JSON type, list/dict of one, a union, Any)."""
    at = where or "the record"
    if annotation is Any:
        return []
    if annotation is None or annotation is type(None):
        return [] if value is None else [f"{at}: {type(value).__name__}, not null"]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if any(not problems(value, option, where) for option in options):
            return []
        return [f"{at}: {type(value).__name__}, not {' | '.join(_name(o) for o in options)}"]
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        return [] if value in allowed else [f"{at}: {value!r}, not one of {allowed}"]
    if _is_typed_dict(annotation):
        if not isinstance(value, dict):
            return [f"{at}: {type(value).__name__}, not an object ({annotation.__name__})"]
        hints = typing.get_type_hints(annotation)
        found = [f"{at}: no key {key!r} ({annotation.__name__} requires it)"
                 for key in sorted(annotation.__required_keys__) if key not in value]
        found += [f"{at}: key {key!r} is not in {annotation.__name__}" for key in value if key not in hints]
        for key, item in value.items():
            if key in hints:
                found += problems(item, hints[key], f"{where}.{key}" if where else key)
        return found
    if origin in (list, tuple) or annotation in (list, tuple):
        if not isinstance(value, list):
            return [f"{at}: {type(value).__name__}, not a list"]
        (item_type,) = typing.get_args(annotation)[:1] or (Any,)
        return [problem for index, item in enumerate(value) for problem in problems(item, item_type, f"{at}[{index}]")]
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            return [f"{at}: {type(value).__name__}, not an object"]
        arguments = typing.get_args(annotation)
        item_type = arguments[1] if len(arguments) == 2 else Any
        return [problem for key, item in value.items() for problem in problems(item, item_type, f"{at}.{key}")]
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation in (str, bool):
        ok = isinstance(value, annotation)
    else:
        raise TypeError(f"{at}: cannot check against {annotation!r}")
    return [] if ok else [f"{at}: {type(value).__name__} {str(value)[:40]!r}, not {_name(annotation)}"]


def record_modules(src: Path = SRC) -> list[str]:
    """Every `record` module of the package (found on disk, so finding them imports nothing else)."""
    found = []
    for path in sorted(src.rglob(f"{RECORD_MODULE}.py")):
        parts = path.relative_to(src.parent).with_suffix("").parts
        if "__pycache__" not in parts:
            found.append(".".join(parts))
    return found


def record_types(modules: Iterable[str] | None = None) -> dict[str, type]:
    """Place in the outputs tree -> record type, from every record module's RECORDS."""
    types_of: dict[str, type] = {}
    for name in record_modules() if modules is None else modules:
        declared: Mapping[str, type] = getattr(importlib.import_module(name), "RECORDS", {})
        for pattern, record_type in declared.items():
            if pattern in types_of and types_of[pattern] is not record_type:
                raise ValueError(f"{pattern} is typed twice: {types_of[pattern].__name__} and {record_type.__name__}")
            types_of[pattern] = record_type
    return types_of


def matches(relative: str, pattern: str) -> bool:
    """Whether the `/`-separated path `relative` matches `pattern` part by part (`*` stays inside one part)."""
    parts, wanted = relative.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=True))


def type_of(relative: str, types_of: Mapping[str, type]) -> type | None:
    """The one record type whose place matches `relative`; ValueError when two do."""
    found = {record_type for pattern, record_type in types_of.items() if matches(relative, pattern)}
    if len(found) > 1:
        raise ValueError(f"{relative} matches {len(found)} record types: {sorted(t.__name__ for t in found)}")
    return found.pop() if found else None


def check_records(root: str | os.PathLike[str], relatives: Iterable[str],
                  types_of: Mapping[str, type] | None = None) -> list[str]:
    """The problems of the records `relatives` (paths under `root`, `/`-separated): a record no type claims, one
    that does not parse, one that departs from its type."""
    types_of = record_types() if types_of is None else types_of
    found: list[str] = []
    for relative in relatives:
        record_type = type_of(relative, types_of)
        if record_type is None:
            found.append(f"{relative}: no record type claims it (add it to a record module's RECORDS)")
            continue
        try:
            value = json.loads((Path(root) / relative).read_text(), parse_constant=_not_json)
        except (OSError, ValueError) as error:
            found.append(f"{relative}: unreadable: {error}")
            continue
        found += [f"{relative}: {problem}" for problem in record_problems(value, record_type)]
    return found


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (records.write_json writes null and lists it under "
                     f"{NOT_REPRESENTABLE!r})")


def record_problems(value: Any, record_type: type) -> list[str]:
    """`problems` of a whole record: its `not_representable` list checked on its own, and the null each entry
    names not held against the record's type."""
    if not isinstance(value, dict) or NOT_REPRESENTABLE not in value:
        return problems(value, record_type)
    value = dict(value)
    noted = value.pop(NOT_REPRESENTABLE)
    found = problems(noted, list[NotRepresentable], NOT_REPRESENTABLE)
    if found:
        return found + problems(value, record_type)
    nulled = {_where(value, entry["path"]) for entry in noted}
    return [problem for problem in problems(value, record_type) if problem.split(":", 1)[0] not in nulled]


def _where(value: Any, pointer: str) -> str:
    """A JSON Pointer into `value` as `problems` names the place (`/a/b/0` -> `a.b[0]`, `b` a list)."""
    where = ""
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list) and part.isdigit():
            where, value = f"{where}[{part}]", value[int(part)] if int(part) < len(value) else None
        else:
            where = f"{where}.{part}" if where else part
            value = value.get(part) if isinstance(value, dict) else None
    return where


def role_problems(root: str | os.PathLike[str], relatives: Iterable[str],
                  types_of: Mapping[str, type] | None = None, made: Mapping[str, Any] | None = None) -> list[str]:
    """Where a role a record type declares names no place: a part its TypedDicts refute, or, below `Any`, a
    pattern that names nothing in any of the records `relatives` (paths under `root`) of its type, nor in the
    records `made` (relative path -> record) that today's code writes, for leaves newer than every committed
    record of their type."""
    types_of = record_types() if types_of is None else types_of
    found: list[str] = []
    pending: dict[type, dict[str, tuple[str, ...]]] = {}
    for record_type in dict.fromkeys(types_of.values()):
        for declaration in roles.declarations(record_type):
            where = f"{record_type.__name__}: the role declared at {declaration.pattern}"
            if declaration.problem:
                found.append(f"{where}: {declaration.problem}")
            elif declaration.typed < len(declaration.parts):
                pending.setdefault(record_type, {})[declaration.pattern] = declaration.parts
    counted: dict[type, int] = {}
    made = made or {}
    # a made record may share its path with a committed one (a record type of one fixed place): each is read
    for relative, is_made in [*((r, False) for r in relatives), *((r, True) for r in made)]:
        record_type = type_of(relative, types_of)
        wanted = pending.get(record_type) if record_type is not None else None
        if not wanted:
            continue
        counted[record_type] = counted.get(record_type, 0) + 1
        try:
            value = made[relative] if is_made else json.loads((Path(root) / relative).read_text())
        except (OSError, ValueError):
            continue  # check_records says why
        for pattern, parts in list(wanted.items()):
            if next(roles.places(value, parts), roles) is not roles:
                del wanted[pattern]
    for record_type, wanted in pending.items():
        for pattern in wanted:
            found.append(f"{record_type.__name__}: the role declared at {pattern} names nothing in any of its "
                         f"{counted.get(record_type, 0)} record(s)")
    return found
