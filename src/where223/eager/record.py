"""The eager tools' records: a divergence report (notebook 02), and the fix's divergence before and after it
(notebook 03). Standard library only."""

from __future__ import annotations

from typing import Any, TypedDict


class DivergenceRecord(TypedDict):
    eager_lines: int
    graph_lines: int
    joined: int
    count: int
    first: dict[str, Any] | None
    divergences: list[dict[str, Any]]


class DivergenceBeforeAfter(TypedDict):
    before: DivergenceRecord
    after: DivergenceRecord


RECORDS: dict[str, type] = {"*/graph/divergence.json": DivergenceRecord,
                            "*/fix-*/divergence.json": DivergenceBeforeAfter}
