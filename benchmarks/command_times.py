"""How long the two commands take: `make test` (and any other command) timed end to end in a checkout.

Each command runs `--repeat` times (default 1) in `--checkout` (default: this repository), one run after the other,
with the output of its last run kept in a log (and of each failed run in a log of its own); the record holds every
run (wall time, exit status, the load average before and after, as other work on the machine slows a run, every pytest
summary line in it, one per suite), their median, minimum and maximum (`seconds`, `minutes`: the median), and the
environment. A command that executes the notebooks (`make run`) has its notebook stage timed apart, by papermill's
own clock in the executed copies it published: from the first notebook's start to the last one's end (each run's
`notebook_stage`, their median `notebook_stage_seconds`), beside what the same notebooks took added up (one at a
time); setup, the report and compare are the rest of `seconds`. Each command's entry carries the run that timed it
(`run`: commit, machine, start); records of other commands in the same file are kept with their own runs (one
without a run, recorded before entries carried theirs, is refused: time it again), so README's "how long" column
reads from one place. The record's top-level `run` and `environment` are those of the run that last wrote it:

    .venv/bin/python benchmarks/command_times.py "make test" [--repeat 3] [--checkout /tmp/fresh-clone] [--out FILE]

Time setup first (`make setup`): a command timed here includes whatever setup it triggers, and says so only
through its time. The record goes to outputs/benchmarks/command_times.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "command_times.json"
_PYTEST_SUMMARY = re.compile(r"^=+ (.*\b(passed|failed|error)\b.*) =+$")


def pytest_summary(output: str) -> str | None:
    """Every pytest summary line (`493 passed, 8 skipped in 656.12s`) in a command's output, in its order, joined
    by "; ", if any: `make test` runs two suites (the main one, then `tests/graph` in `.venv-graph`), and its last
    line alone would quote the second as the whole run."""
    lines = [match.group(1) for match in map(_PYTEST_SUMMARY.match, output.splitlines()) if match]
    return "; ".join(lines) if lines else None


def notebook_stage(notebooks: Path, since: dt.datetime) -> dict[str, Any] | None:
    """The notebook stage of a command that executed notebooks into `notebooks` (an outputs tree's executed
    copies), started at `since`: from the first copy's start to the last one's end by papermill's times in the
    copies, how many, and their durations added up. None when the command published no executed copy."""
    spans = []
    for path in sorted(notebooks.glob("*.ipynb")):
        try:
            timing = json.loads(path.read_text())["metadata"]["papermill"]
            start, end = (dt.datetime.fromisoformat(timing[key]) for key in ("start_time", "end_time"))
        except (OSError, ValueError, KeyError, TypeError):  # not an executed copy papermill finished
            continue
        if start >= since:
            spans.append((start, end, float(timing.get("duration") or (end - start).total_seconds())))
    if not spans:
        return None
    wall = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
    return {"seconds": round(wall.total_seconds(), 1), "notebooks": len(spans),
            "one_at_a_time_seconds": round(sum(duration for _, _, duration in spans), 1)}


def timed(command: str, checkout: Path, log: Path) -> dict[str, Any]:
    """Run `command` once through bash in `checkout`, its output to `log`; its time, status and pytest summary,
    and the notebook stage of a command that executes the notebooks into the checkout's outputs."""
    before = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    start = time.monotonic()
    with log.open("w") as sink:
        status = subprocess.run(["bash", "-c", command], cwd=checkout, stdout=sink, stderr=subprocess.STDOUT,
                                check=False).returncode
    seconds = time.monotonic() - start
    stage = notebook_stage(checkout / "outputs" / "notebooks", started)
    return {
        "seconds": round(seconds, 1),
        **({"notebook_stage": stage} if stage else {}),
        "returncode": status,
        "pytest_summary": pytest_summary(log.read_text(errors="replace")),
        "load_average_before": [round(value, 2) for value in before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def summary(command: str, checkout: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A command's entry in the record: its runs and their median (the `seconds` and `minutes` quoted), minimum,
    maximum, and the last run's status and pytest summary (any failed run's status when one failed)."""
    seconds = [run["seconds"] for run in runs]
    failed = [run["returncode"] for run in runs if run["returncode"] != 0]
    median = statistics.median(seconds)
    stages = [run["notebook_stage"]["seconds"] for run in runs if "notebook_stage" in run]
    return {
        "command": command,
        "checkout": "this repository" if checkout.resolve() == paths.ROOT else "another checkout (a fresh clone)",
        "repeats": len(runs),
        "seconds": round(median, 1),
        "minutes": round(median / 60, 1),
        "seconds_min": min(seconds),
        "seconds_max": max(seconds),
        **({"notebook_stage_seconds": round(statistics.median(stages), 1)} if stages else {}),
        "returncode": failed[0] if failed else 0,
        "pytest_summary": runs[-1]["pytest_summary"],
        "runs": runs,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="+", help='commands to time, each one argument (e.g. "make test")')
    parser.add_argument("--checkout", type=Path, default=paths.ROOT, help="where to run them (default: here)")
    parser.add_argument("--out", type=Path, default=RECORD, help="the record to update")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command, one after the other (default 1)")
    args = parser.parse_args(argv)
    if not 1 <= args.repeat <= 20:
        parser.error(f"--repeat {args.repeat}: choose 1 to 20")
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    commands = dict(previous.get("commands", {}))
    unproven = sorted(name for name, entry in commands.items() if name not in args.command and "run" not in entry)
    if unproven:
        raise SystemExit(f"{args.out}: {', '.join(map(shlex.quote, unproven))} carry no run to be kept with (recorded "
                         "before entries carried theirs): time them again in this run")
    provenance = environment.this_run(args.checkout)  # every command timed now carries it: the checkout's commit
    for command in args.command:
        log = args.out.parent / f".{re.sub(r'[^a-z0-9]+', '-', command.lower()).strip('-')}.log"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        runs = []
        for index in range(args.repeat):
            run = timed(command, args.checkout, log)
            runs.append(run)
            if run["returncode"] != 0:  # a failed run's output is kept beside the last run's (git-ignored)
                shutil.copyfile(log, log.with_suffix(f".failed-{index + 1}.log"))
            print(f"{shlex.quote(command)} [{index + 1}/{args.repeat}]: {run['seconds']:.0f} s, "
                  f"exit {run['returncode']}"
                  f"{', ' + run['pytest_summary'] if run['pytest_summary'] else ''} (log {log})", flush=True)
        commands[command] = {"run": provenance, **summary(command, args.checkout, runs)}
    record = {
        "run": provenance,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "commands": dict(sorted(commands.items())),
    }
    publish.write_record(args.out, record, args.out.parent.parent)
    print(f"record: {args.out}")
    return 0 if all(commands[command]["returncode"] == 0 for command in args.command) else 1


if __name__ == "__main__":
    sys.exit(main())
