"""The roles every question's package has, in the same file names, and their loading when first used (PEP 562),
so that `analysis` and `section` load without `run`'s torch:

- `record`: where its records go and their types (standard library only);
- `run`: the code that produces the records;
- `analysis`: what the records say, read from the records only (no torch);
- `figure`: its figures;
- `section`: its section of the write-up (`where223.study.report` assembles them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

ROLES: tuple[str, ...] = ("analysis", "figure", "record", "run", "section")


def lazy(package: str) -> Callable[[str], ModuleType]:
    """The module `__getattr__` of a question's package: a role is imported when first asked for."""

    def __getattr__(name: str) -> ModuleType:
        if name not in ROLES:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return importlib.import_module(f"{package}.{name}")

    return __getattr__
