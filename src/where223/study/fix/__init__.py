"""Question 3 (notebook 03): does the fix repair the export and change nothing else?

The roles of every question's package (`where223.study._roles`); its `run.verify_fix` (torch) exports, trains and
judges the fixed model with every check and every control.
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
