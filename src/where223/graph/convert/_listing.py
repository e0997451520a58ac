"""The kernels an execution provider registers, as the installed ONNX Runtime lists them: what `convert` asks before it
lets a node compute in a reduced type.

ONNX Runtime 1.32 exports the listing as `onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()`: every
registered kernel with its provider, domain, op, schema version range and type constraints (keyed by a schema type
parameter or a formal input's name). The listing builds each provider compiled into the build and asks it for its
registry, so it lists only providers whose factory can be created here: the CPU build lists CPUExecutionProvider's
kernels alone (AzureExecutionProvider is available and lists none); a CUDA build needs its libraries and a device
to list CUDA's. A provider it lists no kernel for is refused with one line.

Why not the probed table of `lint --kernels` (`where223.graph.kernels`)? It says whether ONNX Runtime creates a
session for a one-node model, not which type the node computes in: the CPU provider has no float16 kernel for MatMul,
Add, Conv or Relu, yet it loads float16 ones, computing them in float between Casts it inserts itself (an isolated
float16 node too). The probe calls those available; the listing says there is no float16 kernel. onnxruntime-training
1.19.2 (.venv) does not export the listing: convert refuses there with one line rather than guess from the probe.

The listing is asked in a child process within `timeout_s` (it creates every provider of the build, natively), or
here with `timeout_s=None`; it is kept per process (the child: `where223.graph.ort_child --kernel-listing`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from where223.errors import UsageError, printable
from where223.graph.ort import import_onnxruntime

__all__ = ["KernelDef", "KernelListing", "kernel_listing", "NoListingError", "LISTING_TIMEOUT_S"]

LISTING_TIMEOUT_S = 120.0
_LISTED: dict[tuple[str, str], KernelListing] = {}


class NoListingError(UsageError, RuntimeError):
    """The installed ONNX Runtime cannot say which kernels the provider has (exit 2, one line)."""


@dataclass(frozen=True)
class KernelDef:
    """One registered kernel: op, domain, schema versions [since, until], and per constraint key the types allowed."""

    op_type: str
    domain: str
    since: int
    until: int
    constraints: tuple[tuple[str, frozenset[str]], ...]

    def accepts(self, bound: Mapping[str, set[str]]) -> bool:
        """Whether every type bound to each of its constraint keys is one it allows (a key nothing binds passes)."""
        return all(bound.get(key, set()) <= allowed for key, allowed in self.constraints)


class KernelListing:
    """One provider's registered kernels in the installed ONNX Runtime."""

    def __init__(self, provider: str, onnxruntime_version: str, kernels: Sequence[KernelDef]) -> None:
        self.provider = provider
        self.onnxruntime_version = onnxruntime_version
        self.by_op: dict[tuple[str, str], list[KernelDef]] = {}
        for kernel in kernels:
            self.by_op.setdefault((kernel.domain, kernel.op_type), []).append(kernel)

    def __len__(self) -> int:
        return sum(map(len, self.by_op.values()))

    def kernels(self, op_type: str, domain: str, since_version: int) -> list[KernelDef]:
        """The kernels registered for an op at the schema version a node resolves to."""
        domain = "" if domain == "ai.onnx" else domain
        return [k for k in self.by_op.get((domain, op_type), []) if k.since <= since_version <= k.until]

    def has_kernel(self, op_type: str, domain: str, since_version: int, bound: Mapping[str, set[str]]) -> bool:
        """Whether a kernel takes these types: `bound` maps each type parameter and formal name of the node to the
        types its values carry (the keys a kernel's constraints use)."""
        return any(kernel.accepts(bound) for kernel in self.kernels(op_type, domain, since_version))

    def types_of(self, op_type: str, domain: str, since_version: int) -> dict[str, set[str]]:
        """Per constraint key, every type some kernel of the op allows (for messages)."""
        found: dict[str, set[str]] = {}
        for kernel in self.kernels(op_type, domain, since_version):
            for key, allowed in kernel.constraints:
                found.setdefault(key, set()).update(allowed)
        return found


