"""Every reader the fuzz drives, by name: its recipes (Hypothesis strategies) and how a recipe becomes a case.

`readers(work, sample)` makes them under a work folder (the ONNX reader's shared kernel cache, the kernel-cache
reader's seed table); with `sample`, each draws from a small fixed subset of its seeds, so that the `make test`
sample starts in a fraction of a second.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from tests.fuzz import json_cases, onnx_cases, yaml_cases
from tests.fuzz.engine import Reader
from tests.fuzz.harness import Case, run_case

NAMES = ("onnx", "kernel_cache", "records", "space", "plan", "yaml")
SAMPLE_SEEDS = 12  # conformance models in the sample (beside the hand-made ones)
SAMPLE_CACHE_MODELS = 3  # models the sample's kernel-cache cases lint
CACHE_MODELS = ("node/test_add", "node/test_matmul_2d", "node/test_where_example", "node/test_relu",
                "node/test_cast_FLOAT_to_FLOAT16", "node/test_layer_normalization_2d_axis0", "node/test_gelu_default_1")


def _onnx(work: Path, sample: bool) -> Reader:
    seeds = onnx_cases.seeds(SAMPLE_SEEDS if sample else None)
    cache = work / "onnx-kernel-cache"
    cache.mkdir(parents=True, exist_ok=True)

    def build(recipe, folder):
        case, data, parses = onnx_cases.build(recipe, folder, seeds, cache)
        return case, {"model.onnx": data}, parses

    return Reader("onnx", onnx_cases.recipes(sorted(seeds)), build)


def cache_models(work: Path) -> dict[str, Path]:
    """The models the kernel-cache cases lint, written under `work`."""
    from where223.graph.mutants import DATA

    folder = work / "cache-models"
    folder.mkdir(parents=True, exist_ok=True)
    models = {}
    built = {name: seed.model for name, seed in onnx_cases._hostile_seeds().items() if name in (
        "hostile:where_conflict", "hostile:duplicate_names")}
    built.update({name: seed.model for name, seed in onnx_cases._conftest_seeds().items()})
    for name in CACHE_MODELS:
        if (DATA / name / "model.onnx").is_file():
            built[name] = onnx.load(str(DATA / name / "model.onnx"))
    for name, model in built.items():
        path = folder / f"{name.replace('/', '_').replace(':', '_')}.onnx"
        onnx.save(model, str(path))
        models[name] = path
    return models


def seed_table(work: Path, models: dict[str, Path]) -> bytes:
    """The kernel cache `lint --kernels` writes for `models` (each linted in a forked child), as bytes."""
    cache = work / "seed-kernel-cache"
    for path in models.values():
        run_case(Case("setup", ["lint", str(path), "--kernels"], (str(path),), frozenset({0, 1, 2, 3, 4}),
                      env={"WHERE223_CACHE": str(cache)}), work)
    table = json_cases.cache_file(cache)
    return table.read_bytes() if table.is_file() else b"{}"


def _kernel_cache(work: Path, sample: bool) -> Reader:
    models = cache_models(work)
    if sample:
        models = {name: models[name] for name in sorted(models)[:SAMPLE_CACHE_MODELS]}
    seed = seed_table(work, models)

    def build(recipe, folder):
        return json_cases.build_cache(recipe, folder, models, seed)

    return Reader("kernel_cache", json_cases.cache_recipes(sorted(models)), build)


def _records(work: Path, sample: bool) -> Reader:
    names = sorted(json_cases.record_seeds())
    if sample:
        names = names[:: max(1, len(names) // 30)]
    return Reader("records", json_cases.record_recipes(names), json_cases.build_records)


def _yaml(name: str):
    def make(work: Path, sample: bool) -> Reader:
        recipes = yaml_cases.file_recipes(yaml_cases.seeds_of(name, sample), yaml_cases.ENTRIES[name],
                                          always_hostile=name == "yaml")
        return Reader(name, recipes, lambda recipe, folder: yaml_cases.build(recipe, folder, name))

    return make


MAKERS = {"onnx": _onnx, "kernel_cache": _kernel_cache, "records": _records, "space": _yaml("space"),
          "plan": _yaml("plan"), "yaml": _yaml("yaml")}


def reader(name: str, work: Path, sample: bool = False) -> Reader:
    """The reader called `name`, its shared files under `work`."""
    (work / name).mkdir(parents=True, exist_ok=True)
    return MAKERS[name](work / name, sample)
