"""The eager kernels a one-model report recorded per node (`where223 explain`'s record.json, a class-sweep cell's
record): what eager PyTorch's kernel at the node's source line was handed, so a repair can compute where eager did.
The report is a file the user gives: read within a size limit, and anything else than the expected JSON is one
line (UsageError, exit 2)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from where223.errors import UsageError, printable
from where223.graph.blame import same_op

REPORT_LIMIT = 64 * 2**20  # bytes of a report read, at most
FLOATING = ("float", "float16", "bfloat16", "double")  # eager's dtype names, as where223.eager.kernels writes them


@dataclass(frozen=True)
class EagerKernel:
    """One eager kernel at a node's source line: its ATen op and the dtypes of its tensor inputs and outputs."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def floating(self) -> list[str]:
        """Its floating input dtypes as ONNX tensor types, in order, each once."""
        return [f"tensor({d})" for d in dict.fromkeys(self.inputs) if d in FLOATING]

    def __str__(self) -> str:
        return f"eager's {self.op} was handed {'/'.join(self.inputs) or 'no tensor'}"


def _entries(report: Any) -> list[dict[str, Any]]:
    blamed = report.get("blame") if isinstance(report, dict) else None
    if not isinstance(blamed, list):
        raise UsageError("the eager report has no `blame` list: give the record.json `where223 explain` wrote")
    return [entry for entry in blamed if isinstance(entry, dict)]


def read_report(source: str | os.PathLike[str] | dict[str, Any]) -> dict[str, Any]:
    """A one-model report as a dict: given one, or read from a JSON file within REPORT_LIMIT bytes."""
    if isinstance(source, dict):
        return source
    path = Path(source)
    try:
        with path.open("rb") as handle:
            data = handle.read(REPORT_LIMIT + 1)
    except OSError as error:
        raise UsageError(f"--eager {printable(str(path))}: {error.strerror or error}") from None
    if len(data) > REPORT_LIMIT:
        raise UsageError(f"--eager {printable(str(path))}: larger than {REPORT_LIMIT // 2**20} MiB; not a report")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        raise UsageError(f"--eager {printable(str(path))}: not JSON ({printable(str(error), 200)})") from None


def eager_kernels(source: str | os.PathLike[str] | dict[str, Any]) -> dict[str, EagerKernel]:
    """Per node name, the eager kernel of the report that computes that node's operator (the first such kernel
    recorded at the node's source line); nodes whose line ran no such kernel are absent."""
    found: dict[str, EagerKernel] = {}
    for entry in _entries(read_report(source)):
        node, op_type = entry.get("node"), entry.get("op_type")
        if not isinstance(node, str) or not isinstance(op_type, str) or node in found:
            continue
        for kernel in entry.get("eager_kernels") or []:
            if not isinstance(kernel, dict) or not isinstance(kernel.get("op"), str):
                continue
            if same_op(kernel["op"], op_type):
                found[node] = EagerKernel(kernel["op"], tuple(map(str, kernel.get("inputs") or [])),
                                          tuple(map(str, kernel.get("outputs") or [])))  # fmt: skip
                break
    return found
