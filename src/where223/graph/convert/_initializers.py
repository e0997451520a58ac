"""Rule: a float32 initializer read in the reduced type is rounded to it (to nearest, ties to even), and what that
costs is counted: values that overflow to infinity, nonzero values flushed to zero, values left subnormal."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import onnx_ir as ir

__all__ = ["InitializerConversion", "convert_tensor"]


@dataclass(frozen=True)
class InitializerConversion:
    """One initializer rounded to the reduced type: its name in the result, and what the rounding cost."""

    name: str
    source: str  # the float32 initializer it was made from
    elements: int
    overflowed: int  # finite values that became infinite
    flushed: int  # nonzero values that became zero
    subnormal: int  # nonzero values left below the type's smallest normal (fewer significant bits)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def convert_tensor(tensor: ir.TensorProtocol, dtype: ir.DataType, name: str, source: str,
                   smallest_normal: float) -> tuple[ir.Tensor, InitializerConversion]:  # fmt: skip
    """`tensor` (float32) rounded to `dtype`, named `name`, with what the rounding cost."""
    original = np.asarray(tensor.numpy(), dtype=np.float32)
    with np.errstate(over="ignore"):  # counted below
        rounded = original.astype(dtype.numpy())
    back = rounded.astype(np.float32)
    finite, nonzero = np.isfinite(original), original != 0
    cost = InitializerConversion(
        name=name, source=source, elements=int(original.size),
        overflowed=int(np.count_nonzero(finite & ~np.isfinite(back))),
        flushed=int(np.count_nonzero(nonzero & (back == 0))),
        subnormal=int(np.count_nonzero((back != 0) & (np.abs(back) < smallest_normal))),
    )  # fmt: skip
    return ir.tensor(rounded, dtype=dtype, name=name), cost
