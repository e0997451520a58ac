"""How fast `where223 lint` is on GPT-2 124M, next to `onnx.checker.check_model(full_check=True)`.

Builds (once, cached under .cache/) a TorchScript ONNX export of the 124M GPT-2 architecture with random
weights, its weights in a separate .data file, then times both on the same file and writes the record
outputs/benchmarks/lint_speed.json (with the environment); NOTES.md's lint-speed line is `notes_line(record)`.
`benchmarks/environments.py` times the same pair over onnx's many small conformance models; this script
covers the one large export the project is about. Only this script imports torch and transformers; the linter
itself never does.

    python benchmarks/lint_speed.py [--repeats 5] [--rebuild]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.internal import api_implementation

from where223.graph.lint import lint_model, lint_types
from where223.graph.loading import load_model
from where223.graph.types import model_types
from where223.pipeline import environment, paths, portable, records
from where223.pipeline.paths import CACHE

RECORD: Path = paths.OUTPUTS / "benchmarks" / "lint_speed.json"
MODEL_DIR = CACHE / "lint_speed"
MODEL_PATH = MODEL_DIR / "gpt2-124m-random-opset17.onnx"


def build_model(path: Path = MODEL_PATH) -> Path:
    """Export GPT2LMHeadModel(GPT2Config()) with random weights at opset 17, weights as external data."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(use_cache=False)).eval()
    input_ids = torch.randint(0, model.config.vocab_size, (1, 16))
    path.parent.mkdir(parents=True, exist_ok=True)
    inline = path.with_suffix(".inline.onnx")
    with torch.no_grad():
        torch.onnx.export(
            model,
            (input_ids,),
            str(inline),
            input_names=["input_ids"],
            output_names=["logits"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}},
            opset_version=17,
        )
    exported = onnx.load(str(inline))
    onnx.save_model(exported, str(path), save_as_external_data=True, location=f"{path.name}.data")
    inline.unlink()
    return path


def timed(function: Callable[[], object], repeats: int) -> list[float]:
    """Wall-clock seconds of each of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def measure(path: Path, repeats: int) -> dict[str, Any]:
    """The lint result, lint's phases and both tools' timed runs on `path` (seconds rounded to the ms)."""
    report = lint_model(path)
    start = time.perf_counter()
    model, _ = load_model(path)
    loaded = time.perf_counter()
    types = model_types(model)
    typed = time.perf_counter()
    lint_types(types)
    checked = time.perf_counter()
    lint_times = timed(lambda: lint_model(path), repeats)
    checker_times = timed(lambda: onnx.checker.check_model(str(path), full_check=True), repeats)
    lint_s, checker_s = statistics.median(lint_times), statistics.median(checker_times)
    data = path.with_name(f"{path.name}.data")
    return {
        "model": {
            "path": portable.path(str(path)),
            "graph_mib": round(path.stat().st_size / 2**20, 2),
            "weights_mib": round(data.stat().st_size / 2**20),
        },
        "lint_result": {
            "nodes_checked": report.nodes_checked,
            "violations": len(report.violations),
            "unchecked": report.unchecked_count,
            "untyped_values": report.untyped_values,
        },
        "lint_phases_s": {
            "load": round(loaded - start, 3),
            "types": round(typed - loaded, 3),
            "constraint_check": round(checked - typed, 3),
        },
        "repeats": repeats,
        "lint_s": {
            "median": round(lint_s, 3),
            "min": round(min(lint_times), 3),
            "runs": [round(t, 3) for t in lint_times],
        },
        "checker_s": {
            "median": round(checker_s, 3),
            "min": round(min(checker_times), 3),
            "runs": [round(t, 3) for t in checker_times],
        },
        "ratio_lint_to_checker": round(lint_s / checker_s, 1),
        "protobuf_backend": api_implementation.Type(),
        "versions": {name: importlib.metadata.version(name) for name in ("onnx", "protobuf", "numpy", "networkx")},
    }


def notes_line(record: dict[str, Any]) -> str:
    """NOTES.md's lint-speed bullet, every figure taken from the record (a test keeps NOTES.md equal to it)."""
    lint, checker, versions = record["lint_s"], record["checker_s"], record["versions"]
    return (
        f"- **Lint speed** (`benchmarks/lint_speed.py` -> `outputs/benchmarks/lint_speed.json`): on the 124M "
        f"export, weights not loaded, `lint_model` takes a median {lint['median']:.3f} s over {record['repeats']} "
        f"runs (min {lint['min']:.3f} s) against {checker['median']:.3f} s for "
        f"`onnx.checker.check_model(full_check=True)` ({record['ratio_lint_to_checker']:.1f} x); "
        f"protobuf {versions['protobuf']} "
        f"({record['protobuf_backend']} implementation), onnx {versions['onnx']}, "
        f"{record['environment']['cpu_count']} cores visible."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--rebuild", action="store_true", help="export the model again")
    parser.add_argument("--out", type=Path, default=RECORD, help="where to write the record")
    args = parser.parse_args()

    if args.rebuild or not MODEL_PATH.is_file():
        start = time.perf_counter()
        build_model()
        print(f"exported {MODEL_PATH} in {time.perf_counter() - start:.1f} s")
    record = {
        **measure(MODEL_PATH, args.repeats),
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    records.write_json(args.out, record)
    result, phases = record["lint_result"], record["lint_phases_s"]
    print(
        f"lint result: {result['nodes_checked']} nodes checked, {result['violations']} violations, "
        f"{result['unchecked']} unchecked, {result['untyped_values']} untyped values"
    )
    print("lint phases: " + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in phases.items()))
    print(notes_line(record))
    print(f"record: {args.out}")


if __name__ == "__main__":
    main()
