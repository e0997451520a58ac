"""One line of the write-up's "At a glance": a question, its answer with its headline numbers, and the section that
says more. Each question's `section` module offers its line (`glance(report)`, None where its records say nothing
yet); `where223.study.report` puts the lines at the top of the write-up, each linking its section's heading.

Every number a line writes goes through `Glance.quote`, which keeps where the number is read (`sources`): which
record, which field, reduced how. tests/study/test_glance.py reads each source again from the records with a reader
of its own, and refuses a line holding a number no source gives, or a source whose number the line does not hold.
"""

from __future__ import annotations

from typing import Any


class Glance:
    """One question's line: `question` (the link's text), `answer` (Markdown), the number of the `section` that says
    more, and the `sources` of the answer's numbers."""

    def __init__(self, section: int, question: str) -> None:
        self.section = section
        self.question = question
        self.answer = ""
        self.sources: list[dict[str, Any]] = []

    def quote(self, value: float, record: str | list[str], field: str, **how: Any) -> str:
        """`value` as the line writes it (`format`: a format spec), read from `field` of `record` (a path under the
        outputs tree; several: their values taken together). A field names keys and list items: `a.b` (`\\.` for a
        dot inside a key), `[0]`, `*` or a pattern such as `today/*` for every key or item it matches, `[key=value]`
        or `[a.b=true]` for the items that hold that value there. The values found are then counted or reduced:
        `equal` (how many are that value), `reduce` (sum, len, max, min); with neither, the one value found."""
        self.sources.append({"record": record, "field": field, **how})
        return format(value, how.get("format", ""))

    def says(self, answer: str) -> Glance:
        self.answer = answer
        return self

    def line(self, anchor: str) -> str:
        """The Markdown line, its question linking `anchor` (the section's heading)."""
        return f"- **[{self.question}]({anchor})**: {self.answer}"


def field_key(name: str) -> str:
    """A key as a field names it: its dots escaped (`4.25` -> `4\\.25`)."""
    return name.replace(".", "\\.")
