"""Version-matrix driver: transformers x torch x exporter for the tiny GPT-2 under CPU bf16 autocast.

Each torch version gets its own virtual environment under `.cache/matrix/envs/torch-X`; each
transformers version is a `pip install --no-deps --target` side folder put first on PYTHONPATH.
Every cell runs `where223.study.matrix_cell` in a subprocess with a timeout and leaves one JSON
record under `outputs/matrix/cells/`; `outputs/matrix/matrix.json` aggregates them. Cells already
recorded are skipped unless `force`, so an interrupted run resumes where it stopped. `where223 matrix` runs it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from where223 import files
from where223.graph.ort import OrtVerdict
from where223.pipeline import environment, paths, publish, records
from where223.pipeline import installer as installers
from where223.pipeline.worker import run_worker
from where223.study.matrix_analysis import cell_label, update_notes, version_key
from where223.study.matrix_cell import CellState

TRANSFORMERS_VERSIONS: tuple[str, ...] = (
    "4.22.0",
    "4.23.1",
    "4.24.0",
    "4.25.1",
    "4.26.0",
    "4.27.4",  # newest 4.27.x on PyPI
    "4.28.1",  # newest 4.28.x
    "4.29.2",  # newest 4.29.x
    "4.30.2",  # newest 4.30.x
)
# 2.14.1 is the newest release the machine's pip cap (/etc/xdg/pip/constraints.txt: torch<=2.14.1) allows.
# 1.12.1 is the last torch whose exporter numbers nodes (`Where_144`) as the seed's message does (`Where_223`).
TORCH_VERSIONS: tuple[str, ...] = ("1.12.1", "1.13.1", "2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.14.1")
EXPORTERS: tuple[str, ...] = ("torchscript", "dynamo")
# The machine's interpreter of a torch version's environment, where it is not the one running the driver:
# torch 1.12.1 has no wheel for Python 3.11. Found on PATH or among pyenv's versions, never downloaded.
PYTHON_FOR_TORCH: dict[str, str] = {"1.12.1": "python3.10"}
# A cell's outcome: ONNX Runtime's verdict, or why it gave none.
OUTCOMES: tuple[str, ...] = (*OrtVerdict, *CellState)
# Outcomes that count as done: a resumed run skips them. `not_run` cells are retried.
FINAL_OUTCOMES: frozenset[str] = frozenset(OUTCOMES) - {CellState.NOT_RUN}

MATRIX_CACHE: Path = paths.CACHE / "matrix"
ENVS: Path = MATRIX_CACHE / "envs"
SIDE: Path = MATRIX_CACHE / "transformers"
ONNX_DIR: Path = MATRIX_CACHE / "onnx"
PIP_CACHE: Path = MATRIX_CACHE / "pip-cache"  # with WHERE223_INSTALLER=pip; uv uses .cache/uv
MATRIX_OUT: Path = paths.OUTPUTS / "matrix"
ENV_READY = "where223-env.json"

# What transformers 4.22-4.30 checks at import (dependency_versions_check), at versions all of them accept.
# tokenizers is left out on purpose: the check skips it when absent, 4.22 wants <0.13 and 4.30 <0.14,
# and no tokenizers below 0.13 has a Python 3.11 wheel; the tiny model never tokenizes.
TRANSFORMERS_DEPS: tuple[str, ...] = (
    "huggingface_hub==0.16.4",
    "safetensors==0.4.5",
    "regex",
    "requests",
    "packaging",
    "filelock",
    "pyyaml",
    "tqdm",
)
# The project's own stack (requirements.in): onnx 1.16.2, ORT training CPU 1.19.2, numpy<2.
PROJECT_ONNX: tuple[str, ...] = (
    "onnx==1.16.2",
    "protobuf==7.36.2",
    "onnxruntime-training-cpu==1.19.2",
    "numpy<2",
)
# onnxscript for torch.onnx.dynamo_export (2.1-2.4): the nightly closest to that torch's release date.
ONNXSCRIPT_FOR: dict[str, str] = {
    "2.1.2": "onnxscript==0.1.0.dev20231213",
    "2.2.2": "onnxscript==0.1.0.dev20240327",
    "2.3.1": "onnxscript==0.1.0.dev20240605",
    "2.4.1": "onnxscript==0.1.0.dev20240904",
}
# onnxscript 0.7 (what the newest torch's dynamo exporter needs) requires onnx>=1.17, so the newest torch gets
# the newest onnx and onnxscript; onnxruntime stays the project's ORT training CPU 1.19.2 in every environment.
NEWEST_STACK: tuple[str, ...] = ("onnx", "onnxscript", "onnxruntime-training-cpu==1.19.2")


def env_packages(torch_version: str) -> list[str]:
    """The pip requirements of one torch version's environment."""
    if torch_version == TORCH_VERSIONS[-1]:
        onnx_stack: Sequence[str] = NEWEST_STACK
    else:
        onnx_stack = [
            *PROJECT_ONNX,
            *([ONNXSCRIPT_FOR[torch_version]] if torch_version in ONNXSCRIPT_FOR else []),
        ]
    return [f"torch=={torch_version}", *onnx_stack, *TRANSFORMERS_DEPS]


