"""Every committed record passes its record type; a copy with a key missing or renamed does not (the controls)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, TypedDict

import pytest

from where223.pipeline import schema
from where223.pipeline.paths import OUTPUTS, ROOT


def committed_records() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", "outputs"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split("\0")  # fmt: skip
    return sorted(p.removeprefix("outputs/") for p in listed if p.endswith(".json"))


RECORDS = committed_records()
TYPES = schema.record_types()


def test_every_committed_record_passes_its_record_type():
    assert len(RECORDS) > 400  # the sweeps' records are among them
    assert schema.check_records(OUTPUTS, RECORDS, TYPES) == []


def one_per_type() -> list[str]:
    """The first committed record of each place a record type claims."""
    found = {}
    for relative in RECORDS:
        pattern = next(p for p in TYPES if schema.matches(relative, p))
        found.setdefault(pattern, relative)
    return sorted(found.values())


@pytest.mark.parametrize("relative", one_per_type())
def test_control_a_copy_with_a_key_missing_or_renamed_fails(relative, tmp_path):
    record = json.loads((OUTPUTS / relative).read_text())
    record_type = schema.type_of(relative, TYPES)
    key = sorted(record_type.__required_keys__)[0]
    copy = tmp_path / relative
    copy.parent.mkdir(parents=True)
    copy.write_text(json.dumps({k: v for k, v in record.items() if k != key}))
    assert schema.check_records(tmp_path, [relative], TYPES) == [
        f"{relative}: the record: no key {key!r} ({record_type.__name__} requires it)"]
    renamed = {(f"{k}_renamed" if k == key else k): v for k, v in record.items()}
    copy.write_text(json.dumps(renamed))
    assert len(schema.check_records(tmp_path, [relative], TYPES)) == 2  # missing, and not declared


def _raises(argv: list[str]) -> int:
    raise ValueError("a control's traceback")


def fuzz_failure_made_today(folder: Path) -> dict[str, Any]:
    """The fuzz record's section of a reader whose one case fails, as today's fuzz engine tallies it
    (tests/fuzz/engine.py): the failure leaves its roles name, for a full run that found none."""
    from hypothesis import strategies as st

    from tests.fuzz.engine import Reader, Tally, run_one
    from tests.fuzz.harness import Case

    def build(recipe: Any, case_folder: Path):
        model = case_folder / "model.onnx"
        model.write_bytes(b"")
        return Case("control", ["lint", str(model)], (str(model),), frozenset({0, 1, 2, 3}), target=_raises), \
            {"model.onnx": b""}, False

    tally = Tally("control")
    run_one(Reader("control", st.just(None), build), None, folder / "case", tally)
    assert tally.failures and tally.failures[0]["outcome"]["problems"], tally  # it failed, as built to
    from where223.pipeline import environment

    # as benchmarks/fuzz.py writes a reader's section: its run, the tally, the reader's setup time
    return {"readers": {"control": {"run": environment.this_run(), **tally.to_dict(), "setup_s": 0.0}}}


def made_today(folder: Path) -> dict[str, Any]:
    """Records as today's code writes them, for leaves newer than every committed record of their type: the
    numerics of today's cell code (`where223.study._cell.numerics`, the rule's `reference_spread`: a real
    comparison, tiny arrays), and a fuzz failure as the fuzz engine records one."""
    import numpy as np

    from where223.study._cell.numerics import compare_outputs

    eager = [np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)]
    numerics = compare_outputs([eager[0] + np.float32(1e-3)], eager, "bf16", "onnxruntime")
    assert numerics["outputs"][0]["reference_spread"] == 3.0  # the leaf the roles name, computed
    return {"classes/today/recipe-exporter/made.json": {"numerics": numerics},
            "remedies/today/recipe-exporter/made.json": {"plain": {"numerics": numerics}},
            "benchmarks/fuzz.json": fuzz_failure_made_today(folder)}


def test_every_declared_role_names_a_place(tmp_path):
    """What compare reads as a timing, an environment field, a measured or informational number names a key of
    its TypedDict, or, below `Any`, a place in some committed record of its type or in one today's code makes
    (the control, a role naming nothing: tests/pipeline/test_compare_roles.py)."""
    assert schema.role_problems(OUTPUTS, RECORDS, TYPES, made=made_today(tmp_path)) == []


def test_a_made_record_at_a_committed_records_place_is_read_beside_it(tmp_path):
    """A record type of one fixed place (benchmarks/fuzz.json): the committed record and the one today's code
    makes are each read, the made one never standing in for the committed one."""
    from where223.pipeline.record import Fuzz

    types = {"benchmarks/fuzz.json": Fuzz}
    committed = tmp_path / "root" / "benchmarks" / "fuzz.json"
    committed.parent.mkdir(parents=True)
    committed.write_text(json.dumps(fuzz_failure_made_today(tmp_path)))
    made = fuzz_failure_made_today(tmp_path)
    empty = {"benchmarks/fuzz.json": {"readers": {"control": {**made["readers"]["control"], "failures": []}}}}
    assert schema.role_problems(committed.parents[1], ["benchmarks/fuzz.json"], types, made=empty) == []
    # the control: with no committed record holding a failure, the failure's roles name nothing
    found = schema.role_problems(committed.parents[1], [], types, made=empty)
    assert any("failures[*].outcome.seconds" in line for line in found), found


def test_control_without_todays_records_the_newer_leaves_name_nothing():
    """Without the records today's code makes, a role that only they hold names nothing: no committed fuzz record
    holds a failure, so its `failures[*].outcome` roles are found only in the one `made_today` writes. (This control
    used the class and remedies cells' `reference_spread` until today's class chain was rerun whole: the committed
    cells now hold it, which the second assertion keeps true.)"""
    found = schema.role_problems(OUTPUTS, RECORDS, TYPES)
    assert any("failures[*].outcome.seconds" in line for line in found), found
    assert not any("reference_spread" in line for line in found), found


def test_every_place_the_types_claim_holds_a_committed_record():
    """A type whose place matches no record checks nothing: each RECORDS entry matches at least one file."""
    assert [p for p in TYPES if not any(schema.matches(r, p) for r in RECORDS)] == []


class Inner(TypedDict):
    n: int


class _Outer(TypedDict):
    inner: Inner
    ratio: float
    names: list[str]
    note: str | None


class Outer(_Outer, total=False):
    extra: dict[str, Any]


@pytest.mark.parametrize(("value", "expected"), [
    ({"inner": {"n": 1}, "ratio": 2, "names": ["a"], "note": None}, []),  # an int is a float in JSON
    ({"inner": {"n": True}, "ratio": 1.0, "names": [], "note": "x"}, ["inner.n: bool 'True', not int"]),
    ({"inner": {"n": 1}, "ratio": 1.0, "names": ["a", 2], "note": "x"}, ["names[1]: int '2', not str"]),
    ({"inner": {}, "ratio": 1.0, "names": [], "note": 3}, ["inner: no key 'n' (Inner requires it)",
                                                            "note: int, not str | None"]),
    ({"inner": {"n": 1}, "ratio": 1.0, "names": [], "note": None, "extra": []}, ["extra: list, not an object"]),
], ids=["passes", "bool for int", "item type", "nested missing and union", "optional key's type"])
def test_problems_are_found_where_they_are(value, expected):
    assert schema.problems(value, Outer) == expected


def test_places_match_part_by_part_and_a_record_no_type_claims_is_a_problem(tmp_path):
    assert schema.matches("matrix/cells/a.json", "matrix/cells/*.json")
    assert not schema.matches("x/matrix/cells/a.json", "matrix/cells/*.json")  # `*` does not span a folder
    assert not schema.matches("a/b/reproduce.json", "*/reproduce.json")
    (tmp_path / "stray.json").write_text("{}")
    assert schema.check_records(tmp_path, ["stray.json"], TYPES) == [
        "stray.json: no record type claims it (add it to a record module's RECORDS)"]
    with pytest.raises(ValueError, match="matches 2 record types"):
        schema.type_of("a.json", {"*.json": Inner, "a.*": Outer})


def test_record_modules_are_found_on_disk():
    modules = schema.record_modules()
    assert {"where223.study.matrix.record", "where223.study.fix.record", "where223.gpt2.record"} <= set(modules)
    assert all(name.endswith(".record") for name in modules)
