"""Warm workers against cold ones: the same cells of the class space, side by side, in one run.

The cells: CELL_COUNT cells of `spaces/classes-today.yaml`, evenly spaced in its order (each a different model
type, across the three recipes and both exporters), on today's stack (torch 2.14.1, transformers 5.24.0), as the
class sweep runs them. Each configuration runs them from nothing into a scratch outputs tree through the sweep
driver (`where223.sweep.driver.run`: a LocalCluster of single-threaded workers; cluster start, stack check and
publishing included), one configuration after the other, warm and cold interleaved (cold-1, warm-1, warm-2,
cold-2) so that the load of whatever else runs on the machine drifts over both alike; the load average is
recorded around each (`--wait-load` waits, up to `--wait-max` minutes, for a quieter machine before starting):

- `cold-N`: each cell in a new interpreter of the stack (`engine="cold"`), on N workers;
- `warm-N`: each cell forked from its worker's warm server for the stack (`engine="warm"`), on N workers; the
  servers' start (their imports) is in the wall time.

Per configuration the record has the wall time, cells per minute, the sum of the cells' own times (each record's
`wall_s`: the cell's process, start to exit), the engine's overhead per cell (workers x wall time minus the sum of
cell times, over cells: the cluster, scheduling, the warm servers' start, publishing), the cells' own overhead
(the median of each record's `engine.overhead_s`: its wall time less its timed stages, i.e. the interpreter's
start and imports, or the fork), the median of their build stages (where transformers imports the model type's
own module, warm or cold) and their outcomes. `warm_over_cold`: cold's wall time over warm's at each number of
workers (target: at least TARGET_WARM times), and whether every cell's outcome is the same warm and cold.
`preload`: what a warm server of the stack imports, in what time, how many threads it has then (one: forking it
is safe) and how many torch operations ran while it imported (counted by a dispatch mode: none should). The
speed-up at 2 workers is warm-1's wall time over warm-2's (target 1.7x, with where the time went); `class_space`
scales each configuration's seconds per cell to the whole space. Nothing here is judged by a test; the record goes
to outputs/benchmarks/sweep_engine.json with the run it came from (`run`: commit, machine, start). `--only`
measures some configurations: the record then holds those alone (and the ratios between them), nothing kept from
an earlier run.

    .venv/bin/python benchmarks/sweep_engine.py [--only cold-1,warm-1] [--wait-load 3 --wait-max 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "sweep_engine.json"
SPACE: Path = paths.ROOT / "spaces" / "classes-today.yaml"
CELL_COUNT = 20
TARGET_SPEEDUP = 1.7
TARGET_WARM = 1.5
CONFIGURATIONS = ("cold-1", "warm-1", "warm-2", "cold-2")  # the order they run in
PROJECTED_WORKERS = (2, 8, 32)

# Run in the stack's interpreter with the cells' environment: what a warm server imports, under a dispatch mode
# that counts every torch operation (torch itself is imported first, to have the mode).
PROBE = """
import json, sys, time
start = time.perf_counter()
import torch
torch_s = time.perf_counter() - start
from torch.utils._python_dispatch import TorchDispatchMode
from where223.sweep import warm

class Count(TorchDispatchMode):
    ops = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        Count.ops.append(str(func))
        return func(*args, **(kwargs or {}))

with Count():
    imported, missing = warm.preload(sys.argv[1].split(","))
print(json.dumps({"torch_import_s": round(torch_s, 2), "imported": imported, "missing": missing,
                  "threads": warm.thread_count(), "torch_ops": len(Count.ops), "first_ops": Count.ops[:5]}))
