"""The sweep engine against itself and against the drivers it replaced: the same 20 cells, in one run.

The cells: every seventh model type of `spaces/model_types-4.25.1.txt` (20 of 143) on the project stack, as the
architecture sweep runs them (CPU bf16 autocast, TorchScript, opset 17, training mode). Each configuration runs
them from nothing into a scratch outputs tree, one configuration after the other:

- `engine-1`, `engine-2`: `where223 sweep --workers 1` and `--workers 2` (a LocalCluster of single-threaded
  workers), wall time from the command's start to its exit (cluster start, stack check and summary included);
- `old-1`, `old-2`: `where223 architectures` of the commit before the engine (`--base`, a git worktree), once
  alone and once as the two shards `make -j2 architectures` ran side by side; its cells were not pinned to one
  thread, so each used every core.

Per configuration the record has the wall time, cells per minute, the sum of the cells' own times (each record's
`wall_s`: the cell's subprocess, start to exit) and the engine's overhead per cell: workers x wall time minus the
sum of cell times, divided by cells (with one worker, wall time minus the sum of cell times over cells: what
scheduling, stack preparation and publishing cost per cell). The speed-up at 2 workers is engine-1's wall time
over engine-2's (target: at least 1.7x on 2 cores; the record says whether it was met and, if not, where the
time went). Nothing here is judged by a test; the record goes to outputs/benchmarks/sweep_engine.json.

    .venv/bin/python benchmarks/sweep_engine.py [--base 0a088fe] [--only engine-1,engine-2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "sweep_engine.json"
BASE = "0a088fe"  # the last commit with the old drivers
EVERY = 7
TARGET_SPEEDUP = 1.7
CONFIGURATIONS = ("engine-1", "engine-2", "old-1", "old-2")


def model_types() -> list[str]:
    """The benchmark's 20 model types: every seventh of the committed list."""
    listed = (paths.ROOT / "spaces" / "model_types-4.25.1.txt").read_text().splitlines()
    return [name for name in listed if name and not name.startswith("#")][::EVERY][:20]


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.name != "summary.json"]


def run_engine(workers: int, types: Sequence[str], scratch: Path) -> tuple[float, list[dict[str, Any]]]:
    outputs = scratch / f"engine-{workers}"
    outputs.mkdir(parents=True)
    command = [sys.executable, "-m", "where223", "sweep", "--space", "spaces/architectures.yaml", "--stack", "project",
               "--model", ",".join(types), "--force", "--workers", str(workers),
               "--output-root", str(outputs)]  # fmt: skip
    start = time.monotonic()
    subprocess.run(command, cwd=paths.ROOT, check=True, capture_output=True, text=True)
    return time.monotonic() - start, _records(outputs / "architectures" / "4.25.1")


