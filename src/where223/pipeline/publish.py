"""Staged, all-or-nothing publication: a run writes into a staging folder; only a run that completes reaches the
outputs tree, and a reader of the tree sees every file of the tree before the switch or every file after it.

Inside an outputs tree `R` (`outputs/` by default):

- `R/manifests/<run>.json` lists what the run published last. Other runs' files are never touched.
- `R/failed/<run>/` keeps a failed run's staged files and its traceback (`traceback.txt`); the next success of
  the same run clears it.

Beside the tree, in its parent folder (outside what is switched, so they survive it):

- `.<R>.lock` serialises writers: one process at a time stages into, publishes into or writes records into a tree.
- `.<R>.staging/<run>/` is where run `<run>` writes, laid out like the tree itself; it is emptied when the run
  starts and removed once the run is published or kept. Outside the tree, so that runs executing side by side
  (`where223 run` runs independent notebooks two at a time) keep writing while another run's publish switches
  the tree.
- `.<R>.next/` is the next tree while a publish builds it; `.<R>.old/` the previous one while it is set aside;
  `.<R>.retired/` the trees publishes replaced while notebooks may still be reading them (`readers_inside`).

Within a process, one thread at a time changes a tree (a publish, a failed run kept, a record written): the lock
serialises processes, `_tree_change` the threads of one `where223 run`. Execution is parallel, publishing serial.

Publishing builds the next tree as hard links to every file of the tree (nothing is copied; files are only ever
replaced, never changed in place) with the run's staged files linked over them, its stale files left out and its
manifest written, then swaps it with the tree in one `renameat2(RENAME_EXCHANGE)` and removes the previous tree.
Before the swap nothing in the tree changed: a failure leaves it as it was and moves the staged files to
`failed/<run>/`. Where the filesystem cannot exchange, the tree is renamed aside and the next one renamed in, and a
failure between the two renames the old tree back; a reader may then find no tree for that instant, never a mix.
A writer killed at any step leaves the tree old or new; the next writer to take the lock removes what it left
(and renames an old tree set aside back, should the tree be missing). The tree must be one filesystem: a mount
inside it (a read-only bind mount, say) makes every publish fail, leaving the tree as it was. `failed/` and
the lock, staging, next, old and retired paths are git-ignored.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from where223.errors import UsageError
from where223.pipeline.paths import FAILED, OUTPUTS, STAGING
from where223.pipeline.records import write_json

MANIFESTS = "manifests"

# The locks this process holds, by tree: (open lock file, depth), so that nested holders (and the threads of one
# `where223 run`, which holds the lock for them all) share one lock; `_holding` guards the table.
_held: dict[Path, tuple[int, int]] = {}
_holding = threading.Lock()
# One change of a tree at a time within this process: a publish, a failed run kept, a record written. A change made
# while another thread's publish builds the next tree would be lost in its switch.
_tree_change = threading.RLock()
# The trees whose replaced trees are set aside rather than removed (`readers_inside`): tree -> how many set aside.
_retiring: dict[Path, int] = {}


class OutputsBusyError(UsageError, RuntimeError):
    """Another process is writing into the same outputs tree."""


class PublishError(UsageError, OSError):
    """A completed run could not be switched into the tree: the tree is as it was, the run's files are kept."""


def lock_path(output_root: Path = OUTPUTS) -> Path:
    """The writers' lock of a tree, beside it."""
    root = Path(output_root)
    return root.parent / f".{root.name}.lock"


def next_tree(output_root: Path = OUTPUTS) -> Path:
    """Where a publish builds the tree that replaces `output_root`."""
    root = Path(output_root)
    return root.parent / f".{root.name}.next"


def old_tree(output_root: Path = OUTPUTS) -> Path:
    """Where the previous tree waits while the tree is renamed in (where the filesystem cannot exchange)."""
    root = Path(output_root)
    return root.parent / f".{root.name}.old"


def staging_area(output_root: Path = OUTPUTS) -> Path:
    """Where runs write until they complete, one folder each: beside the tree, so a switch leaves it alone."""
    root = Path(output_root)
    return root.parent / f".{root.name}{STAGING}"


def retired_trees(output_root: Path = OUTPUTS) -> Path:
    """Where the trees publishes replaced wait while notebooks may still read them (`readers_inside`)."""
    root = Path(output_root)
    return root.parent / f".{root.name}.retired"


def _holder(lock_fd: int) -> str:
    """The pid the lock file names ('unknown' while the holder has not written it yet)."""
    os.lseek(lock_fd, 0, os.SEEK_SET)
    return os.read(lock_fd, 64).decode(errors="replace").strip() or "unknown"


