"""Fuzz cases for the project's YAML readers: spaces (`where223 sweep --space F`), plans (`where223 run --params F`),
and hostile YAML in general (aliases that expand a billion-fold, deep nesting, huge integers, tags, encodings, a
FIFO or /dev/zero for a file) given to each reader: spaces, the stacks file (WHERE223_STACKS), plans and
`sweep --plan`.

Every command is stopped before it runs anything: the child stubs what would run notebooks (`run_plan`), cells
(`where223.sweep.driver.run`), a study's summary, a planner and the write of planned cells (`prepare`), so a case
reads and checks its file through the command line's own path and no more. A recipe names the seed (a committed
file), the mutations of its data (a value replaced at a path, a key removed or added), the text edits, and the
entry point.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.fuzz.harness import Case
from where223.pipeline.paths import NOTEBOOKS, ROOT

SPACES = ROOT / "spaces"
CODES = frozenset({0, 1, 2})
NUMBERS = [0, -1, 1, 2**31, 2**63, 2**70, 10**400, 1.5, float("nan"), float("inf"), -float("inf"), 1e308, True]
TEXTS = ["", " ", "@/etc/passwd", "@../../../etc/passwd", "@spaces/stacks.yaml", "@", "@nonexistent.txt", "@spaces",
         "@/dev/zero", "@/proc/self/environ", "{0}", "{model.__class__.__mro__}", "{nonexistent}", "{", "}",
         "/abs/{model}.json", "../{model}.json", "{model}/../../../x.json", "{torch}-{transformers}-{exporter}.json",
         "os", "json", "where223", "where223.nonexistent", ".relative", "where223.study.matrix.run.x", "\x00", "é",
         "\u202e", "\x1b[2J", "-1", "1e400", "nan", "auto", "today", "gpt2-tiny", "torch-2.1.2", "project",
         "torch-2.1.2+transformers-4.22.0", "cpu_bf16_autocast", "torchscript", "dynamo", "train", "eval",
         "01_reproduce", "../notebooks/01_reproduce", "/etc/passwd", "01_reproduce.ipynb", "onnx_export",
         "output_root", "input_root", "requirements.lock", "../../../../etc/shadow", "x" * 3000, "*", "gpt2-*"]
KEYS = ["study", "records", "stacks", "models", "recipes", "exporters", "opsets", "modes", "cells", "runner",
        "summary", "planner", "identity", "timeout_s", "description", "environments", "transformers", "common",
        "python", "lock", "requirements", "runs", "notebook", "parameters", "path", "batch_size", "seq_len",
        "amp_dtype", "variant", "unknown_key", "", "<<", "~"]
# hostile YAML, each a whole document or a value to put under a key (`{key}` marks where the key goes)
BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
        "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n{key}: *i\n")
SNIPPETS = [
    BOMB,
    "{key}: " + "[" * 20 + "]" * 20 + "\n",
    "{key}: " + "[" * 3000 + "]" * 3000 + "\n",
    "{key}: " + "{a: " * 200 + "b" + "}" * 200 + "\n",
    "{key}: " + "9" * 5000 + "\n",
    "{key}: !!python/object/apply:os.system ['echo pwned']\n",
    "{key}: !!binary aGVsbG8=\n",
    "{key}: !!set {a, b}\n",
    "{key}: !!timestamp 2001-12-14\n",
    "{key}: !!float .nan\n",
    "{key}: .inf\n",
    "{key}: 0x_FF_FF\n",
    "{key}: 1_000_000\n",
    "{key}: !!omap [a: 1, b: 2]\n",
    "? [complex, key]\n: value\n",
    "base: &base {a: 1}\n{key}:\n  <<: *base\n",
    "{key}: 1\n{key}: 2\n",
    "1: one\n~: null\n[a]: list\n",
    "{key}: |\n  " + "long line " * 2000 + "\n",
    "---\n{key}: 1\n---\n{key}: 2\n",
    "{key}:\n\t- tab\n",
    "{key}: 'unterminated\n",
    "{key}: \x00\n",
    "{key}: [" + ", ".join(["x"] * 20000) + "]\n",
    "{key}: *undefined\n",
    "%YAML 1.1\n%TAG ! tag:example.com,2000:\n---\n{key}: !foo bar\n",
]
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "latin-1", "invalid"]
FILE_KINDS = ["file", "file", "file", "file", "file", "file", "missing", "directory", "fifo", "dev_zero", "symlink",
              "dangling", "empty"]

Recipe = dict[str, Any]


@functools.cache
def space_seeds() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(SPACES.glob("*.yaml")) if path.name != "stacks.yaml"}


@functools.cache
def stacks_seed() -> str:
    return (SPACES / "stacks.yaml").read_text()


@functools.cache
def plan_seeds() -> dict[str, str]:
    plan = (NOTEBOOKS / "plan.yaml").read_text()
    small = "runs:\n  - notebook: 01_reproduce\n    parameters: {path: onnx_export, batch_size: 1, seq_len: 8}\n"
    return {"plan.yaml": plan, "small.yaml": small, "empty-parameters.yaml": "runs:\n  - notebook: 04_variants\n"}


# --- mutations of the data --------------------------------------------------------------------------------------


def data_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) into `data`, the root included."""
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += data_paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += data_paths(value, (*prefix, index))
    return found


