"""Real transformers releases beside the pinned one, and the attention block of their exported graphs.

A historic variant of `where223.gpt2.variants` claims to write GPT-2 attention as a release did. The claim is
checked against the release itself: `make setup` installs each pure-Python wheel (no dependencies) into
`.cache/transformers/<version>` (`python -m where223.gpt2.releases --install`; nothing is installed at
notebook time), `export_with_release` exports the tiny model in a subprocess whose PYTHONPATH puts that folder
first (same settings as `export.export_onnx`: training mode, opset 17, bf16 autocast on CPU, weights from the
same seed), and `attention_block_signature` reduces a graph to what the variants change.

The signature covers the nodes of `/transformer/h.<layer>/attn/` from the scores MatMul through the Softmax,
in graph order: both lines the variants rewrite (scale and mask) lie there, and so do every Cast and
Constant they add; the projections around it are the same code in every release and would only lengthen
the comparison. `whole_block=True` takes every node of the attention module instead.

`python -m where223.gpt2.releases` is a worker entry point, not a `where223` command: an export with a release
needs a fresh interpreter whose sys.path puts that release's transformers before the pinned one, which no
command of an already running process can give.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from where223.gpt2 import runs
from where223.pipeline.installer import Installer, install_side_folder
from where223.pipeline.installer import choose as choose_installer
from where223.pipeline.paths import CACHE

if TYPE_CHECKING:
    import torch

    from where223.gpt2.reproduce import ReproduceSettings

RELEASES: dict[str, str] = {"4.24": "4.24.0", "4.25": "4.25.1", "4.26": "4.26.0"}
RELEASES_DIR: Path = CACHE / "transformers"
EXPORTS_DIR: Path = RELEASES_DIR / "exports"
# The parameters of every release and variant export: a reproduction run's, read by `export_settings`.
EXPORT_SETTINGS: dict[str, str | int] = {
    **runs.DEFAULTS,
    "path": "onnx_export",
    "device": "cpu",
    "amp_dtype": "bf16",
    "seq_len": 8,
}

Signature = list[tuple[str, tuple[str, ...]]]


def release_dir(version: str) -> Path:
    """The side folder of one transformers release (`make setup` installs it)."""
    return RELEASES_DIR / version


class ReleaseMissingError(RuntimeError):
    """A release's side folder is not there: `make setup` installs it."""


def installed_release(version: str) -> Path:
    """The side folder of transformers `version` as `make setup` left it; a one-line error when it is missing."""
    target = release_dir(version)
    if not (target / "transformers" / "__init__.py").is_file():
        raise ReleaseMissingError(f"transformers {version} is missing from {target}: run `make setup` to install it")
    return target


def install_release(version: str, installer: Installer) -> Path:
    """Install transformers `version` into its side folder unless it is there (the project's one side-folder
    installer, `where223.pipeline.installer.install_side_folder`: staged, then renamed into place)."""
    return install_side_folder(f"transformers=={version}", release_dir(version), installer)


def release_environment(version: str) -> dict[str, str]:
    """The environment of a subprocess that imports transformers `version` from its side folder."""
    side = str(installed_release(version))
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": side + (os.pathsep + inherited if inherited else "")}


def release_export_path(version: str) -> Path:
    """Where the export of the tiny model with release `version` is cached (named by torch's version)."""
    import torch

    return EXPORTS_DIR / f"transformers-{version}-torch-{torch.__version__}-{runs.run_name(EXPORT_SETTINGS)}.onnx"


def export_with_release(version: str, timeout_s: int = 600) -> Path:
    """Export the tiny model with transformers `version` (in a subprocess), cached; the ONNX file's path."""
    out = release_export_path(version)
    stamp = out.with_suffix(".json")
    if out.is_file() and stamp.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "where223.gpt2.releases", "--expect", version, "--out", str(out)]
    env = release_environment(version)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0 or not stamp.is_file():
        raise RuntimeError(f"export with transformers {version} failed:\n{result.stderr[-3000:]}")
    return out