@dataclass(frozen=True)
class EnvResult:
    """A built environment (its python, or a side folder), or why it could not be built."""

    path: Path | None
    reason: str | None = None
    # False when the failure may pass on a retry (e.g. a network error): its cells become not_run.
    permanent: bool = True


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# pip's words, then uv's, for versions that cannot be installed together (not a network error).
INCOMPATIBLE = (
    "No matching distribution",
    "ResolutionImpossible",
    "Could not find a version",
    "we can conclude that",
)


def _pip_reason(log: str) -> tuple[str, bool]:
    """A short why from a failed pip log, and whether it says the versions cannot be installed together."""
    for line in log.splitlines():
        if any(marker in line for marker in INCOMPATIBLE):
            return line.strip(), True
    return _tail(log, 6), False


def _run_logged(cmd: Sequence[str], log: Path, env: dict[str, str] | None = None) -> int:
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(cmd)}\n")
        handle.flush()
        return subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False).returncode


def base_python(torch_version: str) -> Path | None:
    """The machine's interpreter for one torch version's environment (PYTHON_FOR_TORCH, else this one), or None.

    A name is looked up on PATH, then among pyenv's installed versions; the first candidate that runs wins
    (a pyenv shim of a version that is not selected does not run).
    """
    name = PYTHON_FOR_TORCH.get(torch_version)
    if name is None:
        return Path(sys.executable)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [found for found in [shutil.which(name)] if found] + sorted(
        str(p) for p in pyenv_root.glob(f"versions/*/bin/{name}")
    )
    for candidate in candidates:
        probe = [candidate, "-c", "import sys; sys.stdout.write(sys.executable)"]
        result = subprocess.run(probe, capture_output=True, text=True, check=False)
        if result.returncode == 0 and result.stdout.strip():
            return Path(result.stdout.strip())
    return None


def ensure_env(torch_version: str, envs: Path = ENVS) -> EnvResult:
    """Create (once) the venv of one torch version under `envs`; its marker file records what was installed.

    The installer is `where223.pipeline.installer.choose()`: uv by default, from the interpreter running this
    (never a downloaded one), with pip's configuration passed explicitly (the machine's torch cap among it),
    every file a hard link into the one uv cache; pip with WHERE223_INSTALLER=pip or without uv.
    """
    root = envs / f"torch-{torch_version}"
    python = root / "bin" / "python"
    marker = root / ENV_READY
    if marker.is_file():
        info = json.loads(marker.read_text())
        return EnvResult(python if info.get("ok") else None, info.get("reason"))
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    log = envs.parent / "logs" / f"env-torch-{torch_version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    interpreter = base_python(torch_version)
    if interpreter is None:
        reason = f"torch {torch_version} needs {PYTHON_FOR_TORCH[torch_version]}, which this machine does not have"
        return EnvResult(None, reason)
    installer = installers.choose()
    install_env = installer.environment({"PIP_CACHE_DIR": str(PIP_CACHE)})
    rc = _run_logged(installer.create(interpreter, root), log, install_env)
    packages = env_packages(torch_version)
    if rc == 0:
        rc = _run_logged(installer.install(python, "-q", *packages), log, install_env)
    if rc != 0:
        why, permanent = _pip_reason(log.read_text())
        reason = f"{installer.command_name} {' '.join(packages)} failed: {why}"
        if permanent:  # remembered: the next run does not retry an impossible install
            records.write_json(marker, {"ok": False, "reason": reason, "requested": packages, "freeze": []})
        return EnvResult(None, reason, permanent)
    frozen = subprocess.run(installer.freeze(python), capture_output=True, text=True, env=install_env, check=False)
    records.write_json(
        marker,
        {
            "ok": True,
            "reason": None,
            "installer": installer.name,
            "requested": packages,
            "freeze": frozen.stdout.splitlines(),
        },
    )
    return EnvResult(python)


