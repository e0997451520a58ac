"""Processes as the tests watch them."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process `pid` runs: not gone, and not a zombie waiting for its parent to read its exit."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
