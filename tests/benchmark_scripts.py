"""The benchmark scripts as modules, for their tests: benchmarks/ is no package, so each is loaded from its file."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from where223.pipeline.paths import ROOT


def load(script: str, name: str | None = None) -> ModuleType:
    """benchmarks/SCRIPT.py, executed as a module named `name` (default `SCRIPT_benchmark`) and registered under it,
    so that the dataclasses it defines find their module."""
    spec = importlib.util.spec_from_file_location(name or f"{script}_benchmark", ROOT / "benchmarks" / f"{script}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
