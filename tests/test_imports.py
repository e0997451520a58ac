"""Modules that only read records import no torch, checked by running them in a fresh interpreter.

A static scan of import statements misses an `import torch` inside a function (the report once reached torch
through `bench` that way), so each check runs the code, as a user would, and then reads `sys.modules`.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from where223.pipeline import schema
from where223.pipeline.paths import OUTPUTS, ROOT
from where223.study._roles import ROLES

HEAVY = ("torch", "transformers")
COMMITTED_MODEL = OUTPUTS / "tiny-cpu-bf16-onnx_export" / "model.onnx"
# Every question's package keeps the same roles in the same file names (where223.study's docstring); those that
# read records only are discovered, not listed, so a new question's package is checked the day it lands.
RECORD_ROLES = tuple(role for role in ROLES if role != "run")
# The record readers outside the question packages: the write-up, the comparison and the sweep's own readers.
OTHER_READERS = ("where223.study.report", "where223.pipeline.compare", "where223.sweep.record",
                 "where223.sweep.space", "where223.sweep.driver")


def study_packages() -> list[str]:
    import pkgutil

    import where223.study

    # a private package (`_cell`, every transformers cell's stages) is shared code below the questions, not one
    return [f"where223.study.{found.name}" for found in pkgutil.iter_modules(where223.study.__path__)
            if found.ispkg and not found.name.startswith("_")]


def record_readers() -> list[str]:
    """Each question package's record-reading roles that exist, then OTHER_READERS."""
    import importlib.util

    found = [f"{package}.{role}" for package in study_packages() for role in RECORD_ROLES
             if importlib.util.find_spec(f"{package}.{role}") is not None]
    return [*found, *OTHER_READERS]


RECORD_READERS = tuple(record_readers())


def test_every_question_package_has_the_same_roles():
    """The discovery above finds what is there: each package has every role (a missing `analysis` would shrink
    the check silently otherwise), and the four questions are found."""
    import importlib.util

    packages = study_packages()
    names = ("architectures", "classes", "conversions", "fix", "fx", "matrix", "remedies", "variants")
    assert packages == [f"where223.study.{name}" for name in names]

    def missing(roles: tuple[str, ...]) -> list[str]:
        return [f"{package}.{role}" for package in packages for role in roles
                if importlib.util.find_spec(f"{package}.{role}") is None]

    assert missing(ROLES) == []
    assert missing(("verdict",)) == [f"{package}.verdict" for package in packages]  # control: an absent role
    assert len(RECORD_READERS) == len(packages) * len(RECORD_ROLES) + len(OTHER_READERS)
# What every stack's interpreter imports before its runner: the standard library and these where223 modules only
# (a Dask worker and a cell in any stack, Python 3.10's too, run them).
STDLIB_ONLY = ("where223.sweep.worker", "where223.sweep.warm", "where223.sweep.cell", "where223.sweep.controls",
               "where223.outcomes", "where223.sweep.cell_types", "where223.pipeline.schema")
# The record types too (a cell writes its record in any stack), found as the validator finds them; the sweep's
# reader `where223.sweep.record` parses ONNX Runtime's messages (onnx): its types live in sweep.cell_types.
RECORD_TYPE_MODULES = tuple(name for name in schema.record_modules() if name != "where223.sweep.record")


def loaded_after(code: str, tmp_path: Path, path: Path | None = None) -> set[str]:
    """The modules a fresh interpreter holds once `code` has run (with `path` first on sys.path)."""
    listing = tmp_path / "modules.json"
    prelude = f"import sys; sys.path.insert(0, {str(path)!r})\n" if path else ""
    script = f"{prelude}{code}\nimport json, sys\nopen({str(listing)!r}, 'w').write(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return set(json.loads(listing.read_text()))


def assert_no_heavy_modules(code: str, tmp_path: Path, path: Path | None = None) -> None:
    """Run `code` in a fresh interpreter and fail if it left torch or transformers loaded."""
    heavy = sorted(name for name in loaded_after(code, tmp_path, path) if name.split(".")[0] in HEAVY)
    assert not heavy, f"{code!r} loaded {heavy[:5]}"


