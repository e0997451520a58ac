"""Which element types hold which exactly, and the numbering torch gives them: what the repair rules choose from."""

from __future__ import annotations

from collections.abc import Iterable

from where223.graph.dtypes import short_type

# Each type's exact supertypes, nearest first: every value of the key is a value of each of them.
SUPERTYPES: dict[str, tuple[str, ...]] = {
    "bfloat16": ("float", "double"),
    "float16": ("float", "double"),
    "float": ("double",),
    "double": (),
    "int8": ("int16", "int32", "int64"),
    "int16": ("int32", "int64"),
    "int32": ("int64",),
    "int64": (),
    "uint8": ("uint16", "int16", "uint32", "int32", "uint64", "int64"),
    "uint16": ("uint32", "int32", "uint64", "int64"),
    "uint32": ("uint64", "int64"),
    "uint64": (),
}
_BITS = {"bfloat16": 16, "float16": 16, "float": 32, "double": 64, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16,
         "int32": 32, "uint32": 32, "int64": 64, "uint64": 64}

# torch's ScalarType numbers (c10/core/ScalarType.h) where they differ from ONNX's TensorProto numbers for the same
# number: the TorchScript exporter has passed torch's number as a Cast's `to` (15: torch's bfloat16, ONNX's
# complex128), so a Cast target read the torch way is one candidate for what the exporter meant.
TORCH_SCALAR_TYPES: dict[int, str] = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                                      6: "float", 7: "double", 11: "bool", 15: "bfloat16"}


def holds(wide: str, narrow: str) -> bool:
    """Whether every value of tensor type `narrow` is exactly a value of `wide` ('tensor(float)' holds bf16)."""
    wide, narrow = short_type(wide), short_type(narrow)
    return wide == narrow or wide in SUPERTYPES.get(narrow, ())


def widest(types: Iterable[str]) -> str | None:
    """The smallest tensor type that holds each of `types` exactly ({bf16, float} -> float, {bf16, fp16} ->
    float), None when none does (a float and an int64, a bool and a float)."""
    wanted = [short_type(t) for t in types]
    candidates = {t for t in wanted} | {s for t in wanted for s in SUPERTYPES.get(t, ())}
    fitting = [c for c in candidates if c in _BITS and all(holds(c, t) for t in wanted)]
    if not fitting:
        return None
    return f"tensor({min(fitting, key=lambda c: (_BITS[c], list(SUPERTYPES).index(c)))})"


def nearest_allowed(type_str: str, allowed: Iterable[str]) -> str | None:
    """The nearest type that holds `type_str` exactly and is among `allowed` (bf16 into a Conv of float, float16,
    double -> float), None when there is none."""
    allowed = set(allowed)
    if type_str in allowed:
        return type_str
    for wider in SUPERTYPES.get(short_type(type_str), ()):
        if f"tensor({wider})" in allowed:
            return f"tensor({wider})"
    return None