def _at(data: Any, path: tuple) -> Any:
    for step in path:
        data = data[step]
    return data


def _hostile_value(kind: str, number: Any, text: str, depth: int) -> Any:
    if kind == "number":
        return number
    if kind == "text":
        return text
    if kind == "none":
        return None
    if kind == "list":
        return [text] * (depth % 5)
    if kind == "mapping":
        return {text: number}
    if kind == "deep":
        value: Any = text
        for _ in range(depth):
            value = [value]
        return value
    if kind == "many":  # up to 6,000 short items (long ones would make a file past the readers' size limit)
        return [text[:20]] * (depth * 100)
    return {}


def mutate(data: Any, mutations: list[list[Any]]) -> Any:
    """A copy of `data` with each mutation applied: a value replaced, a key removed, a key added."""
    data = copy.deepcopy(data)
    for action, pick, key, kind, number, text, depth in mutations:
        paths = data_paths(data)
        path = paths[pick % len(paths)]
        value = _hostile_value(kind, number, text, depth)
        if not path:
            if action == "replace":
                data = value
            elif isinstance(data, dict):
                data[key] = value
            continue
        parent, last = _at(data, path[:-1]), path[-1]
        if action == "replace":
            parent[last] = value
        elif action == "remove":
            del parent[last]
        elif isinstance(parent, dict):
            parent[key] = value
        else:
            parent.append(value)
    return data


def dump(data: Any, flow: bool) -> str:
    """`data` as YAML text; values PyYAML cannot write safely (none here) would raise."""
    return yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True, sort_keys=False, width=100)


def edit_text(text: str, snippet: int | None, key: str, line: int) -> str:
    """`text` with a hostile snippet put in at a line (its `{key}` replaced), or the whole text replaced."""
    if snippet is None:
        return text
    block = SNIPPETS[snippet % len(SNIPPETS)].replace("{key}", key or "x")
    lines = text.splitlines(keepends=True)
    if line % 5 == 0:
        return block
    at = line % (len(lines) + 1)
    while at < len(lines) and lines[at][:1] in (" ", "\t", "-"):
        at += 1  # at a top-level line, so that the snippet's keys are top-level keys
    return "".join(lines[:at]) + block + "".join(lines[at:])


def encode(text: str, encoding: str, blob: bytes) -> bytes:
    if encoding == "invalid":
        data = text.encode("utf-8")
        at = len(blob) and blob[0] * 97 % (len(data) + 1)
        return data[:at] + b"\xff\xfe\x80" + blob + data[at:]
    return text.encode(encoding, errors="replace")


_mutation = st.tuples(
    st.sampled_from(["replace", "replace", "remove", "add"]), st.integers(0, 2**16), st.sampled_from(KEYS),
    st.sampled_from(["number", "text", "text", "none", "list", "mapping", "deep", "many", "empty"]),
    st.sampled_from(NUMBERS), st.one_of(st.sampled_from(TEXTS), st.text(max_size=10)), st.integers(0, 60),
)


@st.composite
def file_recipes(draw, seeds: list[str], entries: list[str], always_hostile: bool = False) -> Recipe:
    """A YAML case: seed, data mutations, a hostile snippet (one case in three, or always), encoding, what the file
    is, entry point."""
    return {
        "seed": draw(st.sampled_from(seeds)),
        "entry": draw(st.sampled_from(entries)),
        "mutations": [list(m) for m in draw(st.lists(_mutation, max_size=3))],
        "flow": draw(st.booleans()),
        "snippet": draw(st.integers(0, 2**10)) if always_hostile or draw(st.integers(0, 2)) == 0 else None,
        "snippet_key": draw(st.sampled_from(KEYS)),
        "line": draw(st.integers(0, 400)),
        "encoding": draw(st.sampled_from(ENCODINGS)) if draw(st.integers(0, 5)) == 0 else "utf-8",
        "blob": draw(st.binary(max_size=6)),
        "file": draw(st.sampled_from(FILE_KINDS)) if draw(st.integers(0, 4)) == 0 else "file",
    }