def run_old(shards: int, types: Sequence[str], base: Path) -> tuple[float, list[dict[str, Any]]]:
    env = {**os.environ, "PYTHONPATH": str(base / "src"), "WHERE223_ROOT": str(base)}
    out = base / "outputs" / "architectures" / "4.25.1"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "where223", "architectures", "--release", "4.25.1", "--model-type",
               ",".join(types), "--force", "--timeout", "120"]  # fmt: skip
    start = time.monotonic()
    processes = [
        subprocess.Popen(
            [*command, "--shard", f"{index}/{shards}"],
            cwd=base,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for index in range(shards)
    ]
    if any(process.wait() != 0 for process in processes):
        raise RuntimeError(f"the old driver at {base} failed")
    return time.monotonic() - start, _records(out)


def measure(name: str, wall_s: float, rows: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    cell_s = sum(r.get("wall_s") or 0 for r in rows)
    return {
        "workers": workers,
        "cells": len(rows),
        "wall_s": round(wall_s, 1),
        "cells_per_minute": round(len(rows) / (wall_s / 60), 2),
        "cell_seconds_sum": round(cell_s, 1),
        "overhead_per_cell_s": round((workers * wall_s - cell_s) / len(rows), 2),
        "outcomes": {r["model_type"]: str(r["outcome"]) for r in rows},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=BASE, help="the commit of the old drivers (default %(default)s)")
    parser.add_argument("--only", help="comma-separated configurations (default: all four)")
    parser.add_argument("--out", type=Path, default=RECORD)
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(CONFIGURATIONS)
    types = model_types()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="where223-sweep-bench-") as folder:
        scratch = Path(folder)
        base = scratch / "base"
        if any(name.startswith("old") for name in chosen):
            subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=paths.ROOT, check=True,
                           capture_output=True)  # fmt: skip
        try:
            for name in chosen:
                kind, workers = name.split("-")
                runner = run_engine if kind == "engine" else run_old
                wall_s, rows = runner(int(workers), types, scratch if kind == "engine" else base)
                results[name] = measure(name, wall_s, rows, int(workers))
                print(f"{name}: {results[name]['wall_s']} s, {results[name]['cells_per_minute']} cells/min, "
                      f"overhead {results[name]['overhead_per_cell_s']} s per cell", flush=True)  # fmt: skip
        finally:
            if base.exists():
                subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=paths.ROOT, check=False)
    record: dict[str, Any] = {
        "description": __doc__.split("\n\n")[0],
        "model_types": types,
        "base": args.base,
        "configurations": results,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if "engine-1" in results and "engine-2" in results:
        record.update(judge_speedup(results["engine-1"], results["engine-2"]))
        print(f"speed-up at 2 workers: {record['speedup_2_workers']}x (target {TARGET_SPEEDUP}x)", flush=True)
        record["projections"] = projections(results["engine-2"])
    record["committed_rebuild"] = committed_rebuild()
    for old, new in (("old-1", "engine-1"), ("old-2", "engine-2")):
        if old in results and new in results:
            record[f"{new}_over_{old}"] = round(results[old]["wall_s"] / results[new]["wall_s"], 2)
            same = results[old]["outcomes"] == results[new]["outcomes"]
            record[f"{new}_outcomes_as_{old}"] = same
    publish.write_record(args.out, record, args.out.parent.parent)
    return 0


def judge_speedup(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """engine-1's wall time over engine-2's, against the target, with where the time went."""
    speedup = one["wall_s"] / two["wall_s"]
    return {
        "speedup_2_workers": round(speedup, 2),
        "target_speedup": TARGET_SPEEDUP,
        "target_met": speedup >= TARGET_SPEEDUP,
        "where_the_time_went": where_the_time_went(one, two),
    }


# The spaces the next issues sweep, by their text: today's stack with every model type of its mappings (at least as
# many as 4.25.1's 143), 3 recipes and 2 exporters; the 2022 stack rerun in eval mode with the 3 recipes and the
# TorchScript exporter; the emulated CUDA fp16 recipe over every refusal class on both stacks (not sized: it
# depends on the classes found).
NEXT_SPACES: dict[str, int] = {"today_stack": 143 * 3 * 2, "stack_2022_eval": 143 * 3}


def projection(two: dict[str, Any], mean_cell_s: float, cells: int, workers: Sequence[int]) -> dict[str, Any]:
    """Minutes for `cells` cells on each number of workers: cells x (mean cell time + engine-2's overhead per
    cell) / workers. An extrapolation: it assumes the per-worker rate holds as workers are added."""
    per_cell = mean_cell_s + two["overhead_per_cell_s"]
    return {
        "cells": cells,
        "seconds_per_cell": round(per_cell, 2),
        "minutes": {str(n): round(cells * per_cell / n / 60, 1) for n in workers},
    }


def projections(two: dict[str, Any]) -> dict[str, Any]:
    """The committed spaces and the next issues' spaces, from the committed architecture records' mean cell time."""
    rows = _records(paths.OUTPUTS / "architectures" / "4.25.1") + _records(paths.OUTPUTS / "architectures" / "4.26.0")
    mean_cell_s = sum(r.get("wall_s") or 0 for r in rows) / len(rows)
    spaces = {"committed_spaces": 144 + 286, **NEXT_SPACES, "next_issues": sum(NEXT_SPACES.values())}
    return {
        "mean_cell_s": round(mean_cell_s, 2),
        "mean_cell_from": f"the {len(rows)} committed architecture records",
        "spaces": {name: projection(two, mean_cell_s, cells, (2, 8, 32)) for name, cells in spaces.items()},
    }


def committed_rebuild() -> dict[str, Any]:
    """What the committed records say of the rebuild that wrote them, per space: cells, the sum of their cell times,
    and the span from the first record to the last (the time before the first record, stack builds and cluster
    start, is not in it)."""
    spaces = {"matrix": "matrix/cells/*.json", "architectures": "architectures/4.*/*.json"}
    found = {}
    for name, pattern in spaces.items():
        rows = [json.loads(p.read_text()) for p in sorted(paths.OUTPUTS.glob(pattern))]
        instants = sorted(dt.datetime.fromisoformat(r["recorded_at"]) for r in rows)
        found[name] = {
            "cells": len(rows),
            "cell_minutes_sum": round(sum(r.get("wall_s") or 0 for r in rows) / 60, 1),
            "span_minutes": round((instants[-1] - instants[0]).total_seconds() / 60, 1),
            "workers": sorted({(r.get("engine") or {}).get("host") for r in rows} - {None}),
        }
    return found


def where_the_time_went(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """Why two workers are not twice as fast: the cells' own time grew (two cells share the machine's memory and
    caches), the fixed cost (cluster start, summary) weighs twice as much, and the last cells leave one worker
    idle."""
    return {
        "cell_seconds_1_worker": one["cell_seconds_sum"],
        "cell_seconds_2_workers": two["cell_seconds_sum"],
        "cell_time_growth": round(two["cell_seconds_sum"] / one["cell_seconds_sum"], 2),
        "idle_or_overhead_s_2_workers": round(2 * two["wall_s"] - two["cell_seconds_sum"], 1),
        "idle_or_overhead_s_1_worker": round(one["wall_s"] - one["cell_seconds_sum"], 1),
    }


if __name__ == "__main__":
    raise SystemExit(main())
