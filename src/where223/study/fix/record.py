"""The fix study's records: where a verification run writes, and the record types of `verification.json`.

Standard library only (the record types are read by the validator and by record readers that import no torch)."""

from __future__ import annotations

FIXED_MODEL, FP32_MODEL, REPAIRED_MODEL = "model.onnx", "model-fp32.onnx", "repaired.onnx"
