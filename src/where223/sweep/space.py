"""A sweep's space: the cells of one study, read from a committed YAML file (`spaces/<study>.yaml`).

A cell is (stack, model, precision recipe, exporter, opset, mode); a space is the product of one list of each,
where `stacks` is a list of stack names or {environments: [...], transformers: [...]} for their product, and
`models` a list or `@FILE` (one name per line); or, with `cells: @FILE`, the listed (model, recipe, exporter, opset)
cells in each stack and mode (a plan drawn from earlier records, such as the class study's opset scan).

A space is checked before any cell runs (`load_space` raises UsageError, one line): the file by the one YAML
reader (`where223.pipeline.yamlfile`: no aliases, no deep nesting, string keys, no key outside SPACE_SCHEMA);
stacks against `spaces/stacks.yaml`, recipes and exporters against their open registries, models against the
tiny GPT-2, the engine's controls and the committed model types. An `@FILE` list is read only from inside LISTS
(`spaces/`, links resolved), and a problem in it names its line, never its text. `runner`, `summary` and
`planner` name modules of where223's own that define what the sweep calls (ROLES), found from their source
without importing them. `records` is the record path under the outputs tree, a template of the cell's own FIELDS
(its key and its stack's `torch` and `transformers` versions) that stays inside the tree; `identity` templates
name the same fields; `timeout_s` is finite and above 0. `priority` lists models that run first, in its order (the
most-used families, so that a sweep stopped early has met what users export most), then the rest of `models` in
theirs; every name it gives must be one of `models`, once.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from where223.errors import UsageError
from where223.outcomes import Outcome
from where223.pipeline import paths, yamlfile
from where223.sweep import controls
from where223.sweep.exporters import EXPORTERS, MODES
from where223.sweep.recipes import RECIPES
from where223.sweep.record import KEY_FIELDS
from where223.sweep.stacks import Stack, Stacks, load_stacks

SPACES: Path = paths.ROOT / "spaces"
LISTS: Path = SPACES  # the one folder a space's `@FILE` lists are read from, and `--plan` writes to (links resolved)
LIST_BYTES = 1024 * 1024  # the committed lists are at most 18 KiB
GPT2 = "gpt2-tiny"
TIMEOUT_S = 600.0  # a cell's time limit when its space gives none
FIELDS = (*KEY_FIELDS, "torch", "transformers")  # what `records` and `identity` templates may name: the cell's own
ROLES = {"runner": "run_cell", "summary": "summarize", "planner": "plan"}  # what the sweep calls of each module
MODULE = re.compile(r"where223(\.[A-Za-z_][A-Za-z0-9_]*)+")
PACKAGE = Path(__file__).resolve().parents[1]  # where223's own modules, the only ones a space may name
STUDY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a study's folder under the outputs tree
# The keys of a space file, for its reader (`where223.pipeline.yamlfile`): every other key is refused.
SPACE_SCHEMA: yamlfile.Schema = {
    "description": None, "study": None, "records": None, "identity": yamlfile.Names(), "timeout_s": None,
    "runner": None, "summary": None, "planner": None, "stacks": {"environments": None, "transformers": None},
    "models": None, "priority": None, "recipes": None, "exporters": None, "opsets": None, "modes": None, "cells": None,
}  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep; `key()` is what its record carries and what resuming matches."""

    stack: str
    model: str
    recipe: str
    exporter: str
    opset: int | str
    mode: str

    def key(self) -> dict[str, Any]:
        """The cell's identity as a record carries it."""
        return asdict(self)

    def ident(self) -> str:
        """A short stable name of the cell (task keys, work folders)."""
        digest = hashlib.sha256(json.dumps(self.key(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.model}-{digest}"


def known_models() -> frozenset[str]:
    """Every model a space may name: the tiny GPT-2, the engine's controls, and the committed model types."""
    names = {GPT2, *controls.CONTROLS}
    for listed in SPACES.glob("model_types-*.txt"):
        names.update(_listed(listed))
    return frozenset(names)


def _listed(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


@dataclass
class Space:
    """The cells of one study and where their records go."""

    name: str
    study: str
    records: str
    timeout_s: float
    cells: list[Cell]
    stacks: dict[str, Stack] = field(repr=False, default_factory=dict)
    description: str = ""
    identity: dict[str, str] = field(default_factory=dict)  # fields every record gets, formatted from its cell
    runner: str | None = None  # the module whose run_cell(key, stack, onnx_path) runs a (non-control) cell
    summary: str | None = None  # the module whose summarize(folder) rewrites the study's summary from its records
    planner: str | None = None  # for a space of listed cells: the module whose plan() draws them from records
    cells_file: Path | None = None  # where a space's listed cells lie (`cells: @FILE`)

    def record_path(self, cell: Cell, output_root: Path = paths.OUTPUTS) -> Path:
        """Where the record of `cell` lies under `output_root`."""
        fields = {**self.stacks[cell.stack].attributes(), **cell.key()}
        relative = Path(self.records.format(**fields))
        if relative.is_absolute() or ".." in relative.parts:
            raise UsageError(f"space {self.name}: record path {relative} leaves the outputs tree")
        return Path(output_root) / relative

    def select(self, patterns: dict[str, Sequence[str]]) -> Space:
        """The space restricted to cells whose fields match any of the glob patterns given per field."""

        def keep(cell: Cell) -> bool:
            values = cell.key()
            return all(
                any(fnmatch.fnmatchcase(str(values[f]), p) for p in pats) for f, pats in patterns.items() if pats
            )

        chosen = [cell for cell in self.cells if keep(cell)]
        if not chosen:
            raise UsageError(f"space {self.name}: no cell matches {json.dumps(patterns)}")
        return Space(self.name, self.study, self.records, self.timeout_s, chosen, self.stacks, self.description,
                     self.identity, self.runner, self.summary, self.planner, self.cells_file)


def _list_file(value: str, path: Path) -> Path:
    """The file `@FILE` names (relative to the repository root), links resolved; UsageError (one line) unless it lies
    inside LISTS."""
    named = Path(value[1:])
    lists = LISTS.resolve()
    resolved = (paths.ROOT / named).resolve()
    if ".." in named.parts or not resolved.is_relative_to(lists) or resolved == lists:
        raise UsageError(f"space {path}: {value} is not a file inside {lists} (links resolved): lists are read from "
                         "there only")
    return resolved


def _lines(value: str, path: Path) -> list[tuple[int, str]]:
    """The lines of the list file `@FILE` (see _list_file) as (number, text), blanks and `#` comments left out.
    Problems are one line that names the file and never quotes it."""
    file = _list_file(value, path)
    try:
        if not file.is_file():
            raise UsageError(f"space {path}: {value} is not a file")
        with file.open("rb") as handle:
            raw = handle.read(LIST_BYTES + 1)
    except OSError as error:
        raise UsageError(f"space {path}: cannot read {value} ({error.strerror or type(error).__name__})") from None
    if len(raw) > LIST_BYTES:
        raise UsageError(f"space {path}: {value} is larger than {LIST_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"space {path}: {value} is not UTF-8 text") from None
    lines = [(number, line.split("#", 1)[0].strip()) for number, line in enumerate(text.splitlines(), 1)]
    return [(number, line) for number, line in lines if line]


def _check_listed(what: str, name: str, known: Sequence[str] | frozenset[str], where: str) -> None:
    """A name read from a list file: known, else one line naming the file and line, not the name (the file's
    contents are never shown)."""
    if name not in known:
        shown = ", ".join(sorted(known)) if len(known) < 20 else f"{len(known)} known"
        raise UsageError(f"{where}: not a known {what} ({shown})")


def _names(value: Any, what: str, path: Path) -> list[str]:
    """An axis of the space: a name, a list of names, or (`models` only) `@FILE`, one model per line."""
    if what == "models" and isinstance(value, str) and value.startswith("@"):
        listed = _lines(value, path)
        known = known_models()
        for number, name in listed:
            _check_listed("model", name, known, f"space {path}: {value} line {number}")
        if not listed:
            raise UsageError(f"space {path}: {value} lists no name")
        return [name for _, name in listed]
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list) and value and all(
        isinstance(item, (str, int)) and not isinstance(item, bool) for item in value
    ):
        return [str(item) for item in value]
    raise UsageError(f"space {path}: `{what}` must be a name or a list of names{' or @FILE' * (what == 'models')}")


def _opset(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _listed_cells(value: Any, path: Path) -> list[tuple[str, str, str, int | str]]:
    """A space's explicit `cells`: `@FILE` of lines `MODEL RECIPE EXPORTER OPSET` (`#` comments), or a list of
    such strings; each listed cell runs in every stack and mode of the space. A name in the file is checked here,
    its problem naming the file's line."""
    from_file = isinstance(value, str) and value.startswith("@")
    if from_file:
        lines = _lines(value, path)
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        lines = [(number, item.split("#", 1)[0].strip()) for number, item in enumerate(value, 1)]
    else:
        raise UsageError(f"space {path}: `cells` must be @FILE or a list of 'MODEL RECIPE EXPORTER OPSET'")
    cells = []
    models = known_models()
    for number, line in lines:
        text = line.split()
        if not text:
            continue
        where = f"space {path}: {value} line {number}" if from_file else f"space {path}: cells[{number - 1}]"
        if len(text) != 4:
            raise UsageError(f"{where}: not 'MODEL RECIPE EXPORTER OPSET'")
        model, recipe, exporter, opset = text
        if from_file:
            _check_listed("model", model, models, where)
            _check_listed("recipe", recipe, frozenset(RECIPES), where)
            _check_listed("exporter", exporter, frozenset(EXPORTERS), where)
        try:
            cells.append((model, recipe, exporter, _opset(opset)))
        except ValueError:
            raise UsageError(f"{where}: the opset is neither a number nor auto") from None
    if not cells:
        raise UsageError(f"space {path}: `cells` lists no cell")
    return cells


def _stack_names(value: Any, path: Path) -> list[str]:
    if isinstance(value, dict):
        envs = _names(value.get("environments"), "stacks.environments", path)
        releases = value.get("transformers")
        if not releases:
            return envs
        return [f"{env}+transformers-{release}" for env in envs for release in _names(releases, "stacks", path)]
    return _names(value, "stacks", path)


def _unknown(what: str, names: Sequence[str], known: Sequence[str] | frozenset[str], path: Path) -> None:
    missing = [name for name in names if name not in known]
    if missing:
        shown = ", ".join(sorted(known)) if len(known) < 20 else f"{len(known)} known"
        raise UsageError(f"space {path}: unknown {what} {', '.join(map(repr, missing))} ({shown})")


def _resolved(names: Sequence[str], stacks: Stacks, path: Path) -> dict[str, Stack]:
    """Each stack the space at `path` names, as `stacks` defines it; UsageError naming the space for one it lacks."""
    try:
        return {name: stacks.stack(name) for name in names}
    except UsageError as error:
        raise UsageError(f"space {path}: {error}") from None


def _runner(value: Any, models: Sequence[str], path: Path) -> str | None:
    """The space's `runner`: a where223 module whose `run_cell` runs each cell that is not an engine control,
    required unless every model is a control. The engine names no study: each space names the code it runs."""
    if value is None:
        if all(model.startswith(controls.PREFIX) for model in models):
            return None
        raise UsageError(f"space {path}: name the `runner` module that runs its cells (e.g. where223.study.matrix.run)")
    return _module(value, "runner", path)


def _module(value: Any, what: str, path: Path) -> str:
    """`value`, the name of a module of where223's own that defines the function the engine calls for `what`
    (ROLES), read from its source with `ast`, not imported (finding it imports its parent packages, where223's);
    UsageError (one line) naming the space's `what`."""
    import ast
    import importlib.util

    function = ROLES[what]
    if not (isinstance(value, str) and MODULE.fullmatch(value)):
        raise UsageError(f"space {path}: {what} {value!r} is not a module of where223 (where223.study.STUDY.MODULE)")
    try:
        found = importlib.util.find_spec(value)
    except (ImportError, ValueError):
        found = None
    origin = Path(found.origin).resolve() if found is not None and found.origin else None
    if origin is None or origin.suffix != ".py" or not origin.is_relative_to(PACKAGE):
        raise UsageError(f"space {path}: {what} {value!r} is no importable module of where223")
    tree = ast.parse(origin.read_text(), str(origin))
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if function not in defined:
        raise UsageError(f"space {path}: {what} {value!r} defines no {function}(), which the sweep calls")
    return value


def _template(value: Any, what: str, path: Path) -> str:
    """A `records` or `identity` template: text naming only FIELDS, each as a bare `{field}`."""
    allowed = ", ".join(f"{{{name}}}" for name in FIELDS)
    if not isinstance(value, str) or not value:
        raise UsageError(f"space {path}: {what} must be a template such as 'study/{{model}}.json' ({allowed})")
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as error:
        raise UsageError(f"space {path}: {what} {value!r} is not a template: {error}") from None
    for _, name, spec, conversion in parts:
        if name is not None and (name not in FIELDS or spec or conversion):
            raise UsageError(f"space {path}: {what} {value!r} may name only the cell's fields, as {allowed}")
    return value


def _timeout(value: Any, path: Path) -> float:
    if value is None:
        return TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"space {path}: timeout_s must be a finite number of seconds above 0, not {value!r}")
    return float(value)


def _read(path: Path) -> dict[str, Any]:
    data = yamlfile.read(path, SPACE_SCHEMA)
    if not isinstance(data, dict):
        raise UsageError(f"space {path}: not a mapping of study, records, stacks, models, ...")
    return data


def _prioritised(models: list[str], value: Any, listed: bool, path: Path) -> list[str]:
    """`models` with the ones `priority` names first, in its order; UsageError for a name `models` lacks, a name
    given twice, or a space of listed cells (whose order is its file's)."""
    if listed:
        raise UsageError(f"space {path}: `priority` orders `models`; a space of listed `cells` runs in their order")
    first = _names(value, "priority", path)
    repeated = sorted({name for name in first if first.count(name) > 1})
    if repeated:
        raise UsageError(f"space {path}: `priority` names {', '.join(map(repr, repeated))} twice")
    missing = [name for name in first if name not in models]
    if missing:
        raise UsageError(f"space {path}: `priority` names {', '.join(map(repr, missing[:5]))}, not among its models")
    chosen = set(first)
    return [*first, *(model for model in models if model not in chosen)]


def load_space(path: str | Path, stacks: Stacks | None = None) -> Space:
    """Read (`where223.pipeline.yamlfile`, SPACE_SCHEMA) and check a space file before any cell runs: UsageError (one
    line) for a missing file, an unknown key or name, a list outside LISTS, a module that is not where223's, a
    template naming more than the cell's fields or leaving the outputs tree, a time limit that is not finite."""
    path = Path(path)
    data = _read(path)
    try:
        study, records = data["study"], _template(data["records"], "records", path)
        if not (isinstance(study, str) and STUDY.fullmatch(study)):
            raise UsageError(f"space {path}: study {study!r} is not a folder name (letters, digits, _ . -)")
        timeout_s = _timeout(data.get("timeout_s"), path)
        listed = _listed_cells(data["cells"], path) if "cells" in data else None
        axes = {
            "stack": _stack_names(data["stacks"], path),
            "model": [c[0] for c in listed] if listed else _names(data["models"], "models", path),
            "recipe": [c[1] for c in listed] if listed else _names(data["recipes"], "recipes", path),
            "exporter": [c[2] for c in listed] if listed else _names(data["exporters"], "exporters", path),
            "opset": [c[3] for c in listed] if listed else [
                _opset(o) for o in _names(data.get("opsets", "auto"), "opsets", path)],
            "mode": _names(data.get("modes", "train"), "modes", path),
        }
    except (KeyError, TypeError, ValueError) as error:
        raise UsageError(f"space {path}: missing or malformed {error}") from None
    stacks = stacks or load_stacks()
    resolved = _resolved(axes["stack"], stacks, path)
    _unknown("model", axes["model"], known_models(), path)
    _unknown("recipe", axes["recipe"], frozenset(RECIPES), path)
    _unknown("exporter", axes["exporter"], frozenset(EXPORTERS), path)
    _unknown("mode", axes["mode"], frozenset(MODES), path)
    if "priority" in data:
        axes["model"] = _prioritised(axes["model"], data["priority"], listed is not None, path)
    if listed:  # the listed cells in each stack and mode, not the product of their fields
        cells = [Cell(stack, model, recipe, exporter, opset, mode) for stack in axes["stack"]
                 for (model, recipe, exporter, opset) in listed for mode in axes["mode"]]  # fmt: skip
    else:
        cells = [Cell(*values) for values in itertools.product(*(axes[f] for f in KEY_FIELDS))]
    fields = data.get("identity") or {}
    if not isinstance(fields, dict):
        raise UsageError(f"space {path}: identity must be a mapping of record fields to templates")
    identity = {name: _template(template, f"identity.{name}", path) for name, template in fields.items()}
    runner = _runner(data.get("runner"), axes["model"], path)
    summary = None if data.get("summary") is None else _module(data["summary"], "summary", path)
    planner = None if data.get("planner") is None else _module(data["planner"], "planner", path)
    cells_file = _list_file(data["cells"], path) if isinstance(data.get("cells"), str) else None
    space = Space(path.stem, study, records, timeout_s, cells, resolved, str(data.get("description", "")), identity,
                  runner, summary, planner, cells_file)
    paths_seen: dict[Path, Cell] = {}
    for cell in cells:
        target = space.record_path(cell)
        if target in paths_seen:
            raise UsageError(f"space {path}: cells {paths_seen[target].key()} and {cell.key()} share {target}")
        paths_seen[target] = cell
    return space


def plan_target(path: str | Path) -> tuple[str, Path, list[str]]:
    """What `where223 sweep --space FILE --plan` needs of a space: its `planner` (a where223 module defining plan),
    the file its listed cells go to (`cells: "@FILE"`, inside LISTS, named through no link: the planner's lines are
    written to it, never through a link) and its stacks; UsageError (one line) for a space without them."""
    path = Path(path)
    data = _read(path)
    if data.get("planner") is None:
        raise UsageError(f"space {path}: names no `planner`, so nothing plans its cells")
    planner = _module(data["planner"], "planner", path)
    cells = data.get("cells")
    if not (isinstance(cells, str) and cells.startswith("@")):
        raise UsageError(f"space {path}: `cells` is not @FILE, so there is no file to plan")
    target = _list_file(cells, path)
    if paths.ROOT / cells[1:] != target:
        raise UsageError(f"space {path}: {cells} is reached through a link; --plan writes through none")
    if target.exists() and not target.is_file():
        raise UsageError(f"space {path}: {cells} is not a file")
    stack_names = _stack_names(data.get("stacks"), path)
    _resolved(stack_names, load_stacks(), path)
    return planner, target, stack_names


def is_done(record_path: Path, cell: Cell, current: Callable[[Mapping[str, Any]], bool] | None = None) -> bool:
    """True when the cell's record is there, carries the cell's key and a final outcome (resuming skips it), and,
    given `current`, the record's own `code` passes it (a record made by older cell code is not done)."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return False
    try:
        done = record.get("key") == cell.key() and Outcome(record.get("outcome")).final
    except ValueError:
        return False
    code = record.get("code")
    return done and (current is None or current(code if isinstance(code, Mapping) else {}))
