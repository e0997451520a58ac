"""The ONNX exporters sweep cells use, by name; an open set like the recipes (`register`).

Each exporter is called as `export(torch, module, args, path, opset=..., mode=..., input_names=..., doc_strings=...)`
inside the recipe's context and returns what the record says of the export (the API used, the opset asked for,
the training flag). `opset` is an int or `auto`: opset 17, or 16 with torch 1.12, whose exporter stops there (the
dynamo exporters choose their own). `mode` is `train` or `eval`. An exporter the installed torch lacks raises
`NotApplicable`: that cell cannot exist.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

OPSET = 17
OPSET_FOR_TORCH: dict[str, int] = {"1.12": 16}  # torch 1.12's exporter stops at opset 16
MODES = ("train", "eval")


class NotApplicable(Exception):
    """The cell cannot exist with this stack (the message says why)."""


def resolve_opset(torch: Any, opset: int | str) -> int:
    """The opset asked of the TorchScript exporter for `opset` (`auto`: 17, or the newest this torch has)."""
    if opset != "auto":
        return int(opset)
    return OPSET_FOR_TORCH.get(".".join(torch.__version__.split(".")[:2]), OPSET)


def _has_dynamo_flag(torch: Any) -> bool:
    return "dynamo" in inspect.signature(torch.onnx.export).parameters


def torchscript(
    torch: Any, module: Any, args: tuple[Any, ...], path: Path, *, opset: int | str, mode: str,
    input_names: Sequence[str], doc_strings: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """torch.onnx.export's TorchScript exporter, no constant folding, in `mode`; with `doc_strings` verbose, so each
    node carries its Python stack (what `where223 blame` reads)."""
    resolved = resolve_opset(torch, opset)
    training = torch.onnx.TrainingMode.TRAINING if mode == "train" else torch.onnx.TrainingMode.EVAL
    kwargs: dict[str, Any] = {
        "training": training,
        "opset_version": resolved,
        "do_constant_folding": False,
        "input_names": list(input_names),
        "verbose": doc_strings,
    }
    if _has_dynamo_flag(torch):
        kwargs["dynamo"] = False
    torch.onnx.export(module, args, str(path), **kwargs)
    api = "torch.onnx.export(dynamo=False)" if "dynamo" in kwargs else "torch.onnx.export"
    return {"api": api, "training": f"TrainingMode.{training.name}", "opset_requested": resolved}


def dynamo(
    torch: Any, module: Any, args: tuple[Any, ...], path: Path, *, opset: int | str, mode: str,
    input_names: Sequence[str], doc_strings: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The dynamo-based exporter: `torch.onnx.export(dynamo=True)`, else `torch.onnx.dynamo_export` (2.1-2.4)."""
    module.train(mode == "train")
    kwargs: dict[str, Any] = {} if opset == "auto" else {"opset_version": int(opset)}
    if _has_dynamo_flag(torch):
        torch.onnx.export(module, args, str(path), dynamo=True, input_names=list(input_names), **kwargs)
        api = "torch.onnx.export(dynamo=True)"
    elif hasattr(torch.onnx, "dynamo_export"):
        if kwargs:
            raise NotApplicable(f"torch {torch.__version__}'s torch.onnx.dynamo_export takes no opset")
        torch.onnx.dynamo_export(module, *args).save(str(path))
        api = "torch.onnx.dynamo_export"
    else:
        raise NotApplicable(
            f"torch {torch.__version__} has no dynamo-based ONNX exporter "
            "(torch.onnx.dynamo_export arrived in torch 2.1)"
        )
    return {"api": api, "training": f"model.train({mode == 'train'}) (the dynamo exporters take no training flag)"}


Exporter = Callable[..., dict[str, Any]]
EXPORTERS: dict[str, Exporter] = {"torchscript": torchscript, "dynamo": dynamo}


def register(name: str, exporter: Exporter) -> Exporter:
    """Add an exporter to the open set (a name already taken is an error)."""
    if name in EXPORTERS:
        raise ValueError(f"exporter {name!r} is already registered")
    EXPORTERS[name] = exporter
    return exporter
