"""The publish switch at its edges, in-process and fast (no notebook): the lock's file and depth, trees set aside
while readers are inside, stale files and the folders they leave, what a tree's folders and links keep, and the
errors a failed publish turns into.

Written for the mutation run's survivors in `where223.pipeline.publish` (benchmarks/mutation.py)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from where223.pipeline import publish


def run(root: Path, name: str, files: dict[str, str], links: dict[str, str] | None = None) -> Path:
    """Run `name` staging `files` (relative path -> text) and `links` (relative path -> symlink target)."""
    with publish.staged(name, root) as stage:
        for relative, text in files.items():
            (stage / relative).parent.mkdir(parents=True, exist_ok=True)
            (stage / relative).write_text(text)
        for relative, target in (links or {}).items():
            (stage / relative).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, stage / relative)
    return root


def manifest(root: Path, name: str) -> list[str]:
    return json.loads(publish.manifest_path(name, root).read_text())["files"]


# --- the lock ----------------------------------------------------------------------------------------------------
def test_the_lock_makes_the_tree_s_missing_parents_and_empties_its_file_when_released(tmp_path):
    root = tmp_path / "a" / "b" / "outputs"
    with publish.outputs_lock(root):
        assert publish.lock_path(root.resolve()).read_text() == f"{os.getpid()}\n"
    assert publish.lock_path(root.resolve()).read_text() == ""  # a waiter reading it now sees no holder


def test_the_lock_file_is_created_readable_by_all_and_writable_by_its_owner(tmp_path):
    before = os.umask(0o022)
    try:
        with publish.outputs_lock(tmp_path / "outputs"):
            mode = stat.S_IMODE(os.stat(publish.lock_path((tmp_path / "outputs").resolve())).st_mode)
    finally:
        os.umask(before)
    assert mode == 0o644  # 0o666 under the umask


def _held_elsewhere(root: Path) -> int:
    """The tree's lock taken through another open file (flock is per open file): as another process holds it."""
    import fcntl

    root.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(publish.lock_path(root), os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242\n")
    return fd


@pytest.mark.parametrize("taking", ["outputs_lock", "staged"])
def test_by_default_a_second_writer_is_refused_at_once_not_made_to_wait(tmp_path, taking):
    import threading

    root = (tmp_path / "outputs").resolve()
    fd = _held_elsewhere(root)
    said: list[BaseException] = []

    def take():
        try:
            with publish.outputs_lock(root) if taking == "outputs_lock" else publish.staged("r", root):
                pass
        except BaseException as error:  # noqa: BLE001 - the refusal, or anything else, is what the test reads
            said.append(error)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(10)
    waited = thread.is_alive()
    os.close(fd)  # a waiting writer gets the lock now and ends
    thread.join(10)
    assert not waited, "the writer waited for the lock"
    assert len(said) == 1 and isinstance(said[0], publish.OutputsBusyError) and "pid 4242" in str(said[0])


def test_the_holder_s_line_is_read_up_to_64_bytes(tmp_path):
    path = tmp_path / "lock"
    path.write_text("7" * 70 + "\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert publish._holder(fd) == "7" * 64
        os.truncate(path, 0)
        assert publish._holder(fd) == "unknown"
    finally:
        os.close(fd)


def test_nested_locks_release_only_at_the_outermost(tmp_path):
    root = (tmp_path / "outputs").resolve()
    with publish.outputs_lock(root):
        with publish.outputs_lock(root):
            with publish.outputs_lock(root):
                assert publish._held[root][1] == 3
            assert publish._held[root][1] == 2
        assert publish._held[root][1] == 1
    assert root not in publish._held


def test_a_lock_whose_recovery_fails_is_released_for_the_next_writer(tmp_path, monkeypatch):
    root = tmp_path / "outputs"

    def broken(output_root):
        raise OSError(errno.EIO, "recovery failed")

    monkeypatch.setattr(publish, "recover", broken)
    with pytest.raises(OSError, match="recovery failed"), publish.outputs_lock(root):
        pass
    monkeypatch.undo()
    with publish.outputs_lock(root):  # the failed attempt's descriptor (and its flock) is closed
        pass


# --- readers inside: replaced trees set aside, then removed ------------------------------------------------------
def test_trees_replaced_while_readers_are_inside_are_set_aside_in_order_and_removed_at_the_end(tmp_path):
    root = (tmp_path / "outputs").resolve()
    run(root, "first", {"x.json": "0"})
    with publish.outputs_lock(root), publish.readers_inside(root):
        with publish.readers_inside(root):  # nested: only the outermost removes
            run(root, "first", {"x.json": "1"})
            run(root, "first", {"x.json": "2"})
        retired = publish.retired_trees(root)
        assert sorted(p.name for p in retired.iterdir()) == ["1", "2"]
        assert (retired / "1" / "x.json").read_text() == "0" and (retired / "2" / "x.json").read_text() == "1"
    assert not os.path.lexists(publish.retired_trees(root)) and root not in publish._retiring
    assert (root / "x.json").read_text() == "2"


def test_a_replaced_tree_that_cannot_be_set_aside_is_removed(tmp_path, monkeypatch):
    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"x.json": "0"})
    rename = os.rename

    def refuse_retiring(source, target, *args, **kwargs):
        if str(target).startswith(str(publish.retired_trees(root))):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return rename(source, target, *args, **kwargs)

    monkeypatch.setattr(publish.os, "rename", refuse_retiring)
    with publish.outputs_lock(root), publish.readers_inside(root):
        run(root, "r", {"x.json": "1"})
        assert list(publish.retired_trees(root).iterdir()) == []  # nothing set aside
        assert not os.path.lexists(publish.next_tree(root))  # and the replaced tree is gone
    assert (root / "x.json").read_text() == "1"


