"""benchmarks/command_times.py: the notebook stage of `make run`, timed apart by papermill's own clock (issue 40).

From the first executed copy's start to the last one's end, among the copies the timed command published: with
notebooks running two at a time, this is the stage's wall time, shorter than their durations added up.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from pathlib import Path

import pytest

from tests import benchmark_scripts

SINCE = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("command_times", "command_times_stage")


def executed(folder: Path, name: str, start_s: float, seconds: float) -> None:
    """An executed copy whose papermill metadata says it ran `seconds` from `start_s` after SINCE."""
    start = SINCE + dt.timedelta(seconds=start_s)
    timing = {"start_time": start.isoformat(), "end_time": (start + dt.timedelta(seconds=seconds)).isoformat(),
              "duration": seconds}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.ipynb").write_text(json.dumps({"metadata": {"papermill": timing}, "cells": []}))


def test_the_stage_runs_from_the_first_start_to_the_last_end_of_the_copies_published_since(bench, tmp_path: Path):
    notebooks = tmp_path / "outputs" / "notebooks"
    executed(notebooks, "04_variants", 0, 50)  # alone first
    executed(notebooks, "01_reproduce", 45, 30)  # two at a time from here
    executed(notebooks, "08_remedies", 46, 60)
    executed(notebooks, "older", -3600, 10)  # published by an earlier run: left out
    (notebooks / "unfinished.ipynb").write_text(json.dumps({"metadata": {}, "cells": []}))  # no papermill times
    assert bench.notebook_stage(notebooks, SINCE) == {"seconds": 106.0, "notebooks": 3, "one_at_a_time_seconds": 140.0}
    assert bench.notebook_stage(notebooks, SINCE + dt.timedelta(hours=1)) is None  # control: none published since


WRITE_COPY = """
import datetime as dt, json, pathlib, sys
now = dt.datetime.now(dt.timezone.utc)
stamp = {"start_time": now.isoformat(), "end_time": (now + dt.timedelta(seconds=2)).isoformat(), "duration": 2}
folder = pathlib.Path(sys.argv[1])
folder.mkdir(parents=True, exist_ok=True)
(folder / "a.ipynb").write_text(json.dumps({"metadata": {"papermill": stamp}, "cells": []}))
"""


def test_a_timed_command_that_runs_notebooks_records_its_stage_and_others_do_not(bench, tmp_path: Path):
    out = tmp_path / "record.json"
    script = tmp_path / "write_copy.py"
    script.write_text(WRITE_COPY)
    writes = f"{shlex.quote(sys.executable)} {script} {tmp_path / 'outputs' / 'notebooks'}"
    assert bench.main([writes, "true", "--checkout", str(tmp_path), "--out", str(out)]) == 0
    commands = json.loads(out.read_text())["commands"]
    assert commands[writes]["runs"][0]["notebook_stage"] == {"seconds": 2.0, "notebooks": 1,
                                                            "one_at_a_time_seconds": 2.0}
    assert commands[writes]["notebook_stage_seconds"] == 2.0
    # the control: `true` ran after it, and the copy it finds was published before it started
    assert "notebook_stage" not in commands["true"]["runs"][0] and "notebook_stage_seconds" not in commands["true"]
