"""benchmarks/environments.py: its disk analysis and scratch copy on tiny synthetic trees (nothing timed)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("environments_benchmark", ROOT / "benchmarks" / "environments.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def two_envs(tmp_path: Path) -> tuple[Path, Path]:
    """Env a holds `shared.so` and `copied.so`; env b a hard link of the first and a copy of the second."""
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "lib").mkdir(parents=True)
    (b / "lib").mkdir(parents=True)
    (a / "lib" / "shared.so").write_bytes(b"s" * 1000)
    (a / "lib" / "copied.so").write_bytes(b"c" * 300)
    (a / "only-a.txt").write_bytes(b"x" * 7)
    (b / "only-b.txt").write_bytes(b"y" * 7)  # same size as only-a.txt, other content: no duplicate
    os.link(a / "lib" / "shared.so", b / "lib" / "shared.so")
    shutil.copy2(a / "lib" / "copied.so", b / "lib" / "copied.so")
    return a, b


def test_a_copy_is_duplicated_a_hard_link_is_not(bench, two_envs) -> None:
    duplicated = bench.duplicated_across(list(two_envs))
    assert duplicated["files"] == 1 and duplicated["bytes"] == 300
    assert duplicated["largest"] == [{"bytes": 300, "path": "lib/copied.so"}]


def test_the_control_linking_the_copy_leaves_nothing_duplicated(bench, two_envs) -> None:
    a, b = two_envs
    (b / "lib" / "copied.so").unlink()
    os.link(a / "lib" / "copied.so", b / "lib" / "copied.so")
    assert bench.duplicated_across([a, b]) == {"files": 0, "bytes": 0, "largest": []}


def test_disk_usage_counts_hard_links_once(bench, two_envs) -> None:
    a, b = two_envs
    usage = bench.disk_usage([a, b])
    assert usage["roots"][str(a)] == {"apparent_bytes": 1307, "files": 3, "hard_linked_bytes": 1000}
    assert usage["roots"][str(b)] == {"apparent_bytes": 1307, "files": 3, "hard_linked_bytes": 1000}
    assert usage["apparent_bytes"] == 2614
    assert usage["unique_bytes"] == 2614 - 1000  # shared.so once


def test_scratch_copy_holds_tracked_and_unignored_files_only(bench, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text(".venv/\n.cache/\n")
    (repo / "src" / "tracked.py").write_text("x = 1\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    (repo / "src" / "new.py").write_text("y = 2\n")  # not committed yet: a clone of the tree would hold it
    (repo / ".venv").mkdir()
    (repo / ".venv" / "big").write_text("ignored")
    copy = bench.scratch_copy(repo, tmp_path / "copy")
    copied = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file() and ".git/" not in str(p))
    assert copied == [".gitignore", "src/new.py", "src/tracked.py"]
    assert (copy / ".git").is_dir()
