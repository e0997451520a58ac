"""benchmarks/command_times.py: what it reads from a command's output and records of its run (nothing timed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("command_times_benchmark", ROOT / "benchmarks" / "command_times.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pytest_summary_is_the_last_one(bench):
    output = "== 3 passed in 1.0s ==\ncollected\n=== 2 failed, 491 passed, 8 skipped in 656.12s (0:10:56) ===\n"
    assert bench.pytest_summary(output) == "2 failed, 491 passed, 8 skipped in 656.12s (0:10:56)"
    assert bench.pytest_summary("=== warnings summary ===\nall good\n") is None  # control: no test summary


def test_a_failing_command_is_recorded_with_its_status_and_others_are_kept(bench, tmp_path: Path):
    out = tmp_path / "outputs" / "benchmarks" / "command_times.json"
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps({"commands": {"make run": {"seconds": 1.0}}}))
    assert bench.main(["echo '=== 1 passed in 0.1s ==='; exit 3", "--checkout", str(tmp_path), "--out", str(out)]) == 1
    record = json.loads(out.read_text())
    run = record["commands"]["echo '=== 1 passed in 0.1s ==='; exit 3"]
    assert run["returncode"] == 3 and run["pytest_summary"] == "1 passed in 0.1s" and run["seconds"] >= 0
    assert record["commands"]["make run"] == {"seconds": 1.0} and record["environment"]["cpu_count"]
