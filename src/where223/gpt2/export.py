"""Export GPT-2 to ONNX the way ORTModule does (training mode, no constant folding), keeping source stacks."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

from where223.eager.precision import autocast
from where223.files import atomic_model_path, atomic_path
from where223.pipeline import portable


@contextlib.contextmanager
def output_to(path: str | Path, fds: tuple[int, ...] = (1,)) -> Iterator[None]:
    """Send file descriptors (1: stdout, 2: stderr) to `path` for a while, C++ writers included.

    torch's verbose export dumps the graph from C++ and ORTModule logs at INFO; both belong in a log
    file beside the model, not in a notebook.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in fds}
    with open(path, "w") as sink:
        for fd in fds:
            os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def export_onnx(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    out_path: str | Path,
    opset: int,
    device: str,
    amp_dtype: str,
) -> Path:
    """Export `model(input_ids, attention_mask)` under autocast in TRAINING mode, as ORTModule would.

    `verbose=True` makes torch keep each node's Python stack in its doc_string (what `blame` reads);
    the graph dump that verbose mode prints goes to `<out>.log` beside the model.
    """
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # A trailing dict is passed as keyword arguments (GPT-2's second positional is past_key_values).
    args = (batch["input_ids"].to(device), {"attention_mask": batch["attention_mask"].to(device)})
    model = model.to(device)
    with atomic_model_path(out) as partial:  # readers of `out` never see a half-written model
        with autocast(device, amp_dtype), output_to(out.with_suffix(".log")):
            torch.onnx.export(
                model,
                args,
                str(partial),
                input_names=["input_ids", "attention_mask"],
                output_names=["logits"],
                opset_version=opset,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False,
                verbose=True,
            )
        stable_doc_strings(partial)
    return out


def stable_doc_strings(path: str | Path) -> Path:
    """Rewrite the stacks in node doc_strings (and stack metadata) with `portable.stack`, in place.

    The file then depends neither on where the checkout and the interpreter live nor on the notebook
    kernel's pid: two checkouts, or two reruns, export byte-identical models.
    """
    import onnx

    from where223.graph.loading import subgraphs

    model = onnx.load(str(path), load_external_data=False)
    changed = False
    for node in (node for _, graph in subgraphs(model.graph) for node in graph.node):
        rewritten = portable.stack(node.doc_string)
        if rewritten != node.doc_string:
            node.doc_string = rewritten
            changed = True
        for entry in getattr(node, "metadata_props", ()):  # NodeProto.metadata_props: onnx >= 1.16
            value = portable.stack(entry.value)
            if value != entry.value:
                entry.value = value
                changed = True
    if changed:
        with atomic_path(path) as partial:
            onnx.save(model, str(partial))
    return Path(path)
