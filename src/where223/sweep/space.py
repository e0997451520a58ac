"""A sweep's space: the cells of one study, read from a committed YAML file (`spaces/<study>.yaml`).

A cell is (stack, model, precision recipe, exporter, opset, mode); a space is the product of one list of each,
where `stacks` is a list of stack names or {environments: [...], transformers: [...]} for their product, and
`models` a list or `@FILE` (one name per line); or, with `cells: @FILE`, the listed (model, recipe, exporter, opset)
cells in each stack and mode (a plan drawn from earlier records, such as the class study's opset scan).
Every name is checked before anything runs (`load_space` raises
UsageError, one line): stacks against `spaces/stacks.yaml`, recipes and exporters against their open registries,
models against the tiny GPT-2, the engine's controls and the committed model types. `records` is the record path
under the outputs tree, formatted from the cell's fields and its stack's `torch` and `transformers` versions.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from where223.errors import UsageError
from where223.outcomes import Outcome
from where223.pipeline import paths
from where223.sweep import controls
from where223.sweep.exporters import EXPORTERS, MODES
from where223.sweep.recipes import RECIPES
from where223.sweep.record import KEY_FIELDS
from where223.sweep.stacks import Stack, Stacks, load_stacks

SPACES: Path = paths.ROOT / "spaces"
GPT2 = "gpt2-tiny"


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


def _names(value: Any, what: str, path: Path) -> list[str]:
    if isinstance(value, str) and value.startswith("@"):
        return _listed(paths.ROOT / value[1:])
    if isinstance(value, (str, int)):
        return [str(value)]
    if isinstance(value, list) and value:
        return [str(item) for item in value]
    raise UsageError(f"space {path}: `{what}` must be a name, a list of names or @FILE")


def _listed_cells(value: Any, path: Path) -> list[tuple[str, str, str, int | str]]:
    """A space's explicit `cells`: `@FILE` of lines `MODEL RECIPE EXPORTER OPSET` (`#` comments), or a list of
    such strings; each listed cell runs in every stack and mode of the space."""
    if isinstance(value, str) and value.startswith("@"):
        lines = (paths.ROOT / value[1:]).read_text().splitlines()
    elif isinstance(value, list):
        lines = [str(item) for item in value]
    else:
        raise UsageError(f"space {path}: `cells` must be @FILE or a list of 'MODEL RECIPE EXPORTER OPSET'")
    cells = []
    for line in lines:
        text = line.split("#", 1)[0].split()
        if not text:
            continue
        if len(text) != 4:
            raise UsageError(f"space {path}: cell {line!r} is not 'MODEL RECIPE EXPORTER OPSET'")
        model, recipe, exporter, opset = text
        cells.append((model, recipe, exporter, opset if opset == "auto" else int(opset)))
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


def _unknown(what: str, names: Sequence[str], known: Sequence[str] | frozenset[str]) -> None:
    missing = [name for name in names if name not in known]
    if missing:
        shown = ", ".join(sorted(known)) if len(known) < 20 else f"{len(known)} known"
        raise UsageError(f"unknown {what} {', '.join(map(repr, missing))} ({shown})")


def _runner(value: Any, models: Sequence[str], path: Path) -> str | None:
    """The space's `runner`: an importable module (its `run_cell` runs each cell that is not an engine control),
    required unless every model is a control. The engine names no study: each space names the code it runs."""
    if value is None:
        if all(model.startswith(controls.PREFIX) for model in models):
            return None
        raise UsageError(f"space {path}: name the `runner` module that runs its cells (e.g. where223.study.matrix.run)")
    return _module(value, "runner", path)


def _module(value: Any, what: str, path: Path) -> str:
    """`value`, the name of an importable module (found, not imported); UsageError naming the space's `what`."""
    import importlib.util

    try:
        found = importlib.util.find_spec(str(value))
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UsageError(f"space {path}: {what} {value!r} is no importable module")
    return str(value)


def load_space(path: str | Path, stacks: Stacks | None = None) -> Space:
    """Read and check a space file; UsageError (one line) for a missing file or any unknown name."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UsageError(f"cannot read the space {path}: {type(error).__name__}: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"space {path}: not a mapping of study, records, stacks, models, ...")
    try:
        study, records = str(data["study"]), str(data["records"])
        timeout_s = float(data.get("timeout_s", 600))
        listed = _listed_cells(data["cells"], path) if "cells" in data else None
        axes = {
            "stack": _stack_names(data["stacks"], path),
            "model": [c[0] for c in listed] if listed else _names(data["models"], "models", path),
            "recipe": [c[1] for c in listed] if listed else _names(data["recipes"], "recipes", path),
            "exporter": [c[2] for c in listed] if listed else _names(data["exporters"], "exporters", path),
            "opset": [c[3] for c in listed] if listed else [
                o if o == "auto" else int(o) for o in _names(data.get("opsets", "auto"), "opsets", path)],
            "mode": _names(data.get("modes", "train"), "modes", path),
        }
    except (KeyError, TypeError, ValueError) as error:
        raise UsageError(f"space {path}: missing or malformed {error}") from None
    stacks = stacks or load_stacks()
    resolved = {name: stacks.stack(name) for name in axes["stack"]}
    _unknown("model", axes["model"], known_models())
    _unknown("recipe", axes["recipe"], frozenset(RECIPES))
    _unknown("exporter", axes["exporter"], frozenset(EXPORTERS))
    _unknown("mode", axes["mode"], frozenset(MODES))
    if listed:  # the listed cells in each stack and mode, not the product of their fields
        cells = [Cell(stack, model, recipe, exporter, opset, mode) for stack in axes["stack"]
                 for (model, recipe, exporter, opset) in listed for mode in axes["mode"]]  # fmt: skip
    else:
        cells = [Cell(*values) for values in itertools.product(*(axes[f] for f in KEY_FIELDS))]
    identity = {str(k): str(v) for k, v in (data.get("identity") or {}).items()}
    runner = _runner(data.get("runner"), axes["model"], path)
    summary = None if data.get("summary") is None else _module(data["summary"], "summary", path)
    planner = None if data.get("planner") is None else _module(data["planner"], "planner", path)
    cells_file = paths.ROOT / data["cells"][1:] if isinstance(data.get("cells"), str) else None
    space = Space(path.stem, study, records, timeout_s, cells, resolved, str(data.get("description", "")), identity,
                  runner, summary, planner, cells_file)
    paths_seen: dict[Path, Cell] = {}
    for cell in cells:
        target = space.record_path(cell)
        if target in paths_seen:
            raise UsageError(f"space {path}: cells {paths_seen[target].key()} and {cell.key()} share {target}")
        paths_seen[target] = cell
    return space


def is_done(record_path: Path, cell: Cell) -> bool:
    """True when the cell's record is there, carries the cell's key and a final outcome (resuming skips it)."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return False
    try:
        return record.get("key") == cell.key() and Outcome(record.get("outcome")).final
    except ValueError:
        return False
