"""Every number README.md and NOTES.md quote comes from somewhere: a record field, a test, or a stated exemption.

`tests/quoted_numbers.yaml` lists, per document, entries of three kinds, each found by a `quote` (text of the
document, unique in it, that holds the number):

- `record` (a path, or a glob whose matches are reduced) and `field` (keys, `[index]` or `[key=value]` into the
  JSON, `*` for every key of a mapping, whose items without the next key are left out; nulls, values not
  measured, are left out; a list field stands for its items; `pattern`, a regular expression, takes its first
  group from text): the value, optionally reduced (`reduce: sum | len | max | min`, or `equal: v` for how many
  values are v), less another field of the same record (`minus`), divided (`divide`) and formatted (`format`, a
  Python format spec), must appear in the quote as one of its numbers;
- `test` (`path::name`, or a list of them; a name may be a module-level table of cases): tests that check the
  number; each must exist and the number must appear in one of them;
- `exempt`: why the number needs no source (a release name, a line of someone else's file, a port).

Records that `make run` rewrites (every file a run's manifest under `outputs/manifests/` lists: executed notebooks,
the fix's verification, the variant study) are read as committed (git HEAD), every other record from the working
tree: a local `make run`, slower or on another machine, changes their timings, and README's quotes are of the
committed run, so `make run` then `make test` (README's order) passes. Outside a git checkout, the working tree.

A number is a run of digits (with `,` thousands and a decimal part or exponent) standing alone: not inside a code
span or block (commands, names, node names are quoted text, not measurements), not part of a word (`bf16`,
`H200`, `GPT-2`) and not a three-part version (`4.25.1`). Every number must be covered by an entry's quote, and
every entry's quote must still be in the document: an edited number, a new one, or a changed record all fail.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from where223.pipeline.git import git
from where223.pipeline.paths import ROOT

REGISTRY = ROOT / "tests" / "quoted_numbers.yaml"
DOCUMENTS = ("README.md", "NOTES.md")
_ALONE_BEFORE, _ALONE_AFTER = r"(?<![\w.\-/=#])", r"(?![\w\-]|\.\d)"
_NUMBER = re.compile(
    rf"{_ALONE_BEFORE}(?:\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e-?\d+)?){_ALONE_AFTER}"
)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_VERSION = re.compile(r"\d+\.\d+\.\d+")


def numbers(text: str) -> list[tuple[int, int, str]]:
    """The numbers of a document as (start, end, text), code and versions left out (see the module's docstring)."""
    blanked = _VERSION.sub(lambda m: " " * len(m.group()), _CODE.sub(lambda m: " " * len(m.group()), text))
    return [(m.start(), m.end(), m.group()) for m in _NUMBER.finditer(blanked)]


def _field(data: Any, path: str) -> list[Any]:
    """The values at `path` in `data` (`a.b[0].c`, `[name=lint]` for the one item of a list whose `name` is
    `lint`, `*` for every value of a mapping or list, `\\.` for a dot inside a key such as `2\\.1\\.2`)."""
    values, wild = [data], False
    for part in (part.replace("\\.", ".") for part in re.findall(r"(?:\\\.|[^.\[\]])+|\[[^\]]+\]", path)):
        if part.startswith("[") and "=" in part:  # the list's item whose key has this value
            key, _, wanted = part[1:-1].partition("=")
            chosen = [[item for item in value if item.get(key) == wanted] for value in values]
            if any(len(items) != 1 for items in chosen):
                raise LookupError(f"{part} does not name exactly one item")
            values = [items[0] for items in chosen]
        elif part.startswith("["):
            values = [value[int(part[1:-1])] for value in values]
        elif part == "*":
            values = [item for value in values for item in (value.values() if isinstance(value, dict) else value)]
            wild = True
        else:  # under a `*`, an item without the key was not measured: left out
            values = [value[part] for value in values if not wild or part in value]
    return values


REDUCE = {"sum": sum, "len": len, "max": max, "min": min}


def _git(root: Path, *args: str) -> bytes | None:
    """What git prints for `args` in the checkout at `root` (None when it fails, e.g. outside a checkout)."""
    status, output, _ = git(root, *args)
    return output if status == 0 else None


def _committed(root: Path, relative: str) -> bytes | None:
    """The bytes of `relative` (from `root`) at git HEAD, None when it is not committed there."""
    return _git(root, "cat-file", "blob", f"HEAD:./{relative}")


class Records:
    """Where a record entry's files are read: the working tree under `root`, but the files `make run` rewrites as
    committed (HEAD) when `committed` (see the module's docstring)."""

    def __init__(self, root: Path, committed: bool = True) -> None:
        self.root = root
        self.rewritten: set[str] = set()  # paths under root that a run's manifest lists, read at HEAD
        listing = _git(root, "ls-tree", "-z", "--name-only", "HEAD", "--", "outputs/manifests/") if committed else None
        for name in filter(None, (listing or b"").decode().split("\0")):
            self.rewritten.add(name)
            manifest = json.loads(_committed(root, name) or b"{}")
            self.rewritten.update(f"outputs/{file}" for file in manifest.get("files", []))

    def read(self, path: str) -> Any:
        relative = Path(path).relative_to(self.root).as_posix()
        if relative in self.rewritten:
            data = _committed(self.root, relative)
            if data is not None:
                return json.loads(data)
        return json.loads(Path(path).read_text())


def recorded(entry: dict[str, Any], root: Path, records: Records | None = None) -> str:
    """The text a record entry says its number must read, from the records under `root` (as `records` reads them:
    by default straight from the working tree)."""
    read = records.read if records is not None else (lambda path: json.loads(Path(path).read_text()))
    paths = sorted(glob.glob(str(root / entry["record"])))
    if not paths:
        raise LookupError(f"no record matches {entry['record']}")
    values = [value for path in paths for value in _field(read(path), entry["field"])]
    if "pattern" in entry:  # a number inside recorded text: the pattern's first group
        values = [match.group(1) for value in values if (match := re.search(entry["pattern"], str(value)))]
    if len(values) == 1 and isinstance(values[0], list):  # a list field: its items
        values = values[0]
    values = [value for value in values if value is not None]  # not measured
    if "equal" in entry:  # how many of the values are this one
        value = sum(1 for item in values if item == entry["equal"])
    elif "reduce" in entry:
        value = REDUCE[entry["reduce"]](values)
    elif len(values) == 1:
        value = values[0]
    else:
        raise LookupError(f"{entry['field']} of {entry['record']} gives {len(values)} values and no reduce")
    if "minus" in entry:  # a span between two recorded instants
        (subtrahend,) = _field(read(paths[0]), entry["minus"])
        value = value - subtrahend
    if "divide" in entry:
        value = value / entry["divide"]
    return format(value, entry.get("format", ""))


def _flatten(text: str) -> tuple[str, list[int]]:
    """`text` with every run of white space made one space (a quote may cross a line break), and for each
    character of the result its offset in `text`."""
    flat, origin = [], []
    for match in re.finditer(r"\s+|\S+", text):
        if match.group()[0].isspace():
            flat.append(" ")
            origin.append(match.start())
        else:
            flat.append(match.group())
            origin.extend(range(match.start(), match.end()))
    return "".join(flat), origin


def _test_source(root: Path, test: str) -> str | None:
    """The source of test `path::name` (its line and the lines up to the next top-level statement), if it exists;
    `name` may also be a module-level constant of the test file (a table of cases the test runs)."""
    path, _, name = test.partition("::")
    source = root / path
    if not source.is_file():
        return None
    start = rf"^(?:def {re.escape(name)}\(|{re.escape(name)}\b[^\n=]*=)"
    match = re.search(rf"{start}.*?(?=^\S)", source.read_text() + "\n.", re.M | re.S)
    return match.group() if match else None


def problems(name: str, text: str, entries: list[dict[str, Any]], root: Path = ROOT, committed: bool = True
             ) -> list[str]:
    """What is wrong with the numbers of document `name` against its entries; empty when every number is sourced.
    `committed`: the records `make run` rewrites are read at HEAD (else all from the working tree)."""
    records = Records(root, committed)
    found: list[str] = []
    covered: set[int] = set()
    original = text
    text, origin = _flatten(text)
    for entry in entries:
        quote = _flatten(entry["quote"])[0].strip()
        at = text.find(quote)
        if at < 0:
            found.append(f"{name}: quote no longer in the document: {quote!r}")
            continue
        if text.find(quote, at + 1) >= 0:
            found.append(f"{name}: quote is not unique, lengthen it: {quote!r}")
        inside = [(start, number) for start, end, number in numbers(text) if at <= start and end <= at + len(quote)]
        if not inside:
            found.append(f"{name}: quote holds no number: {quote!r}")
            continue
        kinds = [kind for kind in ("record", "test", "exempt") if kind in entry]
        if len(kinds) != 1:
            found.append(f"{name}: {quote!r} needs exactly one of record, test, exempt (has {kinds})")
            continue
        if "record" in entry:
            try:
                expected = recorded(entry, root, records)
            except (LookupError, KeyError, IndexError, TypeError, ValueError, json.JSONDecodeError) as error:
                found.append(f"{name}: {quote!r}: {entry['record']} {entry.get('field')}: {error!r}")
                continue
            matching = [start for start, number in inside if number == expected]
            if not matching:
                found.append(f"{name}: {quote!r} says {[n for _, n in inside]}, the record says {expected}")
            covered.update(matching)
        elif "test" in entry:
            tests = [entry["test"]] if isinstance(entry["test"], str) else list(entry["test"])
            sources = [_test_source(root, test) for test in tests]
            for test, source in zip(tests, sources, strict=True):
                if source is None:
                    found.append(f"{name}: {quote!r}: no test {test}")
            for _, number in inside:
                pattern = rf"(?<![\d.]){re.escape(number)}(?![\d.])"
                if not any(source and re.search(pattern, source) for source in sources):
                    found.append(f"{name}: {quote!r}: {number} appears in none of {tests}")
            covered.update(start for start, _ in inside)
        else:
            if not str(entry["exempt"]).strip():
                found.append(f"{name}: {quote!r}: an exemption needs its reason")
            covered.update(start for start, _ in inside)
    for start, _, number in numbers(text):
        if start not in covered:
            line = original.count("\n", 0, origin[start]) + 1
            context = text[max(0, start - 40) : start + 40]
            found.append(f"{name}:{line}: {number} has no record, test or exemption: ...{context}...")
    return found


def registry() -> dict[str, list[dict[str, Any]]]:
    return yaml.safe_load(REGISTRY.read_text())


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_number_in_the_document_is_sourced(document: str):
    found = problems(document, (ROOT / document).read_text(), registry()[document])
    assert not found, "\n".join(found)


ENTRIES = [
    {"quote": "takes 0.486 s", "record": "bench.json", "field": "lint.median_s", "format": ".3f"},
    {"quote": "over 5 runs", "test": "tests/test_x.py::test_runs"},
    {"quote": "line 201", "exempt": "a line of someone else's file"},
]
TEXT = "lint takes 0.486 s over 5 runs, see line 201 of `Where_223` in bf16 with torch 2.1.2.\n"


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    (tmp_path / "bench.json").write_text(json.dumps({"lint": {"median_s": 0.4861}}))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_runs():\n    assert len(range(5)) == 5\n")
    return tmp_path


def test_a_sourced_document_passes(sources: Path):
    assert problems("DOC", TEXT, ENTRIES, sources) == []
    assert [number for *_, number in numbers(TEXT)] == ["0.486", "5", "201"]  # code, bf16 and versions left out


def _rewrite(path: str, text: str):
    def edit(document: str, root: Path) -> str:
        (root / path).write_text(text)
        return document

    return edit


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (lambda text, root: text.replace("0.486", "0.487"), "0.487 has no record, test or exemption"),
        (lambda text, root: text + "It took 7 min.\n", "7 has no record, test or exemption"),
        (lambda text, root: text.replace("over 5 runs", "over five runs"), "quote no longer in the document"),
        (_rewrite("bench.json", '{"lint": {"median_s": 0.5}}'), "the record says 0.500"),
        (_rewrite("tests/test_x.py", ""), "no test"),
        (_rewrite("tests/test_x.py", "def test_runs():\n    assert len(range(4)) == 4\n"), "5 appears in none"),
        (lambda text, root: text + "lint takes 0.486 s again\n", "not unique"),
    ],
    ids=["edited-number", "new-number", "edited-quote", "changed-record", "missing-test", "test-without-the-number",
         "ambiguous-quote"],
)
def test_an_edited_copy_fails(sources: Path, edit, complaint: str):
    found = problems("DOC", edit(TEXT, sources), ENTRIES, sources)
    assert any(complaint in line for line in found), found


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_committed_documents_fail_when_a_number_is_edited(document: str):
    text = (ROOT / document).read_text()
    start, end, number = numbers(text)[0]
    edited = text[:start] + str(int(float(number.replace(",", ""))) + 1) + text[end:]
    assert problems(document, edited, registry()[document]) != []


