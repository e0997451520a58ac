"""The fuzz harness judges: each of its assertions fails on a control built to break it, and a case that keeps every
rule passes (tests/fuzz/harness.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.fuzz import harness
from tests.fuzz.harness import LIMIT_BYTES, Case, Outcome, judge, run_case

MODEL = "/tmp/nowhere/model.onnx"
GOOD_LINE = f"where223 lint: {MODEL}: not an ONNX model or truncated (Error parsing message)"


def _say(lines: list[str], status: int):
    def target(argv: list[str]) -> int:
        for line in lines:
            print(line, file=sys.stderr)
        return status

    return target


def _raises(argv: list[str]) -> int:
    raise ValueError("boom")


def _sleeps(argv: list[str]) -> int:
    time.sleep(30)
    return 0


def _spins(argv: list[str]) -> int:
    while True:
        pass


def _allocates(argv: list[str]) -> int:
    block = bytearray(LIMIT_BYTES + 2**30)  # past RLIMIT_DATA: MemoryError at once, nothing touched
    return len(block) and 0


def _case(target, codes=(0, 1, 2, 3)) -> Case:
    return Case("control", ["lint", MODEL], (MODEL,), frozenset(codes), target=target)


def _run(tmp_path: Path, target, limit_s: float = 10.0, wall_s: float | None = None) -> Outcome:
    return run_case(_case(target), tmp_path, limit_s=limit_s, wall_s=wall_s)


def test_control_a_one_line_error_naming_the_file_passes(tmp_path):
    outcome = _run(tmp_path, _say([GOOD_LINE], 2))
    assert outcome.passed and outcome.status == 2 and outcome.stderr == GOOD_LINE + "\n", outcome


def test_control_the_real_command_on_a_file_that_is_no_model_passes(tmp_path):
    harness.warm()  # as the fuzz runs it: onnx and the CLI imported once, before the fork
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07\x12")  # a truncated protobuf
    case = Case("control", ["lint", str(model)], (str(model),), frozenset({0, 1, 2, 3}))
    outcome = run_case(case, tmp_path)
    assert outcome.passed and outcome.status == 2, outcome


def test_a_traceback_fails(tmp_path):
    outcome = _run(tmp_path, _raises)
    assert outcome.status == 1 and any(p.startswith("a traceback on stderr (ValueError: boom)") for p in
                                       outcome.problems), outcome


def test_a_traceback_on_one_line_with_an_allowed_status_still_fails(tmp_path):
    outcome = _run(tmp_path, _say([f"Traceback (most recent call last): {MODEL} is bad here"], 1))
    assert outcome.problems == [f"a traceback on stderr (Traceback (most recent call last): {MODEL} is bad here)"]


@pytest.mark.parametrize("status", [1, 2])
def test_two_lines_fail(tmp_path, status):
    outcome = _run(tmp_path, _say([GOOD_LINE, "and a second line"], status))
    assert outcome.problems[0] == "2 lines on stderr", outcome


def test_control_one_complaint_line_per_problem_passes(tmp_path):
    """A UsageError listing several problems prints one line each: each a complaint naming the file."""
    second = f"where223 lint: {MODEL}:3: key 'x' given twice (first at line 2)"
    assert _run(tmp_path, _say([GOOD_LINE, second], 2)).passed


def test_a_second_complaint_line_naming_no_file_fails(tmp_path):
    outcome = _run(tmp_path, _say([GOOD_LINE, "where223 lint: and something else went wrong"], 2))
    assert outcome.problems == ["the error line names none of the case's files"], outcome


def _warns(argv: list[str]) -> int:
    import logging
    import warnings

    warnings.warn("a library's warning", UserWarning, stacklevel=1)
    logging.getLogger("some.library").warning("a library's log record")
    return 0


def test_a_warning_and_a_library_log_record_reach_stderr_as_from_the_command_itself(tmp_path):
    """Under pytest too (which records warnings and captures log records): the child is judged as `where223` would
    print, so a library's warning counts as the extra lines it is."""
    outcome = _run(tmp_path, _warns)
    assert "UserWarning: a library's warning" in outcome.stderr and "a library's log record" in outcome.stderr
    assert outcome.problems == ["3 lines on stderr"], outcome


def test_computing_past_the_alarm_fails(tmp_path):
    outcome = _run(tmp_path, _spins, limit_s=0.1, wall_s=60)  # CPU time: however loaded the machine is
    assert outcome.signal == "SIGPROF" and "ran past 0.1 s of CPU (the alarm)" in outcome.problems, outcome


def test_sleeping_past_the_wall_clock_alarm_fails(tmp_path):
    """A case that waits (a FIFO opened for reading) uses no CPU: the wall-clock alarm ends it."""
    outcome = _run(tmp_path, _sleeps, wall_s=0.5)
    assert outcome.signal == "SIGALRM" and outcome.problems[0] == (
        "still running after 0.5 s (the wall-clock alarm): waiting, not computing"), outcome
    assert outcome.seconds < 20  # not the 30 s sleep


def test_allocating_past_the_data_limit_fails(tmp_path):
    outcome = _run(tmp_path, _allocates)
    assert outcome.status == 1 and "a traceback on stderr (MemoryError)" in outcome.problems, outcome


def test_an_undocumented_exit_status_fails(tmp_path):
    outcome = _run(tmp_path, _say([GOOD_LINE], 7))
    assert outcome.problems == ["exit status 7, not one of [0, 1, 2, 3]"], outcome


def test_an_error_line_naming_no_file_fails(tmp_path):
    outcome = _run(tmp_path, _say(["where223 lint: cannot read the model, it is broken"], 2))
    assert outcome.problems == ["the error line names none of the case's files"], outcome


@pytest.mark.parametrize("line", [f"where223 lint: {MODEL}: ValueError", f"where223 lint: {MODEL}: KeyError: 'x'",
                                  f"where223 lint: {MODEL}: unexpected error", f"where223 lint: {MODEL}"])
def test_a_catch_all_error_line_fails(tmp_path, line):
    outcome = _run(tmp_path, _say([line], 2))
    assert outcome.problems == ["the error line does not say why"], outcome


def test_exit_two_in_silence_fails(tmp_path):
    assert _run(tmp_path, _say([], 2)).problems == ["exit 2 with nothing on stderr"]


def test_time_and_memory_past_their_bounds_fail_though_the_child_ended():
    case = _case(_raises)
    slow = Outcome(status=0, signal=None, seconds=11.0, cpu_seconds=10.5, peak_bytes=2**20, stdout="", stderr="")
    waited = Outcome(status=0, signal=None, seconds=31.0, cpu_seconds=1, peak_bytes=2**20, stdout="", stderr="")
    big = Outcome(status=0, signal=None, seconds=0.1, cpu_seconds=0.1, peak_bytes=LIMIT_BYTES + 2**20, stdout="",
                  stderr="")
    assert judge(case, slow) == ["used 10.5 s of CPU (bound 10 s)"]
    assert judge(case, waited) == ["took 31.0 s (wall-clock bound 30 s)"]
    assert judge(case, big) == ["peak resident memory 2049 MiB (bound 2048)"]
    assert judge(case, Outcome(status=0, signal=None, seconds=9, cpu_seconds=9, peak_bytes=2**20, stdout="",
                               stderr="")) == []