def ensure_transformers(version: str) -> EnvResult:
    """Install transformers `version` (no dependencies) into its own side folder, once (same installer)."""
    target = SIDE / f"transformers-{version}"
    if (target / "transformers").is_dir():
        return EnvResult(target)
    log = MATRIX_CACHE / "logs" / f"transformers-{version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    installer = installers.choose()
    cmd = installer.install(sys.executable, "-q", "--no-deps", "--target", str(tmp))
    rc = _run_logged([*cmd, f"transformers=={version}"], log, installer.environment({"PIP_CACHE_DIR": str(PIP_CACHE)}))
    if rc != 0:
        why, permanent = _pip_reason(log.read_text())
        return EnvResult(None, f"{installer.command_name} transformers=={version} failed: {why}", permanent)
    tmp.rename(target)
    return EnvResult(target)


def cell_name(torch_version: str, transformers_version: str, exporter: str) -> str:
    """The file stem of one cell: `<torch>-<transformers>-<exporter>`."""
    return f"{torch_version}-{transformers_version}-{exporter}"


def cell_path(name: str, out_dir: Path = MATRIX_OUT) -> Path:
    """Where one cell's JSON record lives."""
    return out_dir / "cells" / f"{name}.json"


def _write(cell: Path, record: dict[str, Any]) -> Path:
    """Write a cell's record into the tree the matrix folder lies in (`<tree>/<matrix>/cells/<cell>.json`, see
    `cell_path`), under that tree's lock."""
    return publish.write_record(cell, record, cell.parent.parent.parent)


def is_done(path: Path) -> bool:
    """True when the cell has a final outcome recorded (a resumed run skips it)."""
    if not path.is_file():
        return False
    try:
        return records.read_json(path).get("outcome") in FINAL_OUTCOMES
    except (OSError, ValueError):
        return False


def _cell_base(torch_version: str, transformers_version: str, exporter: str) -> dict[str, Any]:
    return {
        "cell": cell_name(torch_version, transformers_version, exporter),
        "torch_requested": torch_version,
        "transformers_requested": transformers_version,
        "exporter": exporter,
    }


