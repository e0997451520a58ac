"""Every benchmark record is one measurement per part (tests/benchmark_records.py, the one check): the committed
records, the run each part carries (where223.pipeline.environment.this_run), and the check's controls."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests import benchmark_records
from where223.pipeline import environment, records
from where223.pipeline.paths import OUTPUTS

COMMITTED = sorted((OUTPUTS / "benchmarks").glob("*.json"))
AMD = {"device_name": "AMD EPYC", "cpu_count": 2, "platform": "Linux-6.18.44-fc-v1098-x86_64-with-glibc2.36"}
INTEL = {"device_name": "Intel(R) Xeon(R) Processor @ 2.80GHz", "cpu_count": 2,
         "platform": "Linux-6.18.44-fc-v657-x86_64-with-glibc2.36"}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: path.name)
def test_every_committed_benchmark_record_is_one_measurement_per_part(path):
    assert benchmark_records.problems(records.read_json(path)) == []


def _run(machine=AMD, started="2026-12-03T10:00:00+00:00", commit="a" * 40) -> dict:
    return {"commit": commit, "machine": dict(machine), "started_at": started}


def _part(run: dict, recorded_at: str, machine=AMD, lint=(1.0, 1.2, 1.1), load=(0.2, 0.3, 0.2),
          types=(0.6, 0.7, 0.7)) -> dict:
    """A part as lint_speed's graph section has it: its run, environment, time, a total and its phases."""
    return {
        "run": run,
        "environment": {**machine, "python": "3.11.7", "onnx": "1.16.2"},
        "recorded_at": recorded_at,
        "variants": {"accepted": {
            "lint_s": {"median": sorted(lint)[1], "min": min(lint), "runs": list(lint)},
            "lint_phases_s": {"explains": "lint_s", "rounds": "the same 3 rounds",
                              "median": {"load": sorted(load)[1], "types": sorted(types)[1]},
                              "runs": {"load": list(load), "types": list(types)}},
        }},
    }


def _faithful() -> dict:
    """Both parts of one run: the top-level part and `graph`, each carrying that run."""
    run = _run()
    top = _part(run, "2026-12-03T10:01:00+00:00")
    return {**top, "graph": _part(run, "2026-12-03T10:04:00+00:00")}


def test_a_faithful_record_passes_and_so_does_a_part_kept_with_its_own_earlier_run():
    assert benchmark_records.problems(_faithful()) == []
    kept = _faithful()  # a partial rerun: the graph part kept from an earlier run on another machine, labelled
    kept["graph"] = _part(_run(INTEL, "2026-11-30T14:00:00+00:00", "b" * 40), "2026-11-30T14:05:00+00:00", INTEL)
    assert benchmark_records.problems(kept) == []
    recovered = _faithful()  # a run recovered from git history may not know when it started
    recovered["run"] = recovered["graph"]["run"] = {**_run(started=None), "recovered": "from git history: ..."}
    assert benchmark_records.problems(recovered) == []


def test_a_record_made_of_two_runs_parts_fails():
    other_machine = _faithful()  # the graph part measured on another machine, claiming this run
    other_machine["graph"]["environment"] |= INTEL
    assert benchmark_records.problems(other_machine) == [
        f"graph.environment: measured on another machine ({INTEL}) than its part's run ({AMD}): two runs in one part"]
    earlier = _faithful()  # the graph part of an earlier run on this machine, its run dropped: the record's claims it
    del earlier["graph"]["run"]
    earlier["graph"]["recorded_at"] = "2026-12-02T13:20:00+00:00"
    assert benchmark_records.problems(earlier) == [
        "graph.recorded_at: recorded at 2026-12-02T13:20:00+00:00, before its part's run started "
        "(2026-12-03T10:00:00+00:00): two runs in one part"]
    # lint_speed.json before this change: its 124M part from an Intel machine, its 100k part from an AMD one
    mixed = _faithful()
    mixed["environment"] |= INTEL
    del mixed["graph"]["run"]
    assert any("another machine" in problem for problem in benchmark_records.problems(mixed))
    assert benchmark_records.problems({k: v for k, v in _faithful().items() if k != "run"}) == [
        "the record: no run (each part carries the run it came from: where223.pipeline.environment.this_run)"]


