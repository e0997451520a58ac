"""graph/ stays light: onnx, numpy, protobuf (onnx's own) and the standard library; drawing libraries
only in draw.py; onnx-ir only in repair/ (its surgery); onnxruntime and netron only inside the functions that
need them; never torch."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import where223.graph

PACKAGE = Path(where223.graph.__file__).parent
LIGHT = {"onnx", "numpy", "google", "where223"}
ALLOWED = {"draw.py": LIGHT | {"networkx", "matplotlib"}, **{
    f"repair/{name}": LIGHT | {"onnx_ir"} for name in ("_edit.py", "_cast_target.py", "_repair.py")}, **{
    f"convert/{name}": LIGHT | {"onnx_ir"} for name in ("_initializers.py", "_retype.py", "_search.py")}}
LAZY = {"ort.py": {"onnxruntime"}, "netron_view.py": {"netron"}, "convert/_listing.py": {"onnxruntime"},
        "schema.py": {"onnxruntime"}}  # schema.py: the schemas and kernels the installed onnxruntime lists


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
    files = sorted(PACKAGE.rglob("*.py"))
    assert {f.relative_to(PACKAGE).as_posix() for f in files} >= {
        "dtypes.py",
        "emulate.py",
        "schema.py",
        "types.py",
        "lint.py",
        "ort.py",
        "blame.py",
        "repair/__init__.py",
        "draw.py",
        "netron_view.py",
    }
    for path in files:
        name = path.relative_to(PACKAGE).as_posix()
        for package, top in _imports(ast.parse(path.read_text())):
            if package in sys.stdlib_module_names:
                continue
            allowed = ALLOWED.get(name, LIGHT) if top else ALLOWED.get(name, LIGHT) | LAZY.get(name, set())
            assert package in allowed, f"{name} imports {package} ({'module level' if top else 'lazily'})"
