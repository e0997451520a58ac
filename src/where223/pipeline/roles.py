"""What may change when a record is made again faithfully: the roles record types declare for their leaves, which
`where223 compare` reads and `where223.pipeline.schema` checks.

Every leaf of a record decides whether a rerun reproduced it, unless its record type declares the leaf's role.
A role is declared with `Annotated` on a key of the record's `TypedDict` and covers everything under that key:

    wall_s: Annotated[float, TIMING]
    environment: Annotated[dict[str, Any], ENVIRONMENT]

and, for leaves below a key whose type is left open (`dict[str, Any]`, `list[Any]`), by a `Within` table of path
patterns relative to that key, each covering what lies under the place it names:

    numerics: Annotated[dict[str, Any], Within({"relative": Measured(tolerance_key="tolerance"),
                                                "outputs[*].max_abs_diff": Informational("...")})]

A pattern's parts are separated by `.`: a key, `*` for any one key, `[*]` for any list item, `[3]` for one. A
record type nested in another (`environment: Environment`, `checks: list[CheckRecord]`) brings its own roles, and
keys a TypedDict inherits bring theirs.

The roles:

- `Role("timing", why)`: a time, an instant, a speed, or what a rule on times decided (`TIMING`);
- `Role("environment", why)`: the machine, the interpreter, the packages, the code that ran (`ENVIRONMENT`; a
  call stack's line numbers: `FRAMES`, a `Quoting`);
- `Measured(...)`: a measured number that may move by its tolerance (absolute, relative to the larger of the two
  values, or the number a key of an enclosing mapping holds, as a verification check's `tolerance`); beyond it, or
  not a number on both sides, it decides;
- `Informational(why)`: measured numbers kept for the reader (and what their measurement orders, as a list
  worst first), counted apart and never deciding; the write-up does not quote them as a finding (a check's value
  or verdict carries the finding);
- `Quoting(kind, quotes, why)`: a text whose parts matching the regular expression `quotes` (by default a decimal
  number: a measurement as it is printed) are of that kind; the rest of the text, whole numbers included, decides.

Standard library only: record modules import it, in every stack's interpreter (Python 3.10 and later).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

TIMING_KIND, ENVIRONMENT_KIND, INFORMATIONAL_KIND, MEASURED_KIND = "timing", "environment", "informational", "measured"
KINDS = (TIMING_KIND, ENVIRONMENT_KIND, INFORMATIONAL_KIND)  # what a Role or a Quoting may be
# A number as a measurement is printed (a decimal point or an exponent), not part of a dotted name or version
# (`h.0`, `4.26.0`) nor of a word (`float16`, `to=15`).
DECIMAL = r"(?<![\w.])-?(?:\d+\.\d+(?:e[-+]?\d+)?|\d+e[-+]?\d+)(?![\w.]*\d)"
SOURCE_LINE = r"(?<=:)\d+(?=:[^:]*$)"  # the line of a `path:line:function` frame


@dataclass(frozen=True)
class Role:
    """Everything under the key is of `kind` (KINDS), present on both sides or not: it is listed apart and never
    decides."""

    kind: str
    why: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a role's kind is one of {KINDS}, not {self.kind!r}")


def Informational(why: str) -> Role:  # noqa: N802 (read as a role's name beside Measured and Quoting)
    """Measured numbers kept for the reader: counted apart, never deciding, not quoted as a finding."""
    return Role(INFORMATIONAL_KIND, why)


TIMING = Role(TIMING_KIND, "a time, an instant or a speed")
ENVIRONMENT = Role(ENVIRONMENT_KIND, "the machine, its interpreter and packages")


@dataclass(frozen=True)
class Measured:
    """A measured number that may move by its tolerance: `absolute`, `relative` (to the larger of the two values),
    or the number held by `tolerance_key` in the nearest enclosing mapping (a mapping of numbers there is read by
    the keys below the declared place: a tolerance per model). The largest that applies; none: it decides."""

    absolute: float | None = None
    relative: float | None = None
    tolerance_key: str | None = None
    why: str = ""
    kind = MEASURED_KIND

    def __post_init__(self) -> None:
        if self.absolute is None and self.relative is None and self.tolerance_key is None:
            raise ValueError("Measured needs a tolerance: absolute, relative or tolerance_key")


@dataclass(frozen=True)
class Quoting:
    """A text quoting values of `kind` (KINDS): the parts matching `quotes` are of that kind, the rest decides."""

    kind: str
    why: str
    quotes: str = DECIMAL

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a quoting's kind is one of {KINDS}, not {self.kind!r}")
        re.compile(self.quotes)

    def same_apart_from_quotes(self, reference: str, rerun: str) -> bool:
        """Whether the two texts are the same once what they quote is set aside."""
        quoted = re.compile(self.quotes)
        return quoted.sub("\0", reference) == quoted.sub("\0", rerun)


# A call stack's `path:line:function` frames: the line is the code that ran (where223's own lines move whenever its
# code does, the packages' with their builds); the paths and functions decide.
FRAMES = Quoting(ENVIRONMENT_KIND, "a frame's line number: the code that ran (its path and function decide)",
                 quotes=SOURCE_LINE)


Declared = Union[Role, Measured, Quoting]  # noqa: UP007 (evaluated at run time, in Python 3.10 too)
Key = Union[str, int]  # noqa: UP007 (a mapping's key, or a list's index)
_PART = re.compile(r"\[(?:\*|\d+)\]|[^.\[\]]+")


def parse(pattern: str) -> tuple[str, ...]:
    """A pattern's parts (`a.*[*].b` -> `a`, `*`, `[*]`, `b`); ValueError for one that is not a pattern."""
    parts = tuple(_PART.findall(pattern))
    rebuilt = "".join(part if part.startswith("[") or index == 0 else f".{part}" for index, part in enumerate(parts))
    if not parts or rebuilt != pattern:
        raise ValueError(f"not a path pattern: {pattern!r} (keys separated by '.', '*', '[*]' or '[n]')")
    return parts


