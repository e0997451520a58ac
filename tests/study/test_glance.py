"""The write-up answers first: "At a glance", one line per question, each number in it read from a record (issue 40).

Each section offers its line (`glance`), writing every number through `Glance.quote`, which says where the number is
read (record, field, reduction). Here each of those sources is read again from the records with a reader of this
test's own, and every number of the written lines (outputs/REPORT.md; `test_report` keeps it fresh) must be one a
source gives, each source's number in its line: an edited number, a number no source gives, or a source that
reads another value, each fails (the controls).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.test_quoted_numbers import numbers
from where223 import markdown
from where223.pipeline import yamlfile
from where223.pipeline.paths import OUTPUTS
from where223.pipeline.run import DEFAULT_PLAN, PLAN_SCHEMA, PlannedRun
from where223.study import report
from where223.study._glance import Glance

_PART = re.compile(r"\[[^\]]+\]|(?:\\\.|[^.\[\]])+")


def _matches(value: Any, wanted: str) -> bool:
    return str(value) == wanted or json.dumps(value) == wanted


def read(data: Any, field: str) -> list[Any]:
    """The values `field` names in `data`, as `Glance.quote` describes fields: `a.b`, `\\.` a dot inside a key,
    `[0]`, `*` or a pattern for every matching key or item, `[key=value]` or `[a.b=value]` for the items that hold
    that value there (items without the key are left out)."""
    values = [data]
    for part in _PART.findall(field):
        if part.startswith("[") and "=" in part:
            key, _, wanted = part[1:-1].partition("=")
            values = [item for value in values for item in (value if isinstance(value, list) else [value])
                      if (found := read(item, key)) and _matches(found[0], wanted)]
        elif part.startswith("["):
            values = [value[int(part[1:-1])] for value in values]
        elif "*" in part or "?" in part:
            values = [item for value in values for key, item in
                      (value.items() if isinstance(value, dict) else enumerate(value))
                      if part == "*" or fnmatch.fnmatchcase(str(key), part)]
        else:
            key = part.replace("\\.", ".")
            values = [value[key] for value in values if isinstance(value, dict) and key in value]
    return values


REDUCE = {"sum": sum, "len": len, "max": max, "min": min}


@functools.lru_cache(maxsize=32)
def _record(path: Path) -> Any:
    return json.loads(path.read_text())


def sourced(source: dict[str, Any], outputs: Path = OUTPUTS) -> str:
    """The number a source says, read again from its records."""
    records = source["record"] if isinstance(source["record"], list) else [source["record"]]
    values = [value for record in records for value in read(_record(outputs / record), source["field"])]
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    if "equal" in source:
        value = sum(1 for item in values if item == source["equal"] and type(item) is type(source["equal"]))
    elif "reduce" in source:
        value = REDUCE[source["reduce"]](values)
    else:
        (value,) = values
    return format(value, source.get("format", ""))


def problems(lines: dict[str, str], glances: list[Glance], outputs: Path = OUTPUTS) -> list[str]:
    """What is wrong with the written glance `lines` (by question) against the sections' sources."""
    found = []
    for glance in glances:
        line = lines.get(glance.question)
        if line is None:
            found.append(f"{glance.question}: no line")
            continue
        said = [number for _, _, number in numbers(line)]
        read_again = [sourced(source, outputs) for source in glance.sources]
        found += [f"{glance.question}: {number} is read from no record" for number in said if number not in read_again]
        found += [f"{glance.question}: {source['field']} of {source['record']} reads {value}, not in the line"
                  for source, value in zip(glance.sources, read_again, strict=True) if value not in said]
    return found


@pytest.fixture(scope="module")
def written() -> tuple[str, dict[str, str], list[Glance]]:
    """outputs/REPORT.md, its glance lines by question, and the sections' glances built from the records."""
    text = (OUTPUTS / "REPORT.md").read_text()
    block = text.split("## At a glance\n", 1)[1].split("\n## ", 1)[0]
    lines = {match[1]: line for line in block.splitlines() if (match := re.match(r"- \*\*\[([^\]]+)\]", line))}
    plan = yamlfile.read(DEFAULT_PLAN, PLAN_SCHEMA)["runs"]  # as load_plan reads it, less papermill's checks
    runs = [PlannedRun(entry["notebook"], entry.get("parameters", {})) for entry in plan]
    return text, lines, report.glances(report.Report(OUTPUTS, runs))


def test_every_number_at_a_glance_is_read_from_a_record(written):
    text, lines, glances = written
    assert text.index("## At a glance") < text.index("## 1. ")  # the answers first
    assert [glance.section for glance in glances] == list(range(1, 11))  # one line per question
    assert problems(lines, glances) == []
    assert sum(len(glance.sources) for glance in glances) >= 30
    headings = {markdown.anchor(line) for line in text.splitlines() if line.startswith("## ")}
    links = [re.search(r"\]\((#[^)]+)\)", line)[1] for line in lines.values()]
    assert len(links) == len(glances) and set(links) <= headings  # each line links its section's heading


def test_control_an_edited_or_unsourced_number_or_a_wrong_source_fails(written):
    _, lines, glances = written
    cause = next(glance for glance in glances if glance.section == 2)
    edited = {**lines, cause.question: lines[cause.question].replace(" 481 ", " 482 ")}
    assert edited != lines and problems(edited, glances) == [
        "Its cause: 482 is read from no record",
        f"Its cause: nodes_checked of {cause.sources[1]['record']} reads 481, not in the line"]
    added = {**lines, cause.question: lines[cause.question] + " And 7 more."}
    assert problems(added, glances) == ["Its cause: 7 is read from no record"]
    wrong = Glance(cause.section, cause.question)
    wrong.sources = [{**source, "field": "opset"} if source["field"] == "nodes_checked" else source
                     for source in cause.sources]
    found = problems(lines, [wrong])
    assert found == ["Its cause: 481 is read from no record",
                     f"Its cause: opset of {cause.sources[1]['record']} reads 17, not in the line"]


def test_a_section_added_later_offers_its_line(monkeypatch):
    """A question's module that offers `glance` (a conversions study as section 10, say) gets its line, linked."""
    module = types.ModuleType("where223.study.conversions_probe")

    def section(page: report.Report) -> None:
        page.add("## 10. Conversions", "")

    def glance(page: report.Report) -> Glance:
        offered = Glance(10, "Conversions")
        return offered.says(f"{offered.quote(2, 'x.json', 'n')} of them.")

    section.__module__ = glance.__module__ = module.__name__
    module.section, module.glance = section, glance
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(report, "sections", lambda: [section])
    page = report.Report(OUTPUTS, [])
    section(page)
    assert report.at_a_glance(page) == ["## At a glance", "", "- **[Conversions](#10-conversions)**: 2 of them.", ""]