def export_settings() -> ReproduceSettings:
    """EXPORT_SETTINGS as checked reproduction settings (they build the model and batch every export uses)."""
    from where223.gpt2.reproduce import ReproduceSettings

    return ReproduceSettings.from_parameters(EXPORT_SETTINGS)


def _export(settings: ReproduceSettings, model: torch.nn.Module, out: str | Path) -> Path:
    """Export `model` in training mode on the settings' batch, opset, device and precision."""
    from where223.gpt2.export import export_onnx

    batch = settings.build_batch()
    return export_onnx(model.train(), batch, out, settings.opset, settings.device, settings.amp_dtype)


def _export_here(expect: str, out: Path) -> None:
    """Child side of `export_with_release`: check the imported release, export, leave a stamp."""
    import transformers

    from where223.pipeline.records import write_json

    if transformers.__version__ != expect:
        raise SystemExit(f"expected transformers {expect}, imported {transformers.__version__}")
    settings = export_settings()
    _export(settings, settings.build_model(), out)
    stamp = {"transformers": transformers.__version__, "transformers_file": transformers.__file__}
    write_json(out.with_suffix(".json"), {**stamp, **EXPORT_SETTINGS})


def export_with_variant(name: str, out: str | Path) -> Path:
    """Export the tiny model with the pinned transformers patched to variant `name`, same settings."""
    from where223.gpt2.variants import patched_attention

    settings = export_settings()
    model = settings.build_model()
    with patched_attention(name):
        return _export(settings, model, out)


def attention_block_signature(onnx_path: str | Path, layer: int = 0, whole_block: bool = False) -> Signature:
    """(op_type, output types) of the attention nodes of layer `layer`, in graph order.

    By default from the scores MatMul through the Softmax (see the module docstring); every node of
    `/transformer/h.<layer>/attn/` with `whole_block=True`. Output types are ONNX Runtime style strings
    ('tensor(bfloat16)'), from `where223.graph.types` (weights are never loaded).
    """
    from where223.graph.loading import load_model
    from where223.graph.types import model_types

    model, _ = load_model(onnx_path)
    types = model_types(model)
    prefix = f"/transformer/h.{layer}/attn/"
    nodes = [node for node in model.graph.node if node.name.startswith(prefix)]
    if not nodes:
        raise ValueError(f"{onnx_path}: no node named {prefix}*; was it exported by where223.gpt2.export?")
    if not whole_block:
        ops = [node.op_type for node in nodes]
        if "MatMul" not in ops or "Softmax" not in ops:
            raise ValueError(f"{onnx_path}: layer {layer} attention has no MatMul ... Softmax span")
        nodes = nodes[ops.index("MatMul") : ops.index("Softmax") + 1]
    return [(node.op_type, tuple(str(types.type_of(out)) for out in node.output)) for node in nodes]


def cast_count(onnx_path: str | Path, layer: int = 0) -> int:
    """Cast nodes in layer `layer`'s attention block (scores MatMul through Softmax)."""
    return sum(op == "Cast" for op, _ in attention_block_signature(onnx_path, layer))


def main(argv: list[str] | None = None) -> int:
    """`python -m where223.gpt2.releases --expect VERSION --out FILE.onnx` (run by `export_with_release`);
    `--install` installs the side folders of RELEASES that are missing (run by `scripts/setup-env.sh`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="install every missing release side folder")
    parser.add_argument("--expect", help="the transformers version the import must find")
    parser.add_argument("--out", type=Path, help="where to write the ONNX file")
    args = parser.parse_args(argv)
    if args.install:
        installer = choose_installer()
        for version in RELEASES.values():
            print(f"transformers {version}: {install_release(version, installer)}")
        return 0
    if not (args.expect and args.out):
        parser.error("--expect and --out are required (or --install)")
    _export_here(args.expect, args.out)
    print(json.dumps({"out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
