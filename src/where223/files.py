"""Writing files so that a reader never sees half of one, and a killed writer's leftovers are cleared.

Standard library only: the graph tools, the pipeline and the figures all write through here. A temporary file or
folder is made beside its target (same filesystem, so the final rename is atomic) and named
`.tmp-<pid>-<random>-<target name>`: the pid says which process owns it, so a later writer into the same folder
removes what a killed one left (`remove_stale_temporaries`). The rename replaces whatever is at the target,
a symlink included: the link itself is replaced, never the file it points to. A writer that replaces a file the
user keeps (a model repaired in place) asks for `keep_mode`: the new file takes the old one's permissions, and its
owner and group where this process may set them; the rename gives the name a new file all the same, so other hard
links to the old one keep the old content (the caller says so, or refuses, before writing). Each file put in place
is told to the listeners in `placed` (the command line's record of what an interrupted command had written).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

# Every temporary file starts so (.gitignore hides them wherever a killed process leaves one).
TEMPORARY_PREFIX = ".tmp-"
_OWNED = re.compile(rf"^{re.escape(TEMPORARY_PREFIX)}(?P<pid>\d+)-[0-9a-f]+-")
# Called with each file a write here has put in place, once it is there.
placed: list[Callable[[Path], None]] = []


def _tell_placed(target: Path) -> None:
    for listener in placed:
        listener(target)


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files and folders in `folder` whose owning process no longer runs; returns them.

    Entries of live processes (another writer at work) and names this module did not make are left alone.
    """
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _OWNED.match(entry.name)
        if match is None or int(match["pid"]) == os.getpid() or _alive(int(match["pid"])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def temporary_name(target: Path) -> Path:
    """A fresh temporary name beside `target`, owned by this process, keeping `target`'s name as its end."""
    return target.with_name(f"{TEMPORARY_PREFIX}{os.getpid()}-{secrets.token_hex(6)}-{target.name}")


def _reserve_temporary(target: Path) -> Path:
    """Create an empty, uniquely named temporary file beside `target`, with the umask's permissions."""
    while True:
        candidate = temporary_name(target)
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return candidate


def keep_attributes(replaced: Path, replacement: Path) -> None:
    """Give `replacement` the permission bits, owner and group of the regular file at `replaced` (nothing when there
    is none: a missing file, a symlink, a folder). The owner and group are kept where this process may set them
    (root; a group it belongs to), else they stay its own and set-id bits are dropped."""
    try:
        before = os.lstat(replaced)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(before.st_mode):
        return
    mode = stat.S_IMODE(before.st_mode)
    now = os.lstat(replacement)
    if (now.st_uid, now.st_gid) != (before.st_uid, before.st_gid):
        try:
            os.chown(replacement, before.st_uid, before.st_gid, follow_symlinks=False)
        except PermissionError:
            mode &= ~(stat.S_ISUID | stat.S_ISGID)  # no set-id bits on a file of another owner
            with suppress(PermissionError):
                os.chown(replacement, -1, before.st_gid, follow_symlinks=False)
    os.chmod(replacement, mode)


@contextmanager
def atomic_path(path: str | os.PathLike[str], keep_mode: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` to write the whole file to; renamed onto `path` when the block completes.

    Readers of `path` see the old file or the new one, never half of one; a block that raises (an interrupt
    included) leaves `path` untouched and removes the temporary file. The temporary name keeps `path`'s suffix
    (ONNX and matplotlib, for two, pick their format from it). With `keep_mode`, a regular file replaced at `path`
    passes its permissions, owner and group on (`keep_attributes`).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target.parent)
    partial = _reserve_temporary(target)
    try:
        yield partial
        if keep_mode:
            keep_attributes(target, partial)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _tell_placed(target)


@contextmanager
def temporary_folder(beside: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh folder beside the file `beside`, removed with its contents when the block ends, however it ends."""
    target = Path(beside)
    remove_stale_temporaries(target.parent)
    while True:
        folder = temporary_name(target)
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        break
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def atomic_model_path(path: str | os.PathLike[str], keep_mode: bool = False) -> Iterator[Path]:
    """A path with `path`'s own name, in a fresh folder beside it, for a writer that puts files of its own beside
    the one it writes (an ONNX exporter's external weights, named after the model they belong to); when the block
    completes, every other file in that folder is moved beside `path`, then the model onto `path`.

    `atomic_path` would leave such files under their temporary names, which the model then names and the next
    writer into the folder removes as stale; here they keep the names the model gives them. A block that raises
    leaves `path` untouched and removes the folder. With `keep_mode`, each file replaced passes its permissions,
    owner and group on to the one that replaces it (`keep_attributes`).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with temporary_folder(target) as staging:
        partial = staging / target.name
        yield partial
        for entry in sorted(staging.iterdir()):  # the weights first: the model never names a file not yet there
            if entry != partial:
                if keep_mode:
                    keep_attributes(target.with_name(entry.name), entry)
                os.replace(entry, target.with_name(entry.name))
                _tell_placed(target.with_name(entry.name))
        if keep_mode:
            keep_attributes(target, partial)
        os.replace(partial, target)
    _tell_placed(target)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, keep_mode: bool = False) -> Path:
    """Write `data` to `path` through a temporary file and a rename, so readers never see half a file (`keep_mode`:
    the replaced file's mode and owner kept, as `atomic_path` keeps them)."""
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(path, keep_mode=keep_mode) as partial:
        partial.write_bytes(raw)
    return Path(path)
