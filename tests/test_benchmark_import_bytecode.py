"""benchmarks/import_bytecode.py: its two arms are what they claim (nothing timed)."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from tests import benchmark_records, benchmark_scripts
from where223.pipeline import records


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("import_bytecode")


def two_faced_module(folder: Path) -> None:
    """A module whose bytecode says 1 and whose source, of the same size and time, says 2: which one an interpreter
    ran tells whether it read the bytecode."""
    source = folder / "probe.py"
    source.write_text("X = 1\n")
    stamp = source.stat().st_mtime_ns
    py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)), doraise=True)
    source.write_text("X = 2\n")
    os.utime(source, ns=(stamp, stamp))  # the bytecode's header still matches: it is used when found


def test_the_arm_with_bytecode_reads_it_and_the_other_compiles_from_source(bench, tmp_path):
    two_faced_module(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    seen = {}
    for with_bytecode in (True, False):
        env = {**bench.arm_environment(with_bytecode, empty), "PYTHONPATH": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", "import probe; print(probe.X)"], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        seen[with_bytecode] = done.stdout.strip()
    assert seen == {True: "1", False: "2"}
    assert list(empty.iterdir()) == []  # the arm without bytecode wrote none
    # control: a prefix left over from the caller's environment would hide the bytecode from the first arm too
    assert "PYTHONPYCACHEPREFIX" not in bench.arm_environment(True, empty, {"PYTHONPYCACHEPREFIX": str(empty)})


def test_the_record_holds_both_arms_their_runs_and_the_ratio(bench, tmp_path):
    result = bench.measure(2, {"probe": "pass"})["probe"]
    assert set(result["runs_s"]) == {"with_bytecode", "without"} and all(len(v) == 2 for v in result["runs_s"].values())
    medians = result["median_s"]
    assert result["ratio_without_to_with"] == round(medians["without"] / medians["with_bytecode"], 2)


def test_the_written_record_carries_its_run(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "measure", lambda repeat: {"probe": {"median_s": {"with_bytecode": 1.0, "without": 2.0},
                                                                    "ratio_without_to_with": 2.0}})
    out = tmp_path / "outputs" / "benchmarks" / "import_bytecode.json"
    assert bench.main(["--repeat", "1", "--out", str(out)]) == 0
    record = records.read_json(out)
    assert set(record["run"]) == {"commit", "machine", "started_at"} and benchmark_records.problems(record) == []
