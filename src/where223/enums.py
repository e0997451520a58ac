"""`TextEnum`: a string enum whose members print as their values, on every Python the project runs."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """What Python 3.11's `enum.StrEnum` gives, also on Python 3.10 (torch 1.12.1's matrix environment):
    members are `str`, compare equal to their values, and print and format as them."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