# --- stale files and the folders they leave ------------------------------------------------------------------------
def test_a_file_a_run_no_longer_writes_goes_with_its_empty_folders_and_one_already_gone_is_no_error(tmp_path):
    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"deep/er/x.json": "1", "deep/y.json": "1", "gone.json": "1", "z.json": "1"})
    (root / "gone.json").unlink()  # removed by hand: still in the run's manifest
    run(root, "r", {"deep/y.json": "2", "z.json": "2"})
    assert not (root / "deep" / "er").exists() and (root / "deep" / "y.json").read_text() == "2"
    assert manifest(root, "r") == ["deep/y.json", "z.json"]
    run(root, "r", {"z.json": "3"})
    assert not (root / "deep").exists() and root.is_dir()  # the tree itself is never removed


# --- what a tree keeps -------------------------------------------------------------------------------------------
def test_a_folder_keeps_its_permissions_and_links_stay_links_in_the_tree_and_from_the_stage(tmp_path):
    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"kept/x.json": "1", "x.json": "1"}, links={"staged_link.json": "x.json"})
    os.chmod(root / "kept", 0o751)
    os.symlink("x.json", root / "tree_link.json")
    run(root, "other", {"new/deeper/y.json": "1"})  # into folders the tree does not have yet
    assert stat.S_IMODE(os.stat(root / "kept").st_mode) == 0o751
    for name in ("staged_link.json", "tree_link.json"):
        assert os.path.islink(root / name) and os.readlink(root / name) == "x.json"
    assert (root / "new" / "deeper" / "y.json").read_text() == "1"


def test_the_exchange_reports_the_error_the_kernel_gave(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(OSError) as caught:
        publish._exchange(tmp_path / "a", tmp_path / "missing")
    assert caught.value.errno == errno.ENOENT and caught.value.filename == str(tmp_path / "a")


# --- a failed publish ------------------------------------------------------------------------------------------------
def test_a_publish_that_fails_before_building_anything_raises_its_own_error(tmp_path, monkeypatch):
    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"x.json": "1"})

    def refuse(source, target, skip):
        raise OSError(errno.EACCES, "Permission denied", str(source))

    monkeypatch.setattr(publish, "_link_tree", refuse)
    with pytest.raises(publish.PublishError) as caught:
        run(root, "r", {"x.json": "2"})
    message = str(caught.value)
    assert message.startswith(f"publishing r failed: Permission denied ({root}); {root} is as it was")
    assert (root / "x.json").read_text() == "1"
    assert (publish.failed_dir("r", root) / "x.json").read_text() == "2"


def test_a_filesystem_error_without_a_file_name_says_none_and_another_error_is_not_a_publish_error(tmp_path,
                                                                                                  monkeypatch):
    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"x.json": "1"})
    monkeypatch.setattr(publish, "_link_tree", lambda source, target, skip: (_ for _ in ()).throw(
        OSError(errno.EIO, "I/O error")))
    with pytest.raises(publish.PublishError) as caught:
        run(root, "r", {"x.json": "2"})
    assert str(caught.value).startswith(f"publishing r failed: I/O error; {root} is as it was")
    monkeypatch.setattr(publish, "_link_tree", lambda source, target, skip: (_ for _ in ()).throw(
        ValueError("not the filesystem")))
    with pytest.raises(ValueError, match="not the filesystem"):
        run(root, "r", {"x.json": "3"})
    assert (root / "x.json").read_text() == "1"


def test_a_stale_file_whose_folder_is_gone_is_no_error(tmp_path):
    import shutil

    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"gone/x.json": "1", "z.json": "1"})
    shutil.rmtree(root / "gone")  # the folder removed by hand: its file still in the run's manifest
    run(root, "r", {"z.json": "2"})
    assert manifest(root, "r") == ["z.json"] and not (root / "gone").exists()


def test_a_publish_error_of_the_tree_itself_is_not_wrapped_and_an_error_without_strerror_shows_itself(
        tmp_path, monkeypatch):
    root = (tmp_path / "outputs").resolve()
    run(root, "r", {"x.json": "1"})
    monkeypatch.setattr(publish.os.path, "ismount", lambda path: Path(path) == root)
    with pytest.raises(publish.PublishError) as caught:
        run(root, "r", {"x.json": "2"})
    assert str(caught.value).startswith(f"{root} is a mount point")  # the refusal itself, not "publishing r failed"
    monkeypatch.undo()
    monkeypatch.setattr(publish, "_link_tree", lambda source, target, skip: (_ for _ in ()).throw(
        OSError("disk on fire")))
    with pytest.raises(publish.PublishError) as caught:
        run(root, "r", {"x.json": "3"})
    assert str(caught.value).startswith(f"publishing r failed: disk on fire; {root} is as it was")
