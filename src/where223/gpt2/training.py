"""Short, deterministic training runs: PyTorch eager and ORTModule, side by side."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from where223.gpt2 import models
from where223.gpt2.export import autocast, output_to
from where223.gpt2.reproduce import ortmodule_environment


def batches(dataset: torch.utils.data.Dataset, batch_size: int, steps: int) -> list[dict[str, torch.Tensor]]:
    """`steps` consecutive batches of `batch_size` rows, wrapping around the dataset."""
    rows = [dataset[index % len(dataset)] for index in range(batch_size * steps)]
    return [
        {key: torch.stack([row[key] for row in rows[step * batch_size : (step + 1) * batch_size]]) for key in rows[0]}
        for step in range(steps)
    ]


def train_losses(
    module: Callable[..., object],
    parameters: list[torch.nn.Parameter],
    data: list[dict[str, torch.Tensor]],
    device: str,
    amp_dtype: str,
    lr: float = 1e-3,
) -> list[float]:
    """AdamW steps over `data`; the loss of each step, in order."""
    optimizer = torch.optim.AdamW(parameters, lr=lr)
    losses = []
    for batch in data:
        optimizer.zero_grad()
        inputs = {key: value.to(device) for key, value in batch.items()}
        with autocast(device, amp_dtype):
            loss = module(**inputs).loss
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def eager_losses(preset: str, seed: int, data: list, device: str, amp_dtype: str) -> list[float]:
    """Losses of plain PyTorch training from `seed`, dropout off (ORT draws other random numbers)."""
    model = models.build_model(preset, seed, dropout=False).to(device).train()
    return train_losses(model, list(model.parameters()), data, device, amp_dtype)


def ortmodule_losses(
    preset: str, seed: int, data: list, device: str, amp_dtype: str, opset: int, log_dir: Path
) -> list[float]:
    """Losses of the same training through ORTModule (ORT's log goes to `log_dir/ortmodule-train.log`)."""
    from onnxruntime.training.ortmodule import ORTModule

    model = models.build_model(preset, seed, dropout=False).to(device).train()
    log_dir.mkdir(parents=True, exist_ok=True)
    with ortmodule_environment(opset), output_to(log_dir / "ortmodule-train.log", fds=(1, 2)):
        wrapped = ORTModule(model)
        return train_losses(wrapped, list(model.parameters()), data, device, amp_dtype)