def test_phases_summing_past_their_total_fail():
    # the accepted variant of lint_speed.json before this change: one unmedianed run of phases summing to 2.012 s
    # against the 1.818 s median of five runs
    old = _faithful()
    variant = old["graph"]["variants"]["accepted"]
    variant["lint_s"] = {"median": 1.818, "min": 1.764, "runs": [1.764, 1.818, 1.864, 1.91, 1.764]}
    variant["lint_phases_s"] = {"constraint_check": 0.146, "load": 0.309, "types": 1.557}
    assert benchmark_records.problems(old) == [
        "graph.variants.accepted.lint_phases_s: phases without the total they explain and the rounds they come from "
        "(explains, median, runs)"]
    one_round = {"explains": "lint_s", "median": {"load": 0.309, "types": 1.557}, "runs": {"load": [0.309],
                                                                                           "types": [1.557]}}
    variant["lint_phases_s"] = one_round  # said to explain the total, but from one run of its own
    assert "not the same rounds" in benchmark_records.problems(old)[0]
    round_past = _part(_run(), "2026-12-03T10:01:00+00:00", load=(0.2, 0.3, 0.5), types=(0.6, 0.7, 0.7))
    assert benchmark_records.problems(round_past) == [  # round 3: 0.5 + 0.7 > 1.1
        "variants.accepted.lint_phases_s: round 3's phases sum to 1.200 s, past its total 1.100 s"]
    # every round within its total, but medians taken apart sum past the median total
    medians_past = _part(_run(), "2026-12-03T10:01:00+00:00", lint=(9.1, 9.1, 18.1), load=(0.0, 9.0, 9.0),
                         types=(9.0, 0.0, 9.0))
    assert benchmark_records.problems(medians_past) == [
        "variants.accepted.lint_phases_s: the phases' medians sum to 18.000 s, past the median total they explain "
        "(lint_s, 9.100 s)"]
    wrong_median = _part(_run(), "2026-12-03T10:01:00+00:00")
    wrong_median["variants"]["accepted"]["lint_phases_s"]["median"]["load"] = 0.25
    assert "is not the median of its rounds" in benchmark_records.problems(wrong_median)[0]


def test_an_even_count_s_median_may_sit_between_its_rounded_rounds():
    """Of two rounds 0.0074 and 0.0076 s the median 0.0075 is recorded 0.008, the rounds 0.007 and 0.008: a pass
    (seen in lint_speed's own test); a median a whole millisecond off beyond that still fails (the control)."""
    record = _part(_run(), "2026-12-03T10:01:00+00:00", lint=(1.0, 1.2, 1.1))
    variant = record["variants"]["accepted"]
    variant["lint_s"] = {"median": 1.1, "min": 1.0, "runs": [1.0, 1.2]}
    variant["lint_phases_s"]["runs"] = {"load": [0.007, 0.008], "types": [0.6, 0.7]}
    variant["lint_phases_s"]["median"] = {"load": 0.008, "types": 0.65}
    assert benchmark_records.problems(record) == []
    variant["lint_phases_s"]["median"]["load"] = 0.009
    assert benchmark_records.problems(record) == [
        "variants.accepted.lint_phases_s: load's median 0.009 is not the median of its rounds (0.007)"]


