"""The versions and device recorded beside every result."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from typing import Any

PACKAGES = (
    "torch",
    "transformers",
    "onnx",
    "onnxruntime-training-cpu",
    "onnxruntime-training",
    "onnxruntime",
    "optimum",
    "numpy",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions (None where a distribution is absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_name(device: str = "cpu") -> str:
    """A human name for the device a result was measured on."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return _cpu_model() or platform.processor() or platform.machine()


def _cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), if readable."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def describe(device: str = "cpu") -> dict[str, Any]:
    """The environment record: python, packages, platform, device."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "device": device,
        "device_name": device_name(device),
    }
