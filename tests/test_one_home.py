"""One home per concept: each of these is defined in one module, and a second definition anywhere else in the
package fails here (each check has a control: the way the second copies were once written is caught)."""

from __future__ import annotations

import re

import pytest

from where223.pipeline.paths import ROOT

PACKAGE = ROOT / "src" / "where223"

# concept -> (its one home, a pattern that a second definition would match)
HOMES: dict[str, tuple[str, re.Pattern[str]]] = {
    "a Markdown table": ("markdown.py", re.compile(r"""["']\|---|["']\|" \+ "---\|"|"\|---" \*""")),
    "a path normaliser": ("pipeline/portable.py", re.compile(
        r"^def _?(portable\w*|relative_paths?|\w*_portable\w*)\(|_SITE_PACKAGES\s*=|_KERNEL_CELL\s*=|_SIDE_FOLDER\s*=",
        re.M)),
    "a verdict word": ("verdicts.py", re.compile(
        r"""^\s*(PASS|FAIL|INFO|NOT_MEASURED)\s*(,\s*\w+\s*)*=\s*["']""", re.M)),
    "a run name": ("gpt2/runs.py", re.compile(r"^def run_name\(", re.M)),
    "the outcome colours": ("figures.py", re.compile(r"^\s*\w*OUTCOME_COLOU?RS?\w*\s*[:=]", re.M)),
}
CONTROLS: dict[str, list[str]] = {
    "a Markdown table": ['"|---|---|"', '"|" + "---|" * len(header)', '"|---" * (len(axis) + 1) + "|"'],
    "a path normaliser": ["def portable(path: str) -> str:", "def portable_text(text):", "def _portable(file):",
                          "def _relative_paths(text):", "def _portable_source(source):", "def portable_stack(t):",
                          '_SITE_PACKAGES = re.compile(r"x")'],
    "a verdict word": ['PASS, FAIL = "pass", "fail"', 'NOT_MEASURED = "not measured"'],
    "a run name": ["def run_name(*parts: object) -> str:"],
    "the outcome colours": ["OUTCOME_COLOURS = {}", "    MATRIX_OUTCOME_COLORS: dict = {}"],
}


@pytest.mark.parametrize("concept", list(HOMES))
def test_each_concept_has_one_home(concept):
    home, pattern = HOMES[concept]
    modules = sorted(PACKAGE.rglob("*.py"))
    elsewhere = [p.relative_to(PACKAGE).as_posix() for p in modules
                 if p.relative_to(PACKAGE).as_posix() != home and pattern.search(p.read_text())]
    assert elsewhere == [], f"{concept} outside {home}"
    assert pattern.search((PACKAGE / home).read_text()), f"{home} no longer defines {concept}: the check checks nothing"
    for written in CONTROLS[concept]:
        assert pattern.search(written), written
