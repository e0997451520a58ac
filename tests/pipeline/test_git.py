"""git asked safely (where223.pipeline.git): which code made a sweep cell's record, and whether the cell code changed
since; a repository's configured commands never run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from where223.pipeline.git import cell_code_changed, code_version, git

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _commit(root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(root), *IDENTITY, "commit", "-qm", "c"], check=True, capture_output=True)
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_only_a_change_to_what_a_cell_runs_makes_its_records_older(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    first = _commit(tmp_path, {"src/where223/study/classes/run.py": "a", "src/where223/study/classes/section.py": "a",
                               "README.md": "a"})
    shown = _commit(tmp_path, {"src/where223/study/classes/section.py": "b", "README.md": "b",
                               "src/where223/cli/_studies.py": "b"})
    ran = _commit(tmp_path, {"src/where223/study/classes/run.py": "c"})
    assert not cell_code_changed(tmp_path, first, shown)  # presentation and docs only
    assert cell_code_changed(tmp_path, shown, ran) and cell_code_changed(tmp_path, first, ran)  # the runner changed
    assert cell_code_changed(tmp_path, "0" * 40, ran)  # a commit git does not know: older
    assert cell_code_changed(tmp_path, "--output=/tmp/x", ran)  # never read as an option
    assert code_version(tmp_path) == {"commit": ran, "dirty": False}
    (tmp_path / "src/where223/study/classes/new.py").write_text("x")
    assert code_version(tmp_path) == {"commit": ran, "dirty": True}  # an untracked module counts
    assert code_version(tmp_path / "src") == {"commit": None, "dirty": True}  # not a checkout's root


def test_with_the_files_a_cell_read_only_those_and_data_make_its_record_older(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    base = {"src/where223/graph/lint.py": "a", "src/where223/pipeline/compare.py": "a",
            "src/where223/autocast_lists/x.json": "a", "src/where223/study/classes/section.py": "a"}
    first = _commit(tmp_path, base)
    read = frozenset({"src/where223/graph/lint.py"})
    other = _commit(tmp_path, {"src/where223/pipeline/compare.py": "b", "src/where223/study/classes/section.py": "b"})
    assert not cell_code_changed(tmp_path, first, other, read)  # a module the cell never imported
    assert not cell_code_changed(tmp_path, first, other)  # presentation only, by the rule without the list too
    unread = _commit(tmp_path, {"src/where223/sweep/new.py": "c"})
    assert not cell_code_changed(tmp_path, other, unread, read)
    assert cell_code_changed(tmp_path, other, unread)  # the control: without the list, any cell code counts
    data = _commit(tmp_path, {"src/where223/autocast_lists/x.json": "d"})
    assert cell_code_changed(tmp_path, unread, data, read)  # data a cell may read, though not imported
    linted = _commit(tmp_path, {"src/where223/graph/lint.py": "e"})
    assert cell_code_changed(tmp_path, data, linted, read)  # a module it imported
    assert not cell_code_changed(tmp_path, linted, linted, read)
    assert cell_code_changed(tmp_path, "0" * 40, linted, read)  # a commit git does not know: older, list or not


def test_a_repository_s_configured_monitor_never_runs(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _commit(tmp_path, {"src/where223/x.py": "a"})
    marker = tmp_path / "ran"
    subprocess.run(["git", "-C", str(tmp_path), "config", "core.fsmonitor", f"touch {marker}; false"], check=True)
    assert code_version(tmp_path)["dirty"] is False and not marker.exists()
    subprocess.run(["git", "-C", str(tmp_path), "status"], capture_output=True)  # control: plain git runs it
    assert marker.exists()
    assert git(tmp_path / "nowhere", "status")[0] != 0
