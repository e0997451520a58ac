"""where223.markdown, the one Markdown writer: tables whose cells cannot break them, code spans that hold backticks
(that no other module writes a table: tests/test_one_home.py)."""

from __future__ import annotations

from where223 import markdown


def test_a_table_escapes_its_cells_and_formats_floats():
    assert markdown.table(["a", "b|c"], [[0.123456, "x|y"], [3, None]]) == [
        "| a | b\\|c |", "|---|---|", "| 0.123 | x\\|y |", "| 3 | None |"]


def test_a_code_span_is_fenced_past_its_own_backticks():
    assert markdown.code("plain") == "`plain`"
    assert markdown.code("a `b` c") == "``a `b` c``"
    assert markdown.code("`edge`") == "`` `edge` ``"