def placeholder(
    torch_version: str, transformers_version: str, exporter: str, outcome: str, reason: str
) -> dict[str, Any]:
    """A record written by the driver for a cell it could not or did not run."""
    return {
        **_cell_base(torch_version, transformers_version, exporter),
        "outcome": outcome,
        "reason": reason,
        "recorded_by": "driver",
        "recorded_at": _now(),
    }


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def run_cell(
    python: Path,
    side: Path,
    torch_version: str,
    transformers_version: str,
    exporter: str,
    out: Path,
    timeout_s: float,
    work_root: Path = ONNX_DIR,
) -> dict[str, Any]:
    """Run one cell in a subprocess; a crash or a timeout becomes an `other_error` record.

    `out` changes only when the cell's record is complete: an interrupted cell leaves the previous record as it was.
    """
    name = cell_name(torch_version, transformers_version, exporter)
    work = work_root / name  # also the cwd: the dynamo exporters drop reports there
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    onnx_path = work / "model.onnx"
    written = work / "cell.json"  # the cell's own record; `out` is replaced only once the record is complete
    env = {
        **os.environ,
        "PYTHONPATH": f"{side}{os.pathsep}{paths.ROOT / 'src'}",
        "WHERE223_ROOT": str(paths.ROOT),
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [
        str(python), "-m", "where223.study.matrix_cell",
        "--torch", torch_version, "--transformers", transformers_version,
        "--exporter", exporter, "--onnx", str(onnx_path), "--out", str(written),
    ]  # fmt: skip
    result = run_worker(cmd, written, timeout_s, env=env, cwd=work)
    if result.timed_out:
        record = placeholder(torch_version, transformers_version, exporter, OrtVerdict.OTHER_ERROR, "timeout")
        record["error"] = {**(result.error or {}), "message": f"cell did not finish within {timeout_s:.0f} s"}
        _write(out, record)
        return record
    if result.record is not None:
        record = result.record
    else:
        record = placeholder(torch_version, transformers_version, exporter, OrtVerdict.OTHER_ERROR, "cell process died")
        record["error"] = result.error
    record["wall_s"] = result.wall_s
    _write(out, record)
    return record


def load_cells(out_dir: Path = MATRIX_OUT) -> list[dict[str, Any]]:
    """Every cell record under `out_dir/cells`, sorted by name."""
    return [records.read_json(p) for p in sorted((out_dir / "cells").glob("*.json"))]


def aggregate(out_dir: Path = MATRIX_OUT) -> dict[str, Any]:
    """Build and write `matrix.json` from the cell records (axes, counts, per-env versions, cells); refresh the
    figures of `NOTES.md` beside it (`matrix_analysis.update_notes`)."""
    cells = load_cells(out_dir)
    envs: dict[str, dict[str, Any]] = {}
    for cell in cells:
        versions = cell.get("versions")
        if versions:
            envs.setdefault(cell["torch_requested"], {k: v for k, v in versions.items() if k != "transformers"})
    torch_axis = sorted({c["torch_requested"] for c in cells}, key=version_key)
    tf_axis = sorted({c["transformers_requested"] for c in cells}, key=version_key)
    exporters = [e for e in EXPORTERS if any(c["exporter"] == e for c in cells)]
    matrix = {
        "description": (
            "Tiny GPT-2 (random weights) exported to ONNX under torch.autocast('cpu', torch.bfloat16), "
            "then loaded and run with onnxruntime's CPU provider"
        ),
        "axes": {"torch": torch_axis, "transformers": tf_axis, "exporter": exporters},
        "counts": dict(Counter(c["outcome"] for c in cells)),
        "driver_environment": environment.describe(),
        "cell_environments": envs,
        "updated_at": _now(),
        "cells": cells,
    }
    publish.write_record(out_dir / "matrix.json", matrix, out_dir.parent)
    notes = out_dir / "NOTES.md"
    with publish.outputs_lock(out_dir.parent, wait=True):
        if notes.is_file():  # its figures follow the cells
            files.write_atomic(notes, update_notes(notes.read_text(), matrix))
    return matrix


def _planned(
    torch_versions: Iterable[str], transformers_versions: Iterable[str], exporters: Iterable[str]
) -> list[tuple[str, str, str]]:
    return [(t, tf, e) for t in torch_versions for tf in transformers_versions for e in exporters]


def build(
    torch_versions: Sequence[str],
    transformers_versions: Sequence[str],
    exporters: Sequence[str],
    *,
    out_dir: Path = MATRIX_OUT,
    force: bool = False,
    timeout_s: float = 600.0,
    deadline: dt.datetime | None = None,
    drop_envs: bool = False,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run every missing cell (all with `force`), torch version by torch version, then aggregate; `progress`
    is told one line per environment and per cell."""
    plan = _planned(torch_versions, transformers_versions, exporters)
    counts: Counter[str] = Counter()
    done = 0
    for torch_version in torch_versions:
        todo = [c for c in plan if c[0] == torch_version and (force or not is_done(cell_path(cell_name(*c), out_dir)))]
        skipped = sum(1 for c in plan if c[0] == torch_version) - len(todo)
        done += skipped
        if skipped:
            progress(f"torch {torch_version}: {skipped} cells already recorded, skipped")
        if not todo:
            continue
        if deadline and dt.datetime.now(dt.timezone.utc) >= deadline:
            for cell in todo:
                reason = f"not run: the matrix deadline {deadline.isoformat()} was reached before this cell"
                _write(cell_path(cell_name(*cell), out_dir), placeholder(*cell, CellState.NOT_RUN, reason))
                counts[CellState.NOT_RUN] += 1
                done += 1
            continue
        progress(f"torch {torch_version}: building environment (once) ...")
        env = ensure_env(torch_version)
        for cell in todo:
            path = cell_path(cell_name(*cell), out_dir)
            if env.path is None:
                outcome = CellState.NOT_APPLICABLE if env.permanent else CellState.NOT_RUN
                record = placeholder(*cell, outcome, env.reason or "environment build failed")
                _write(path, record)
            elif deadline and dt.datetime.now(dt.timezone.utc) >= deadline:
                reason = f"not run: the matrix deadline {deadline.isoformat()} was reached before this cell"
                record = placeholder(*cell, CellState.NOT_RUN, reason)
                _write(path, record)
            else:
                side = ensure_transformers(cell[1])
                if side.path is None:
                    outcome = CellState.NOT_APPLICABLE if side.permanent else CellState.NOT_RUN
                    record = placeholder(*cell, outcome, side.reason or "transformers install failed")
                    _write(path, record)
                else:
                    record = run_cell(env.path, side.path, *cell, path, timeout_s)
            counts[record["outcome"]] += 1
            done += 1
            summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            label = cell_label(record, width=70).replace("\n", " ")
            progress(f"[{done}/{len(plan)}] {record['cell']}: {label}  ({summary})")
            aggregate(out_dir)
        if drop_envs and env.path is not None:
            shutil.rmtree(ENVS / f"torch-{torch_version}", ignore_errors=True)
    return aggregate(out_dir)