def test_a_run_says_which_commit_which_machine_and_when():
    for broken, expected in [
        ({"commit": "HEAD"}, "run: commit 'HEAD' is not a commit"),
        ({"machine": {"device_name": "AMD EPYC"}}, "does not name device_name, cpu_count, platform"),
        ({"started_at": None}, "run: no start, and not recovered"),
        ({"started_at": "yesterday"}, "run: started_at 'yesterday' is not a UTC instant"),
        ({"recovered": " "}, "run: recovered says nothing"),
    ]:
        record = _faithful()
        record["run"] = {**record["run"], **broken}
        assert expected in benchmark_records.problems(record)[0]


def test_this_run_is_the_commit_checked_out_this_machine_and_now():
    run = environment.this_run()
    assert set(run) == {"commit", "machine", "started_at"} and benchmark_records.run_problems(run, "run") == []
    assert run["machine"] == environment.machine({**environment.describe(), "cpu_count": run["machine"]["cpu_count"]})
    record = {"run": run, "environment": {**environment.describe(), "cpu_count": run["machine"]["cpu_count"]}}
    assert benchmark_records.problems(record) == []


def _repository(root: Path, head: str, refs: dict[str, str] | None = None, packed: str = "") -> Path:
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    for name, value in (refs or {}).items():
        (git / name).write_text(value + "\n")
    if packed:
        (git / "packed-refs").write_text(packed)
    return root


def test_the_commit_is_read_from_the_repository_without_running_git(tmp_path):
    sha, other = "1" * 40, "2" * 40
    loose = _repository(tmp_path / "loose", "ref: refs/heads/main", {"refs/heads/main": sha})
    assert environment.checked_out_commit(loose) == sha
    packed = _repository(tmp_path / "packed", "ref: refs/heads/main", packed=f"# pack-refs\n{other} refs/heads/x\n"
                         f"{sha} refs/heads/main\n")
    assert environment.checked_out_commit(packed) == sha
    assert environment.checked_out_commit(_repository(tmp_path / "detached", sha)) == sha
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {loose / '.git'}\n")
    assert environment.checked_out_commit(worktree) == sha
    # the controls: no repository, a branch with no commit yet, a ref outside refs/, a HEAD that is no commit
    assert environment.checked_out_commit(tmp_path / "none") is None
    assert environment.checked_out_commit(_repository(tmp_path / "unborn", "ref: refs/heads/main")) is None
    assert environment.checked_out_commit(_repository(tmp_path / "outside", "ref: ../../etc/passwd")) is None
    assert environment.checked_out_commit(_repository(tmp_path / "junk", "not a commit")) is None


def test_a_kept_part_carries_its_own_run_not_the_rerun_s():
    """What a partial rerun writes, as lint_speed's keeps it: the other part with its own run, untouched."""
    earlier = _faithful()
    rerun = copy.deepcopy(earlier)
    rerun["run"] = _run(started="2026-12-04T09:00:00+00:00")  # only the top-level part rerun, a day later
    rerun["recorded_at"] = "2026-12-04T09:02:00+00:00"
    assert benchmark_records.problems(rerun) == []  # the graph part kept with the run that measured it
    rerun["graph"]["run"] = rerun["run"]  # the control: relabelled as the rerun's, it claims what it is not
    assert benchmark_records.problems(rerun) == [
        "graph.recorded_at: recorded at 2026-12-03T10:04:00+00:00, before its part's run started "
        "(2026-12-04T09:00:00+00:00): two runs in one part"]


def test_a_tally_keyed_by_a_command_named_run_is_no_part_and_a_part_whose_run_is_a_number_still_fails():
    """The fuzz counts its cases per command, `run` among them: a mapping of numbers alone is a tally. The control:
    a part (numbers and more) whose `run` is a number is still refused."""
    record = {"run": _run(), "readers": {"plan": {"run": _run(), "commands": {"run": 10000}, "cases": 10000}}}
    assert benchmark_records.problems(record) == []
    broken = {"run": _run(), "readers": {"plan": {"run": 3, "commands": {"run": 10000}, "note": "a part"}}}
    assert benchmark_records.problems(broken) == ["readers.plan.run: its run is int, not an object"]
