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

Real CUDA fp16 autocast against its emulation on CPU (`--compare-emulation`; needs only Python and a recent torch,
no transformers, no network). It traces small torch-only models (`EMULATION_MODELS`: GPT-2 4.25.1's masked
attention, a Conv1D MLP, layer norm, softmax, norm, promotion, einsum, conv with group norm) twice on the same
machine: on the GPU under `torch.autocast("cuda", torch.float16)`, and on CPU tensors under
`where223.cuda_autocast` with the lists of that machine's torch (read from its own header and dispatcher,
or the bundled file for its release). It compares the TorchScript graphs node by node (op, input and output
types; Casts counted) and, where onnx imports, the ONNX exports; it writes one JSON record whatever fails
(`outputs/variants/cuda-emulation.json`, each part with its error). What it validates is the mechanism for that
machine's torch release, not the historic release's lists (2.1.2's lists are checked against 2.1.2's binary only).

    # here: a bundle of this script, the emulation module and the committed lists (well under 1 MB)
    python benchmarks/bench_variants_gpu.py --bundle /tmp/cuda-emulation
    # on the GPU machine (finishes in well under 5 minutes)
    python /tmp/cuda-emulation/bench_variants_gpu.py --compare-emulation --out /tmp/cuda-emulation/out
"""

from __future__ import annotations

import argparse
import difflib
import json
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# ---------------------------------------------------------------------------------------------------------------------
# Real CUDA fp16 autocast against the emulation (torch only).

EMULATION_RECORD = "variants/cuda-emulation.json"
# GPT-2 sizes of the tiny preset: batch, sequence, width, heads
SIZES = {"batch": 2, "seq": 8, "width": 32, "heads": 2}
# The graph nodes that carry no op of the model: constants, lists, attribute reads
_PLUMBING_KINDS = ("prim::Constant", "prim::ListConstruct", "prim::ListUnpack", "prim::GetAttr", "prim::TupleConstruct",
                   "prim::TupleUnpack", "prim::NumToTensor", "aten::Int", "aten::size", "prim::device", "prim::dtype")
_CAST_KINDS = ("aten::to", "aten::_to_copy", "aten::type_as")


def emulation_models(torch: Any) -> dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]]:
    """Small torch-only models, each a factory of (module, example inputs) on CPU, float32, eval mode."""
    nn = torch.nn
    b, t, w, h = SIZES["batch"], SIZES["seq"], SIZES["width"], SIZES["heads"]

    class Gpt2Attention(nn.Module):
        """GPT-2 4.25.1's `_attn` and Conv1D projections: scores, scale, the mask value in the scores' dtype, where."""

        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(w, 3 * w), nn.Linear(w, w)
            self.register_buffer("bias", torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t))

        def forward(self, x):
            q, k, v = (part.view(b, t, h, w // h).transpose(1, 2) for part in self.c_attn(x).split(w, dim=2))
            scores = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
            mask_value = torch.full([], torch.finfo(scores.dtype).min, dtype=scores.dtype)
            scores = torch.where(self.bias[:, :, :t, :t], scores, mask_value)
            out = torch.matmul(nn.functional.softmax(scores, dim=-1), v)
            return self.c_proj(out.transpose(1, 2).reshape(b, t, w))

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.randn(w, 4 * w) * 0.02), nn.Parameter(torch.zeros(4 * w))

        def forward(self, x):  # transformers' Conv1D: addmm, then GELU
            return nn.functional.gelu(torch.addmm(self.bias, x.view(-1, w), self.weight))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln, self.attn, self.mlp = nn.LayerNorm(w), Gpt2Attention(), Mlp()

        def forward(self, x):
            hidden = x + self.attn(self.ln(x))
            return self.mlp(self.ln(hidden)).sum(-1)

    class NormPromote(nn.Module):
        def forward(self, x, y):  # norm: fp32_append_dtype; addcmul: promote; cumsum: fp32_set_opt_dtype
            return torch.addcmul(x, x @ y, y).norm(dim=-1) + torch.cumsum(x @ y, -1).sum(-1)

    class EinsumExp(nn.Module):
        def forward(self, x, y):  # einsum: lower precision; exp and log_softmax: fp32
            return torch.einsum("bij,bjk->bik", x, y).exp().log_softmax(-1)

    class ConvGroupNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm = nn.Conv1d(4, 8, 3, padding=1), nn.GroupNorm(2, 8)

        def forward(self, x):
            return self.norm(self.conv(x)).relu()

    def made(module: Any, *inputs: Any) -> tuple[Any, tuple[Any, ...]]:
        return module.eval(), inputs

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=torch.Generator().manual_seed(0))

    return {
        "gpt2_attention": lambda: made(Gpt2Attention(), randn(b, t, w)),
        "gpt2_block": lambda: made(Block(), randn(b, t, w)),
        "norm_promote": lambda: made(NormPromote(), randn(b, t, t), randn(b, t, t)),
        "einsum_exp": lambda: made(EinsumExp(), randn(b, t, t), randn(b, t, t)),
        "conv_group_norm": lambda: made(ConvGroupNorm(), randn(b, 4, t)),
    }


def _type_name(value: Any) -> str:
    kind = value.type()
    if kind.kind() == "TensorType":
        return kind.scalarType() or "Tensor"
    return str(kind)


def graph_signature(graph: Any) -> list[dict[str, Any]]:
    """A TorchScript graph as the comparison sees it: per op node, its kind and its inputs' and outputs' types
    (scalar types of tensors, the type kind of the rest); constants, lists and attribute reads left out."""
    return [{"kind": node.kind(), "inputs": [_type_name(value) for value in node.inputs()],
             "outputs": [_type_name(value) for value in node.outputs()]}
            for node in graph.nodes() if node.kind() not in _PLUMBING_KINDS]  # fmt: skip


def onnx_signature(model: Any) -> list[dict[str, Any]]:
    """An ONNX model as the comparison sees it: per node, op type and its inputs' and outputs' element types."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {value.name: value.type.tensor_type.elem_type for value in
             [*graph.input, *graph.output, *graph.value_info]}  # fmt: skip
    types.update({init.name: init.data_type for init in graph.initializer})

    def name(value: str) -> str:
        elem = types.get(value)
        return "?" if not elem else onnx.TensorProto.DataType.Name(elem).lower()

    return [{"kind": node.op_type, "inputs": [name(v) for v in node.input if v],
             "outputs": [name(v) for v in node.output]} for node in graph.node]  # fmt: skip


