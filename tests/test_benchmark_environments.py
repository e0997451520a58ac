"""benchmarks/environments.py: its disk analysis and scratch copy on tiny synthetic trees (nothing timed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import benchmark_records, benchmark_scripts
from where223.pipeline import records


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("environments")


SITE = "lib/python3.11/site-packages"


def _install(env: Path, release: str, files: dict[str, bytes]) -> None:
    """Files of one package release under the env's site-packages, with the dist-info RECORD naming them."""
    site = env / SITE
    for name, content in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(content)
    (site / f"{release}.dist-info").mkdir(parents=True)
    (site / f"{release}.dist-info" / "RECORD").write_text("".join(f"{name},,\n" for name in files))


@pytest.fixture
def two_envs(tmp_path: Path) -> tuple[Path, Path]:
    """Both envs hold pkg 1.0: `shared.so` hard-linked between them, `copied.so` copied (a duplicate)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _install(a, "pkg-1.0", {"pkg/shared.so": b"s" * 1000, "pkg/copied.so": b"c" * 300, "pkg/only.txt": b"x" * 7})
    _install(b, "pkg-1.0", {"pkg/copied.so": b"c" * 300, "pkg/only.txt": b"y" * 7})  # same size, other content
    os.link(a / SITE / "pkg" / "shared.so", b / SITE / "pkg" / "shared.so")
    return a, b


def test_a_copy_is_duplicated_a_hard_link_is_not(bench, two_envs) -> None:
    duplicated = bench.duplicated_across(list(two_envs))
    assert duplicated["files"] == 1 and duplicated["bytes"] == 300
    assert duplicated["same_release_files"] == 1 and duplicated["same_release_bytes"] == 300
    assert duplicated["largest"] == [{"bytes": 300, "path": "pkg/copied.so"}]


def test_equal_files_of_different_releases_are_duplicated_but_not_same_release(bench, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _install(a, "pkg-1.0", {"pkg/header.h": b"h" * 50})
    _install(b, "pkg-2.0", {"pkg/header.h": b"h" * 50})
    duplicated = bench.duplicated_across([a, b])
    assert (duplicated["files"], duplicated["same_release_files"]) == (2, 0)  # header.h, and the equal RECORDs


def test_equal_files_inside_one_release_are_not_counted_across_envs_once_linked(bench, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _install(a, "pkg-1.0", {"pkg/one/LICENSE": b"L" * 80, "pkg/two/LICENSE": b"L" * 80})
    for name in ("pkg/one/LICENSE", "pkg/two/LICENSE", "pkg-1.0.dist-info/RECORD"):
        (b / SITE / name).parent.mkdir(parents=True, exist_ok=True)
        os.link(a / SITE / name, b / SITE / name)
    _install(b, "other-2.0", {"other/COPYING": b"L" * 80})  # the same text in another package, only in b
    duplicated = bench.duplicated_across([a, b])
    assert (duplicated["files"], duplicated["same_release_files"]) == (1, 0)


def test_the_control_linking_the_copy_leaves_nothing_duplicated(bench, two_envs) -> None:
    a, b = two_envs
    (b / SITE / "pkg" / "copied.so").unlink()
    os.link(a / SITE / "pkg" / "copied.so", b / SITE / "pkg" / "copied.so")
    duplicated = bench.duplicated_across([a, b])
    assert (duplicated["files"], duplicated["bytes"], duplicated["same_release_files"]) == (0, 0, 0)


def test_disk_usage_counts_hard_links_once(bench, two_envs) -> None:
    a, b = two_envs
    usage = bench.disk_usage([a, b])
    records = sum(len((env / SITE / "pkg-1.0.dist-info" / "RECORD").read_bytes()) for env in (a, b))
    assert usage["roots"][str(a)]["files"] == 4 and usage["roots"][str(b)]["files"] == 4
    assert usage["roots"][str(a)]["hard_linked_bytes"] == usage["roots"][str(b)]["hard_linked_bytes"] == 1000
    assert usage["apparent_bytes"] == 2 * 1307 + records
    assert usage["unique_bytes"] == 2 * 1307 + records - 1000  # shared.so once


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


def test_the_record_is_one_run_and_what_it_skipped_is_left_out_not_kept(bench, tmp_path: Path) -> None:
    out = tmp_path / "environments.json"
    out.write_text('{"setup": {"runs": []}, "recorded_at": "2026-11-30T15:20:06+00:00"}')  # an earlier record
    assert bench.main(["--skip-setup", "--skip-matrix", "--skip-lint", "--out", str(out)]) == 0
    record = records.read_json(out)
    assert "setup" not in record and record["run"]["started_at"] <= record["recorded_at"]
    assert benchmark_records.problems(record) == []


def test_lint_against_the_checker_judges_its_ratio_and_says_what_lints_time_goes_to(bench, monkeypatch) -> None:
    models = bench.conformance_models()[:4]
    found = bench.lint_against_checker(models, repeats=1)
    assert found["models"] == 4 and found["ratio_lint_to_checker"] > 0
    assert found["errors"] == {"lint": {}, "checker": {}}
    assert found["met"] == (found["ratio_lint_to_checker"] <= bench.LINT_TARGET_RATIO)
    assert set(found["lint_parts_apart_s"]) == {"open (read, parse, guards)", "types (onnx's inference, then ours)",
                                           "check"}
    assert found["run"]["started_at"] <= found["recorded_at"]
    monkeypatch.setattr(bench, "LINT_TARGET_RATIO", 0.0)  # the control: a target no lint meets
    assert bench.lint_against_checker(models, repeats=1)["met"] is False
