"""Question 5 (notebook 05): which transformers x torch x exporter stacks have the bug.

The roles of every question's package (`where223.study._roles`); its `run.run_cell` runs one sweep cell, the tiny
GPT-2 in its stack (`spaces/matrix.yaml` names it as its runner).
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