def test_a_field_selects_by_name_and_refuses_an_ambiguous_one(tmp_path: Path):
    record = {"checks": [{"name": "lint", "value": 2}, {"name": "fp32", "value": 1e-5}], "t": {"a": 3.0, "b": 1.0}}
    (tmp_path / "r.json").write_text(json.dumps(record))
    entry = {"record": "r.json", "field": "checks[name=fp32].value", "format": ".0e"}
    assert recorded(entry, tmp_path) == "1e-05"
    assert recorded({"record": "r.json", "field": "t.a", "minus": "t.b", "format": ".0f"}, tmp_path) == "2"
    assert recorded({"record": "r.json", "field": "checks[0].value"}, tmp_path) == "2"
    assert recorded({"record": "r.json", "field": "checks[0].name", "pattern": r"(l)int"}, tmp_path) == "l"
    record["checks"].append({"name": "fp32", "value": 0.5})  # control: two items of that name
    (tmp_path / "r.json").write_text(json.dumps(record))
    with pytest.raises(LookupError, match="exactly one"):
        recorded(entry, tmp_path)


def _committed_copy(tmp_path: Path) -> Path:
    """A checkout whose committed run published notebook 04 (its papermill duration 120 s) and whose README quotes it;
    its working tree then holds a slower rerun's notebook (300 s), as `make run` on a busier machine leaves it."""
    root = tmp_path / "checkout"
    notebook = root / "outputs" / "notebooks" / "04_variants.ipynb"
    notebook.parent.mkdir(parents=True)
    (root / "outputs" / "manifests").mkdir()
    (root / "outputs" / "manifests" / "04_variants.json").write_text(
        json.dumps({"run": "04_variants", "files": ["notebooks/04_variants.ipynb"]}))
    notebook.write_text(json.dumps({"metadata": {"papermill": {"duration": 120.0}}}))
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "run"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    notebook.write_text(json.dumps({"metadata": {"papermill": {"duration": 300.0}}}))
    return root


RUN_ENTRY = [{"quote": "took 2.0 min", "record": "outputs/notebooks/*.ipynb", "field": "metadata.papermill.duration",
              "reduce": "sum", "divide": 60, "format": ".1f"}]


def test_a_local_make_run_leaves_the_quotes_of_the_committed_run_true(tmp_path: Path):
    root = _committed_copy(tmp_path)
    assert problems("README", "The variants took 2.0 min.\n", RUN_ENTRY, root) == []
    # control: the same copy read from its working tree fails, as the check did before it read HEAD
    found = problems("README", "The variants took 2.0 min.\n", RUN_ENTRY, root, committed=False)
    assert any("the record says 5.0" in line for line in found), found
