"""The one Markdown writer of the project: tables, cells, code spans and heading links of the write-up, the notebooks'
tables and the generated notes. Cells print floats with three significant digits and escape the table's `|`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


def cell(value: Any) -> str:
    """A table cell: a float with three significant digits, anything else as text with `|` escaped."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


def row(values: Sequence[Any]) -> str:
    """One table row of `values`, each written by `cell`."""
    return "| " + " | ".join(cell(value) for value in values) + " |"


def table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table's lines: the header, the rule, then a line per row, cells escaped."""
    return [row(header), "|" + "---|" * len(header), *[row(values) for values in rows]]


def code(text: str) -> str:
    """`text` as a Markdown code span, fenced by one backtick more than its longest run of them."""
    runs = re.findall(r"`+", text)
    fence = "`" * (max(map(len, runs), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def anchor(heading: str) -> str:
    """The link GitHub gives a heading (`## 9. The torch.fx question` -> `#9-the-torchfx-question`): lower case,
    punctuation but `-` and `_` left out, spaces made `-`."""
    text = heading.lstrip("#").strip().lower()
    return "#" + re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