def first_heavy_import(modules: tuple[str, ...], tmp_path: Path, path: Path | None = None) -> list:
    """Import `modules` in turn in one fresh interpreter (with `path` first on sys.path); [module, heavy modules] for
    the first after whose import torch or transformers is loaded, else []. One interpreter for all: what a reader
    imports shows right after its own import, every module before it having imported nothing heavy."""
    found = tmp_path / "heavy.json"
    prelude = f"sys.path.insert(0, {str(path)!r})\n" if path else ""
    script = (f"import importlib, json, sys\n{prelude}result = []\nfor name in {list(modules)!r}:\n"
              f"    importlib.import_module(name)\n"
              f"    heavy = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)!r})\n"
              f"    if heavy:\n        result = [name, heavy[:5]]\n        break\n"
              f"open({str(found)!r}, 'w').write(json.dumps(result))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(found.read_text())


def test_record_readers_import_no_torch(tmp_path):
    assert first_heavy_import(RECORD_READERS, tmp_path) == []


def test_control_one_interpreter_names_the_reader_that_imports_torch(tmp_path):
    """The control: a reader that imports torch, between two that do not, is the one named."""
    (tmp_path / "heavy_reader.py").write_text("import torch\n")
    (tmp_path / "light_reader.py").write_text("import json\n")
    found = first_heavy_import(("light_reader", "heavy_reader", "where223.study.fix.analysis"), tmp_path, tmp_path)
    assert found[0] == "heavy_reader" and "torch" in found[1]


def test_report_command_runs_without_torch(tmp_path):
    """`where223 report` on a copy of the committed records (the models left out): written, torch never loaded."""
    outputs = tmp_path / "outputs"
    shutil.copytree(OUTPUTS, outputs, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.data", "*.html"))
    committed = (OUTPUTS / "REPORT.md").read_bytes()
    code = f"from where223.cli import main\nassert main(['report', '--output-root', {str(outputs)!r}]) == 0"
    assert_no_heavy_modules(code, tmp_path)
    assert (outputs / "REPORT.md").read_text().startswith("# where223")
    assert (OUTPUTS / "REPORT.md").read_bytes() == committed


def test_lint_command_runs_without_torch(tmp_path):
    code = f"from where223.cli import main\nassert main(['lint', {str(COMMITTED_MODEL)!r}]) == 1"
    assert_no_heavy_modules(code, tmp_path)


def test_the_check_catches_torch_imported_inside_a_function(tmp_path):
    """The control: a module whose only `import torch` sits in a function it calls passes a static scan of
    module-level imports and fails the check that runs it."""
    (tmp_path / "sneaky_reader.py").write_text(
        "def table():\n    import torch\n\n    return torch.__version__\n\n\nVERSION = table()\n"
    )
    tree = ast.parse((tmp_path / "sneaky_reader.py").read_text())
    module_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert module_level == []
    with pytest.raises(AssertionError, match="loaded"):
        assert_no_heavy_modules("import sneaky_reader", tmp_path, tmp_path)


_STARTUP: set[str] = set()


def _started(tmp_path: Path) -> set[str]:
    """What a fresh interpreter holds before any code runs (computed once per process)."""
    if not _STARTUP:
        _STARTUP.update(loaded_after("pass", tmp_path))
    return _STARTUP


def third_party(code: str, tmp_path: Path) -> list[str]:
    """Top-level modules `code` loads that are neither the standard library nor where223 (nor loaded by the
    interpreter's start-up, such as setuptools' .pth hook)."""
    start = _started(tmp_path)
    loaded = {name.split(".")[0] for name in loaded_after(code, tmp_path) - start}
    # sysconfig's build-time data (`_sysconfigdata_<abi>_<platform>`) is the standard library's, named per platform
    return sorted(name for name in loaded - set(sys.stdlib_module_names) - {"where223"}
                  if not name.startswith("_sysconfigdata_"))


@pytest.mark.parametrize("module", STDLIB_ONLY + RECORD_TYPE_MODULES)
def test_the_worker_modules_import_the_standard_library_only(module, tmp_path):
    assert third_party(f"import {module}", tmp_path) == []


def test_control_a_module_importing_a_third_party_package_is_caught(tmp_path):
    code = "from where223.sweep.space import load_space\nload_space('spaces/architectures.yaml')"
    assert "yaml" in third_party(code, tmp_path)
