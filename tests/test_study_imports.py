"""Inside where223.study, imports run one way too: no question's package imports another question's runner (the
stages every transformers cell shares live below them all, in `where223.study._cell`, which imports no question),
and no two modules import each other, directly or round a longer circle. Read from the source: every import
statement counted, those inside functions too (a deferred import is a circle all the same)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT

STUDY = ROOT / "src" / "where223" / "study"
PACKAGE = "where223.study"


def modules(root: Path = STUDY, package: str = PACKAGE) -> dict[str, Path]:
    """Every module under `root` (the package `package`) by its dotted name; a package by its own name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            name = ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
            found[name] = path
    return found


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def graph(root: Path = STUDY, package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules of `package` its import statements name (`from a import b` names `a.b` when that is a
    module, else `a`; relative imports resolved)."""
    known = modules(root, package)
    edges: dict[str, set[str]] = {}
    for module, path in known.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom):
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                source = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                for alias in node.names:
                    targets.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source)
            elif isinstance(node, ast.Import):
                for alias in node.names:  # `import a.b.c`: the innermost of them that is a module here
                    parts = alias.name.split(".")
                    named = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
                    targets.add(next((name for name in named if name in known), alias.name))
        edges[module] = {target for target in targets if target in known and target != module}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other round a circle (Tarjan's strongly connected components with more
    than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def question(module: str, package: str = PACKAGE) -> str | None:
    """The question package a module belongs to (`classes` for where223.study.classes.run); None for the study's own
    modules (report, judging) and its private packages (`_cell`)."""
    parts = module.removeprefix(package + ".").split(".")
    return parts[0] if len(parts) > 1 and not parts[0].startswith("_") else None


def runners(root: Path = STUDY, package: str = PACKAGE) -> set[str]:
    """A question's runners: its `run` module and any module that defines `run_cell` (the sweep's entry)."""
    found = set()
    for module, path in modules(root, package).items():
        entry = any(isinstance(node, ast.FunctionDef) and node.name == "run_cell" for node in parsed(path).body)
        if question(module, package) and (path.stem == "run" or entry):
            found.add(module)
    return found


def crossings(root: Path = STUDY, package: str = PACKAGE) -> list[str]:
    """Each import of another question's runner, and each import of a question from below them (a private package
    such as `_cell`)."""
    found, running = [], runners(root, package)
    for module, targets in sorted(graph(root, package).items()):
        mine = question(module, package)
        below = module.removeprefix(package + ".").startswith("_")
        for target in sorted(targets):
            theirs = question(target, package)
            if (target in running and theirs != mine) or (below and theirs is not None):
                found.append(f"{module} imports {target}")
    return found


def test_no_study_imports_another_studys_runner():
    assert crossings() == []


def test_no_import_circle_in_the_studies():
    assert circles(graph()) == []


def test_the_scan_reads_the_studies_as_they_are():
    """What the checks rest on is found: the runners the spaces name, and the stages they share."""
    found, edges = runners(), graph()
    assert {"where223.study.classes.run", "where223.study.classes.explain", "where223.study.remedies.run",
            "where223.study.architectures.run"} <= found  # fmt: skip
    assert "where223.study._cell.stages" in edges["where223.study.classes.run"]
    assert "where223.study.classes.run" in edges["where223.study.classes.explain"]  # a deferred import, seen


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "study" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [root / "study", *(root / "study").rglob("*")]:
        if folder.is_dir() and not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("")
    return root / "study"


HARMLESS = {
    "alpha/run.py": "def run_cell(key, stack, path):\n    return {}\n",
    "alpha/explain.py": "def run_cell(key, stack, path):\n    from .run import run_cell\n",  # its own runner
    "alpha/analysis.py": "from where223.study.judging import rule\n",
    "beta/analysis.py": "from where223.study.alpha import analysis\n",  # another's reader, not its runner
    "beta/run.py": "from where223.study._cell.stages import stage\n",  # the shared stages
    "_cell/stages.py": "from .numbers import spacing\n",
    "_cell/numbers.py": "from where223.study import judging\n",
    "judging.py": "RULE = 1\n",
}


def test_control_the_harmless_layout_passes(tmp_path):
    root = _write(tmp_path, HARMLESS)
    assert crossings(root) == [] and circles(graph(root)) == []
    assert runners(root) == {"where223.study.alpha.run", "where223.study.beta.run", "where223.study.alpha.explain"}


@pytest.mark.parametrize(("files", "expected"), [
    ({"beta/run.py": "def run():\n    from where223.study.alpha.run import run_cell\n"},
     ["where223.study.beta.run imports where223.study.alpha.run"]),
    ({"beta/run.py": "from where223.study.alpha import explain\n"},
     ["where223.study.beta.run imports where223.study.alpha.explain"]),
    ({"_cell/stages.py": "from ..alpha.analysis import rule\n"},
     ["where223.study._cell.stages imports where223.study.alpha.analysis"]),
], ids=["deferred, another study's runner", "a module that defines run_cell", "the shared stages importing a question"])
def test_control_a_crossing_is_caught(tmp_path, files, expected):
    assert crossings(_write(tmp_path, {**HARMLESS, **files})) == expected


@pytest.mark.parametrize(("files", "expected"), [
    ({"report.py": "class Report:\n    pass\n\ndef sections():\n    from where223.study.alpha import section\n",
      "alpha/section.py": "from where223.study.report import Report\n"},
     [["where223.study.alpha.section", "where223.study.report"]]),
    ({"alpha/analysis.py": "from . import emulated\n",
      "alpha/emulated.py": "def plan():\n    from .analysis import groups\n"},
     [["where223.study.alpha.analysis", "where223.study.alpha.emulated"]]),
    ({"_cell/numbers.py": "import where223.study._cell.stages\n"},
     [["where223.study._cell.numbers", "where223.study._cell.stages"]]),
], ids=["the write-up and a section", "relative, one side deferred", "plain import"])
def test_control_a_circle_is_caught(tmp_path, files, expected):
    assert circles(graph(_write(tmp_path, {**HARMLESS, **files}))) == expected
