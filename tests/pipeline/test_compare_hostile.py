"""`where223 compare` on trees from anyone: a folder is read as a folder (its repository's configured commands never
run), links are not followed, and deep or huge records, odd names, gitlinks, an empty REF and trees past the limits
are one line and exit 2; names are printed escaped. Each hostile case has a harmless control beside it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from where223 import cli
from where223.pipeline import compare

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repository: Path, *args: str) -> str:
    """git for building a throwaway repository (its own monitor, once configured, switched off here)."""
    return subprocess.run(["git", "-c", "core.fsmonitor=false", "-C", str(repository), *args], capture_output=True,
                           check=True, env={**os.environ, **IDENTITY}).stdout.decode().strip()


def records(folder: Path, files: dict[str | bytes, object]) -> Path:
    """A folder holding `files` (name -> JSON value, or raw bytes)."""
    for name, value in files.items():
        path = os.path.join(os.fsencode(folder), os.fsencode(name))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(value if isinstance(value, bytes) else json.dumps(value).encode())
    return folder


def repository(root: Path, files: dict[str | bytes, object]) -> Path:
    """A throwaway git repository with `files` committed."""
    records(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "files")
    return root


def monitored(root: Path) -> Path:
    """Configure `root`'s repository to run a filesystem monitor that leaves a marker file; returns the marker."""
    marker = root.parent / f"{root.name}-monitor-ran"
    git(root, "config", "core.fsmonitor", f"touch {shlex.quote(str(marker))}; false")
    return marker


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(["compare", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], words: str) -> None:
    status, _, err = run(argv, capsys)
    assert status == 2 and err.count("\n") == 1 and err.startswith("where223 compare:"), (status, err)
    assert words in err, err


@pytest.mark.parametrize("side", ["REF", "--output-root"])
def test_a_folder_in_a_repository_runs_nothing_it_configures(tmp_path, capsys, side):
    hostile = repository(tmp_path / "hostile", {"outputs/a.json": {"n": 1}})
    marker = monitored(hostile)
    normal = records(tmp_path / "normal", {"a.json": {"n": 1}})
    argv = [str(hostile / "outputs"), "--output-root", str(normal)]
    if side == "--output-root":
        argv = [str(normal), "--output-root", str(hostile / "outputs")]
    status, out, _ = run([*argv, "--summary"], capsys)
    assert not marker.exists(), "the folder's repository ran its core.fsmonitor"
    assert status == 0 and out.startswith("reproduced (1 records against")  # the control: it still compares


def test_this_repositorys_outputs_honour_gitignore_without_running_its_monitor(tmp_path, monkeypatch):
    root = repository(tmp_path / "root", {"outputs/a.json": {"n": 1}, ".gitignore": b"/outputs/**/*.log\n"})
    records(root, {"outputs/b.json": {"n": 2}, "outputs/run.log": b"scratch"})
    marker = monitored(root)
    monkeypatch.setattr(compare, "ROOT", root)  # root's outputs/ stands for this repository's
    assert sorted(compare.folder_files(root / "outputs")) == ["a.json", "b.json"]  # .gitignore decides
    assert not marker.exists(), "git ran the repository's core.fsmonitor"
    copy = records(tmp_path / "copy", {"a.json": {"n": 1}, "run.log": b"scratch"})
    assert sorted(compare.folder_files(copy)) == ["a.json", "run.log"]  # any other folder: all its files


def test_links_out_of_the_folder_are_not_followed(tmp_path, capsys):
    outside = records(tmp_path / "outside", {"d/x.json": {"secret": 1}, "y.json": {"secret": 2}})
    folder = repository(tmp_path / "folder", {"outputs/a.json": {"n": 1}, "outputs/d/x.json": {"n": 2}})
    (folder / "outputs" / "d" / "x.json").unlink()
    (folder / "outputs" / "d").rmdir()
    (folder / "outputs" / "d").symlink_to(outside / "d")  # d/x.json, still in git's index, now reached through a link
    (folder / "outputs" / "y.json").symlink_to(outside / "y.json")
    files = compare.folder_files(folder / "outputs")
    assert files == {"a.json": b'{"n": 1}'}
    (tmp_path / "link").symlink_to(folder / "outputs")  # the control: the folder named may itself be a link
    assert compare.folder_files(tmp_path / "link") == files


DEEP = "[" * 100 + "1" + "]" * 100  # nested past DEPTH_LIMIT, below the parser's own limit
CHECK = '{"value": 1, "tolerance": 1, "verdict": "pass"}'


@pytest.mark.parametrize(
    ("a", "c", "words"),
    [
        ("[" * 100_000 + "]" * 100_000, CHECK, "nested more than 64 deep"),  # past the parser's depth
        (DEEP.replace("1", "2"), CHECK, "nested more than 64 deep"),  # differs past DEPTH_LIMIT
        ("7" * 5_000, CHECK, "5,000 digits"),  # past Python's own limit on int()
        (DEEP, CHECK.replace("1,", "7" * 400 + ","), "400 digits"),  # a check value no float holds
    ],
    ids=["deep-json", "past-depth-limit", "5000-digit-integer", "400-digit-check-value"],
)
def test_deep_and_huge_records_are_one_line(tmp_path, capsys, a, c, words):
    reference = records(tmp_path / "reference", {"r.json": f'{{"a": {DEEP}, "c": {CHECK}}}'.encode()})
    folder = records(tmp_path / "rerun", {"r.json": f'{{"a": {a}, "c": {c}}}'.encode()})
    refused([str(reference), "--output-root", str(folder)], capsys, words)
    control = records(tmp_path / "control", {"r.json": f'{{"a": {DEEP}, "b": 12345678901, "c": {CHECK}}}'.encode()})
    status, out, _ = run([str(reference), "--output-root", str(control)], capsys)  # deep, but equal where deep
    assert status == 1 and "| differs | r.json | b | (absent) | 12345678901 |  |" in out


