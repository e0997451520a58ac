"""graph/ stays light: onnx, numpy, protobuf (onnx's own) and the standard library; drawing libraries
only in draw.py; onnxruntime and netron only inside the functions that need them; never torch."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import where223.graph

PACKAGE = Path(where223.graph.__file__).parent
LIGHT = {"onnx", "numpy", "google", "where223"}
ALLOWED = {"draw.py": LIGHT | {"networkx", "matplotlib"}}
LAZY = {"ort.py": {"onnxruntime"}, "netron_view.py": {"netron"}}


def _imports(tree: ast.AST) -> list[tuple[str, bool]]:
    """(top-level package, imported at module level) for every import statement."""
    module_level = {id(node) for node in ast.iter_child_nodes(tree)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], id(node) in module_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module.split(".")[0], id(node) in module_level))
    return found


def test_graph_imports_only_light_modules():
    files = sorted(PACKAGE.glob("*.py"))
    assert {f.name for f in files} >= {
        "dtypes.py",
        "emulate.py",
        "schema.py",
        "types.py",
        "lint.py",
        "ort.py",
        "blame.py",
        "repair.py",
        "draw.py",
        "netron_view.py",
    }
    for path in files:
        for package, top in _imports(ast.parse(path.read_text())):
            if package in sys.stdlib_module_names:
                continue
            allowed = (
                ALLOWED.get(path.name, LIGHT)
                if top
                else ALLOWED.get(path.name, LIGHT) | LAZY.get(path.name, set())
            )
            assert package in allowed, (
                f"{path.name} imports {package} ({'module level' if top else 'lazily'})"
            )
