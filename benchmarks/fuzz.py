"""The fuzz's full run (`make fuzz`): at least 10,000 Hypothesis cases per reader, each run as the command line runs it
in a child forked from a warmed parent and judged (tests/fuzz/), written to outputs/benchmarks/fuzz.json.

The readers (tests/fuzz/readers.py): `onnx` (mutated models through lint, lint --kernels, blame, draw and repair),
`kernel_cache` (a mutated cache file under WHERE223_CACHE, through lint --kernels), `records` (mutated records and
folders through compare), `space` (sweep --space), `plan` (run --params), `yaml` (hostile YAML given to each YAML
reader). A case passes when the command printed at most one line on stderr (several only on exit 2, each the
command's own complaint), no traceback, exited with a status it documents, named the file and the cause on exit 2,
and stayed within 10 s of CPU (30 s of wall-clock time) and 2 GiB (tests/fuzz/harness.py). The record keeps per
reader the cases, how many got past the reader's parser (protobuf, YAML, JSON), the time, the exit statuses, the
failures grouped by signature with up to three whole (the recipe, the command, the input's bytes and what the command
printed), and the environment and the run it came from. Running some readers (`--readers`) keeps the others' sections
as recorded in `--out`. `--jobs` runs readers side by side, one process each; the seed makes a run repeatable up to
the cases whose outcome depends on time.

    .venv/bin/python benchmarks/fuzz.py [--cases 10000] [--readers onnx,records] [--seed 223] [--jobs 2] [--out F]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.fuzz is imported from the checkout, as pytest imports it
    sys.path.insert(0, str(ROOT))

from tests.fuzz.harness import LIMIT_BYTES, LIMIT_S, WALL_FACTOR  # noqa: E402

from where223.pipeline import environment, paths, publish  # noqa: E402

RECORD: Path = paths.OUTPUTS / "benchmarks" / "fuzz.json"
CASES = 10_000
SEED = 223
PARENT_LIMIT_BYTES = 8 * 2**30  # the warmed parent's own data limit: a recipe that builds a huge input stops here
CONTRACT = (
    "each case runs `where223.cli.main(argv)` in a child forked from a warmed parent (an alarm at 10 s of CPU, a "
    "wall-clock alarm at 30 s, RLIMIT_DATA 2 GiB), "
    "stdout and stderr to files; it passes with at most one line on stderr (several only on exit 2, each the "
    "command's own `where223 CMD:` complaint), no traceback, an exit status the command documents (lint 0-3, "
    "4 with --kernels; the others 0-2), on exit 2 every line naming the case's file and saying why, no signal, "
    "within 10 s of CPU (its own and its waited-for children's), 30 s of wall-clock time and 2 GiB of peak "
    "resident memory"
)


def run_reader(name: str, cases: int, seed: int, work: Path, say=print) -> dict[str, Any]:
    """Run `cases` cases of one reader in this process; its tally as a dict."""
    from tests.fuzz import harness
    from tests.fuzz.engine import explore
    from tests.fuzz.readers import reader

    resource.setrlimit(resource.RLIMIT_DATA, (PARENT_LIMIT_BYTES, PARENT_LIMIT_BYTES))
    harness.warm()
    started = time.perf_counter()
    made = reader(name, work)
    setup_s = time.perf_counter() - started

    def progress(tally) -> None:
        if tally.cases % 500 == 0:
            rate = tally.cases / (time.perf_counter() - started)
            say(f"{name}: {tally.cases}/{cases} cases, {tally.cases - tally.passed} failed, {rate:.1f} cases/s")

    tally = explore(made, cases, seed, work / name, progress=progress)
    return {**tally.to_dict(), "setup_s": round(setup_s, 1)}


def shortfalls(record: dict[str, Any], cases: int = CASES) -> list[str]:
    """What keeps a fuzz record from the full run's promise: every reader (tests/fuzz/readers.py) with at least
    `cases` cases and no failure, its counts consistent. Empty when it keeps it (README quotes it then)."""
    from tests.fuzz.readers import NAMES

    found = []
    readers = record.get("readers", {})
    for name in NAMES:
        part = readers.get(name)
        if not isinstance(part, dict) or "cases" not in part:
            found.append(f"{name}: no cases recorded" + (f" ({part['error']})" if isinstance(part, dict)
                                                          and "error" in part else ""))
            continue
        if part["cases"] < cases:
            found.append(f"{name}: {part['cases']:,} cases, fewer than {cases:,}")
        if part["failed"] or part["passed"] != part["cases"] or part["signatures"]:
            found.append(f"{name}: {part['failed']:,} failed ({len(part['signatures'])} signature(s))")
        if not 0 <= part["parsed"] <= part["cases"]:
            found.append(f"{name}: {part['parsed']:,} past parsing of {part['cases']:,} cases")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    from tests.fuzz.readers import NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=CASES, help=f"cases per reader (default {CASES:,})")
    parser.add_argument("--readers", default=",".join(NAMES), help=f"comma-separated, of {', '.join(NAMES)}")
    parser.add_argument("--seed", type=int, default=SEED, help=f"Hypothesis's seed of the first run (default {SEED})")
    parser.add_argument("--jobs", type=int, default=1, help="readers run side by side, one process each")
    parser.add_argument("--out", type=Path, default=RECORD, help="the record to write")
    parser.add_argument("--here", metavar="READER", help=argparse.SUPPRESS)  # a worker: one reader, JSON to --out
    args = parser.parse_args(argv)
    if args.here:
        with tempfile.TemporaryDirectory(prefix=f"fuzz-{args.here}-") as work:
            result = run_reader(args.here, args.cases, args.seed, Path(work),
                                say=lambda line: print(line, file=sys.stderr, flush=True))
        args.out.write_text(json.dumps(result))
        return 0
    names = [name.strip() for name in args.readers.split(",") if name.strip()]
    unknown = sorted(set(names) - set(NAMES))
    if unknown or not names:
        parser.error(f"--readers: unknown {', '.join(unknown) or 'none given'} (known: {', '.join(NAMES)})")
    if args.cases < 1 or args.jobs < 1:
        parser.error("--cases and --jobs: at least 1")
    started = time.perf_counter()
    run = environment.this_run()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fuzz-") as parts:
        pending = list(names)
        running: dict[str, tuple[subprocess.Popen, Path]] = {}
        while pending or running:
            while pending and len(running) < args.jobs:
                name = pending.pop(0)
                part = Path(parts) / f"{name}.json"
                command = [sys.executable, __file__, "--here", name, "--cases", str(args.cases),
                           "--seed", str(args.seed), "--out", str(part)]
                running[name] = (subprocess.Popen(command, cwd=ROOT), part)
            time.sleep(1)
            for name, (process, part) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[name]
                if process.returncode != 0 or not part.is_file():
                    results[name] = {"error": f"the worker exited {process.returncode}"}
                else:
                    results[name] = {"run": run, **json.loads(part.read_text())}
                    print(f"{name}: {results[name]['cases']} cases, {results[name]['parsed']} past parsing, "
                          f"{results[name]['failed']} failed ({len(results[name]['signatures'])} signatures) in "
                          f"{results[name]['seconds']:.0f} s")
    # a reader not run now keeps its section from the record there (each section carries the run it came from)
    previous = json.loads(args.out.read_text()).get("readers", {}) if args.out.is_file() else {}
    kept = {name: section for name, section in previous.items() if name not in names and "cases" in section}
    readers = {name: results.get(name) or kept[name] for name in NAMES if name in results or name in kept}
    done = [result for result in readers.values() if "cases" in result]
    record = {
        "run": run,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "options": {"cases_per_reader": args.cases, "seed": args.seed, "jobs": args.jobs,
                    "limit_cpu_s": LIMIT_S, "limit_wall_s": LIMIT_S * WALL_FACTOR,
                    "limit_mib": LIMIT_BYTES // 2**20, "readers": names, "kept": sorted(kept)},
        "contract": CONTRACT,
        "totals": {"cases": sum(r["cases"] for r in done), "parsed": sum(r["parsed"] for r in done),
                   "failed": sum(r["failed"] for r in done),
                   "signatures": sum(len(r["signatures"]) for r in done)},
        "readers": readers,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    publish.write_record(args.out, record, args.out.parent.parent)
    print(f"record: {args.out}")
    for line in shortfalls(record, args.cases) or [f"every reader: at least {args.cases:,} cases, none failed"]:
        print(line)
    return 0 if all("cases" in result for result in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
