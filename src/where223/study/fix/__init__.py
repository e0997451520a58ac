"""Question 3 (notebook 03): does the fix repair the export and change nothing else?

The same roles in the same file names as every question's package:

- `record`: where its records go and their types (standard library only);
- `run`: the code that produces the records:
  `run.verify_fix` (torch: exports, trains and judges the fixed model with every check and control);
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
