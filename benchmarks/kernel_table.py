"""How long the CPU kernel table takes to build, what it holds, and what it costs `where223 lint --kernels`.

For each Python given (default: this one, then `.venv-graph`'s, so both onnxruntimes of the project), in a process
of its own: the CPU provider's table (`where223.graph.kernels`) built in memory for every ai.onnx operator at each
opset (`--opsets`, default 17 and 21; `--repeat` builds each, default 3, the first one paying ONNX Runtime's
warm-up), with its entries counted by status and by type (float, float16, bfloat16, double) and the operators
missing a kernel named per type; then `lint_model` on the committed repaired GPT-2 (type conflicts resolved, still
bfloat16) without kernels, with kernels and an empty cache, and again with the cache just written, beside ONNX
Runtime's verdict on the whole model and whether the node it names is among those lint says lack a kernel. The
record carries the environment and the run it came from (`run`: commit, machine, start; every interpreter's part
measured in that run, one after the other).

    .venv/bin/python benchmarks/kernel_table.py [--opsets 17,21] [--repeat 3] [--python PY ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "kernel_table.json"
MODEL: Path = paths.OUTPUTS / "tiny-cpu-bf16-onnx_export" / "fix-4.26" / "repaired.onnx"
GRAPH_PYTHON: Path = paths.ROOT / ".venv-graph" / "bin" / "python"
# the float types, the varied one found last-first: float is also the type a parameter takes by default
TYPES = {"tensor(float)": "float", "tensor(double)": "double", "tensor(float16)": "float16",
         "tensor(bfloat16)": "bfloat16"}


def type_of_entry(key: str) -> str | None:
    """The float type an entry's binding varies (`MatMul(13) opset 17 T=tensor(bfloat16)` -> bfloat16), None when
    it binds none of them. A parameter that does not allow the varied type takes int64, bool, int32 or float
    (`kernels.planned_bindings`), so a binding's float type other than float is the varied one."""
    parts = key.split(" ")
    bound = {pair.partition("=")[2] for pair in parts[-1].split(",")} if len(parts) >= 4 else set()
    return next((name for spelled, name in reversed(TYPES.items()) if spelled in bound), None)


def summarize(entries: dict[str, Any]) -> dict[str, Any]:
    """Entries (key -> KernelEntry) counted by status, by type and status, with the operators missing per type."""
    status: dict[str, int] = {}
    by_type: dict[str, dict[str, int]] = {name: {} for name in TYPES.values()}
    missing: dict[str, list[str]] = {name: [] for name in TYPES.values()}
    for key, entry in sorted(entries.items()):
        status[str(entry.status)] = status.get(str(entry.status), 0) + 1
        kind = type_of_entry(key)
        if kind is None:
            continue
        by_type[kind][str(entry.status)] = by_type[kind].get(str(entry.status), 0) + 1
        if str(entry.status) == "missing":
            missing[kind].append(key.split(" ", 1)[0])
    ops = len({key.split("(", 1)[0] for key in entries})
    return {"entries": len(entries), "ops": ops, "status": status, "by_type": by_type, "missing": missing}


def measure_tables(opsets: Iterable[int], repeat: int, ops: Sequence[str] | None = None) -> dict[str, Any]:
    """Build the CPU table in memory `repeat` times per opset; the last build's entries summarized."""
    from where223.graph.kernels import kernel_table

    built: dict[str, Any] = {}
    for opset in opsets:
        runs = []
        for _ in range(repeat):
            table = kernel_table("CPUExecutionProvider", cache=False)
            started = time.perf_counter()
            table.build(opset, ops=ops)
            runs.append(round(time.perf_counter() - started, 3))
        built[str(opset)] = {"runs_s": runs, "median_s": round(statistics.median(runs), 3),
                             **summarize(table.entries)}
    return built


def measure_lint(model: Path) -> dict[str, Any]:
    """lint_model on `model` without kernels, with them from an empty cache, and again from the cache."""
    from where223.graph.lint import lint_model
    from where223.graph.ort import judge, refused_node

    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kernel-cache-") as cache:
        started = time.perf_counter()
        lint_model(model)
        seconds["types only"] = round(time.perf_counter() - started, 3)
        for arm in ("kernels, empty cache", "kernels, cached"):
            started = time.perf_counter()
            report = lint_model(model, provider="CPUExecutionProvider", kernel_cache=Path(cache))
            seconds[arm] = round(time.perf_counter() - started, 3)
            entries = len(json.loads(Path(report.kernels.table).read_text())["entries"])
    verdict = judge(model)
    named = refused_node(verdict.message)
    return {
        "model": os.path.relpath(model, paths.ROOT),
        "seconds": seconds,
        "cache_entries": entries,
        "nodes_looked_up": report.kernels.nodes_checked,
        "missing": len(report.kernels.missing),
        "unknown": sum(report.kernels.unknown.values()),
        "ort_verdict": str(verdict.verdict),
        "ort_names": named,
        "ort_named_node_predicted": named in {m.node for m in report.kernels.missing},
    }


def measure_here(opsets: Sequence[int], repeat: int, model: Path) -> dict[str, Any]:
    """Everything measured in this interpreter, with its versions."""
    from where223.graph.ort import import_onnxruntime

    started = time.perf_counter()
    onnxruntime = import_onnxruntime()
    import onnx

    return {
        "python": sys.executable,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "import_s": round(time.perf_counter() - started, 3),
        "tables": measure_tables(opsets, repeat),
        "lint": measure_lint(model) if model.is_file() else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opsets", default="17,21", help="ai.onnx opsets to build the table at (default 17,21)")
    parser.add_argument("--repeat", type=int, default=3, help="builds per opset (default 3)")
    parser.add_argument("--python", action="append", help="an interpreter to measure in (repeatable)")
    parser.add_argument("--model", type=Path, default=MODEL, help="the model lint is timed on")
    parser.add_argument("--here", action="store_true", help="measure in this interpreter only; print JSON")
    parser.add_argument("--out", type=Path, default=RECORD, help="the record to write")
    args = parser.parse_args(argv)
    opsets = [int(part) for part in args.opsets.split(",") if part.strip()]
    if not 1 <= args.repeat <= 20:
        parser.error(f"--repeat {args.repeat}: choose 1 to 20")
    if args.here:
        print(json.dumps(measure_here(opsets, args.repeat, args.model)))
        return 0
    pythons = args.python or [sys.executable, *([str(GRAPH_PYTHON)] if GRAPH_PYTHON.is_file() else [])]
    run = environment.this_run()
    runtimes = {}
    for python in pythons:
        command = [python, __file__, "--here", "--opsets", args.opsets, "--repeat", str(args.repeat),
                   "--model", str(args.model)]
        done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=paths.ROOT)
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        measured["python"] = os.path.relpath(python, paths.ROOT) if Path(python).is_absolute() else python
        runtimes[measured["onnxruntime"]] = measured
        for opset, table in measured["tables"].items():
            missing = {kind: len(ops) for kind, ops in table["missing"].items()}
            print(f"onnxruntime {measured['onnxruntime']}, opset {opset}: {table['entries']} entries "
                  f"({table['ops']} ops) in {table['median_s']:.2f} s; missing {missing}")
    record = {
        "run": run,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "provider": "CPUExecutionProvider",
        "opsets": opsets,
        "repeat": args.repeat,
        "runtimes": runtimes,
        "not_measured": "providers other than the CPU one; int types (the build varies the float types only)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    publish.write_record(args.out, record, args.out.parent.parent)
    print(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