"""


def chosen_cells(space: Any) -> list[Any]:
    """CELL_COUNT cells evenly spaced in the space's order."""
    step = max(1, len(space.cells) // CELL_COUNT)
    return list(space.cells[::step][:CELL_COUNT])


def cell_name(cell: Any) -> str:
    return f"{cell.model} {cell.recipe} {cell.exporter}"


def run_configuration(space: Any, engine: str, workers: int, scratch: Path) -> tuple[float, list[dict[str, Any]]]:
    """The space's cells through the sweep driver by `engine` on `workers` workers: (wall time, their records)."""
    from where223.sweep import driver

    outputs = scratch / f"{engine}-{workers}"
    outputs.mkdir(parents=True)
    start = time.monotonic()
    with open(os.devnull, "w") as quiet:
        driver.run(space, workers=workers, force=True, output_root=outputs, engine=engine, stream=quiet)
    wall_s = time.monotonic() - start
    rows = []
    for cell in space.cells:
        record = json.loads(space.record_path(cell, outputs).read_text())
        rows.append({**record, "cell": cell_name(cell)})
    return wall_s, rows


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def measure(name: str, wall_s: float, rows: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """A configuration's rate, overheads and outcomes."""
    cell_s = sum(r.get("wall_s") or 0 for r in rows)
    engines = [r.get("engine") or {} for r in rows]
    builds = [sum(v for k, v in (r.get("timings_s") or {}).items() if k.startswith("build-")) for r in rows
              if r.get("timings_s")]  # fmt: skip
    return {
        "engine": name.split("-")[0],
        "workers": workers,
        "cells": len(rows),
        "wall_s": round(wall_s, 1),
        "cells_per_minute": round(len(rows) / (wall_s / 60), 2),
        "cell_seconds_sum": round(cell_s, 1),
        "overhead_per_cell_s": round((workers * wall_s - cell_s) / len(rows), 2),
        "median_cell_overhead_s": _median([e["overhead_s"] for e in engines if e.get("overhead_s") is not None]),
        "median_build_s": _median(builds),
        "server_starts_s": [e["server_start_s"] for e in engines if e.get("server_start_s")],
        "ran_by": sorted({str(e.get("kind")) for e in engines}),
        "outcomes": {r.get("cell") or r.get("model_type"): str(r["outcome"]) for r in rows},
    }


def wait_for_load(below: float | None, most_min: float) -> dict[str, Any]:
    """Wait (polling every 30 s, at most `most_min` minutes) for the 1-minute load average to fall below `below`."""
    start = time.monotonic()
    while below is not None and os.getloadavg()[0] >= below and time.monotonic() - start < most_min * 60:
        print(f"load {os.getloadavg()[0]:.1f}: waiting for it to fall below {below}", flush=True)
        time.sleep(30)
    return {"wanted_below": below, "waited_s": round(time.monotonic() - start),
            "load_average_at_start": [round(v, 2) for v in os.getloadavg()]}  # fmt: skip


def probe_preload(space: Any) -> dict[str, Any]:
    """What a warm server of the space's stack imports (warm.PRELOAD and the runner), in the stack's interpreter."""
    from where223.sweep import stacks, warm, worker

    stack = space.stacks[space.cells[0].stack]
    prepared = stacks.prepare(stack)
    env = worker.cell_environment(paths.ROOT / "src", prepared.path, 1)
    modules = [*warm.PRELOAD, *([space.runner] if space.runner else [])]
    done = subprocess.run([str(prepared.python), "-c", PROBE, ",".join(modules)], env=env, cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, check=True, timeout=900)  # fmt: skip
    found = json.loads(done.stdout.strip().splitlines()[-1])
    found["import_s"] = round(found["torch_import_s"] + sum(found["imported"].values()), 2)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    from where223.sweep.space import load_space

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated configurations (default: all four)")
    parser.add_argument("--wait-load", type=float, help="wait for the 1-minute load average to fall below this")
    parser.add_argument("--wait-max", type=float, default=30.0, help="minutes to wait for it at most (default 30)")
    parser.add_argument("--out", type=Path, default=RECORD)
    args = parser.parse_args(argv)
    chosen = [name for name in CONFIGURATIONS if not args.only or name in args.only.split(",")]
    full = load_space(SPACE)
    space = dataclasses.replace(full, cells=chosen_cells(full))
    load_wait = wait_for_load(args.wait_load, args.wait_max)
    run = environment.this_run()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="where223-sweep-bench-") as folder:
        for name in chosen:
            engine, workers = name.split("-")
            before = [round(v, 2) for v in os.getloadavg()]
            wall_s, rows = run_configuration(space, engine, int(workers), Path(folder))
            results[name] = {**measure(name, wall_s, rows, int(workers)), "load_average_before": before,
                             "load_average_after": [round(v, 2) for v in os.getloadavg()]}  # fmt: skip
            print(f"{name}: {results[name]['wall_s']} s, {results[name]['cells_per_minute']} cells/min, cells' own "
                  f"overhead {results[name]['median_cell_overhead_s']} s (median), load {before[0]}",
                  flush=True)  # fmt: skip
    record: dict[str, Any] = {
        "run": run,
        "description": __doc__.split("\n\n")[0],
        "space": SPACE.relative_to(paths.ROOT).as_posix(),
        "cells": [cell_name(cell) for cell in space.cells],
        "load_wait": load_wait,
        "configurations": results,
        "preload": probe_preload(space),
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    record.update(judge_warm(results))
    if "warm-1" in results and "warm-2" in results:
        record.update(judge_speedup(results["warm-1"], results["warm-2"]))
        print(f"speed-up at 2 workers: {record['speedup_2_workers']}x (target {TARGET_SPEEDUP}x)", flush=True)
    record["class_space"] = class_space(results, len(full.cells))
    record["committed_rebuild"] = committed_rebuild()
    publish.write_record(args.out, record, args.out.parent.parent)
    return 0


def judge_warm(results: dict[str, Any]) -> dict[str, Any]:
    """Cold's wall time over warm's at each number of workers measured both ways, against TARGET_WARM, and whether
    the outcomes agree cell by cell."""
    ratios, agree = {}, {}
    for workers in ("1", "2"):
        cold, warm = results.get(f"cold-{workers}"), results.get(f"warm-{workers}")
        if cold and warm:
            ratios[workers] = round(cold["wall_s"] / warm["wall_s"], 2)
            agree[workers] = cold["outcomes"] == warm["outcomes"]
            print(f"warm over cold at {workers} worker(s): {ratios[workers]}x (target {TARGET_WARM}x)", flush=True)
    if not ratios:
        return {}
    return {"warm_over_cold": {"workers": ratios, "target": TARGET_WARM,
                               "target_met": all(r >= TARGET_WARM for r in ratios.values()),
                               "outcomes_agree": agree}}  # fmt: skip


def judge_speedup(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """One worker's wall time over two workers', against the target, with where the time went."""
    speedup = one["wall_s"] / two["wall_s"]
    return {
        "speedup_2_workers": round(speedup, 2),
        "target_speedup": TARGET_SPEEDUP,
        "target_met": speedup >= TARGET_SPEEDUP,
        "where_the_time_went": where_the_time_went(one, two),
    }


def class_space(results: dict[str, Any], cells: int) -> dict[str, Any]:
    """Each configuration's seconds per cell per worker (workers x wall time over cells) scaled to the class space's
    `cells`: worker-hours, and hours on PROJECTED_WORKERS workers. An extrapolation: it assumes the per-worker rate
    holds as workers are added (measured up to 2)."""
    found: dict[str, Any] = {"cells": cells}
    for name, measured in results.items():
        per_cell = measured["workers"] * measured["wall_s"] / measured["cells"]
        found[name] = {
            "seconds_per_cell": round(per_cell, 2),
            "worker_hours": round(cells * per_cell / 3600, 1),
            "hours": {str(n): round(cells * per_cell / n / 3600, 1) for n in PROJECTED_WORKERS},
        }
    return found


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