def recover(output_root: Path = OUTPUTS) -> None:
    """Undo what a writer killed mid-publish left beside the tree; call with the lock held.

    A tree set aside while the tree itself is missing is renamed back (the publish never completed); any other
    next or old tree is a leftover (half built, or the previous tree half removed) and is removed, as are the
    staging folders of runs that never completed and the retired trees of a run that did not end.
    """
    root = Path(output_root)
    old = old_tree(root)
    if old.is_dir() and not os.path.lexists(root):
        os.rename(old, root)
    for leftover in (next_tree(root), old, staging_area(root), retired_trees(root)):
        if os.path.lexists(leftover):
            shutil.rmtree(leftover)


@contextmanager
def outputs_lock(
    output_root: Path = OUTPUTS, wait: bool = False, progress: Callable[[str], None] = lambda line: None
) -> Iterator[None]:
    """Hold the writers' lock of an outputs tree: refuse at once (OutputsBusyError naming the holder's pid) or wait,
    telling `progress` whom it waits for. Taking it first undoes what a killed publish left (`recover`).

    Re-entrant within a process; the lock is an flock on a file beside the tree, so it goes with the process,
    however it ends, and survives the tree's switch.
    """
    root = Path(output_root).resolve()
    with _holding:
        nested = root in _held
        if nested:
            lock_fd, depth = _held[root]
            _held[root] = (lock_fd, depth + 1)
    if not nested:
        root.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(lock_path(root), os.O_RDWR | os.O_CREAT, 0o666)
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
        try:
            os.ftruncate(lock_fd, 0)
            os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
            recover(root)
            root.mkdir(exist_ok=True)
        except BaseException:
            os.close(lock_fd)
            raise
        with _holding:
            _held[root] = (lock_fd, 1)
    try:
        yield
    finally:
        with _holding:
            lock_fd, depth = _held[root]
            if depth > 1:
                _held[root] = (lock_fd, depth - 1)
            else:
                del _held[root]
                os.ftruncate(lock_fd, 0)
                os.close(lock_fd)  # closing the last descriptor releases the flock


def staging_dir(name: str, output_root: Path = OUTPUTS) -> Path:
    """Where run `name` writes until it completes (beside the tree: `staging_area`)."""
    return staging_area(output_root) / name


def _tidy_staging(stage: Path) -> None:
    """Remove a stage that is published or kept, and the staging area once no run stages there."""
    shutil.rmtree(stage, ignore_errors=True)
    try:
        os.rmdir(stage.parent)
    except OSError:  # another run stages there (or it is gone)
        pass


@contextmanager
def readers_inside(output_root: Path = OUTPUTS) -> Iterator[None]:
    """While the block runs, a publish into the tree sets the tree it replaced aside (`retired_trees`) instead of
    removing it at once, and the block's end removes them. For notebooks that run while other runs publish
    (`where223 run`'s parallel runs): one listing a folder of the tree at the moment of a switch lists the previous
    tree's folder, which removing it then would empty under the listing. Call with the lock held."""
    root = Path(output_root).resolve()
    with _tree_change:
        nested = root in _retiring
        _retiring.setdefault(root, 0)
    try:
        yield
    finally:
        if not nested:
            with _tree_change:
                del _retiring[root]
                shutil.rmtree(retired_trees(root), ignore_errors=True)


def _discard(previous: Path, root: Path) -> None:
    """The tree a switch replaced: removed, or set aside while notebooks may read it (`readers_inside`)."""
    if root in _retiring:
        retired = retired_trees(root)
        retired.mkdir(exist_ok=True)
        _retiring[root] += 1
        try:
            os.rename(previous, retired / str(_retiring[root]))
            return
        except OSError:
            pass
    shutil.rmtree(previous, ignore_errors=True)  # a killed writer leaves it to the next one (`recover`)


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


def _link_tree(source: Path, target: Path, skip: Callable[[str], bool]) -> None:
    """Make `target` a tree of hard links to `source`'s files (symlinks linked as links), leaving out the
    folders and files whose path relative to `source` `skip` names."""
    def fail(error: OSError) -> None:
        raise error  # a folder that cannot be read would otherwise be left out of the next tree

    for folder, folders, names in os.walk(source, onerror=fail):
        relative = Path(folder).relative_to(source)
        os.mkdir(target / relative, os.stat(folder).st_mode & 0o7777)
        linked = [d for d in folders if os.path.islink(Path(folder) / d)]  # walked as names, not followed
        folders[:] = [d for d in folders if d not in linked and not skip((relative / d).as_posix())]
        for name in [*names, *linked]:
            if not skip((relative / name).as_posix()):
                os.link(Path(folder) / name, target / relative / name, follow_symlinks=False)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> None:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); OSError, with errno, where it cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(first), None, str(second))


