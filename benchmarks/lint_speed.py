"""How fast `where223 lint` is on GPT-2 124M, next to `onnx.checker.check_model(full_check=True)`.

Builds (once, cached under .cache/) a TorchScript ONNX export of the 124M GPT-2 architecture with random
weights, its weights in a separate .data file, then times both on the same file. Only this script
imports torch and transformers; the linter itself never does.

    python benchmarks/lint_speed.py [--repeats 5] [--rebuild]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import onnx
from google.protobuf.internal import api_implementation

from where223.graph.lint import lint_model, lint_types
from where223.graph.loading import load_model
from where223.graph.types import model_types
from where223.pipeline.paths import CACHE

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


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--rebuild", action="store_true", help="export the model again")
    args = parser.parse_args()

    if args.rebuild or not MODEL_PATH.is_file():
        start = time.perf_counter()
        build_model()
        print(f"exported {MODEL_PATH} in {time.perf_counter() - start:.1f} s")
    data = MODEL_PATH.with_name(f"{MODEL_PATH.name}.data")
    print(
        f"model: {MODEL_PATH} ({MODEL_PATH.stat().st_size / 2**20:.2f} MiB graph; "
        f"{data.stat().st_size / 2**20:.0f} MiB weights in {data.name}, never read by lint)"
    )

    report = lint_model(MODEL_PATH)
    print(
        f"lint result: {report.nodes_checked} nodes checked, {len(report.violations)} violations, "
        f"{report.unchecked_count} unchecked, {report.untyped_values} untyped values"
    )

    start = time.perf_counter()
    model, _ = load_model(MODEL_PATH)
    loaded = time.perf_counter()
    types = model_types(model)
    typed = time.perf_counter()
    lint_types(types)
    checked = time.perf_counter()
    print(
        f"lint phases: load {loaded - start:.3f} s, types {typed - loaded:.3f} s, "
        f"constraint check {checked - typed:.3f} s"
    )

    lint_times = timed(lambda: lint_model(MODEL_PATH), args.repeats)
    checker_times = timed(lambda: onnx.checker.check_model(str(MODEL_PATH), full_check=True), args.repeats)
    lint_s, checker_s = statistics.median(lint_times), statistics.median(checker_times)
    print(f"where223 lint_model (weights not loaded): median {lint_s:.3f} s  (min {min(lint_times):.3f} s)")
    print(
        f"onnx.checker.check_model(full_check=True):   median {checker_s:.3f} s  "
        f"(min {min(checker_times):.3f} s)"
    )
    print(f"ratio lint / checker: {lint_s / checker_s:.2f}  (target: lint under 1 s: {lint_s < 1.0})")

    versions = {name: importlib.metadata.version(name) for name in ("onnx", "protobuf", "numpy", "networkx")}
    print(
        f"environment: python {platform.python_version()}, "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f", protobuf backend {api_implementation.Type()}"
    )
    print(f"cpu: {cpu_name()}, {os.cpu_count()} cores visible, {platform.platform()}")


if __name__ == "__main__":
    main()
