"""All-or-nothing publishing under faults: the switch made to fail, or the writer killed, at each of its steps.

A publish is a sequence of filesystem calls (folders made, files linked, the manifest written and renamed, the
trees exchanged or renamed, the previous tree removed). Each test first counts the calls of a publish that
succeeds, then repeats it from the same start with call k failing (OSError) or killing the writer (SIGKILL), for
every k. At every k the tree must hold exactly the old files or exactly the new ones; a failure before the switch
leaves the old and keeps the new in `failed/<run>/`; what a killed writer leaves beside the tree is undone by the
next one to take the lock. Both ways of switching are covered: the one-step exchange, and the two renames used
where the filesystem cannot exchange (forced here by making the exchange report EINVAL).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.pipeline.test_publish import probe  # noqa: F401 (a fixture)
from where223.pipeline import publish

# The calls a publish makes that change the filesystem; each is a step the fault injection can stop at.
STEPS = ("mkdir", "link", "unlink", "rmdir", "replace", "rename")

OLD = {"01": {"run/reproduce.json": "old record", "run/model.onnx": "old model", "notebooks/01.ipynb": "old nb",
              "run/dropped.log": "only the old 01 wrote this"},
       "02": {"run/graph/lint.json": "02's record", "notebooks/02.ipynb": "02's notebook"}}
NEW = {"run/reproduce.json": "new record", "run/model.onnx": "new model", "notebooks/01.ipynb": "new nb",
       "run/added/figure.svg": "a file only the new 01 writes"}


def view(root: Path) -> dict[str, str] | None:
    """What a reader of the tree sees: every file but the runner's own (staging, kept failures); None: no tree."""
    if not root.is_dir():
        return None
    return {path.relative_to(root).as_posix(): path.read_text() for path in sorted(root.rglob("*"))
            if path.is_file() and path.relative_to(root).parts[0] not in (".staging", "failed")}


def prepare(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Publish the old 01 and 02 into `root`; returns the old view and the new one (once the new 01, `NEW`, is
    published): the views the switch must choose between."""
    for name, files in OLD.items():
        with publish.staged(name, root) as folder:
            write(folder, files)
    (root / "failed" / "other").mkdir(parents=True)
    (root / "failed" / "other" / "traceback.txt").write_text("another run's kept failure")
    old = view(root)
    new = {key: value for key, value in old.items() if not key.startswith(("run/dropped", "manifests/01"))}
    new.update(NEW)
    new["manifests/01.json"] = json.dumps({"files": sorted(NEW), "run": "01"}, indent=2, sort_keys=True) + "\n"
    assert old["manifests/01.json"] != new["manifests/01.json"]  # the manifest itself changes with the switch
    return old, new


def write(folder: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)


class Faults:
    """Counts the filesystem calls made while a publish runs and makes call number `at` fail, or kill."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int = 0, action: Callable[[], None] | None = None,
                 exchange: bool = True) -> None:
        self.calls, self.at, self.action, self.active = 0, at, action, False
        for step in STEPS:
            monkeypatch.setattr(os, step, self.counted(getattr(os, step)))
        exchange_function = publish._exchange if exchange else self.no_exchange
        monkeypatch.setattr(publish, "_exchange", self.counted(exchange_function))
        inner = publish.publish

        def publishing(*args, **kwargs):
            self.active = True
            try:
                return inner(*args, **kwargs)
            finally:
                self.active = False

        monkeypatch.setattr(publish, "publish", publishing)

    @staticmethod
    def no_exchange(first: Path, second: Path) -> None:
        raise OSError(errno.EINVAL, "this filesystem cannot exchange (test)")

    def counted(self, function: Callable) -> Callable:
        def call(*args, **kwargs):
            if self.active:
                self.calls += 1
                if self.calls == self.at:
                    (self.action or self.fail)()
            return function(*args, **kwargs)

        return call

    @staticmethod
    def fail() -> None:
        raise OSError(errno.EIO, "injected fault")


def count_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> int:
    root = tmp_path / "count" / "outputs"
    _, new = prepare(root)
    with monkeypatch.context() as patch:
        faults = Faults(patch, exchange=exchange)
        with publish.staged("01", root) as folder:
            write(folder, NEW)
    assert view(root) == new  # control: without a fault, the new tree is published
    assert faults.calls > 10, faults.calls
    return faults.calls


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_fault_at_any_step_leaves_the_old_tree_or_the_new_never_a_mix(tmp_path, monkeypatch, exchange):
    steps = count_steps(tmp_path, monkeypatch, exchange)
    outcomes = []
    for at in range(1, steps + 1):
        root = tmp_path / f"at-{at}" / "outputs"
        old, new = prepare(root)
        with monkeypatch.context() as patch:
            Faults(patch, at=at, exchange=exchange)
            try:
                with publish.staged("01", root) as folder:
                    write(folder, NEW)
                raised = None
            except publish.PublishError as error:
                raised = error
        seen = view(root)
        assert seen in (old, new), f"step {at}: a mix of the old and the new tree"
        if raised is not None:  # a publish that gives up tidies beside the tree itself
            assert sorted(path.name for path in root.parent.iterdir()) == [".outputs.lock", "outputs"], at
        with publish.outputs_lock(root):  # one that could not remove the previous tree leaves it to the next writer
            pass
        assert sorted(path.name for path in root.parent.iterdir()) == [".outputs.lock", "outputs"], at
        assert view(root) == seen
        if raised is not None:  # failed before the switch: the old tree, the new files kept
            assert seen == old, at
            assert str(raised).count("\n") == 0 and "outputs is as it was" in str(raised), raised
            kept = publish.failed_dir("01", root)
            assert str(kept) in str(raised) and view(kept) == NEW | {"traceback.txt": view(kept)["traceback.txt"]}
            assert "injected fault" in (kept / "traceback.txt").read_text()
            assert (root / "failed" / "other" / "traceback.txt").is_file()  # another run's failure untouched
        else:  # the fault hit after the switch (removing the previous tree): published
            assert seen == new, at
        outcomes.append(raised is None)
    assert not all(outcomes) and any(outcomes), outcomes  # control: both sides of the switch were reached