def compare_signatures(real: list[dict[str, Any]], emulated: list[dict[str, Any]],
                       cast_kinds: tuple[str, ...] = _CAST_KINDS + ("Cast",)) -> dict[str, Any]:
    """Node-by-node comparison of two signatures: equal or not, each difference (difflib's opcodes over the
    nodes, with the nodes on either side), and the Casts each side has."""
    keyed = [[json.dumps(node, sort_keys=True) for node in side] for side in (real, emulated)]
    differences = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=keyed[0], b=keyed[1], autojunk=False).get_opcodes():
        if tag != "equal":
            differences.append({"change": tag, "real": real[i1:i2], "emulated": emulated[j1:j2]})
    casts = {side: sum(node["kind"] in cast_kinds for node in nodes) for side, nodes in
             (("real", real), ("emulated", emulated))}  # fmt: skip
    return {"equal": not differences, "nodes": {"real": len(real), "emulated": len(emulated)}, "casts": casts,
            "differences": differences}


def _emulation_module() -> Any:
    """where223.cuda_autocast from this checkout, or `cuda_autocast` beside this script in a bundle."""
    here = Path(__file__).resolve().parent
    if (here / "cuda_autocast.py").is_file():
        sys.path.insert(0, str(here))
        import cuda_autocast

        return cuda_autocast
    sys.path.insert(0, str(REPO / "src"))
    from where223 import cuda_autocast

    return cuda_autocast


def _trace(torch: Any, module: Any, inputs: tuple[Any, ...]) -> Any:
    previous = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)  # as torch.onnx.export traces
    try:
        return torch.jit.trace(module, inputs, check_trace=False).inlined_graph
    finally:
        torch.set_autocast_cache_enabled(previous)


def _export(torch: Any, module: Any, inputs: tuple[Any, ...], path: Path) -> Any:
    import onnx

    options: dict[str, Any] = {"opset_version": 17, "do_constant_folding": False}
    if "dynamo" in torch.onnx.export.__code__.co_varnames:
        options["dynamo"] = False  # the TorchScript exporter, the seed's
    torch.onnx.export(module, inputs, str(path), **options)
    return onnx.load(str(path))


def _part(record: dict[str, Any], name: str, action: Callable[[], Any]) -> Any:
    """Run one part; its result, or None with its error recorded (the record is written whatever fails)."""
    try:
        return action()
    except Exception as error:  # every failure is part of the record
        record["errors"][name] = f"{type(error).__name__}: {str(error).splitlines()[0][:400] if str(error) else ''}"
        record["tracebacks"][name] = traceback.format_exc()[-2000:]
        return None


