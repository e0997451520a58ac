"""Fuzz cases for the JSON readers: records and folders for `where223 compare` (mutated from the committed
outputs/ records), and the kernel cache `where223 lint --kernels` reads (a mutated cache file under a
WHERE223_CACHE of the case's own).

A record is mutated in its data (a value replaced by a deep nesting, a huge integer, NaN, an odd key), in its text
(tokens Python's json reads and others refuse: NaN, Infinity, 5,000-digit integers, 100,000 nested brackets,
duplicate keys, lone surrogates, invalid UTF-8), or on the filesystem (a link out of the folder, a dangling or
looping link, a folder or a FIFO named like a record, a name that is not UTF-8, a file missing on one side, folders
nested deep, a REF that is no folder).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.harness import Case
from tests.fuzz.yaml_cases import data_paths
from where223.pipeline.paths import OUTPUTS

RECORD_LIMIT_BYTES = 8 * 2**10  # committed records up to this size are seeds
ODD_KEYS = ["", " ", "\n", "\x00", "\x1b[2J", "é", "名前", "\ud800", "value", "tolerance", "verdict", "environment",
            "recorded_at", "elapsed_s", "[0]", "a.b", "x" * 5000, "__proto__", "constructor", "outcome", "entries",
            "status", "message", "format", "onnxruntime", "provider"]
ODD_VALUES = [None, True, 0, -1, 2**63, 2**64 + 1, 10**300, 1.5, float("nan"), float("inf"), -float("inf"), 1e-320,
              "", "x" * 10000, "\x1b[31m", "\ud800", [], {}, "available", "missing", "type_refused", "unknown",
              "reproduced", "1.19.2", "CPUExecutionProvider", 1]
TEXT_EDITS = ["nan", "infinity", "huge_int", "deep_list", "deep_object", "duplicate_key", "lone_surrogate",
              "invalid_utf8", "bom", "truncate", "empty", "not_json", "trailing_garbage", "huge_float"]
FS_EDITS = ["link_out", "link_dir_out", "dangling", "loop", "directory", "fifo", "non_utf8_name", "newline_name",
            "missing_rerun", "missing_reference", "deep_folders", "hidden", "ref_is_file", "ref_missing",
            "rerun_is_file", "link_root", "dev_zero", "many_files", "ref_dash"]

Recipe = dict[str, Any]


@functools.cache
def record_seeds() -> dict[str, bytes]:
    """Small committed records by their path under outputs/ (staging and failures left out)."""
    found = {}
    for path in sorted(OUTPUTS.rglob("*.json")):
        relative = path.relative_to(OUTPUTS).as_posix()
        if relative.split("/")[0].startswith((".", "staging", "failed")) or path.stat().st_size > RECORD_LIMIT_BYTES:
            continue
        found[relative] = path.read_bytes()
    return found


# --- mutations --------------------------------------------------------------------------------------------------


def mutate_data(data: Any, mutations: list[list[Any]]) -> Any:
    """A copy of `data` with values replaced, keys removed or added (odd keys and values, nested a few levels)."""
    data = copy.deepcopy(data)
    for action, pick, key, value, depth in mutations:
        paths = data_paths(data)
        path = paths[pick % len(paths)]
        for _ in range(depth % 6):
            value = [value] if depth % 2 else {key: value}
        if not path:
            data = value if action == "replace" or not isinstance(data, dict) else {**data, key: value}
            continue
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        if action == "replace":
            parent[path[-1]] = value
        elif action == "remove":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[key] = value
        else:
            parent.append(value)
    return data


def edit_text(data: bytes, edit: str, at: int, size: int) -> bytes:
    """The record's bytes with one hostile text edit at a place (`at`) with a size (`size`)."""
    where = at % (len(data) + 1)
    value_at = data.find(b": ", where)
    value_at = value_at + 2 if value_at >= 0 else where
    if edit == "nan":
        return data[:value_at] + b"NaN, \"z\": -Infinity, \"zz\": " + data[value_at:]
    if edit == "infinity":
        return data[:value_at] + b"Infinity, \"z\": " + data[value_at:]
    if edit == "huge_int":
        return data[:value_at] + b"9" * (size * 100 + 1) + b", \"z\": " + data[value_at:]
    if edit == "huge_float":
        return data[:value_at] + b"1e" + b"9" * (size % 12 + 1) + b", \"z\": " + data[value_at:]
    if edit == "deep_list":
        depth = 10 ** (size % 6)
        return data[:value_at] + b"[" * depth + b"]" * depth + b", \"z\": " + data[value_at:]
    if edit == "deep_object":
        depth = 10 ** (size % 6)
        return data[:value_at] + b"{\"a\":" * depth + b"1" + b"}" * depth + b", \"z\": " + data[value_at:]
    if edit == "duplicate_key":
        return b"{\"outcome\": 1, \"outcome\": 2, " + data.lstrip()[1:] if data.lstrip().startswith(b"{") else data
    if edit == "lone_surrogate":
        return data[:value_at] + b"\"\\ud800\\udfff\\ud800\", \"\\udc00\": " + data[value_at:]
    if edit == "invalid_utf8":
        return data[:where] + b"\xff\xfe\x80" + data[where:]
    if edit == "bom":
        return b"\xef\xbb\xbf" + data
    if edit == "truncate":
        return data[:where]
    if edit == "empty":
        return b""
    if edit == "not_json":
        return b"this is not json " * (size % 4)
    if edit == "trailing_garbage":
        return data + b"\n}{]"
    return data