def _switch(root: Path, built: Path) -> Path:
    """Put the tree `built` at `root`; returns where the previous tree now is (to be removed)."""
    try:
        _exchange(root, built)
        return built
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    aside = old_tree(root)  # no exchange here: rename the tree aside, the next one in, and back on failure
    os.rename(root, aside)
    try:
        os.rename(built, root)
    except BaseException:
        os.rename(aside, root)
        raise
    return aside


def publish(name: str, output_root: Path = OUTPUTS) -> list[str]:
    """Switch run `name`'s staged files into the tree in one step, without what only it published before, with
    its manifest; then remove the previous tree (or set it aside: `readers_inside`) and the staging folder. Returns
    the published files, relative to the tree, sorted. One publish at a time in this process (`_tree_change`).

    Raises before the switch with the tree untouched and the staging folder in place; once the switch is made the
    run is published (the tree's manifest of `name` is the new one) and only tidying remains.
    """
    root = Path(output_root).resolve()
    if os.path.ismount(root):
        raise PublishError(
            f"{root} is a mount point: publishing switches the whole folder, so mount the folder above it instead"
        )
    with _tree_change:
        files = _publish(name, root)
    _tidy_staging(staging_dir(name, root))
    return files


def _publish(name: str, root: Path) -> list[str]:
    stage = staging_dir(name, root)
    files = sorted(path.relative_to(stage).as_posix() for path in stage.rglob("*") if not path.is_dir())
    manifest = manifest_path(name, root)
    others = [path for path in manifest.parent.glob("*.json") if path != manifest]
    claimed = set().union(*(_published_files(path) for path in others))
    stale = sorted(_published_files(manifest) - set(files) - claimed)
    kept_failure = failed_dir(name, root).relative_to(root).as_posix()
    built = next_tree(root)
    shutil.rmtree(built, ignore_errors=True)
    try:
        _link_tree(root, built, lambda relative: relative in (STAGING, kept_failure))
        for relative in files:
            target = built / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                os.unlink(target)
            os.link(stage / relative, target, follow_symlinks=False)
        for relative in stale:
            _remove_with_empty_parents(built / relative, built)
        write_json(built / manifest.relative_to(root), {"run": name, "files": files})
        previous = _switch(root, built)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    _discard(previous, root)
    return files


def keep_failed(name: str, error: BaseException, output_root: Path = OUTPUTS) -> Path:
    """Move run `name`'s staged files to `failed/<name>/` with the traceback; returns that folder."""
    kept = failed_dir(name, output_root)
    with _tree_change:
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging_dir(name, output_root), kept)
        (kept / "traceback.txt").write_text("".join(traceback.format_exception(error)))
    _tidy_staging(staging_dir(name, output_root))
    return kept


@contextmanager
def staged(name: str, output_root: Path = OUTPUTS, wait: bool = False) -> Iterator[Path]:
    """Lock the tree and give run `name` an empty staging folder; publish it if the block completes.

    If the block raises, the tree stays as it was and the staged files go to `failed/<name>/`. If publishing
    fails, the same: the tree as it was, the new files in `failed/<name>/`, and a PublishError (one line) when
    the cause was the filesystem.
    """
    root = Path(output_root).resolve()
    with outputs_lock(root, wait):
        stage = staging_dir(name, root)
        shutil.rmtree(stage, ignore_errors=True)  # what a killed run left
        stage.mkdir(parents=True)
        try:
            yield stage
        except BaseException as error:
            keep_failed(name, error, root)
            raise
        manifest = manifest_path(name, root)
        before = _identity(manifest)
        try:
            publish(name, root)
        except BaseException as error:
            if _identity(manifest) != before:  # each publish writes a new manifest: the switch was made
                _tidy_staging(stage)
                raise  # published; interrupted while removing the previous tree or the stage
            kept = keep_failed(name, error, root)
            if isinstance(error, OSError) and not isinstance(error, UsageError):
                where = f" ({error.filename})" if error.filename else ""
                hint = " (a mount inside the tree? it must be one filesystem)" if error.errno == errno.EXDEV else ""
                raise PublishError(
                    f"publishing {name} failed: {error.strerror or error}{where}{hint}; {root} is as it was, "
                    f"the new files are in {kept}"
                ) from error
            raise


def _identity(path: Path) -> tuple[int, int] | None:
    """The file at `path` (device, inode), None when there is none."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def write_record(path: Path, data: object, tree: Path) -> Path:
    """Write the JSON record `path` straight into the published tree `tree` (a sweep's record, cell by cell),
    holding the tree's lock: a publish in progress is waited for, since a record written while it builds the next
    tree would be lost in the switch."""
    with outputs_lock(tree, wait=True), _tree_change:
        return write_json(path, data)
