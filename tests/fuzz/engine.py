"""Driving a reader's cases with Hypothesis: draw recipes, build each case's files, run it forked, tally.

`explore` is what the `make test` sample (tests/fuzz/test_fuzz.py) and the full run (benchmarks/fuzz.py) share:
Hypothesis draws `examples` recipes from a reader's strategy with a fixed seed (generation only: a failure is
recorded, not shrunk, so that one run finds them all), each case runs in a child (tests/fuzz/harness.py), and the
tally keeps the counts, the time and every failure with what reproduces it (the recipe, the command, the input's
bytes, compressed) grouped by a signature (the command, the judge's first problem, the traceback's last line).
"""

from __future__ import annotations

import base64
import math
import re
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.harness import LIMIT_BYTES, LIMIT_S, Case, Outcome, run_case

KEPT_PER_SIGNATURE = 3  # failures kept whole per signature; the rest are counted
KEPT_INPUT_BYTES = 256 * 2**10  # an input larger than this is kept as its recipe only

Build = Callable[[Any, Path], tuple[Case, dict[str, bytes], bool]]


@dataclass
class Reader:
    """A reader's cases: the recipes Hypothesis draws and how one becomes files and a command."""

    name: str
    recipes: st.SearchStrategy[Any]
    build: Build  # (recipe, folder) -> (case, the input files by name, whether they get past the parser)


@dataclass
class Tally:
    reader: str
    cases: int = 0
    parsed: int = 0
    passed: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0
    peak_mib: float = 0.0
    commands: dict[str, int] = field(default_factory=dict)
    exit_statuses: dict[str, int] = field(default_factory=dict)
    signatures: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "parsed": self.parsed, "passed": self.passed,
                "failed": self.cases - self.passed, "seconds": round(self.seconds, 1),
                "slowest_case_s": round(self.slowest_s, 2), "peak_mib": round(self.peak_mib, 1),
                "commands": dict(sorted(self.commands.items())),
                "exit_statuses": dict(sorted(self.exit_statuses.items())),
                "signatures": dict(sorted(self.signatures.items(), key=lambda item: -item[1])),
                "failures": self.failures}


def signature(case: Case, outcome: Outcome) -> str:
    """What groups failures that are one bug: the command, the judge's first problem, the traceback's last line
    (numbers, paths and quoted text blurred)."""
    command = case.argv[0] + (" --kernels" if "--kernels" in case.argv else "")
    last = ""
    if "Traceback" in outcome.stderr:
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else ""
    elif outcome.stderr.strip():
        last = outcome.stderr.strip().splitlines()[0]
    last = re.sub(r"'[^']*'|\"[^\"]*\"|/[^\s:,)]*|-?\d+", "…", last)[:160]
    first = re.sub(r"\d+(\.\d+)?", "N", outcome.problems[0])
    return f"{command}: {first}" + (f" | {last}" if last else "")


def packed(files: dict[str, bytes]) -> dict[str, str]:
    """Input files as zlib-compressed base64 (left out above KEPT_INPUT_BYTES)."""
    return {name: base64.b64encode(zlib.compress(data, 9)).decode() for name, data in files.items()
            if len(data) <= KEPT_INPUT_BYTES}


def unpacked(files: dict[str, str]) -> dict[str, bytes]:
    return {name: zlib.decompress(base64.b64decode(text)) for name, text in files.items()}


def run_one(reader: Reader, recipe: Any, folder: Path, tally: Tally, limit_s: float = LIMIT_S,
            limit_bytes: int = LIMIT_BYTES) -> Outcome:
    """Build and run one case in a fresh `folder`; count it in `tally`."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    case, files, parses = reader.build(recipe, folder)
    outcome = run_case(case, folder, limit_s, limit_bytes)
    tally.cases += 1
    tally.parsed += parses
    tally.passed += outcome.passed
    tally.seconds += outcome.seconds
    tally.slowest_s = max(tally.slowest_s, outcome.seconds)
    tally.peak_mib = max(tally.peak_mib, outcome.peak_bytes / 2**20)
    command = case.argv[0] + (" --kernels" if "--kernels" in case.argv else "")
    tally.commands[command] = tally.commands.get(command, 0) + 1
    status = str(outcome.status) if outcome.signal is None else outcome.signal
    tally.exit_statuses[status] = tally.exit_statuses.get(status, 0) + 1
    if not outcome.passed:
        key = signature(case, outcome)
        tally.signatures[key] = tally.signatures.get(key, 0) + 1
        if tally.signatures[key] <= KEPT_PER_SIGNATURE:
            tally.failures.append(plain({
                "signature": key, "recipe": recipe, "argv": [_relative(a, folder) for a in case.argv],
                "env": {k: _relative(v, folder) for k, v in case.env.items()},
                "outcome": {k: _relative(v, folder) if isinstance(v, str) else v for k, v in outcome.summary().items()},
                "inputs": packed(files),
            }))
    return outcome


def _relative(text: str, folder: Path) -> str:
    return text.replace(str(folder), "$CASE")


INT_LIMIT = 2**53  # integers past this are kept as text: a strict JSON reader may hold no larger one


def plain(value: Any) -> Any:
    """`value` (a recipe, a command) as strict JSON can hold it: bytes as base64, non-finite floats, huge integers
    and text with lone surrogates tagged as text (`unplain` undoes it), tuples as lists."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_LIMIT:
        return {"int": str(value) if len(str(abs(value))) <= 300 else f"10**{len(str(abs(value))) - 1}"}
    if isinstance(value, str) and any(0xD800 <= ord(char) <= 0xDFFF for char in value):
        return {"surrogates": value.encode("utf-8", "surrogatepass").hex()}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def unplain(value: Any) -> Any:
    """The value `plain` made JSON of (tuples come back as lists, which every recipe reader takes)."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, text), = value.items()
        if tag == "base64":
            return base64.b64decode(text)
        if tag == "float":
            return float(text)
        if tag == "int":
            return int(text) if "**" not in text else 10 ** int(text.split("**")[1])
        if tag == "surrogates":
            return bytes.fromhex(text).decode("utf-8", "surrogatepass")
    if isinstance(value, dict):
        return {key: unplain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unplain(item) for item in value]
    return value


def explore(reader: Reader, examples: int, seed_value: int, folder: Path, limit_s: float = LIMIT_S,
            limit_bytes: int = LIMIT_BYTES, progress: Callable[[Tally], None] | None = None,
            chunk: int = 1000) -> Tally:
    """Run `examples` cases of `reader` drawn by Hypothesis, in runs of at most `chunk` examples seeded
    `seed_value`, `seed_value + 1`, ... (Hypothesis stops a run early when it has drawn every distinct recipe it
    can: the next run goes on with the next seed); their tally."""
    tally = Tally(reader.name)
    started = time.perf_counter()

    def one(recipe: Any) -> None:
        if tally.cases < examples:
            run_one(reader, recipe, folder / "case", tally, limit_s, limit_bytes)
            if progress is not None:
                progress(tally)

    for run in range(examples):  # a bound never reached: each run adds at least one case
        left = examples - tally.cases
        if left <= 0:
            break
        before = tally.cases
        settings(max_examples=min(chunk, left), database=None, deadline=None, phases=[Phase.generate],
                 suppress_health_check=list(HealthCheck))(seed(seed_value + run)(given(reader.recipes)(one)))()
        if tally.cases == before:
            break
    tally.seconds = time.perf_counter() - started
    shutil.rmtree(folder / "case", ignore_errors=True)
    return tally