_value = st.one_of(st.sampled_from(ODD_VALUES), st.text(max_size=8), st.integers(), st.floats())
_mutation = st.tuples(st.sampled_from(["replace", "replace", "remove", "add"]), st.integers(0, 2**16),
                      st.one_of(st.sampled_from(ODD_KEYS), st.text(max_size=6)), _value, st.integers(0, 11))


def _recipe_parts(draw) -> dict[str, Any]:
    return {
        "mutations": [list(m) for m in draw(st.lists(_mutation, max_size=3))],
        "text_edit": draw(st.sampled_from(TEXT_EDITS)) if draw(st.integers(0, 3)) == 0 else None,
        "at": draw(st.integers(0, 2**20)),
        "size": draw(st.integers(0, 60)),
    }


def mutated_bytes(seed: bytes, parts: dict[str, Any]) -> bytes:
    data = seed
    if parts["mutations"]:
        data = json.dumps(mutate_data(json.loads(seed), parts["mutations"]), indent=1).encode("utf-8",
                                                                                             "surrogatepass")
    if parts["text_edit"] is not None:
        data = edit_text(data, parts["text_edit"], parts["at"], parts["size"])
    return data


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


# --- compare: records and folders -------------------------------------------------------------------------------


@st.composite
def record_recipes(draw, names: list[str]) -> Recipe:
    """A compare case: 1 to 4 committed records in both trees, one of them mutated on one side or both, a
    filesystem edit (one case in three), the options."""
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True))
    return {
        "records": chosen,
        "side": draw(st.sampled_from(["rerun", "reference", "both"])),
        **_recipe_parts(draw),
        "fs_edit": draw(st.sampled_from(FS_EDITS)) if draw(st.integers(0, 2)) == 0 else None,
        "options": draw(st.sampled_from([[], [], ["--all"], ["--summary"]])),
    }


def _fs_edit(edit: str | None, reference: Path, rerun: Path, first: str) -> tuple[Path, Path]:
    """Apply a filesystem edit to the trees; the REF and rerun paths the command gets."""
    target = rerun / first
    if edit is None:
        return reference, rerun
    if edit in ("link_out", "link_dir_out", "dangling", "loop", "directory", "fifo", "dev_zero"):
        target.unlink()
        if edit == "link_out":
            os.symlink("/etc/hostname", target)
        elif edit == "link_dir_out":
            os.symlink("/etc", target)
        elif edit == "dangling":
            os.symlink("nowhere.json", target)
        elif edit == "loop":
            os.symlink(target.name, target)
        elif edit == "directory":
            target.mkdir()
            (target / "inner.json").write_text("{}")
        elif edit == "fifo":
            os.mkfifo(target)
        else:
            os.symlink("/dev/zero", target)
    elif edit == "non_utf8_name":
        os.rename(target, os.path.join(os.fsencode(target.parent), b"\xff\xfe-record.json"))
    elif edit == "newline_name":
        os.rename(target, target.parent / "odd\nname.json")
    elif edit == "missing_rerun":
        target.unlink()
    elif edit == "missing_reference":
        (reference / first).unlink()
    elif edit == "deep_folders":
        deep = rerun
        for k in range(60):
            deep = deep / f"d{k}"
        deep.mkdir(parents=True)
        (deep / "deep.json").write_text("{}")
    elif edit == "hidden":
        (rerun / ".hidden.json").write_text("{\"a\": 1}")
    elif edit == "ref_is_file":
        return reference / first, rerun
    elif edit == "ref_missing":
        return reference.parent / "no-such-folder", rerun
    elif edit == "rerun_is_file":
        return reference, target
    elif edit == "link_root":
        os.symlink("/", rerun / "root")
    elif edit == "many_files":
        for k in range(2000):
            (rerun / f"many-{k}.json").write_text("{}")
    elif edit == "ref_dash":
        return Path("--output=/tmp/x"), rerun
    return reference, rerun


