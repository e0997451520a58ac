"""The driver hands cells to Dask a window at a time, in the space's order (an in-process cluster, the cells'
work replaced by an instant record): never more than the window in the cluster's hands, none out of order."""

from __future__ import annotations

from pathlib import Path

import pytest

from where223.sweep import driver
from where223.sweep.space import load_space


def _space(tmp_path: Path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "study: window-test\nrecords: 'window/{model}-{recipe}-{exporter}.json'\nrunner: where223.study.matrix.run\n"
        "timeout_s: 60\nstacks: [project]\nmodels: [control-sleep, control-exit]\n"
        "recipes: [cpu_bf16_autocast, bf16_model, fp16_model]\nexporters: [torchscript, dynamo]\n"
    )
    return load_space(path)


@pytest.fixture
def in_process(monkeypatch):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                           silence_logs=40)
    client = Client(cluster, set_as_default=False)
    events: list[tuple[str, str]] = []
    records: list[dict] = []
    submit = client.submit

    def spied(function, cell_key, *args, **kwargs):
        events.append(("submitted", cell_key["model"] + cell_key["recipe"] + cell_key["exporter"]))
        return submit(function, cell_key, *args, **kwargs)

    def instant(key, space, timeout_s, threads=1, runner=None, engine="warm"):
        if (key["model"], key["recipe"], key["exporter"]) == ("control-sleep", "fp16_model", "torchscript"):
            lost = timeout_s == 60  # lost once: run again, longer
            return {"key": dict(key), "outcome": "timeout" if lost else "accepted",
                    "recorded_by": "worker" if lost else "cell", "timeout_s": timeout_s, "engine": {}}
        return {"key": dict(key), "outcome": "accepted", "recorded_by": "cell"}

    def published(path, record, output_root):
        key = record["key"]
        events.append(("published", key["model"] + key["recipe"] + key["exporter"]))
        records.append(record)

    monkeypatch.setattr(client, "submit", spied)
    monkeypatch.setattr(driver, "connect", lambda scheduler, workers: (client, cluster))
    monkeypatch.setattr(driver, "execute", instant)
    monkeypatch.setattr(driver.publish, "write_record", published)
    monkeypatch.setattr(driver, "_published", records, raising=False)  # read by the tests below
    yield events
    client.close()
    cluster.close()


def test_cells_go_a_window_at_a_time_in_the_spaces_order(tmp_path, in_process):
    """One single-threaded worker: at most 2 cells in its hands at once, submitted in the space's order (and the
    one cell the engine lost, once more right after it, with three times its limit)."""
    space = _space(tmp_path)
    assert driver.window(driver.connect(None, None)[0]) == 2
    counts = driver.run(space, output_root=tmp_path / "out")
    assert sum(counts.values()) == len(space.cells) == 12 and counts == {"accepted": 12}
    submitted = [name for kind, name in in_process if kind == "submitted"]
    lost = "control-sleepfp16_modeltorchscript"
    order = [c.model + c.recipe + c.exporter for c in space.cells]
    assert [name for name in submitted if name != lost] == [name for name in order if name != lost]
    assert submitted.count(lost) == 2
    assert _peak(in_process) <= 2
    (again,) = [r for r in driver._published if r["key"]["model"] + r["key"]["recipe"] + r["key"]["exporter"] == lost]
    assert again["timeout_s"] == 60 * driver.LONGER_LIMIT  # the second run's limit
    assert again["engine"]["first_run"] == {"outcome": "timeout", "timeout_s": 60, "error": None}
    others = [r for r in driver._published if r is not again]
    assert all("first_run" not in r.get("engine", {}) for r in others)  # the control: cells not lost run once


def _peak(events: list[tuple[str, str]]) -> int:
    in_hands: set[str] = set()  # cells submitted and not yet published (a lost cell's rerun follows its first run)
    peak = 0
    for kind, name in events:
        (in_hands.add if kind == "submitted" else in_hands.discard)(name)
        peak = max(peak, len(in_hands))
    return peak


def test_the_window_check_fails_on_all_at_once(tmp_path, in_process, monkeypatch):
    """The control: a window as large as the space, as the driver before it, hands every cell over at once."""
    monkeypatch.setattr(driver, "window", lambda client: 12)
    driver.run(_space(tmp_path), output_root=tmp_path / "out")
    assert _peak(in_process) == 12