def killed_publish(root: Path, at: int, exchange: bool) -> int:
    """Publish the new 01 in a forked writer that SIGKILLs itself at call `at`; returns its wait status."""
    pid = os.fork()
    if pid == 0:  # the writer: never returns into pytest
        try:
            Faults(pytest.MonkeyPatch(), at=at, action=lambda: os.kill(os.getpid(), signal.SIGKILL), exchange=exchange)
            with publish.staged("01", root) as folder:
                write(folder, NEW)
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_writer_killed_at_any_step_leaves_the_old_tree_or_the_new_and_the_next_writer_tidies(
    tmp_path, monkeypatch, exchange
):
    steps = count_steps(tmp_path, monkeypatch, exchange)
    missing = []
    for at in range(1, steps + 1):
        root = tmp_path / f"at-{at}" / "outputs"
        old, new = prepare(root)
        status = killed_publish(root, at, exchange)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (at, status)
        seen = view(root)
        if seen is None:  # only between the two renames, which need no reader to find the tree
            assert not exchange, at
            missing.append(at)
        else:
            assert seen in (old, new), f"step {at}: a mix of the old and the new tree"
        with publish.outputs_lock(root):  # the next writer undoes what the killed one left beside the tree
            pass
        assert view(root) in (old, new), at
        assert view(root) == (seen if seen is not None else old), at
        assert sorted(path.name for path in root.parent.iterdir()) == [".outputs.lock", "outputs"], at
        with publish.staged("01", root) as folder:  # and publishing works again from there
            write(folder, NEW)
        assert view(root) == new, at
    assert len(missing) == (0 if exchange else 1), missing  # control: the kill did land between the two renames


def test_the_next_writer_renames_a_tree_left_aside_back(tmp_path: Path):
    root = tmp_path / "outputs"
    old, _ = prepare(root)
    os.rename(root, publish.old_tree(root))  # a writer killed between the two renames
    publish.next_tree(root).mkdir()
    (publish.next_tree(root) / "half").write_text("a next tree half built")
    assert view(root) is None
    with publish.outputs_lock(root):
        assert view(root) == old
    assert sorted(path.name for path in tmp_path.iterdir()) == [".outputs.lock", "outputs"]


def test_a_read_only_folder_in_the_tree_fails_the_publish_and_leaves_the_tree_byte_identical(tmp_path: Path):
    root = tmp_path / "outputs"
    prepare(root)
    before = {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
    with read_only(root / "run"), pytest.raises(publish.PublishError) as raised:
        with publish.staged("01", root) as stage:
            write(stage, NEW)
    message = str(raised.value)
    assert message.count("\n") == 0 and "mount inside the tree" in message, message
    kept = publish.failed_dir("01", root)
    assert str(kept) in message and (kept / "run" / "reproduce.json").read_text() == "new record"
    after = {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
             and not path.is_relative_to(kept)}
    assert after == before
    assert sorted(path.name for path in tmp_path.iterdir()) == [".outputs.lock", "outputs"]


def test_a_sweep_record_waits_for_a_publish_in_progress(tmp_path: Path):
    from tests.pipeline.test_publish import hold_lock

    root = tmp_path / "outputs"
    holder = hold_lock(root, 3)
    writer = threading.Thread(target=publish.write_record, args=(root / "matrix" / "cells" / "a.json", {"cell": "a"},
                                                                   root))
    try:
        writer.start()
        writer.join(timeout=1)
        assert writer.is_alive() and not (root / "matrix").exists()  # waiting while the holder holds the lock
        writer.join(timeout=30)
        assert not writer.is_alive() and holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((root / "matrix" / "cells" / "a.json").read_text()) == {"cell": "a"}


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` bind-mounted read-only onto itself for the block (root only: chmod does not stop root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root")
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"mount --bind refused here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        with pytest.raises(OSError):
            (folder / "probe").write_text("control: the folder is read-only, even for root")
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_run_that_cannot_be_published_names_the_failed_copy_it_kept(probe: Path, tmp_path: Path, capsys):  # noqa: F811
    from where223 import cli
    from where223.pipeline.run import PlannedRun, execute

    root = tmp_path / "outputs"
    execute(PlannedRun("probe", {"text": "first"}), output_root=root)
    before = {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
    plan = tmp_path / "plan.yaml"
    plan.write_text("runs:\n  - notebook: probe\n    parameters: {text: second}\n")
    with read_only(root / "run"):
        code = cli.main(["run", "--params", str(plan), "--output-root", str(root)])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and "publishing probe__text=second failed" in error, error
    kept = publish.failed_dir("probe__text=second", root)
    assert str(kept) in error and (kept / "notebooks" / "probe__text=second.ipynb").is_file()
    assert json.loads((kept / "run" / "record.json").read_text()) == {"text": "second"}
    after = {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
             and not path.is_relative_to(kept)}
    assert after == before
