"""ONNX type names and their conversions: element-type enums, ONNX Runtime style type strings."""

from __future__ import annotations

import functools

import onnx


@functools.cache
def elem_type_name(elem_type: int) -> str:
    """The lower-case TensorProto name of an element type: 1 -> 'float', 10 -> 'float16'.

    UnknownElementTypeError (a MalformedModelError: one line, exit 2) for a number the installed onnx defines no
    type for.
    """
    try:
        return onnx.helper.tensor_dtype_to_string(elem_type).split(".")[-1].lower()
    except (KeyError, ValueError) as error:
        from where223.graph.loading import UnknownElementTypeError

        raise UnknownElementTypeError(f"element type {elem_type} is not one the installed onnx defines") from error


@functools.cache
def _tensor_text(kind: str, elem: int) -> str | None:
    """type_string of a tensor or sparse tensor type (`kind`, its oneof's name) of element type `elem`."""
    if elem == onnx.TensorProto.UNDEFINED:
        return None
    prefix = "tensor" if kind == "tensor_type" else "sparse_tensor"
    return f"{prefix}({elem_type_name(elem)})"


def type_string(type_proto: onnx.TypeProto) -> str | None:
    """ONNX Runtime style type string ('tensor(float)', 'seq(tensor(int64))'), None when undefined."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        return _tensor_text(kind, getattr(type_proto, kind).elem_type)
    if kind in ("sequence_type", "optional_type"):
        inner = type_string(getattr(type_proto, kind).elem_type)
        prefix = "seq" if kind == "sequence_type" else "optional"
        return f"{prefix}({inner})" if inner else None
    if kind == "map_type":
        value = type_string(type_proto.map_type.value_type)
        if value is None:
            return None
        # onnx's schemas spell map values bare: map(string, float)
        return f"map({elem_type_name(type_proto.map_type.key_type)}, {short_type(value)})"
    return None


def short_type(ort: str) -> str:
    """The human name of a type string: 'tensor(float16)' -> 'float16'; other kinds are kept whole."""
    if ort.startswith("tensor(") and ort.endswith(")"):
        return ort[len("tensor(") : -1]
    return ort


def tensor_type_string(name: str) -> str:
    """'float16' or 'tensor(float16)' -> 'tensor(float16)'; ValueError for unknown element types."""
    bare = short_type(name.strip().lower())
    known = {elem_type_name(v) for v in onnx.TensorProto.DataType.values() if v}
    if bare not in known:
        raise ValueError(f"unknown ONNX element type {name!r}; expected one of {', '.join(sorted(known))}")
    return f"tensor({bare})"


def elem_type_of(ort: str) -> int:
    """The TensorProto enum of a tensor type string: 'tensor(float16)' -> 10."""
    return int(getattr(onnx.TensorProto, short_type(tensor_type_string(ort)).upper()))


def tensor_type(elem_type: int, dims: list[int] | None = None) -> onnx.TypeProto:
    """A tensor TypeProto of `elem_type`, with a shape when `dims` is given."""
    return onnx.helper.make_tensor_type_proto(elem_type, dims)