def build_records(recipe: Recipe, folder: Path) -> tuple[Case, dict[str, bytes], bool]:
    """Two trees of the recipe's records, mutated; `where223 compare REF --output-root RERUN`."""
    seeds = record_seeds()
    reference, rerun = folder / "reference", folder / "rerun"
    first = recipe["records"][0]
    mutated = mutated_bytes(seeds[first], recipe)
    files = {}
    for name in recipe["records"]:
        for tree, side in ((reference, "reference"), (rerun, "rerun")):
            data = mutated if name == first and recipe["side"] in (side, "both") else seeds[name]
            path = tree / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if name == first:
            files[name] = mutated
    ref, out = _fs_edit(recipe["fs_edit"], reference, rerun, first)
    argv = ["compare", str(ref), "--output-root", str(out), *recipe["options"]]
    names = (str(ref), str(out), *recipe["records"], *(Path(n).name for n in recipe["records"]))
    return Case("records", argv, names, frozenset({0, 1, 2})), files, _parses(mutated)


# --- the kernel cache -------------------------------------------------------------------------------------------

CACHE_FS_EDITS = ["directory", "dangling", "loop", "empty", "kernels_is_file", "fifo", "dev_zero", "link_out",
                  "cache_missing"]


@st.composite
def cache_recipes(draw, models: list[str]) -> Recipe:
    """A kernel-cache case: the model linted, the cache file's mutations, a filesystem edit (one in six), format."""
    return {
        "model": draw(st.sampled_from(models)),
        **_recipe_parts(draw),
        "fs_edit": draw(st.sampled_from(CACHE_FS_EDITS)) if draw(st.integers(0, 5)) == 0 else None,
        "format": draw(st.sampled_from(["text", "json", "sarif", "github"])),
    }


def cache_file(cache: Path) -> Path:
    """The CPU provider's table file under a cache folder, for the installed onnxruntime."""
    from where223.graph.kernels import DEFAULT_PROVIDER, table_path
    from where223.graph.ort import import_onnxruntime

    return table_path(DEFAULT_PROVIDER, import_onnxruntime().__version__, cache)


def build_cache(recipe: Recipe, folder: Path, models: dict[str, Path], seed: bytes
                ) -> tuple[Case, dict[str, bytes], bool]:
    """A cache folder holding the mutated table; `where223 lint MODEL --kernels` with WHERE223_CACHE on it."""
    cache = folder / "cache"
    table = cache_file(cache)
    table.parent.mkdir(parents=True)
    data = mutated_bytes(seed, recipe)
    table.write_bytes(data)
    edit = recipe["fs_edit"]
    if edit in ("directory", "dangling", "loop", "fifo", "dev_zero", "link_out"):
        table.unlink()
        {"directory": lambda: table.mkdir(), "dangling": lambda: os.symlink("nowhere.json", table),
         "loop": lambda: os.symlink(table.name, table), "fifo": lambda: os.mkfifo(table),
         "dev_zero": lambda: os.symlink("/dev/zero", table),
         "link_out": lambda: os.symlink("/etc/hostname", table)}[edit]()
    elif edit == "empty":
        table.write_bytes(b"")
    elif edit == "kernels_is_file":
        shutil.rmtree(table.parent)
        table.parent.write_text("not a folder")
    elif edit == "cache_missing":
        shutil.rmtree(cache)
    model = folder / "model.onnx"
    shutil.copyfile(models[recipe["model"]], model)
    argv = ["lint", str(model), "--kernels", "--format", recipe["format"]]
    case = Case("kernel_cache", argv, (str(model), str(table), str(cache)), frozenset({0, 1, 2, 3, 4}),
                env={"WHERE223_CACHE": str(cache)})
    return case, {table.name: data}, _parses(data) and edit is None
