"""benchmarks/command_times.py: what it reads from a command's output and records of its run (nothing timed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import benchmark_records, benchmark_scripts
from where223.pipeline import environment


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("command_times")


def test_the_pytest_summary_holds_every_suite_in_order(bench):
    output = ("=== 2 failed, 491 passed, 8 skipped in 656.12s (0:10:56) ===\n== the graph tests again ==\n"
              "collected\n== 3 passed in 1.0s ==\n")
    assert bench.pytest_summary(output) == "2 failed, 491 passed, 8 skipped in 656.12s (0:10:56); 3 passed in 1.0s"
    assert bench.pytest_summary(output.split("== the")[0]) == "2 failed, 491 passed, 8 skipped in 656.12s (0:10:56)"
    assert bench.pytest_summary("=== warnings summary ===\nall good\n") is None  # control: no test summary


def test_a_failing_command_is_recorded_with_its_status_and_others_are_kept_with_their_own_runs(bench, tmp_path: Path):
    out = tmp_path / "outputs" / "benchmarks" / "command_times.json"
    out.parent.mkdir(parents=True)
    earlier = {**environment.this_run(), "started_at": "2026-12-01T10:00:00+00:00"}
    kept = {"run": earlier, "seconds": 1.0, "runs": [{"seconds": 1.0, "recorded_at": "2026-12-01T10:00:01+00:00"}]}
    out.write_text(json.dumps({"commands": {"make run": kept}}))
    assert bench.main(["echo '=== 1 passed in 0.1s ==='; exit 3", "--checkout", str(tmp_path), "--out", str(out)]) == 1
    record = json.loads(out.read_text())
    run = record["commands"]["echo '=== 1 passed in 0.1s ==='; exit 3"]
    assert run["returncode"] == 3 and run["pytest_summary"] == "1 passed in 0.1s" and run["seconds"] >= 0
    assert record["commands"]["make run"] == kept and record["environment"]["cpu_count"]
    # each part carries the run it came from: the new command this run's, the kept one its own earlier run
    assert run["run"] == record["run"] != earlier and benchmark_records.problems(record) == []


def test_a_kept_command_without_a_run_is_refused_before_anything_runs(bench, tmp_path: Path):
    out = tmp_path / "command_times.json"
    marker = tmp_path / "ran"
    out.write_text(json.dumps({"commands": {"true": {"seconds": 1.0, "runs": []}}}))
    with pytest.raises(SystemExit, match="true carry no run to be kept with"):
        bench.main([f"touch {marker}", "--checkout", str(tmp_path), "--out", str(out)])
    assert not marker.exists()
    # the control: timing that command again replaces the entry, whatever it held
    assert bench.main(["true", "--checkout", str(tmp_path), "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["commands"]["true"]["run"] == record["run"] and benchmark_records.problems(record) == []


def test_repeated_runs_are_all_recorded_and_the_median_is_quoted(bench, tmp_path: Path):
    out = tmp_path / "outputs" / "benchmarks" / "command_times.json"
    counter = tmp_path / "count"
    # the second of three runs fails: the entry says so although the last one passed
    command = f"echo x >> {counter}; test $(wc -l < {counter}) -ne 2"
    assert bench.main([command, "--repeat", "3", "--checkout", str(tmp_path), "--out", str(out)]) == 1
    entry = json.loads(out.read_text())["commands"][command]
    assert entry["repeats"] == 3 == len(entry["runs"]) and [run["returncode"] for run in entry["runs"]] == [0, 1, 0]
    assert entry["returncode"] == 1  # control: the last run's status alone would be 0
    seconds = sorted(run["seconds"] for run in entry["runs"])
    assert entry["seconds"] == seconds[1] and (entry["seconds_min"], entry["seconds_max"]) == (seconds[0], seconds[2])
    runs = [{"seconds": value, "returncode": 0, "pytest_summary": None} for value in (300.0, 60.0, 30.0)]
    assert bench.summary("c", tmp_path, runs)["minutes"] == 1.0  # the median, not the mean (2.2) nor the last (0.5)
    with pytest.raises(SystemExit):
        bench.main(["true", "--repeat", "0", "--out", str(out)])
