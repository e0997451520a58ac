"""benchmarks/mutation.py: its own mutators make the mutants the issue named, its operator set is the selective one,
and its record (when one is committed) is one measurement per module with its run (nothing mutated here)."""

from __future__ import annotations

import json

import pytest

from tests import benchmark_records, benchmark_scripts
from tests.processes import alive
from where223.pipeline.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("mutation")


def test_the_lists_mutator_moves_drops_and_shifts_each_op(bench):
    text = (ROOT / "src/where223/autocast_lists/2.1.2.json").read_text()
    mutants = list(bench.json_mutants(text))
    made = {(operator, what) for operator, _, _, what in mutants}
    for op in ("bmm", "baddbmm", "addbmm", "prelu"):  # the survivors, float16 -> float32
        assert ("MovePolicy", f"{op}: lower_precision_fp -> fp32") in made
    for op in ("exp", "log", "rsqrt"):  # and float32 -> float16
        assert ("MovePolicy", f"{op}: fp32 -> lower_precision_fp") in made
    assert ("DropEntry", "bmm dropped from lower_precision_fp") in made
    assert any(operator == "ShiftLine" and what.startswith("bmm at ") for operator, what in made)
    mutated = next(m for _, _, m, what in mutants if what == "exp: fp32 -> lower_precision_fp")
    policies = json.loads(mutated)["policies"]
    assert "exp" in {e["op"] for e in policies["lower_precision_fp"]} - {e["op"] for e in policies["fp32"]}


def test_the_python_mutator_drops_blames_root_restriction(bench):
    """The issue's survivor: `readable_source` without its `is_relative_to` test; module-level data left alone
    where only functions are mutated, and made where the whole module is (a pattern that matches nothing)."""
    blame = bench.TARGETS["graph/blame"]
    text = (ROOT / blame.path).read_text()
    made = bench.python_data_mutants(text, blame.definitions, blame.module_level)
    dropped = [m for m in made if m.what == "any((resolved.is_relative_to(r) for r in roots))"]
    assert len(dropped) == 1 and "is_relative_to" not in dropped[0].apply(text).split("def readable_source")[1][:900]
    assert {m.operator for m in made} == {"DropCondition"}
    ort = bench.TARGETS["graph/ort"]
    operators = {m.operator for m in bench.python_data_mutants((ROOT / ort.path).read_text(), ort.definitions)}
    assert {"DropCondition", "DropEntry", "PatternMatchesNothing"} <= operators


def test_the_selective_operator_set(bench):
    assert bench.wanted("core/ReplaceBinaryOperator_Add_Sub") and not bench.wanted("core/ReplaceBinaryOperator_Add_Mul")
    assert bench.wanted("core/ReplaceComparisonOperator_Lt_LtE")
    assert bench.wanted("core/ReplaceComparisonOperator_Lt_GtE")
    assert not bench.wanted("core/ReplaceComparisonOperator_Lt_Is")
    assert bench.wanted("core/AddNot") and not bench.wanted("core/VariableReplacer")
    source = "from __future__ import annotations\n\ndef f(x: int | None) -> str | None:\n    return x | 1\n"
    spans = bench.annotation_spans(source)
    assert any(a <= (3, 9) < b for a, b in spans) and not any(a <= (4, 11) < b for a, b in spans)


def test_the_committed_record_is_one_measurement_per_module():
    path = ROOT / "outputs" / "benchmarks" / "mutation.json"
    if not path.is_file():
        pytest.skip("no mutation record committed: `make mutation` writes it")
    record = json.loads(path.read_text())
    assert benchmark_records.problems(record) == []
    for name, part in record["modules"].items():
        judged = part["made"] - part["equivalent"]
        assert part["killed"] + part["survived"] + part["equivalent"] + part["timed_out"] + part["incompetent"] == (
            part["made"]), name
        assert part["score"] == (round(part["killed"] / judged, 4) if judged else None), name
        for survivor in part["survivors"]:  # each survivor has its fate: killed since (by a test) or still open
            assert survivor["outcome"] in ("survived", "killed"), name
            assert survivor["outcome"] == "survived" or survivor["killed_by"]["test"], name


def test_a_cosmic_ray_session_ends_with_the_run_that_started_it(tmp_path):
    """The child started as `cosmic_mutants` starts Cosmic Ray's exec (here a sleep) ends when its parent is killed;
    the control, started without it, outlives its parent."""
    import os
    import signal
    import subprocess
    import sys
    import time

    def orphan(preexec: str) -> int:
        code = ("import subprocess, sys, time\nsys.path.insert(0, 'benchmarks')\nfrom tests import benchmark_scripts\n"
                f"bench = benchmark_scripts.load('mutation')\nchild = subprocess.Popen(['sleep', '60']{preexec})\n"
                "print(child.pid, flush=True)\ntime.sleep(60)\n")
        parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        return child

    def gone(pid: int, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    assert gone(orphan(", preexec_fn=bench._die_with_parent"), 5.0)
    control = orphan("")
    try:
        assert not gone(control, 1.0)  # the signal comes at once: a second is ample
    finally:
        os.kill(control, signal.SIGKILL)


def test_a_copy_is_head_with_the_working_changes_and_reaches_the_built_stacks(bench, tmp_path, monkeypatch):
    """make_tree on a small repository: the commit, a changed and an untracked file laid over it, a deleted one gone,
    and the checkout's built stacks linked (read by today's-stack tests); the control, a checkout with no stacks
    built, gets no link."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    for name, text in (("src/a.py", "a = 1\n"), ("src/gone.py", "g = 1\n")):
        (repo / name).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (repo / "src/a.py").write_text("a = 2\n")
    (repo / "src/new.py").write_text("n = 1\n")
    (repo / "src/gone.py").unlink()
    monkeypatch.setattr(bench, "ROOT", repo)
    bench.make_tree(tmp_path / "bare")
    assert not (tmp_path / "bare" / ".cache").exists()  # the control: nothing built, nothing linked
    (repo / ".cache" / "sweep" / "envs" / "today-1").mkdir(parents=True)
    copy = tmp_path / "copy"
    bench.make_tree(copy)
    assert (copy / "src/a.py").read_text() == "a = 2\n" and (copy / "src/new.py").is_file()
    assert not (copy / "src/gone.py").exists()
    envs = copy / ".cache" / "sweep" / "envs"
    assert envs.is_symlink() and envs.resolve() == (repo / ".cache" / "sweep" / "envs").resolve()
    assert (envs / "today-1").is_dir()
    bench.make_tree(copy)  # again over the same folder: the link removed with the copy, not followed
    assert (repo / ".cache" / "sweep" / "envs" / "today-1").is_dir()
