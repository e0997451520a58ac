"""`where223 convert`: a float32 model file converted into another, written atomically only when the result is
within tolerance (and so has passed lint and ONNX Runtime's type check)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from where223.graph.convert._record import ConversionRecord
from where223.graph.convert._search import convert
from where223.graph.diff import DEFAULT_SEED, Feeds
from where223.graph.ort import ORT_TIMEOUT_S

__all__ = ["convert_file"]


def convert_file(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    to: str = "fp16",
    keep_io_types: bool = False,
    provider: str = "CPUExecutionProvider",
    feeds: Feeds | str | os.PathLike[str] | None = None,
    seed: int = DEFAULT_SEED,
    dims: Mapping[str, int] | None = None,
    timeout_s: float | None = ORT_TIMEOUT_S,
    say: Callable[[str], None] = print,
) -> ConversionRecord:
    """Convert the model at `source` (`convert`) and write the result to `output` atomically (`repair.save_model`);
    nothing is written when `convert` raises. Returns the record (its `output` set)."""
    from where223.graph.repair import save_model

    model, record = convert(source, to, keep_io_types, provider, feeds, seed, dims, timeout_s, say=say)
    save_model(model, Path(output))
    record.output = str(output)
    return record
