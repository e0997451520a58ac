"""Question 8 (notebook 08): does every refusal class the class study explains have a graph repair and an
export-time fix that ONNX Runtime accepts, and that computes what eager PyTorch computed?

The roles of every question's package (`where223.study._roles`); its `run.run_cell` runs one sweep cell, one refused
(or, as a control, one accepted) model of the class sweep again with its plain export, `where223 repair` of it and
the export-time fixes (`spaces/remedies-today.yaml` and `spaces/remedies-2022.yaml` name it as their runner).
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