def part_matches(part: str, key: Key) -> bool:
    """Whether one part of a pattern matches one key (a str) or list index (an int)."""
    if isinstance(key, int):
        return part == "[*]" or part == f"[{key}]"
    return part == "*" or part == key


class Within:
    """Roles of the leaves below a key its type leaves open, by path patterns relative to that key."""

    def __init__(self, roles: Mapping[str, Declared]) -> None:
        self.roles: tuple[tuple[str, tuple[str, ...], Declared], ...] = tuple(
            (pattern, parse(pattern), role) for pattern, role in roles.items())

    def __repr__(self) -> str:
        return f"Within({dict((pattern, role) for pattern, _, role in self.roles)!r})"

    def match(self, keys: Sequence[Key]) -> tuple[Declared, int] | None:
        """The role of the first pattern that names `keys` or a place above them, and how many keys it spans."""
        for _, parts, role in self.roles:
            if len(parts) <= len(keys) and all(part_matches(p, k) for p, k in zip(parts, keys, strict=False)):
                return role, len(parts)
        return None


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """An annotation without its `Annotated` layers, and their markers (roles and Within tables)."""
    markers: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        markers += [m for m in annotation.__metadata__ if isinstance(m, (Role, Measured, Quoting, Within))]
        annotation = annotation.__origin__
    return annotation, markers


def is_typed_dict(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, dict) and hasattr(annotation, "__total__")


_HINTS: dict[type, dict[str, Any]] = {}


def hints(record_type: type) -> dict[str, Any]:
    """A TypedDict's keys and their annotations, `Annotated` markers kept (inherited keys included)."""
    if record_type not in _HINTS:
        _HINTS[record_type] = typing.get_type_hints(record_type, include_extras=True)
    return _HINTS[record_type]


