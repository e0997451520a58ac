"""What a cell records of the code it ran (`where223.sweep.cell.code_read`): where223's files its process imported,
its `python -m` children's, nothing else; and every child module a cell's code starts is listed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from where223.pipeline.paths import ROOT
from where223.sweep import cell


def _read_in_a_fresh_process(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport json\nfrom where223.sweep.cell import code_read\n"
                           "print(json.dumps(code_read()))"], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)


def test_a_cell_lists_the_modules_its_process_imported_and_its_children_s():
    bare = _read_in_a_fresh_process("")
    assert bare == sorted(bare) and all(name.startswith("src/where223/") and name.endswith(".py") for name in bare)
    assert {"src/where223/sweep/cell.py", "src/where223/graph/ort_child.py"} <= set(bare)
    assert all((ROOT / name).is_file() for name in bare)
    assert "src/where223/graph/lint.py" not in bare  # the control: a module it did not import is not listed
    linted = _read_in_a_fresh_process("import where223.graph.lint")
    assert "src/where223/graph/lint.py" in linted and set(bare) < set(linted)


def test_run_with_python_m_the_cell_lists_its_own_file():
    done = subprocess.run([sys.executable, "-c", "import runpy, sys, json\nsys.argv = ['x']\n"
                           "from where223.sweep.cell import code_read\n"
                           "sys.modules['__main__'].__file__ = sys.modules['where223.sweep.cell'].__file__\n"
                           "del sys.modules['where223.sweep.cell']\nprint(json.dumps(code_read()))"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    assert "src/where223/sweep/cell.py" in json.loads(done.stdout)  # as __main__, not as where223.sweep.cell


def test_every_child_module_where223_starts_is_listed():
    started = set()
    for path in (ROOT / "src" / "where223").rglob("*.py"):
        started |= set(re.findall(r'"-m", "(where223\.[\w.]+)"', path.read_text()))
    assert started - {"where223.sweep.cell"} <= set(cell.CHILD_MODULES)  # the cell itself runs as __main__
    assert started  # the control: the pattern finds the children it is there to find
    assert all(Path(cell._module_file(name, ROOT / "src" / "where223")).is_file() for name in cell.CHILD_MODULES)
