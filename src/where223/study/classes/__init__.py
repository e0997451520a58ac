"""Question 7 (notebook 07): which models today's exporters break for ONNX Runtime in reduced precision, and why.

The roles of every question's package (`where223.study._roles`); its `run.run_cell` runs one sweep cell, one model
type under one recipe and exporter in its stack (`spaces/classes-today.yaml` and `spaces/classes-2022.yaml` name
it as their runner).
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
