"""Staged publication: a run writes into a staging folder; only a run that completes reaches the outputs tree.

Inside an outputs tree (`outputs/` by default):

- `.staging/<run>/` is where run `<run>` writes, laid out like the tree itself; it is emptied when the run starts.
- When the run completes, each staged file is renamed onto its place in the tree (readers see the old file or the
  new one), then the files the run published last time and did not write now are removed, unless another run
  published them too; `manifests/<run>.json` lists what the run published. Other runs' files are never touched.
- When the run raises (or is interrupted), nothing in the tree changes: its staged files and the traceback
  (`traceback.txt`) are kept under `failed/<run>/`; the next success of the same run clears them.
- `.lock` serialises writers: one process at a time stages and publishes into a tree.

`.staging/`, `failed/` and `.lock` are git-ignored; a killed run leaves its files in `.staging/` only.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from where223.errors import UsageError
from where223.pipeline.paths import FAILED, OUTPUTS, STAGING
from where223.pipeline.records import write_json

LOCK = ".lock"
MANIFESTS = "manifests"

# The locks this process holds, by tree: (open lock file, depth), so that nested holders share one lock.
_held: dict[Path, tuple[int, int]] = {}


class OutputsBusyError(UsageError, RuntimeError):
    """Another process is writing into the same outputs tree."""


def _holder(lock_fd: int) -> str:
    """The pid the lock file names ('unknown' while the holder has not written it yet)."""
    os.lseek(lock_fd, 0, os.SEEK_SET)
    return os.read(lock_fd, 64).decode(errors="replace").strip() or "unknown"


@contextmanager
def outputs_lock(
    output_root: Path = OUTPUTS, wait: bool = False, progress: Callable[[str], None] = lambda line: None
) -> Iterator[None]:
    """Hold the writer's lock of an outputs tree: refuse at once (OutputsBusyError naming the holder's pid) or wait,
    telling `progress` whom it waits for.

    Re-entrant within a process; the lock is an flock, so it goes with the process, however it ends.
    """
    root = Path(output_root).resolve()
    if root in _held:
        lock_fd, depth = _held[root]
        _held[root] = (lock_fd, depth + 1)
    else:
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(lock_fd)
            if not wait:
                os.close(lock_fd)
                raise OutputsBusyError(
                    f"{root} is being written by another where223 process (pid {holder}); "
                    "wait for it to finish, or pass --wait to start after it"
                ) from None
            progress(f"waiting for the where223 process writing {root} (pid {holder})")
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
        _held[root] = (lock_fd, 1)
    try:
        yield
    finally:
        lock_fd, depth = _held[root]
        if depth > 1:
            _held[root] = (lock_fd, depth - 1)
        else:
            del _held[root]
            os.ftruncate(lock_fd, 0)
            os.close(lock_fd)  # closing the last descriptor releases the flock


def staging_dir(name: str, output_root: Path = OUTPUTS) -> Path:
    """Where run `name` writes until it completes."""
    return Path(output_root) / STAGING / name


def failed_dir(name: str, output_root: Path = OUTPUTS) -> Path:
    """Where the staged files and the traceback of run `name`'s last failure are kept."""
    return Path(output_root) / FAILED / name


def manifest_path(name: str, output_root: Path = OUTPUTS) -> Path:
    """The list of files run `name` published last."""
    return Path(output_root) / MANIFESTS / f"{name}.json"


def _published_files(manifest: Path) -> set[str]:
    return set(json.loads(manifest.read_text())["files"]) if manifest.is_file() else set()


def _remove_with_empty_parents(path: Path, root: Path) -> None:
    path.unlink(missing_ok=True)
    parent = path.parent
    while parent != root and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def publish(name: str, output_root: Path = OUTPUTS) -> list[str]:
    """Move run `name`'s staged files into the tree, drop what only it published before, write its manifest.

    Returns the published files, relative to the tree, sorted.
    """
    root = Path(output_root)
    stage = staging_dir(name, root)
    files = sorted(path.relative_to(stage).as_posix() for path in stage.rglob("*") if not path.is_dir())
    for relative in files:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / relative, target)
    manifest = manifest_path(name, root)
    others = [path for path in manifest.parent.glob("*.json") if path != manifest]
    claimed = set().union(*(_published_files(path) for path in others))
    for stale in sorted(_published_files(manifest) - set(files) - claimed):
        _remove_with_empty_parents(root / stale, root)
    write_json(manifest, {"run": name, "files": files})
    shutil.rmtree(stage)
    shutil.rmtree(failed_dir(name, root), ignore_errors=True)
    return files


def keep_failed(name: str, error: BaseException, output_root: Path = OUTPUTS) -> Path:
    """Move run `name`'s staged files to `failed/<name>/` with the traceback; returns that folder."""
    kept = failed_dir(name, output_root)
    shutil.rmtree(kept, ignore_errors=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging_dir(name, output_root), kept)
    (kept / "traceback.txt").write_text("".join(traceback.format_exception(error)))
    return kept


@contextmanager
def staged(name: str, output_root: Path = OUTPUTS, wait: bool = False) -> Iterator[Path]:
    """Lock the tree and give run `name` an empty staging folder; publish it if the block completes.

    If the block raises, the tree stays as it was and the staged files go to `failed/<name>/`.
    """
    with outputs_lock(output_root, wait):
        stage = staging_dir(name, output_root)
        shutil.rmtree(stage, ignore_errors=True)  # what a killed run left
        stage.mkdir(parents=True)
        try:
            yield stage
        except BaseException as error:
            keep_failed(name, error, output_root)
            raise
        publish(name, output_root)
