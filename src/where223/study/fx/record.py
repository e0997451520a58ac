"""The torch.fx study's record: `fx/fx.json`, one entry per transformers release and model configuration. Standard
library only.

Roles (`where223.pipeline.roles`): the differences and losses behind each comparison are informational (another
CPU's kernels may round otherwise); whether the two sides are equal, whether each control failed, the dtypes, the
errors and the counts decide."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from where223.pipeline.record import Environment
from where223.pipeline.roles import Informational

_BEHIND = Informational("a difference or a loss behind a comparison: whether the two sides are equal decides")

FX_RECORD = "fx/fx.json"
# The model name of the torch-only probe of an autocast region (the same module in every release's interpreter)
PROBE = "autocast region probe (torch.fx)"


class FxControl(TypedDict):
    """The same comparison run on a traced module with one line changed (`run.CONTROL_CHANGE`): `failed` is True
    when the comparison told it apart from eager, as it must for the real comparison to be judged."""

    changed: str | None
    equal: bool
    max_abs_diff: Annotated[float | None, _BEHIND]
    failed: bool
    error: str | None


class FxRun(TypedDict):
    """The traced module and eager under one autocast policy (eval mode, forward): their logits' dtypes and max
    |difference|; what makes eager's logits unable to tell modules apart (constant, all zero, not finite), if
    anything; and the control."""

    policy: str
    eager_dtype: str | None
    traced_dtype: str | None
    dtypes_agree: bool
    max_abs_diff: Annotated[float | None, _BEHIND]
    equal: bool
    error: str | None
    reference_problems: list[str]
    control: FxControl | None


class FxStepsCompared(TypedDict):
    """Two short training runs compared bitwise: each step's loss, every parameter's gradient after the first
    backward, every parameter after the last optimiser step (counts of parameters bitwise equal)."""

    losses_equal: bool
    loss_max_abs_diff: Annotated[float | None, _BEHIND]
    first_unequal_step: int | None
    parameters: int
    gradients_equal: int
    gradient_max_abs_diff: Annotated[float | None, _BEHIND]
    worst_gradient: Annotated[str | None, _BEHIND]
    after_equal: int
    after_max_abs_diff: Annotated[float | None, _BEHIND]
    equal: bool


class FxTraining(TypedDict):
    """The traced module trained beside eager under one policy (`run.train_beside_eager`): what the run compares,
    each side's losses or error, the comparison, what makes eager's run unable to tell modules apart (losses the
    same at every step, gradients all zero, values not finite), and the control (the changed traced module trained
    the same way: `control.max_abs_diff` is its largest gradient difference, `control_compared` all of it)."""

    policy: str
    compares: str
    steps: int
    eager_losses: Annotated[list[float] | None, _BEHIND]
    traced_losses: Annotated[list[float] | None, _BEHIND]
    eager_error: str | None
    traced_error: str | None
    compared: FxStepsCompared | None
    zero_reference_gradients: int
    reference_problems: list[str]
    control: FxControl | None
    control_compared: FxStepsCompared | None


class FxTrace(TypedDict):
    """One release and model configuration: whether transformers' fx tracer traced it, the nodes that carry a dtype,
    a device or a dtype's extreme fixed at trace time, the autocast regions of the source the graph no longer has,
    each policy's forward run and each policy's training run."""

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
    training: list[FxTraining]


class FxRecord(TypedDict):
    description: str
    settings: dict[str, Any]
    tolerance: dict[str, Any]
    traces: list[FxTrace]
    environment: Environment


RECORDS: dict[str, type] = {FX_RECORD: FxRecord}
