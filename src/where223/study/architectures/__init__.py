"""Question 6 (notebook 06): which other architectures share the bug class, and what 4.26.0 changed.

The roles of every question's package (`where223.study._roles`); its `run.run_cell` runs one sweep cell, one model
type in its stack (`spaces/architectures.yaml` names it as its runner).
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
