"""Question 9 (notebook 09): does GPT-2's modeling code, traced by transformers' own torch.fx tracer, compute under
mixed precision what eager PyTorch computes (the seed's reviewer's open question)?

The roles of every question's package (`where223.study._roles`); `run.run_study` traces each real release folder
(4.24.0, 4.25.1, 4.26.0) in its own interpreter.
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
