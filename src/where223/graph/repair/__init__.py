"""Repair a model's type violations, one rule per file, on onnx-ir; `where223 repair` re-lints the result and
has ONNX Runtime judge it.

- `_cast_target`: a wrong Cast target is retargeted at its root (the TorchScript exporter's `Cast(to=15)`);
- `_binding`: a type-binding conflict is computed in one type and cast back (where eager computed, given the
  one-model report; else the widest bound type, saying eager was not consulted);
- `_not_allowed`: a type its schema does not allow at the opset is computed in the nearest allowed type that
  holds it and cast back, saying what it costs and from which opset the type itself is allowed.

What no rule resolves is refused with its reason (RepairError); no Cast is inserted from or to a type Cast does
not take (`_edit`).
"""

from __future__ import annotations

from where223.graph.repair._change import Change, RepairError, RepairRefused
from where223.graph.repair._eager import EagerKernel, eager_kernels
from where223.graph.repair._file import ORT_TIMEOUT_S, repair_file, save_model
from where223.graph.repair._repair import repair

__all__ = [
    # repair a model, or a file into another
    "repair",
    "repair_file",
    "save_model",
    "ORT_TIMEOUT_S",
    # what it did, and why it stopped
    "Change",
    "RepairError",
    "RepairRefused",
    # what eager computed, from a one-model report
    "eager_kernels",
    "EagerKernel",
]
