"""The one reader of the project's YAML files: spaces, `spaces/stacks.yaml`, plans (`--params`). `read(path, schema)`.

A safe loader (PyYAML's pure-Python SafeLoader: the C loader cannot be hooked) that refuses what no file of the
project needs and a hostile file uses, before anything walks the data:
- anchors and aliases (`&name`, `*name`): nine levels of aliases in 544 bytes expand a billion-fold in whatever
  walks the data (`str()`, a loop), in minutes and gigabytes;
- nesting deeper than MAX_DEPTH (a RecursionError in the composer, thousands of lines of traceback);
- an integer longer than MAX_INT_CHARS (Python refuses to convert one of more than 4,300 digits: a traceback);
- a key that is not a string (`1:`, `~:`, `[a]:`, the merge key `<<:`) and a key given twice;
- a file over MAX_BYTES, or not a regular file (a FIFO, /dev/zero);
- against the schema the caller gives for its kind of file, every key it does not know, where it appears, with a
  "did you mean" (difflib).
Every problem is one line, `FILE:LINE: what` (a `YamlFileError`, a UsageError: exit 2); none quotes the file
beyond the key at fault, cut short. Standard library and PyYAML only.

A schema says which keys a mapping may have: a dict of key -> the schema of its value; `Names(values)` for a
mapping of free names (a stacks file's environments, a plan's parameters); `Items(item)` for a list; None for any
value (whose mappings still need string keys). A schema of a mapping is applied only where the file has a mapping
(a value the schema says is a mapping but the file gives as a list passes here: the caller checks types).
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from where223.errors import UsageError, printable

MAX_BYTES = 256 * 1024  # the committed files are at most 4 KiB; the pure-Python loader reads this in well under 1 s
MAX_DEPTH = 16  # levels of nesting, the document's top mapping the first; the committed files use at most 5
MAX_INT_CHARS = 100  # characters of an integer (digits, sign, a base prefix); the committed files: at most 8 digits
MAX_PROBLEMS = 20  # lines of problems listed, then how many more
SHOWN = 60  # characters of a key shown in a problem
STRING = "tag:yaml.org,2002:str"


@dataclass(frozen=True)
class Names:
    """A mapping of free names (strings), each value following `values`."""

    values: Schema = None


@dataclass(frozen=True)
class Items:
    """A list whose items each follow `item`."""

    item: Schema = None


Schema = Mapping[str, Any] | Names | Items | None  # Mapping[str, Schema], recursively


class YamlFileError(UsageError, ValueError):
    """A YAML file the reader refuses; one line per problem (`problems`), each naming the file."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def suggestion(name: str, known: Sequence[str]) -> str:
    """`did you mean X?` for the closest of `known` (difflib), else the known names."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"


class _Refused(Exception):
    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem)
        self.line = mark.line + 1 if mark is not None else None
        self.problem = problem


class _Loader(yaml.SafeLoader):
    """SafeLoader composing no alias, no anchor and no node deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark, "anchors and aliases (&name, *name) are not allowed")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Refused(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _construct_int(loader: _Loader, node: ScalarNode) -> int:
    """An integer, as SafeLoader reads it, of at most MAX_INT_CHARS characters: Python refuses to convert one of
    more than 4,300 digits (a ValueError from deep in PyYAML), and none of the project's files needs one so long."""
    size = len(str(node.value).replace("_", ""))
    if size > MAX_INT_CHARS:
        raise _Refused(node.start_mark, f"an integer of {size:,} characters, longer than any this file takes (at "
                                        f"most {MAX_INT_CHARS})")
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _key(node: Node) -> str:
    """A key as a problem shows it: a scalar's text, cut; or what kind of node it is."""
    if isinstance(node, ScalarNode):
        return repr(printable(str(node.value), SHOWN))
    return "a list" if isinstance(node, SequenceNode) else "a mapping"


def _check(node: Node, schema: Schema, where: str, problems: list[tuple[int, str]]) -> None:
    """Append (line, problem) for every key of `node` and below that is not a string, is given twice, or is not in
    the schema."""
    inside = f" in {printable(where, SHOWN)}" if where else ""
    if isinstance(node, SequenceNode):
        item = schema.item if isinstance(schema, Items) else None
        for index, child in enumerate(node.value):
            _check(child, item, f"{where}[{index}]", problems)
        return
    if not isinstance(node, MappingNode):
        return
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not (isinstance(key_node, ScalarNode) and key_node.tag == STRING):
            kind = "the merge key <<" if key_node.tag == "tag:yaml.org,2002:merge" else f"key {_key(key_node)}"
            problems.append((_line(key_node), f"{kind}{inside} is not a string (quote it)"))
            continue
        key = str(key_node.value)
        if key in seen:
            problems.append((_line(key_node), f"key {_key(key_node)}{inside} given twice (first at line {seen[key]})"))
            continue
        seen[key] = _line(key_node)
        label = f"{where}.{key}" if where else key
        if isinstance(schema, Names):
            _check(value_node, schema.values, label, problems)
        elif isinstance(schema, Mapping):
            if key not in schema:
                hint = suggestion(key, sorted(schema))
                problems.append((_line(key_node), f"unknown key {_key(key_node)}{inside}; {hint}"))
                continue
            _check(value_node, schema[key], label, problems)
        else:
            _check(value_node, None, label, problems)


def _text(path: Path) -> str:
    """The file's text: a regular file of at most MAX_BYTES of UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO does not block the open
    except OSError as error:
        raise YamlFileError(f"{path}: cannot read it ({error.strerror or type(error).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise YamlFileError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise YamlFileError(f"{path}: larger than {MAX_BYTES // 1024} KiB, more than any YAML file of the project")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlFileError(f"{path}: not UTF-8 text (byte {error.start})") from None


def read(path: str | os.PathLike[str], schema: Schema = None) -> Any:
    """The data of the YAML file at `path` (None for an empty one), every key checked against `schema`.

    Raises YamlFileError (a UsageError): one line per problem, `FILE:LINE: problem`.
    """
    path = Path(path)
    text = _text(path)
    try:
        loader = _Loader(text)  # the reader refuses a character YAML does not allow here already
    except yaml.YAMLError as error:
        reason = printable(str(getattr(error, "reason", "") or type(error).__name__), SHOWN)
        raise YamlFileError(f"{path}: not valid YAML: {reason}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problems: list[tuple[int, str]] = []
        _check(node, schema, "", problems)
        if problems:
            lines = [f"{path}:{line}: {problem}" for line, problem in problems[:MAX_PROBLEMS]]
            if len(problems) > MAX_PROBLEMS:
                lines.append(f"{path}: and {len(problems) - MAX_PROBLEMS} more problems")
            raise YamlFileError(lines)
        return loader.construct_document(node)
    except _Refused as refused:
        raise YamlFileError(f"{path}:{refused.line}: {refused.problem}") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        at = f":{mark.line + 1}" if mark is not None else ""
        problem = printable(str(error.problem or error.context or type(error).__name__), SHOWN * 2)
        raise YamlFileError(f"{path}{at}: not valid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise YamlFileError(f"{path}: not valid YAML: {type(error).__name__}") from None
    finally:
        loader.dispose()
