"""Imports run one way: cli -> study -> sweep, gpt2, eager, fixes -> graph, pipeline (and the standalone modules at the
package's top: errors, files, enums, outcomes, verdicts, markdown, figures, cuda_autocast). Read from the source, every
import statement counted, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT

PACKAGE = ROOT / "src" / "where223"
# layer -> the layers it must never import
FORBIDDEN: dict[str, set[str]] = {
    "graph": {"cli", "study", "sweep", "gpt2", "eager", "fixes", "pipeline"},
    "pipeline": {"cli", "study", "sweep", "gpt2", "eager", "fixes", "graph"},
    "eager": {"cli", "study", "sweep", "gpt2", "fixes"},
    "fixes": {"cli", "study", "sweep", "gpt2", "eager", "pipeline"},
    "gpt2": {"cli", "study", "sweep", "fixes"},
    "sweep": {"cli", "study", "gpt2", "eager", "fixes"},
    "study": {"cli"},
    "cli": set(),
    "top": {"cli", "study", "sweep", "gpt2", "eager", "fixes", "graph", "pipeline"},
}


def layer(module: str, root: Path = PACKAGE) -> str:
    """`where223.graph.lint` -> graph; a module at the package's top (`where223.errors`) -> top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (root / parts[1]).is_dir()) else "top"


def imported(source: str, module: str) -> set[str]:
    """The where223 modules an import statement of `source` names (`from where223 import x` as where223.x)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = module.rsplit(".", node.level)[0]
            found.add(f"{base}.{node.module}" if node.module else base)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "where223":
            names = [f"{node.module}.{alias.name}" for alias in node.names] if node.module == "where223" else []
            found.update(names or [node.module])
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "where223")
    return found


def violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts or path.name == "__main__.py":  # the entry point calls the cli
            continue
        module = ".".join(("where223", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for target in sorted(imported(path.read_text(), module)):
            if layer(target, root) in FORBIDDEN[layer(module, root)]:
                found.append(f"{module} imports {target}")
    return found


def test_imports_run_one_way():
    assert violations() == []


@pytest.mark.parametrize(("where", "source", "expected"), [
    ("sweep/cell.py", "def run():\n    from where223.study.matrix import run\n",
     "where223.sweep.cell imports where223.study.matrix"),
    ("graph/lint.py", "import where223.gpt2.export\n", "where223.graph.lint imports where223.gpt2.export"),
    ("eager/x.py", "from where223 import gpt2\n", "where223.eager.x imports where223.gpt2"),
    ("errors.py", "from .graph import lint\n", "where223.errors imports where223.graph"),
    ("fixes/x.py", "from where223.sweep import exporters\n", "where223.fixes.x imports where223.sweep"),
], ids=["inside a function", "plain import", "from the package", "relative", "a fix naming the engine"])
def test_control_a_backward_import_is_caught(tmp_path, where, source, expected):
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    for folder in ("sweep", "graph", "eager", "fixes", "study", "gpt2", "pipeline", "cli"):  # the layers as folders
        (tmp_path / folder).mkdir(exist_ok=True)
    assert violations(tmp_path) == [expected]
