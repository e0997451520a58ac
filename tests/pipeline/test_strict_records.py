"""Every record is strict JSON: a value JSON cannot hold (NaN, ±Infinity) is written null and named in the record's
`not_representable` list; a finite record is written exactly as before; the validator accepts the list on any
record type and refuses a record file that is not strict JSON."""

from __future__ import annotations

import json
import math
from typing import TypedDict

from where223.pipeline import portable, records, schema


def _strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in a record")

    return json.loads(text, parse_constant=refuse)


def test_a_value_json_cannot_hold_is_null_and_named(tmp_path):
    record = {"ratio": math.inf, "rows": [1.5, -math.inf, {"x/y~": math.nan}], "name": "kept"}
    written = _strict(records.write_json(tmp_path / "r.json", record).read_text())
    assert written["ratio"] is None and written["rows"] == [1.5, None, {"x/y~": None}] and written["name"] == "kept"
    assert written["not_representable"] == [
        {"path": "/ratio", "text": "Infinity"},
        {"path": "/rows/1", "text": "-Infinity"},
        {"path": "/rows/2/x~1y~0", "text": "NaN"},
    ]
    assert record["ratio"] == math.inf  # the caller's record is left as it was


def test_rewriting_a_record_keeps_what_it_named_and_adds_what_is_new(tmp_path):
    first = records.write_json(tmp_path / "r.json", {"a": math.inf})
    again = records.read_json(first)
    again["b"] = math.nan
    assert _strict(records.write_json(first, again).read_text())["not_representable"] == [
        {"path": "/a", "text": "Infinity"},
        {"path": "/b", "text": "NaN"},
    ]


def test_control_a_finite_record_is_written_byte_for_byte_as_before(tmp_path):
    record = {"b": [1, 2.5, -0.0, 1e308, None, True], "a": {"nested": "text", "n": 3}, "path": str(tmp_path)}
    before = json.dumps(portable.record(json.loads(json.dumps(record, default=str))), indent=2, sort_keys=True) + "\n"
    assert records.write_json(tmp_path / "r.json", record).read_text() == before
    assert "not_representable" not in _strict(before)


class Measured(TypedDict):
    relative: float
    label: str


TYPES = {"m/*.json": Measured}


def test_the_validator_accepts_the_list_and_the_nulls_it_names(tmp_path):
    (tmp_path / "m").mkdir()
    written = records.write_json(tmp_path / "m" / "inf.json", {"relative": math.inf, "label": "x"})
    assert _strict(written.read_text())["relative"] is None
    assert schema.check_records(tmp_path, ["m/inf.json"], TYPES) == []


def test_the_validator_checks_the_list_itself(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "bad.json").write_text('{"relative": 1, "label": "x", "not_representable": [{"path": 1}]}')
    assert schema.check_records(tmp_path, ["m/bad.json"], TYPES) == [
        "m/bad.json: not_representable[0]: no key 'text' (NotRepresentable requires it)",
        "m/bad.json: not_representable[0].path: int '1', not str",
    ]


def test_control_a_null_no_entry_names_is_still_against_the_type(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "null.json").write_text('{"relative": null, "label": "x"}')
    assert schema.check_records(tmp_path, ["m/null.json"], TYPES) == [
        "m/null.json: relative: NoneType 'None', not float"
    ]


def test_the_validator_refuses_a_record_that_is_not_strict_json(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "nan.json").write_text('{"relative": NaN, "label": "x"}')
    (tmp_path / "m" / "ok.json").write_text('{"relative": 0.5, "label": "x"}')  # the control
    assert schema.check_records(tmp_path, ["m/nan.json", "m/ok.json"], TYPES) == [
        "m/nan.json: unreadable: NaN is not JSON (records.write_json writes null and lists it under "
        "'not_representable')"
    ]
