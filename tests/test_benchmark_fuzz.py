"""benchmarks/fuzz.py's verdict on its record: the committed full run keeps the promise README quotes (every reader
at least 10,000 cases, none failed), and copies built to break it each say why (nothing is fuzzed here)."""

from __future__ import annotations

import copy
import json

import pytest

from tests import benchmark_scripts
from where223.pipeline.paths import OUTPUTS


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("fuzz")


@pytest.fixture(scope="module")
def record():
    return json.loads((OUTPUTS / "benchmarks" / "fuzz.json").read_text())


def test_the_committed_full_run_has_every_reader_at_10000_cases_and_no_failure(bench, record):
    """What README quotes: every reader at least 10,000 cases, none failed."""
    assert bench.CASES == 10_000
    assert bench.shortfalls(record) == []


@pytest.mark.parametrize("break_it, says", [
    (lambda r: r["readers"].pop("yaml"), "yaml: no cases recorded"),
    (lambda r: r["readers"]["plan"].update(cases=9_999, passed=9_999), "plan: 9,999 cases, fewer than 10,000"),
    (lambda r: r["readers"]["onnx"].update(failed=1, passed=r["readers"]["onnx"]["cases"] - 1,
                                           signatures={"lint: a traceback": 1}), "onnx: 1 failed (1 signature(s))"),
    (lambda r: r["readers"]["records"].update(passed=r["readers"]["records"]["cases"] - 1), "records: 0 failed"),
    (lambda r: r["readers"]["space"].update(parsed=r["readers"]["space"]["cases"] + 1), "past parsing"),
    (lambda r: r["readers"].update(kernel_cache={"error": "the worker exited -9"}),
     "kernel_cache: no cases recorded (the worker exited -9)"),
])
def test_control_a_record_short_of_the_promise_says_why(bench, record, break_it, says):
    broken = copy.deepcopy(record)
    break_it(broken)
    found = bench.shortfalls(broken)
    assert any(says in line for line in found), found