def test_a_deadline_never_replaces_a_published_result_with_not_run(tmp_path):
    """`--force` (or `--rerun-older-code`) past its deadline: a cell whose record is there with a final outcome
    keeps that record byte for byte (a resumed sweep reruns it as it would have); a cell without one is recorded
    `not_run`. The control: a `not_run` record is no result, and is written again."""
    import datetime as dt
    import json

    space = _space(tmp_path)
    out = tmp_path / "out"
    first, second, third, *rest = space.cells
    kept = space.record_path(first, out)
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"key": first.key(), "outcome": "type_error", "recorded_by": "cell"}))
    before = kept.read_bytes()
    stale = space.record_path(second, out)
    stale.write_text(json.dumps({"key": second.key(), "outcome": "not_run", "recorded_by": "driver"}))
    past = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    counts = driver.run(space, force=True, output_root=out, deadline=past)
    assert kept.read_bytes() == before
    assert counts == {"not_run": len(space.cells) - 1}
    assert json.loads(stale.read_text())["reason"].startswith("the sweep's deadline")
    assert json.loads(space.record_path(third, out).read_text())["outcome"] == "not_run"


def _commit(root: Path, files: dict[str, str]) -> str:
    import subprocess

    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(root), *identity, "commit", "-qm", "c"], check=True, capture_output=True)
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_record_that_lists_no_files_is_judged_by_what_its_commits_other_cells_read(tmp_path, monkeypatch):
    """A cell killed before it could say what it read (`crashed`, no `code.read`) is older only when a file that the
    cells made at its commit read has changed since (or, with no such cell, any cell code); the control, without its
    siblings, calls it older for a change to the driver, which no cell's process runs."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setattr(driver.paths, "ROOT", tmp_path)
    driver.git._changed.cache_clear()
    lint, engine = "src/where223/graph/lint.py", "src/where223/sweep/driver.py"
    made = _commit(tmp_path, {lint: "a", engine: "a"})
    finished = {"outcome": "type_error", "code": {"commit": made, "dirty": False, "read": [lint]}}
    killed = {"outcome": "crashed", "code": {"commit": made, "dirty": False}}
    elsewhere = {"outcome": "crashed", "code": {"commit": "f" * 40, "dirty": False}}
    dirty = {"outcome": "accepted", "code": {"commit": made, "dirty": True, "read": [engine]}}
    siblings = driver.reads_by_commit([finished, killed, elsewhere, dirty, {"code": "x"}, {"code": {"read": 3}}])
    assert siblings == {made: frozenset({lint})}  # a dirty checkout's list and malformed ones say nothing

    engine_changed = _commit(tmp_path, {engine: "b"})
    now = driver._same_cell_code({"commit": engine_changed, "dirty": False}, siblings)
    assert now(finished["code"]) and now(killed["code"])
    assert not driver._same_cell_code({"commit": engine_changed, "dirty": False})(killed["code"])  # the control
    assert not now(elsewhere["code"])  # no sibling at its commit (and git knows none): older

    lint_changed = _commit(tmp_path, {lint: "c"})
    now = driver._same_cell_code({"commit": lint_changed, "dirty": False}, siblings)
    assert not now(finished["code"]) and not now(killed["code"])  # what its siblings read changed
    driver.git._changed.cache_clear()


def test_the_siblings_are_read_from_the_spaces_own_records_and_a_bad_one_is_passed_over(tmp_path):
    """`run` draws the siblings from the records of the space's cells under the output root: each readable record once,
    one that is not JSON or not an object passed over, a file outside the space's record paths never read."""
    import json

    space, root = _space(tmp_path), tmp_path / "out"
    first, second, third = space.cells[:3]
    for cell, text in ((first, json.dumps({"code": {"commit": "a" * 40, "dirty": False, "read": ["x.py"]}})),
                       (second, "{not json"), (third, "[1, 2]")):
        space.record_path(cell, root).parent.mkdir(parents=True, exist_ok=True)
        space.record_path(cell, root).write_text(text)
    (root / "window" / "stray.json").write_text(json.dumps({"code": {"commit": "b" * 40, "dirty": False,
                                                                      "read": ["y.py"]}}))
    found = list(driver._records(space, root))
    assert found == [{"code": {"commit": "a" * 40, "dirty": False, "read": ["x.py"]}}]
    assert driver.reads_by_commit(found) == {"a" * 40: frozenset({"x.py"})}
