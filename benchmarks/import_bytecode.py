"""What bytecode written at setup saves: the same imports timed with and without it, side by side in one run.

Where PYTHONDONTWRITEBYTECODE is set (this machine and CI set it) no import writes bytecode, and uv writes none
unless asked, so every interpreter, Jupyter kernel and subprocess compiled torch and transformers from source
again; setup now compiles them once (`scripts/setup-env.sh`, `where223.pipeline.installer.compile_bytecode`).
Each statement runs in a fresh interpreter of this venv, the two arms alternating (`--repeat` pairs, default 5):

- with bytecode: the environment as setup leaves it (PYTHONDONTWRITEBYTECODE=1, so a run writes nothing);
- without: the same, with PYTHONPYCACHEPREFIX pointing at an empty folder, so no bytecode is found and every
  module is compiled from its source, as before this change (nothing is written there either).

The record (outputs/benchmarks/import_bytecode.json) holds every run, the medians, their ratio, whether torch's
bytecode was present at all (without it the two arms measure the same thing), the environment and the run it came
from (`run`: commit, machine, start). It measures
imports only, not a whole test or notebook.

    .venv/bin/python benchmarks/import_bytecode.py [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "import_bytecode.json"
STATEMENTS: dict[str, str] = {
    "torch": "import torch",
    # the first cell of notebook 03: what every kernel of the suite and of `make run` imports before our cells
    "notebook 03's imports": (
        "from where223.gpt2 import reproduce, runs, variants; from where223.study import report, verify"
    ),
}


def arm_environment(with_bytecode: bool, empty_prefix: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of one arm: nothing is ever written; without bytecode, none is found either."""
    env = {**(os.environ if base is None else base), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    if not with_bytecode:
        env["PYTHONPYCACHEPREFIX"] = str(empty_prefix)
    return env


def timed(statement: str, env: Mapping[str, str], python: str = sys.executable) -> float:
    start = time.monotonic()
    subprocess.run([python, "-c", statement], env=dict(env), check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def torch_bytecode_present() -> bool:
    spec = importlib.util.find_spec("torch")
    return bool(spec and spec.origin and Path(importlib.util.cache_from_source(spec.origin)).is_file())


def measure(repeat: int, statements: Mapping[str, str] = STATEMENTS) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="no-bytecode-") as empty:
        arms = {name: arm_environment(name == "with_bytecode", Path(empty)) for name in ("with_bytecode", "without")}
        for label, statement in statements.items():
            runs: dict[str, list[float]] = {name: [] for name in arms}
            for _ in range(repeat):  # alternating, so a slower moment of the machine falls on both arms
                for name, env in arms.items():
                    runs[name].append(round(timed(statement, env), 3))
            assert not any(Path(empty).iterdir()), "an arm wrote bytecode"  # the arms stayed what they claim
            medians = {name: round(statistics.median(values), 3) for name, values in runs.items()}
            results[label] = {
                "statement": statement,
                "runs_s": runs,
                "median_s": medians,
                "ratio_without_to_with": round(medians["without"] / medians["with_bytecode"], 2),
            }
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="pairs of runs per statement (default 5)")
    parser.add_argument("--out", type=Path, default=RECORD, help="the record to write")
    args = parser.parse_args(argv)
    if not 1 <= args.repeat <= 50:
        parser.error(f"--repeat {args.repeat}: choose 1 to 50")
    run = environment.this_run()
    record = {
        "run": run,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "torch_bytecode_present": torch_bytecode_present(),
        "repeat": args.repeat,
        "imports": measure(args.repeat),
        "not_measured": "whole tests, notebooks or commands (outputs/benchmarks/command_times.json times those)",
    }
    for label, result in record["imports"].items():
        print(f"{label}: {result['median_s']['with_bytecode']:.2f} s with bytecode, "
              f"{result['median_s']['without']:.2f} s without ({result['ratio_without_to_with']}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    publish.write_record(args.out, record, args.out.parent.parent)
    missing = "" if record["torch_bytecode_present"] else " (torch has no bytecode: run make setup)"
    print(f"record: {args.out}{missing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