def test_a_committed_name_with_a_newline_is_one_line(tmp_path):
    root = repository(tmp_path / "root", {"outputs/a.json": {"n": 1}, "outputs/a\nb.json": {"n": 2}})
    with pytest.raises(compare.CompareError, match="a file name with a newline: a\\\\nb.json"):
        compare.revision_files("HEAD", root=root)
    git(root, "rm", "-q", "--cached", "outputs/a\nb.json")
    git(root, "commit", "-qm", "control")
    assert compare.revision_files("HEAD", root=root) == {"a.json": b'{"n": 1}'}


def test_a_gitlink_is_one_line(tmp_path):
    root = repository(tmp_path / "root", {"outputs/a.json": {"n": 1}})
    commit = git(root, "rev-parse", "HEAD")
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{commit},outputs/sub")
    git(root, "commit", "-qm", "a gitlink")
    with pytest.raises(compare.CompareError, match="outputs/sub is a commit \\(a gitlink"):
        compare.revision_files("HEAD", root=root)
    assert compare.revision_files("HEAD~1", root=root) == {"a.json": b'{"n": 1}'}  # the control: before it


def test_a_name_that_is_not_utf8_is_one_line(tmp_path, capsys):
    reference = records(tmp_path / "reference", {"a.json": {"n": 1}})
    folder = records(tmp_path / "rerun", {"a.json": {"n": 1}, b"caf\xe9.json": {"n": 2}})
    refused([str(reference), "--output-root", str(folder)], capsys, "not UTF-8: caf\\xe9.json")
    root = repository(tmp_path / "root", {"outputs/a.json": {"n": 1}, b"outputs/caf\xe9.json": {"n": 2}})
    with pytest.raises(compare.CompareError, match="not UTF-8"):
        compare.revision_files("HEAD", root=root)
    status, out, _ = run([str(reference), "--output-root", str(reference), "--summary"], capsys)  # the control
    assert status == 0 and out.startswith("reproduced")


def test_an_empty_ref_is_one_line(tmp_path, capsys, monkeypatch):
    folder = records(tmp_path / "rerun", {"a.json": {"n": 1}})
    monkeypatch.chdir(folder)  # what '' would name before: the current folder, which reproduces
    refused(["", "--output-root", str(folder)], capsys, "an empty REF names nothing")
    refused(["-x", "--output-root", str(folder)], capsys, "unrecognized arguments")  # argparse's own line
    with pytest.raises(compare.CompareError, match="read as an option"):
        compare.revision_files("--output=x")
    status, _, _ = run([".", "--output-root", str(folder), "--summary"], capsys)  # the control: '.' is a folder
    assert status == 0


def test_names_keys_and_values_are_printed_escaped(tmp_path, capsys):
    reference = records(tmp_path / "reference", {"\x1b[31mred.json": {"k\nx\x1b[2J": 1}, "b.json": {}})
    rerun = records(tmp_path / "rerun", {"\x1b[31mred.json": {"k\nx\x1b[2J": 2}, "\x1b]0;title\x07.json": {}})
    status, out, _ = run([str(reference), "--output-root", str(rerun)], capsys)
    assert status == 1 and "\x1b" not in out and "\x07" not in out
    lines = out.splitlines()
    assert "| differs | \\x1b[31mred.json | k\\nx\\x1b[2J | 1 | 2 |  |" in lines
    assert ("| differs | \\x1b]0;title\\x07.json | (the record) | (absent) | (present) | missing from the reference |"
            in lines)
    assert all(line.startswith("|") for line in lines[:-1]) and lines[-1].startswith("not reproduced")
    refused([str(reference), "--output-root", str(records(tmp_path / "newline", {"a\nb.json": {}}))], capsys,
            "a file name with a newline: a\\nb.json")


@pytest.mark.parametrize(
    ("limit", "value", "words"),
    [
        ("FILES_LIMIT", 3, "more than 3 files and folders to compare"),
        ("FOLDER_DEPTH_LIMIT", 1, "folders nested more than 1 deep"),
        ("FILE_BYTES_LIMIT", 20, "d/c.json holds more than 20 bytes"),
        ("TREE_BYTES_LIMIT", 30, "its files hold more than 30 bytes"),
    ],
)
def test_a_tree_past_a_limit_is_one_line(tmp_path, capsys, monkeypatch, limit, value, words):
    small = records(tmp_path / "small", {"a.json": {"n": 1}})
    large = records(tmp_path / "large", {"a.json": {"n": 1}, "b.json": {"n": 2}, "d/c.json": {"n": 3, "more": "x" * 20},
                                        "d/e/f.json": {}})
    monkeypatch.setattr(compare, limit, value)
    refused([str(small), "--output-root", str(large)], capsys, f"{words} ({limit})")
    status, _, _ = run([str(small), "--output-root", str(small), "--summary"], capsys)  # the control: within it
    assert status == 0