def options(annotation: Any) -> list[Any]:
    """The types a union allows other than None (the annotation itself when it is no union)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [option for option in typing.get_args(annotation) if option is not type(None)]
    return [annotation]


def _inner(annotation: Any, key: Key) -> Any | None:
    """The annotation of what `key` reaches inside a value of `annotation` (None when the type says nothing)."""
    origin = typing.get_origin(annotation)
    if isinstance(key, int) and (origin in (list, tuple) or annotation in (list, tuple)):
        return (typing.get_args(annotation) or (Any,))[0]
    if isinstance(key, str) and is_typed_dict(annotation):
        return hints(annotation).get(key)
    if isinstance(key, str) and (origin is dict or annotation is dict):
        arguments = typing.get_args(annotation)
        return arguments[1] if len(arguments) == 2 else Any
    return None


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def role_of(annotation: Any, keys: Sequence[Key], depth: int = 0) -> tuple[Declared, int] | None:
    """The role a record type (or any annotation) declares for the place `keys` (mapping keys and list indices,
    from the record's top), and how many of the keys lead to the declared place; None: it decides."""
    annotation, markers = _unwrap(annotation)
    for marker in markers:
        if isinstance(marker, Within):
            found = marker.match(keys[depth:])
            if found is not None:
                return found[0], depth + found[1]
        else:
            return marker, depth
    if _is_union(annotation):
        for option in options(annotation):
            found = role_of(option, keys, depth)
            if found is not None:
                return found
        return None
    if depth == len(keys):
        return None
    inner = _inner(annotation, keys[depth])
    return None if inner is None else role_of(inner, keys, depth + 1)


@dataclass(frozen=True)
class Declaration:
    """One declared role: where (parts from the record's top), the role, and how many of those parts the types
    show exist (`typed`: the way to the declaring key, then TypedDict keys; below a mapping, a list or `Any`
    only records can show the place exists)."""

    parts: tuple[str, ...]
    role: Declared
    typed: int
    problem: str = ""  # a part the TypedDict does not have, where the types alone refute the place

    @property
    def pattern(self) -> str:
        return "".join(part if part.startswith("[") or index == 0 else f".{part}"
                       for index, part in enumerate(self.parts))


def _step(annotation: Any, part: str) -> tuple[Any, str]:
    """What the pattern part `part` reaches in a value of `annotation`: its annotation (Any below `Any`), or None
    and why the types refute it."""
    annotation = _unwrap(annotation)[0]
    if annotation is Any:
        return Any, ""
    if _is_union(annotation):
        why = ""
        for option in options(annotation):
            inner, why = _step(option, part)
            if inner is not None:
                return inner, ""
        return None, why
    origin = typing.get_origin(annotation)
    if is_typed_dict(annotation):
        if part.startswith("[") or part == "*":
            return None, f"{annotation.__name__}'s keys are named, not {part!r}"
        inner = hints(annotation).get(part)
        return (inner, "") if inner is not None else (None, f"{annotation.__name__} has no key {part!r}")
    if origin in (list, tuple) or annotation in (list, tuple):
        if part.startswith("["):
            return (typing.get_args(annotation) or (Any,))[0], ""
        return None, f"a list holds no key {part!r}"
    if origin is dict or annotation is dict:
        if not part.startswith("["):
            arguments = typing.get_args(annotation)
            return (arguments[1] if len(arguments) == 2 else Any), ""
        return None, f"a mapping holds no item {part!r}"
    return None, f"{typing_name(annotation)} holds nothing at {part!r}"


def _typed_depth(annotation: Any, parts: tuple[str, ...]) -> tuple[int, str]:
    """How many of `parts`, from the first, are keys of TypedDicts (the types alone show those places exist), and
    why the types refute the place ('' when they do not: what lies below a mapping, a list or `Any` only records
    can show)."""
    typed, named = 0, True
    for part in parts:
        annotation = _unwrap(annotation)[0]
        if annotation is Any:
            return typed, ""
        named = named and any(is_typed_dict(_unwrap(option)[0]) for option in options(annotation))
        annotation, why = _step(annotation, part)
        if annotation is None:
            return typed, why
        typed += named
    return typed, ""


def typing_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def declarations(record_type: Any, prefix: tuple[str, ...] = (), seen: tuple[Any, ...] = ()) -> Iterator[Declaration]:
    """Every role a record type declares, nested record types' included, each with its place from the record's
    top (`[*]` and `*` where the place goes through a list or a mapping)."""
    annotation, markers = _unwrap(record_type)
    for marker in markers:
        if isinstance(marker, Within):
            for _, parts, role in marker.roles:
                typed, problem = _typed_depth(annotation, parts)
                yield Declaration(prefix + parts, role, len(prefix) + typed, problem)
        else:
            yield Declaration(prefix, marker, len(prefix))
            return  # a role covers everything under it
    if _is_union(annotation):
        for option in options(annotation):
            yield from declarations(option, prefix, seen)
        return
    origin = typing.get_origin(annotation)
    if is_typed_dict(annotation) and annotation not in seen:
        for key, inner in hints(annotation).items():
            yield from declarations(inner, (*prefix, key), (*seen, annotation))
    elif origin in (list, tuple) and typing.get_args(annotation):
        yield from declarations(typing.get_args(annotation)[0], (*prefix, "[*]"), seen)
    elif origin is dict and len(typing.get_args(annotation)) == 2:
        yield from declarations(typing.get_args(annotation)[1], (*prefix, "*"), seen)


def places(value: Any, parts: Sequence[str]) -> Iterator[Any]:
    """What the pattern `parts` names in a JSON value (every match)."""
    if not parts:
        yield value
        return
    part, rest = parts[0], parts[1:]
    if isinstance(value, Mapping) and not part.startswith("["):
        for key, inner in value.items():
            if part_matches(part, str(key)):
                yield from places(inner, rest)
    elif isinstance(value, list) and part.startswith("["):
        for index, inner in enumerate(value):
            if part_matches(part, index):
                yield from places(inner, rest)
