"""The torch.fx study's record: `fx/fx.json`, one entry per transformers release and model configuration. Standard
library only."""

from __future__ import annotations

from typing import Any, TypedDict

from where223.pipeline.record import Environment

FX_RECORD = "fx/fx.json"
# The model name of the torch-only probe of an autocast region (the same module in every release's interpreter)
PROBE = "autocast region probe (torch.fx)"


class FxRun(TypedDict):
    """The traced module and eager under one autocast policy: their logits' dtypes and max |difference|."""

    policy: str
    eager_dtype: str | None
    traced_dtype: str | None
    dtypes_agree: bool
    max_abs_diff: float | None
    equal: bool
    error: str | None


class FxTrace(TypedDict):
    """One release and model configuration: whether transformers' fx tracer traced it, the nodes that carry a dtype,
    a device or a dtype's extreme fixed at trace time, the autocast regions of the source the graph no longer has,
    and each policy's run."""

    release: str
    model: str
    config_changes: dict[str, Any]
    traced: bool
    error: str | None
    nodes: int
    fixed_at_trace_time: list[dict[str, Any]]
    autocast_regions_in_source: list[str]
    autocast_nodes_in_graph: int
    runs: list[FxRun]


class FxRecord(TypedDict):
    description: str
    settings: dict[str, Any]
    tolerance: dict[str, Any]
    traces: list[FxTrace]
    environment: Environment


RECORDS: dict[str, type] = {FX_RECORD: FxRecord}