def _listed_here() -> tuple[str, list[dict]]:
    """ONNX Runtime's version and its listing as plain records; NoListingError when it has none."""
    onnxruntime = import_onnxruntime()
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as state
    except ImportError as error:
        raise NoListingError(f"onnxruntime {onnxruntime.__version__} has no native state module: {error}") from None
    listing = getattr(state, "get_all_opkernel_def", None)
    if listing is None:
        raise NoListingError(
            f"onnxruntime {onnxruntime.__version__} does not list its registered kernels (no get_all_opkernel_def); "
            "convert needs the listing, and the probed table of `lint --kernels` cannot stand in for it (it calls a "
            "float16 node available when ONNX Runtime computes it in float): run convert with an onnxruntime that "
            "lists them (1.32's does, .venv-graph)")  # fmt: skip
    try:
        kernels = listing()
    except Exception as error:  # a provider of the build that cannot be created here
        raise NoListingError(f"onnxruntime {onnxruntime.__version__} could not list its kernels here: "
                             f"{printable(str(error).strip().splitlines()[-1] if str(error).strip() else '', 300)}"
                             ) from None  # fmt: skip
    records = [{"op": k.op_name, "domain": k.domain, "provider": k.provider, "range": list(k.version_range),
                "constraints": {key: list(types) for key, types in k.type_constraints.items()}} for k in kernels]
    return onnxruntime.__version__, records


def _listed_in_child(timeout_s: float) -> tuple[str, list[dict]]:
    search = [str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, search))}
    try:
        done = subprocess.run([sys.executable, "-m", "where223.graph.ort_child", "--kernel-listing"],
                              capture_output=True, text=True, timeout=timeout_s, env=environment,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NoListingError(f"ONNX Runtime did not list its kernels within {timeout_s:g} s: stopped") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        how = f"died with signal {-done.returncode}" if done.returncode < 0 else f"exited with {done.returncode}"
        raise NoListingError(f"ONNX Runtime's kernel listing {how} {printable(last, 300)}".strip())
    answer = json.loads(lines[-1])
    if answer.get("error"):
        raise NoListingError(answer["error"])
    return answer["version"], answer["kernels"]


def kernel_listing(provider: str = "CPUExecutionProvider",
                   timeout_s: float | None = LISTING_TIMEOUT_S) -> KernelListing:
    """The kernels the installed ONNX Runtime lists for `provider` (see the module's docstring). NoListingError (one
    line) when it lists none for it, or cannot list any; UsageError for a provider it does not have."""
    onnxruntime = import_onnxruntime()
    available = onnxruntime.get_available_providers()
    if provider not in available:
        raise UsageError(f"execution provider {provider!r} is not in this onnxruntime ({', '.join(available)})")
    key = (onnxruntime.__version__, provider)
    if key in _LISTED:
        return _LISTED[key]
    version, records = _listed_here() if timeout_s is None else _listed_in_child(timeout_s)
    kernels = [
        KernelDef(r["op"], r["domain"], r["range"][0], r["range"][1],
                  tuple((k, frozenset(v)) for k, v in sorted(r["constraints"].items())))
        for r in records if r["provider"] == provider
    ]  # fmt: skip
    if not kernels:
        listed = sorted({r["provider"] for r in records})
        raise NoListingError(f"onnxruntime {version} lists no kernel for {provider} on this machine (it lists "
                             f"{', '.join(listed) or 'none'}): its kernels cannot be known here")
    _LISTED[key] = listing = KernelListing(provider, version, kernels)
    return listing


def child_listing() -> dict[str, Any]:
    """The child's side (`python -m where223.graph.ort_child --kernel-listing`): {"version", "kernels"} or
    {"error"}."""
    try:
        version, records = _listed_here()
    except NoListingError as error:
        return {"error": str(error)}
    return {"version": version, "kernels": records}
