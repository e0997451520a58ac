"""The one check every benchmark record passes (outputs/benchmarks/*.json, and what each benchmark's code writes):
a record is one measurement per part, its phases explain their total.

A record carries, at its top, the run its top-level part came from (`run`, `where223.pipeline.record.Run`: the
commit, the machine, when it started; or how it was recovered from git history); a part nested in it that came
from another run (kept by a partial rerun) carries its own. Everything else in a part claims to be its run's
measurement, and is held against it:

- an `environment` in the part describes the run's machine (`where223.pipeline.environment.machine`);
- a `recorded_at` in the part is no earlier than the run's start, where the run says when it started;
- a part's phases (`<name>_phases_s`) say which total they explain (`explains`, a key beside them holding that
  total's `median` and `runs`), are the medians of the same rounds as that total (as many `runs` per phase as
  the total has, each phase's `median` the median of its own), and neither a round's phases nor their medians
  sum past the total (beyond the rounding to the millisecond).

`problems(record)` lists where a record fails, one line each; an empty list is a pass.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Mapping
from typing import Any

from where223.pipeline.environment import MACHINE_KEYS

RUN = "run"
PHASES_SUFFIX = "_phases_s"
ROUNDED = 0.0005  # seconds are recorded to the millisecond: each rounded value may be this far off
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _instant(text: object) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def run_problems(run: object, where: str) -> list[str]:
    """Where a part's `run` is not a run: a commit (or null), a machine, a start (null only when recovered)."""
    if not isinstance(run, Mapping):
        return [f"{where}: its run is {type(run).__name__}, not an object"]
    found = []
    commit = run.get("commit")
    if commit is not None and not (isinstance(commit, str) and _COMMIT.fullmatch(commit)):
        found.append(f"{where}: commit {commit!r} is not a commit")
    machine = run.get("machine")
    if not isinstance(machine, Mapping) or set(machine) != set(MACHINE_KEYS):
        found.append(f"{where}: machine {machine!r} does not name {', '.join(MACHINE_KEYS)}")
    recovered = run.get("recovered")
    if recovered is not None and not (isinstance(recovered, str) and recovered.strip()):
        found.append(f"{where}: recovered says nothing")
    started = run.get("started_at")
    if started is None and recovered is None:
        found.append(f"{where}: no start, and not recovered")
    elif started is not None and _instant(started) is None:
        found.append(f"{where}: started_at {started!r} is not a UTC instant")
    unknown = set(run) - {"commit", "machine", "started_at", "recovered"}
    if unknown:
        found.append(f"{where}: unknown keys {sorted(unknown)}")
    return found


def _summary(value: object) -> tuple[float, list[float]] | None:
    if isinstance(value, Mapping) and isinstance(value.get("median"), (int, float)) and isinstance(
            value.get("runs"), list) and all(isinstance(v, (int, float)) for v in value["runs"]):
        return float(value["median"]), [float(v) for v in value["runs"]]
    return None


def phase_problems(holder: Mapping[str, Any], key: str, where: str) -> list[str]:
    """Where `holder[key]`'s phases do not explain their total from the same rounds."""
    phases = holder[key]
    at = f"{where}.{key}" if where else key
    if not isinstance(phases, Mapping) or not {"explains", "median", "runs"} <= set(phases):
        return [f"{at}: phases without the total they explain and the rounds they come from "
                "(explains, median, runs)"]
    total = _summary(holder.get(phases["explains"]))
    if total is None:
        return [f"{at}: explains {phases['explains']!r}, which is no total with a median and runs beside it"]
    total_median, total_runs = total
    medians, runs = phases["median"], phases["runs"]
    if not isinstance(medians, Mapping) or not isinstance(runs, Mapping) or set(medians) != set(runs) or not medians:
        return [f"{at}: the phases' medians and runs name different phases"]
    found = []
    for name, samples in runs.items():
        if not isinstance(samples, list) or len(samples) != len(total_runs):
            found.append(f"{at}: {name} has {len(samples) if isinstance(samples, list) else 'no'} rounds, "
                         f"its total {len(total_runs)}: not the same rounds")
        # the median is of the unrounded rounds, then rounded; the rounds are rounded each: of an even count the
        # median averages two of them, so the two may differ by a rounding each (and a float's last bit)
        elif abs(statistics.median(samples) - medians[name]) > 2 * ROUNDED + 1e-9:
            found.append(f"{at}: {name}'s median {medians[name]} is not the median of its rounds "
                         f"({statistics.median(samples):.3f})")
    if found:
        return found
    slack = ROUNDED * (len(medians) + 1)
    for index, total_s in enumerate(total_runs):
        summed = sum(samples[index] for samples in runs.values())
        if summed > total_s + slack:
            found.append(f"{at}: round {index + 1}'s phases sum to {summed:.3f} s, past its total {total_s:.3f} s")
    summed = sum(medians.values())
    if summed > total_median + slack:
        found.append(f"{at}: the phases' medians sum to {summed:.3f} s, past the median total they explain "
                     f"({phases['explains']}, {total_median:.3f} s)")
    return found


def _part_problems(node: Any, run: Mapping[str, Any], where: str) -> list[str]:
    """What in `node` (inside a part whose run is `run`) is not that run's, down to nested parts (held against
    their own runs)."""
    found: list[str] = []
    if isinstance(node, list):
        for index, item in enumerate(node):
            found += _part_problems(item, run, f"{where}[{index}]")
        return found
    if not isinstance(node, Mapping):
        return found
    tally = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in node.values())
    if where and RUN in node and not tally:  # a part of its own: a rerun's, or one kept from an earlier run, labelled
        # (a mapping of numbers alone is a tally, whose keys are names: the fuzz's count of `run` commands)
        found += run_problems(node[RUN], f"{where}.{RUN}")
        if found:
            return found
        run = node[RUN]
    started = _instant(run.get("started_at"))
    for key, value in node.items():
        at = f"{where}.{key}" if where else key
        if key == RUN:
            continue
        if key == "environment" and isinstance(value, Mapping) and set(MACHINE_KEYS) & set(value):
            described = {k: value[k] for k in MACHINE_KEYS if k in value}
            if any(described[k] != run["machine"].get(k) for k in described):
                found.append(f"{at}: measured on another machine ({described}) than its part's run "
                             f"({run['machine']}): two runs in one part")
        elif key == "recorded_at" and started is not None:
            when = _instant(value)
            if when is None:
                found.append(f"{at}: {value!r} is not a UTC instant")
            elif when < started:
                found.append(f"{at}: recorded at {value}, before its part's run started ({run['started_at']}): "
                             "two runs in one part")
        if key.endswith(PHASES_SUFFIX):
            found += phase_problems(node, key, where)
        elif isinstance(value, (Mapping, list)):
            found += _part_problems(value, run, at)
    return found


def problems(record: Any) -> list[str]:
    """Where a benchmark record is not one measurement per part (the module's rules), one line each."""
    if not isinstance(record, Mapping) or RUN not in record:
        return ["the record: no run (each part carries the run it came from: where223.pipeline.environment.this_run)"]
    found = run_problems(record[RUN], RUN)
    return found or _part_problems(record, record[RUN], "")
