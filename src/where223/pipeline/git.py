"""git, run safely: the one way where223 asks git anything (what `compare` reads of a revision, which commit a sweep
cell's code came from).

git is run only on this repository (or the one a caller names), never on a folder someone hands a tool, and with
what a repository's configuration could make it run switched off: the filesystem monitor (which ls-files and status
start), hooks, pagers and transports (a partial clone's fetch of a missing object); variables that would point git at
another repository or command are dropped. rev-parse, ls-files, ls-tree, status, diff --name-only and cat-file
--batch run no textconv, filter or external diff. Standard library only.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

GIT_OFF = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat",
           "-c", "protocol.allow=never", "--no-pager")
ENVIRONMENT_DROPPED = frozenset({  # an inherited variable that would point git at another repository or command
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_SSH",
    "GIT_SSH_COMMAND"})


def git(root: Path, *args: str, data: bytes | None = None, work_tree: bool = False) -> tuple[int, bytes, str]:
    """git on the repository at `root` (its `.git`, found nowhere else), with GIT_OFF: exit status, stdout and the
    last line of stderr (-1 when git cannot be run)."""
    where = Path(root).absolute()
    environment = {key: value for key, value in os.environ.items() if key not in ENVIRONMENT_DROPPED}
    environment.update(GIT_PAGER="cat", PAGER="cat", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0",
                       GIT_NO_LAZY_FETCH="1")
    command = ["git", *GIT_OFF, f"--git-dir={where / '.git'}", *([f"--work-tree={where}"] if work_tree else []), *args]
    try:
        done = subprocess.run(command, input=data, capture_output=True, check=False, cwd=where, env=environment)
    except OSError as error:  # no git, or no such root
        return -1, b"", str(error)
    message = done.stderr.decode(errors="replace").strip().splitlines()
    return done.returncode, done.stdout, message[-1] if message else ""


CODE = "src/where223"  # what a sweep cell runs of this repository
# what only presents records, and cannot change what a cell records: a change there leaves records current
PRESENTATION = ("src/where223/cli/", "src/where223/study/report.py", "src/where223/study/_page.py",
                "src/where223/study/_glance.py", "src/where223/markdown.py", "src/where223/figures.py",
                "src/where223/pipeline/compare.py")
PRESENTATION_ROLES = ("analysis.py", "figure.py", "section.py")  # a question's package files that only read records


def code_version(root: Path) -> dict[str, Any]:
    """Which code a run used: {"commit": HEAD's sha (None outside a git checkout), "dirty": whether src/where223
    differs from it (changed, or a file git does not track)}."""
    status, head, _ = git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if status != 0:
        return {"commit": None, "dirty": True}
    _, changed, _ = git(root, "status", "--porcelain", "--untracked-files=normal", "--", CODE, work_tree=True)
    return {"commit": head.decode().strip(), "dirty": bool(changed.strip())}


def _presentation(path: str) -> bool:
    return path.startswith(PRESENTATION) or (path.startswith("src/where223/study/")
                                             and path.rsplit("/", 1)[-1] in PRESENTATION_ROLES)


@functools.lru_cache(maxsize=64)
def _changed(root: Path, since: str, now: str) -> frozenset[str] | None:
    """The files under CODE that differ between commits `since` and `now`; None when git cannot say."""
    if since == now:
        return frozenset()
    if not since or since.startswith("-") or now.startswith("-"):
        return None
    status, names, _ = git(root, "diff", "--name-only", "--no-renames", "-z", since, now, "--", CODE)
    if status != 0:
        return None
    return frozenset(name for name in names.decode(errors="replace").split("\0") if name)


def cell_code_changed(root: Path, since: str, now: str, read: frozenset[str] | None = None) -> bool:
    """Whether the code a cell runs changed between commits `since` and `now`: a file under src/where223 that does
    more than present records, or, given `read` (the Python files the cell's process imported, as the cell recorded
    them: `where223.sweep.cell.code_read`), one of those or a file under src/where223 that is not Python (data a
    cell may read); True when git cannot say (an unknown commit)."""
    names = _changed(root, since, now)
    if names is None:
        return True
    if read is None:
        return any(not _presentation(name) for name in names)
    return any(name in read or not (name.endswith(".py") or _presentation(name)) for name in names)