def compare_emulation(device: str, out_root: Path, scratch: Path, only: list[str] | None = None) -> dict[str, Any]:
    """Trace each emulation model (or those named in `only`) under real autocast on `device` and emulated on CPU;
    compare; write the record."""
    started = time.perf_counter()
    record: dict[str, Any] = {
        "description": "real CUDA fp16 autocast against where223.cuda_autocast on the same machine: "
        "TorchScript graphs and ONNX exports compared node by node",
        "environment": {"python": platform.python_version(), "platform": platform.platform()},
        "device": device, "lists": None, "models": {}, "errors": {}, "tracebacks": {},
    }  # fmt: skip
    torch = _part(record, "import torch", lambda: __import__("torch"))
    emulation = _part(record, "import emulation", _emulation_module)
    if torch is not None:
        record["environment"].update(torch=torch.__version__, cuda=getattr(torch.version, "cuda", None),
                                     gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    lists = None
    if torch is not None and emulation is not None:
        lists = _part(record, "lists from the binary", emulation.lists_from_binary)
        if lists is None:
            lists = _part(record, "bundled lists", emulation.lists_for)
        if lists is not None:
            record["lists"] = {"torch": lists.torch, "ops": len(lists.ops), "drift": emulation.drift(lists)}
    has_onnx = _part(record, "import onnx", lambda: __import__("onnx")) is not None
    for name, factory in (emulation_models(torch) if torch is not None and lists is not None else {}).items():
        if only and name not in only:
            continue
        entry: dict[str, Any] = {}
        module, inputs = factory()
        moved = [value.to(device) for value in inputs]

        def real(module=module, moved=moved):
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                return graph_signature(_trace(torch, module.to(device), tuple(moved)))

        def emulated(module=module, inputs=inputs):
            with emulation.emulate_cuda_autocast(lists):
                return graph_signature(_trace(torch, module.to("cpu"), tuple(inputs)))

        signatures = {"real": _part(record, f"{name}: trace on {device}", real),
                      "emulated": _part(record, f"{name}: trace emulated", emulated)}  # fmt: skip
        if None not in signatures.values():
            entry["torchscript"] = compare_signatures(signatures["real"], signatures["emulated"])
        if has_onnx:
            def real_onnx(module=module, moved=moved, name=name):
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    return onnx_signature(_export(torch, module.to(device), tuple(moved),
                                                  scratch / f"{name}-real.onnx"))

            def emulated_onnx(module=module, inputs=inputs, name=name):
                with emulation.emulate_cuda_autocast(lists):
                    return onnx_signature(_export(torch, module.to("cpu"), tuple(inputs),
                                                  scratch / f"{name}-emulated.onnx"))

            exported = {"real": _part(record, f"{name}: onnx on {device}", real_onnx),
                        "emulated": _part(record, f"{name}: onnx emulated", emulated_onnx)}  # fmt: skip
            if None not in exported.values():
                entry["onnx"] = compare_signatures(exported["real"], exported["emulated"])
        record["models"][name] = entry
    record["seconds"] = round(time.perf_counter() - started, 1)
    out = out_root / EMULATION_RECORD
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")  # strict JSON; it holds no float but `seconds`
    record["path"] = str(out)
    return record


def bundle(target: Path) -> Path:
    """Copy this script, the emulation module and the committed lists into `target` (no checkout needed there)."""
    emulation = REPO / "src" / "where223"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(__file__, target / "bench_variants_gpu.py")
    shutil.copy2(emulation / "cuda_autocast.py", target / "cuda_autocast.py")
    shutil.copytree(emulation / "autocast_lists", target / "autocast_lists", dirs_exist_ok=True)
    return target


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
    parser.add_argument("--compare-emulation", action="store_true",
                        help="real CUDA fp16 autocast against its CPU emulation (torch only); writes "
                        f"{EMULATION_RECORD} under --out")
    parser.add_argument("--bundle", type=Path, metavar="DIR", help="copy what --compare-emulation needs into DIR")
    parser.add_argument("--models", default="", help="with --compare-emulation: a comma-separated subset of "
                        "gpt2_attention, gpt2_block, norm_promote, einsum_exp, conv_group_norm (default: all)")
    args = parser.parse_args(argv)
    if args.bundle:
        print(bundle(args.bundle))
        return 0
    if args.compare_emulation:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            record = compare_emulation(args.device, Path(args.out) if args.out else REPO / "outputs", Path(scratch),
                                       [name for name in args.models.split(",") if name])
        print(json.dumps({name: {part: found["equal"] for part, found in entry.items()}
                          for name, entry in record["models"].items()}, indent=1))  # fmt: skip
        print(f"errors: {sorted(record['errors'])}\nwritten: {record['path']}")
        return 0
    if args.download:
        return download(args.download, args.python_version, not args.no_tokenizers)
    if args.prepare:
        return prepare(args.prepare, args.wheels, not args.no_tokenizers)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
