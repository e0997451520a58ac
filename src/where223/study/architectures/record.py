"""The architectures study's records: where they go and their types (standard library only)."""

from __future__ import annotations
