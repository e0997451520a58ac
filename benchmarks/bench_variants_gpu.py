"""The eager half of the variant study on a CUDA GPU, needing only torch, transformers 4.25.1 and the stdlib.

Per variant (the same definitions as `where223.gpt2.variants`, imported from this checkout's `src/`, which
needs no installation): eager logits bitwise equal to transformers 4.25.1 or not, host-made tensors per
forward, and eager fp16 training steps of the 124M GPT-2, interleaved round-robin: the median step time as
a ratio to 4.25, and `cudaStreamSynchronize`, `cudaMemcpy*` and host-to-device copies per step from
torch.profiler. The export columns come from the CPU run (`where223 bench-variants`): the eager numbers do
not depend on the exporter, so a GPU machine with a newer torch is fine. The record goes to
`outputs/variants/variants-cuda.json` with the GPU's name and the torch version; commit it.

Environment. transformers 4.25.1 is a pure-Python wheel, but at import it rejects an installed `tokenizers`
newer than 0.13 and it predates huggingface_hub 1.x. So everything it imports, except torch and numpy, goes
into one side folder put first on PYTHONPATH, which shadows whatever the machine has installed:

    # where pip reaches PyPI: fetch the wheels (about 15 MB) for the GPU machine's Python
    python benchmarks/bench_variants_gpu.py --download .cache/gpu-wheels --python-version 3.11
    # on the GPU machine (a CUDA torch and numpy installed; no network needed): unpack, then run
    python benchmarks/bench_variants_gpu.py --prepare .cache/gpu-side --wheels .cache/gpu-wheels
    PYTHONPATH=.cache/gpu-side python benchmarks/bench_variants_gpu.py

(`--prepare` without `--wheels` installs from PyPI directly.) The unpacked folder is about 100 MB, so carry
the wheels, not the folder. The run checks that transformers 4.25.1 was imported and, at the end, that
none of the project's ONNX-side modules was.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The project's modules that need onnx, onnxruntime or optimum (torch itself may import onnx if installed).
ONNX_SIDE: tuple[str, ...] = ("where223.graph", "where223.eager.divergence", "where223.gpt2.reproduce", "optimum")
TRANSFORMERS = "4.25.1"
# What transformers 4.25.1 and huggingface_hub 0.16.4 import, pinned to releases that support both; all are
# pure Python or have wheels for CPython 3.8-3.12 (tokenizers 0.13.3: 3.7-3.11; see --no-tokenizers).
SIDE_PACKAGES: tuple[str, ...] = (
    f"transformers=={TRANSFORMERS}",
    "huggingface_hub==0.16.4",
    "tokenizers==0.13.3",
    "filelock==3.12.2",
    "fsspec==2023.6.0",
    "packaging==23.1",
    "pyyaml==6.0.1",
    "regex==2023.12.25",
    "requests==2.31.0",
    "urllib3==2.0.4",
    "idna==3.4",
    "charset_normalizer==3.2.0",
    "certifi==2023.7.22",
    "tqdm==4.65.0",
    "typing_extensions==4.7.1",
)


def _packages(tokenizers: bool) -> list[str]:
    return [p for p in SIDE_PACKAGES if tokenizers or not p.startswith("tokenizers")]


def download(wheels: Path, python_version: str | None, tokenizers: bool) -> int:
    """pip download the wheels of SIDE_PACKAGES (no dependencies) into `wheels`, for `python_version`."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
    if python_version:
        command += ["--python-version", python_version, "--implementation", "cp"]
        command += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64"]
    return subprocess.call([*command, *_packages(tokenizers)])


def prepare(target: Path, wheels: Path | None, tokenizers: bool) -> int:
    """pip install SIDE_PACKAGES (no dependencies, wheels only) into `target`, offline from `wheels` if given."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", "--target", str(target)]
    if wheels:
        command += ["--no-index", "--find-links", str(wheels)]
    return subprocess.call([*command, *_packages(tokenizers)])


def measure(args: argparse.Namespace) -> int:
    """Run the eager study on `args.device` and print the table."""
    import transformers

    if transformers.__version__ != TRANSFORMERS:
        sys.exit(
            f"transformers {transformers.__version__} imported from {transformers.__file__}; this benchmark patches "
            f"{TRANSFORMERS}: run --prepare and put the folder first on PYTHONPATH (see this script's docstring)"
        )
    sys.path.insert(0, str(REPO / "src"))
    from where223.study.variants import analysis as ranking
    from where223.study.variants import run as bench

    settings = bench.StudySettings.resolve(
        device=args.device,
        amp_dtype="auto",
        preset=args.preset,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        steps=args.steps,
        warmup=args.warmup,
        profile_steps=args.profile_steps,
        export=False,
    )
    export_record = args.export_record or REPO / "outputs" / "variants" / "variants-cpu.json"
    record = bench.run_study(
        settings,
        args.out or None,
        progress=print,
        export_record=export_record if export_record.is_file() else None,
    )
    print(ranking.format_table(record))
    print(f"\nwritten: {record['path']}")
    onnx_side = sorted(name for name in sys.modules if name.startswith(ONNX_SIDE))
    if onnx_side:
        sys.exit(f"the benchmark imported {onnx_side}: its eager half must run without the ONNX side")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--download", type=Path, metavar="DIR", help="download the wheels into DIR and stop")
    parser.add_argument("--python-version", help="with --download: the GPU machine's Python, e.g. 3.11")
    parser.add_argument("--prepare", type=Path, metavar="DIR", help="install the side folder into DIR and stop")
    parser.add_argument("--wheels", type=Path, help="with --prepare: install offline from this --download folder")
    parser.add_argument(
        "--no-tokenizers",
        action="store_true",
        help="with --download/--prepare: leave tokenizers out (for a machine that has none installed)",
    )
    parser.add_argument("--device", default="cuda", help="cuda (default); cpu only to try the script out")
    parser.add_argument("--preset", default="gpt2", help="gpt2 (124M, default) | tiny")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50, help="timed steps per variant (default 50)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument(
        "--export-record",
        type=Path,
        help="JSON whose export columns to reuse (default outputs/variants/variants-cpu.json when present)",
    )
    parser.add_argument("--out", default="", help="output root (default outputs/ of this checkout)")
    args = parser.parse_args(argv)
    if args.download:
        return download(args.download, args.python_version, not args.no_tokenizers)
    if args.prepare:
        return prepare(args.prepare, args.wheels, not args.no_tokenizers)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
