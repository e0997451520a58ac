"""Question 6 (notebook 06): which other architectures share the bug class, and what 4.26.0 changed.

The same roles in the same file names as every question's package:

- `record`: where its records go and their types (standard library only);
- `run`: the code that produces the records:
  `run.run`, one sweep cell of one model type (`spaces/architectures.yaml`);
- `analysis`: what the records say, read from the records only (no torch);
- `figure`: its figures;
- `section`: its section of the write-up (`where223.study.report` assembles them).
"""

import importlib
from types import ModuleType

__all__ = ["analysis", "figure", "record", "run", "section"]


def __getattr__(name: str) -> ModuleType:
    """A role loads when first used (PEP 562): `analysis` and `section` without `run`'s torch."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