# --- the entry points -------------------------------------------------------------------------------------------


def _stub_runs() -> None:
    """In the child: the command reads and checks its file, then stops where it would run notebooks or cells."""
    import where223.cli._studies as studies
    import where223.pipeline.run as pipeline_run
    import where223.sweep.driver as driver

    pipeline_run.run_plan = lambda plan, *args, **kwargs: [run.name for run in plan]
    driver.run = lambda space, **kwargs: {"not_run": len(space.cells)}
    studies.summarize = lambda space, outputs: "not summarized (fuzz)"


def _stub_plans() -> None:
    """In the child, for `sweep --plan`: the same, and the planner the space names plans nothing from the records
    (a module with a `plan` is imported as named, its `plan` stubbed) and the planned cells are written nowhere."""
    import importlib

    import where223.files

    _stub_runs()
    where223.files.write_atomic = lambda target, *args, **kwargs: Path(target)
    real = importlib.import_module

    def import_module(name: str, package: str | None = None):
        module = real(name, package)
        if callable(getattr(module, "plan", None)):
            module.plan = lambda stacks: ["gpt2-tiny cpu_bf16_autocast torchscript 17"]
        return module

    importlib.import_module = import_module


def _seed_text(recipe: Recipe) -> str:
    entry, seed = recipe["entry"], recipe["seed"]
    if entry == "stacks":
        return stacks_seed()
    if entry == "plan":
        return plan_seeds().get(seed) or plan_seeds()["small.yaml"]
    return space_seeds().get(seed) or space_seeds()["matrix.yaml"]


def write_input(path: Path, kind: str, data: bytes) -> None:
    """The file a case reads: its bytes, or a folder, a FIFO, /dev/zero, a link (dangling or not), nothing."""
    if kind == "file":
        path.write_bytes(data)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "symlink":
        (path.parent / "target.yaml").write_bytes(data)
        os.symlink("target.yaml", path)
    elif kind == "dangling":
        os.symlink("nowhere.yaml", path)


def build(recipe: Recipe, folder: Path, reader: str) -> tuple[Case, dict[str, bytes], bool]:
    """The case a recipe describes, its file written into `folder`; (case, input files, whether it parses)."""
    text = _seed_text(recipe)
    if recipe["mutations"]:
        data = mutate(yaml.safe_load(text), recipe["mutations"])
        text = dump(data, recipe["flow"])
    text = edit_text(text, recipe["snippet"], recipe["snippet_key"], recipe["line"])
    payload = encode(text, recipe["encoding"], recipe["blob"])
    path = folder / ("stacks.yaml" if recipe["entry"] == "stacks" else "input.yaml")
    write_input(path, recipe["file"], payload)
    try:
        yaml.safe_load(payload)
        parses = recipe["file"] in ("file", "symlink", "empty")
    except (yaml.YAMLError, ValueError, RecursionError):
        parses = False
    outputs = folder / "outputs"
    outputs.mkdir()
    entry = recipe["entry"]
    env = {}
    if entry == "plan":
        argv = ["run", "--params", str(path), "--output-root", str(outputs)]
    elif entry == "sweep-plan":
        argv = ["sweep", "--space", str(path), "--plan"]
    elif entry == "stacks":
        argv = ["sweep", "--space", str(SPACES / "matrix.yaml"), "--output-root", str(outputs)]
        env["WHERE223_STACKS"] = str(path)
    else:
        argv = ["sweep", "--space", str(path), "--output-root", str(outputs)]
    case = Case(reader, argv, (str(path),), CODES, env=env,
                prepare=_stub_plans if entry == "sweep-plan" else _stub_runs)
    return case, {path.name: payload}, parses


ENTRIES = {"space": ["space"], "plan": ["plan"], "yaml": ["space", "stacks", "plan", "sweep-plan"]}


SAMPLE_SEEDS = ("matrix.yaml", "classes-opsets.yaml", "small.yaml", "empty-parameters.yaml")  # quick to check


def seeds_of(reader: str, sample: bool = False) -> list[str]:
    """The seeds a reader draws from (`sample`: only those a command checks in a fraction of a second; a space of
    thousands of cells takes most of a second)."""
    if reader == "plan":
        found = sorted(plan_seeds())
    elif reader == "space":
        found = sorted(space_seeds())
    else:
        found = sorted({*space_seeds(), *plan_seeds()})
    return [name for name in found if name in SAMPLE_SEEDS] if sample else found
