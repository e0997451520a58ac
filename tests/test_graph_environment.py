"""The graph tools' second environment: `.[graph]` (pyproject.toml) pinned by requirements-graph.lock, installed
by `make setup` into .venv-graph without the historic stack, where `make test` runs tests/graph again.

Checked here: the lock pins every requirement of the extra and of requirements-graph.in within its bounds, at
today's onnx (past the historic lock's); the `historic` extra names the historic lock's own pins; the
environment setup built holds the lock's onnx and onnxruntime, no torch, and runs `where223 lint`."""

from __future__ import annotations

import json
import subprocess

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from where223.pipeline.paths import ROOT

GRAPH_LOCK = ROOT / "requirements-graph.lock"
GRAPH_PYTHON = ROOT / ".venv-graph" / "bin" / "python"


def pins_of(text: str) -> dict[str, Version]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = Version(version.split(";")[0].strip())
    return pins


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def graph_requirements() -> list[Requirement]:
    listed = [line.split("#", 1)[0].strip() for line in (ROOT / "requirements-graph.in").read_text().splitlines()]
    return [Requirement(text) for text in [*extras()["graph"], *filter(None, listed)]]


def unpinned(requirements: list[Requirement], pins: dict[str, Version]) -> list[str]:
    """The requirements a lock leaves missing or out of bounds."""
    problems = []
    for requirement in requirements:
        pin = pins.get(canonicalize_name(requirement.name))
        if pin is None or not requirement.specifier.contains(pin, prereleases=True):
            problems.append(f"{requirement} (lock: {pin})")
    return problems


def test_the_graph_lock_pins_every_requirement_of_the_extra():
    pins = pins_of(GRAPH_LOCK.read_text())
    assert unpinned(graph_requirements(), pins) == []
    historic = pins_of((ROOT / "requirements.lock").read_text())
    assert pins["onnx"] > historic["onnx"] and pins["onnx"] >= Version("1.23")  # today's onnx, not the 2022 one
    assert "torch" not in pins and "transformers" not in pins and "onnxruntime-training-cpu" not in pins


def test_a_lock_missing_or_out_of_bounds_is_caught():
    """Control: a lock without onnxruntime, and one whose onnx is older than the extra allows, are both named."""
    pins = pins_of(GRAPH_LOCK.read_text())
    assert any(p.startswith("onnxruntime") for p in unpinned(graph_requirements(), {**pins, "onnxruntime": None}))
    old = {**pins, "onnx": Version("1.15.0")}
    assert any(p.startswith("onnx>=") for p in unpinned(graph_requirements(), old))


def test_the_historic_extra_is_the_historic_lock():
    pins = pins_of((ROOT / "requirements.lock").read_text())
    requirements = [Requirement(text) for text in extras()["historic"]]
    assert unpinned(requirements, pins) == []
    stated = (ROOT / "requirements.in").read_text()
    for requirement in requirements:  # the same pins as the lock's source names them
        assert str(requirement.specifier).lstrip("=<>") in stated or requirement.name == "numpy", requirement


@pytest.mark.skipif(not GRAPH_PYTHON.is_file(), reason="no .venv-graph: `make setup` builds it")
def test_the_graph_environment_is_today_s_onnx_without_torch(tmp_path):
    probe = (
        "import importlib.util, json, onnx, onnxruntime; "
        "print(json.dumps([onnx.__version__, onnxruntime.__version__, importlib.util.find_spec('torch') is None]))"
    )
    done = subprocess.run([str(GRAPH_PYTHON), "-c", probe], capture_output=True, text=True, check=True)
    onnx_version, ort_version, no_torch = json.loads(done.stdout)
    pins = pins_of(GRAPH_LOCK.read_text())
    assert (Version(onnx_version), Version(ort_version), no_torch) == (pins["onnx"], pins["onnxruntime"], True)
    import onnx

    from tests.graph import hostile

    path = tmp_path / "where.onnx"
    onnx.save(hostile.where_conflict(), str(path))
    lint = subprocess.run([str(GRAPH_PYTHON), "-m", "where223", "lint", str(path)], capture_output=True, text=True)
    assert lint.returncode == 1 and "Where_223" in lint.stdout, (lint.stdout, lint.stderr)
