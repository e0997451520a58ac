"""The page the write-up is written on: `Report`, the Markdown lines built against one outputs folder and the plan
that filled it, and the lookups every section shares (`find_run`, the notebooks' names). Below every question's
`section` and below `where223.study.report`, which assembles them: a section imports this, never the assembler."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from where223.gpt2 import runs
from where223.pipeline.records import read_json
from where223.pipeline.run import PlannedRun

REPRODUCE, GRAPH, FIX = "01_reproduce", "02_graph", "03_fix_and_verify"


def find_run(outputs: Path, given: Mapping[str, object]) -> str:
    """The folder of the reproduction run that notebook parameters `given` produced, found from the records'
    own parameters (a folder counts only under its own run name); the newest record if several match."""
    found = []
    for record in outputs.glob("*/reproduce.json"):
        parameters = read_json(record)["parameters"]
        if runs.run_name(parameters) == record.parent.name and runs.produced_by(given, parameters):
            found.append((record.stat().st_mtime, record.parent.name))
    if not found:
        raise FileNotFoundError(f"no run under {outputs} was made with {dict(given)}: run `make run`")
    return max(found)[1]


class Report:
    """Markdown lines built against one outputs folder and the plan that filled it; links are relative to it."""

    def __init__(self, outputs: Path, plan: list[PlannedRun]) -> None:
        self.outputs = outputs
        self.plan = plan
        self.lines: list[str] = []

    def json(self, relative: str) -> dict[str, Any]:
        return read_json(self.outputs / relative)

    def planned(self, notebook: str, parameters: Mapping[str, object]) -> PlannedRun:
        """The plan's first run of `notebook` with the reproduction run of `parameters` (its executed copy)."""
        for run in self.plan:
            if run.notebook == notebook and runs.produced_by(run.parameters, parameters):
                return run
        raise ValueError(f"the plan runs no {notebook} for {runs.run_name(parameters)}")

    def fix_run(self) -> PlannedRun:
        """The plan's first run of notebook 03 (it names its variant): the subject of sections 2 and 3."""
        for run in self.plan:
            if run.notebook == FIX and "variant" in run.parameters:
                return run
        raise ValueError(f"the plan runs no {FIX} that names its variant")

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def figure(self, stem: str, caption: str, notebook: str) -> None:
        """An image with its caption and links to the notebook that drew it (ipynb renders on GitHub)."""
        if not (self.outputs / f"{stem}.png").is_file():
            raise FileNotFoundError(f"{stem}.png is missing from {self.outputs}: run `make run`")
        self.add(
            f"![{caption}]({stem}.png)",
            "",
            f"*{caption}.* Drawn by [`{notebook}`](notebooks/{notebook}.ipynb) "
            f"([HTML](notebooks/{notebook}.html), [SVG]({stem}.svg)).",
            "",
        )

    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"
