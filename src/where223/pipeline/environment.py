"""The versions and device recorded beside every result, and the run a measurement came from (standard library
only).

`describe` is the environment a record carries; `this_run` is the provenance a benchmark's record carries in each
of its parts (`run`): the commit checked out, the machine, when the run started. A benchmark takes it once, at
its start, and puts that same one into every part the run measures; a part it keeps from an earlier run keeps its
own. `machine` names a machine from an environment as `describe` writes it, so a record's environments can be held
against its runs (tests/benchmark_records.py does, for every record under outputs/benchmarks/).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PACKAGES = (
    "torch",
    "transformers",
    "onnx",
    "onnxruntime-training-cpu",
    "onnxruntime-training",
    "onnxruntime",
    "optimum",
    "numpy",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions (None where a distribution is absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_name(device: str = "cpu") -> str:
    """A human name for the device a result was measured on."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return _cpu_model() or platform.processor() or platform.machine()


def _cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), if readable."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def describe(device: str = "cpu") -> dict[str, Any]:
    """The environment record: python, packages, platform, device."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "device": device,
        "device_name": device_name(device),
    }


MACHINE_KEYS = ("device_name", "cpu_count", "platform")  # what names a machine in an environment record
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REF = re.compile(r"refs/[A-Za-z0-9._/-]+")


def machine(described: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The machine an environment record describes (default: this one): its device's name, its cores, its platform
    (the kernel's build too, so two virtual machines of one CPU model are two machines)."""
    if described is None:
        described = {**describe(), "cpu_count": os.cpu_count()}
    return {key: described.get(key) for key in MACHINE_KEYS}


def checked_out_commit(root: Path | None = None) -> str | None:
    """The commit checked out in the git repository at `root` (default: this one), read from its `.git` without
    running git; None where that cannot be told (no repository, an unusual layout)."""
    if root is None:
        from where223.pipeline import paths

        root = paths.ROOT
    git = Path(root) / ".git"
    try:
        if git.is_file():  # a worktree's or a submodule's: `gitdir: <folder>`
            pointed = git.read_text().strip()
            if not pointed.startswith("gitdir:"):
                return None
            git = (Path(root) / pointed.partition(":")[2].strip()).resolve()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head if _SHA.fullmatch(head) else None
        ref = head.partition(":")[2].strip()
        if not _REF.fullmatch(ref) or ".." in ref:
            return None
        for folder in (git, common):
            if (folder / ref).is_file():
                value = (folder / ref).read_text().strip()
                return value if _SHA.fullmatch(value) else None
        for line in (common / "packed-refs").read_text().splitlines():
            value, _, name = line.partition(" ")
            if name == ref:
                return value if _SHA.fullmatch(value) else None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def this_run(root: Path | None = None) -> dict[str, Any]:
    """The run now starting, as a record's parts carry it (`where223.pipeline.record.Run`): the commit checked out
    (the code measured is that commit with whatever the working tree changed: a record is committed after the run
    that wrote it), the machine, and when it started (UTC, to the second)."""
    return {
        "commit": checked_out_commit(root),
        "machine": machine(),
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
