"""Short, deterministic training runs: PyTorch eager and ORTModule, side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from where223.eager.precision import autocast
from where223.gpt2 import models
from where223.gpt2.export import output_to
from where223.gpt2.reproduce import ortmodule_environment


@dataclass
class TrainingRun:
    """What a short training run measured: each step's loss, every parameter's gradient after the first
    backward (by parameter name, on the CPU), and for ORTModule what its execution manager held at the end."""

    losses: list[float]
    first_gradients: dict[str, torch.Tensor]
    ort_execution: dict[str, Any] = field(default_factory=dict)


def batches(dataset: torch.utils.data.Dataset, batch_size: int, steps: int) -> list[dict[str, torch.Tensor]]:
    """`steps` consecutive batches of `batch_size` rows, wrapping around the dataset."""
    rows = [dataset[index % len(dataset)] for index in range(batch_size * steps)]
    return [
        {key: torch.stack([row[key] for row in rows[step * batch_size : (step + 1) * batch_size]]) for key in rows[0]}
        for step in range(steps)
    ]


def train(
    module: Callable[..., object],
    parameters: dict[str, torch.nn.Parameter],
    data: list[dict[str, torch.Tensor]],
    device: str,
    amp_dtype: str,
    lr: float = 1e-3,
) -> TrainingRun:
    """AdamW steps over `data`: the loss of each step, in order, and the gradients of the first backward."""
    optimizer = torch.optim.AdamW(list(parameters.values()), lr=lr)
    losses: list[float] = []
    first_gradients: dict[str, torch.Tensor] = {}
    for batch in data:
        optimizer.zero_grad()
        inputs = {key: value.to(device) for key, value in batch.items()}
        with autocast(device, amp_dtype):
            loss = module(**inputs).loss
        loss.backward()
        if not first_gradients:
            first_gradients = {
                name: (p.grad.detach().float().cpu().clone() if p.grad is not None else torch.zeros(p.shape))
                for name, p in parameters.items()
            }
        optimizer.step()
        losses.append(float(loss.detach()))
    return TrainingRun(losses, first_gradients)


def eager_training(
    preset: str, seed: int, data: list, device: str, amp_dtype: str, dropout: bool = False
) -> TrainingRun:
    """Plain PyTorch training from `seed`, dropout off by default (ORT draws other random numbers)."""
    model = models.build_model(preset, seed, dropout=dropout).to(device).train()
    return train(model, dict(model.named_parameters()), data, device, amp_dtype)


def ortmodule_execution(wrapped: Any) -> dict[str, Any]:
    """What ORTModule's training execution manager holds: the fallback policy, whether a fallback is pending,
    and the execution agent that ran the graph (None if ONNX Runtime never executed it)."""
    manager = wrapped._torch_module._execution_manager(True)
    agent = manager._execution_agent
    return {
        "fallback_policy": wrapped._fallback_manager.policy.name,
        "fallback_pending": bool(wrapped._fallback_manager.is_pending()),
        "execution_agent": type(agent).__name__ if agent is not None else None,
        "inference_session": type(agent._inference_session).__name__ if agent is not None else None,
    }


def ortmodule_training(
    preset: str, seed: int, data: list, device: str, amp_dtype: str, opset: int, log_dir: Path, dropout: bool = False
) -> TrainingRun:
    """The same training through ORTModule with fallback to PyTorch disabled; what its execution manager held
    is observed after the run (ORT's log goes to `log_dir/ortmodule-train.log`)."""
    from onnxruntime.training.ortmodule import ORTModule

    model = models.build_model(preset, seed, dropout=dropout).to(device).train()
    log_dir.mkdir(parents=True, exist_ok=True)
    with ortmodule_environment(opset), output_to(log_dir / "ortmodule-train.log", fds=(1, 2)):
        wrapped = ORTModule(model)
        run = train(wrapped, dict(model.named_parameters()), data, device, amp_dtype)
    run.ort_execution = ortmodule_execution(wrapped)
    return run
