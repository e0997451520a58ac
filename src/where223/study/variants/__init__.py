"""Question 4 (notebook 04): every way to write the two lines, traced under autocast and timed side by side.

The roles of every question's package (`where223.study._roles`); its `run.run_study` (torch) measures them.
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
