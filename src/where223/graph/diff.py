"""`where223 diff`: does a reduced-precision model compute what its float32 reference computes?

Both models run on ONNX Runtime with the same inputs: given (`--feeds INPUTS.npz`, one array per model input), or
generated from the reference's input types (`generate_feeds`: seeded normal floats, ones for integers, True for
booleans; a dynamic dimension takes the size `--dim NAME=N` states, else DEFAULT_DIM; what was used is recorded).
The candidate gets each input rounded to its own input type. For each output the report gives the largest absolute
and relative difference and its size in *spacings* of the candidate's reduced type at the reference output's largest
magnitude (ulps at the reference's magnitude), against a tolerance fixed before any model was run:
TOLERANCE_SPACINGS spacings, one k for every model and for `diff`, `repair --reference` and `convert` alike.

Beyond it, both models run again with every value of their main graph exposed as an output (graph optimisations
off, so each value is what its node computes) and the report names the first value, in the reference's
topological order (inputs, initializers, then node outputs), where the candidate departs: matched by name, and
through the float Casts a converter inserts or renames around it (a reference value is compared with every candidate
value of its name's Cast class, e.g. `x` and `graph_input_cast_0` = Cast(x)), saying whether the reduced type
overflows there (infinite where the reference is finite), saturates (held at a ceiling below the reference), or
underflows (zero where the reference is a nonzero value below the type's smallest normal).

Non-float outputs (indices, masks) must be equal. Each ONNX Runtime run is bounded: with `timeout_s`, it runs in a
child process killed after that many seconds. Models are read through the guards (`loading.load_model`), inputs
from an .npz only as plain arrays (no pickles) of bounded size. Errors that stop the comparison (an unreadable
model or feeds file, inputs that do not fit, a model ONNX Runtime refuses or does not finish) are one-line
UsageErrors (exit 2).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from where223.errors import UsageError, printable
from where223.graph.dtypes import elem_type_name, elem_type_of
from where223.graph.loading import ModelLike, load_model
from where223.graph.ort import ORT_TIMEOUT_S, first_message_line, import_onnxruntime
from where223.graph.types import model_types

__all__ = [
    # the tolerance, fixed before any model was run
    "TOLERANCE_SPACINGS",
    "FloatFormat",
    "FORMATS",
    # inputs
    "Feeds",
    "read_feeds",
    "generate_feeds",
    "DEFAULT_DIM",
    "DEFAULT_SEED",
    # runs and the comparison
    "run_model",
    "Comparator",
    "diff",
    "DiffReport",
    "OutputDiff",
    "Departure",
    "CannotCompareError",
]

# k, the tolerance: an output is within it when its largest absolute difference is at most k spacings of the
# reduced type at the reference output's largest magnitude. Chosen before any model was run, and not to be tuned on
# results. Why 32 (= 2^5, so at most 2^-(p-5) of the largest magnitude, p the type's fraction bits: 3.1 % for float16
# with p = 10, 25 % for bfloat16 with p = 7):
# - what a faithful conversion costs: every operation rounds its result to the reduced type, at most half a spacing
#   at its own magnitude; along a model's deepest path (tens of operations, a few hundred in a 12-block transformer)
#   independent roundings add up like a random walk, 0.5 * sqrt(200) = 7 spacings, and a systematic bias (a sum
#   accumulated in the reduced type) a few times that: 32 leaves a factor of about 4 above it;
# - what it must catch: garbage (an element that should be 0 reading 1 on an output of magnitude 1, a sign flip, a
#   saturated or infinite value) is off by about the magnitude itself, 2^p spacings (1024 for float16, 128 for
#   bfloat16): 32 stays a factor 4 (bfloat16) to 32 (float16) below it.
# Its limit: an output much smaller than the values it is computed from (a difference of large terms) loses precision
# relative to its own magnitude in any faithful conversion, and may read beyond 32 spacings.
TOLERANCE_SPACINGS = 32
DEFAULT_DIM = 1  # the size of a dynamic dimension no --dim states
DEFAULT_SEED = 0
FEEDS_LIMIT = 4 * 2**30  # bytes an inputs file may hold uncompressed, all arrays together
FEEDS_MEMBERS = 10_000  # arrays an inputs file may hold
GENERATED_LIMIT = 2**28  # elements of generated inputs, all together
EXPOSED_SUFFIX = "__where223_as_float"  # a bfloat16 value run out as float32 (numpy and ONNX Runtime's Python API
# have no bfloat16 in common), or a bfloat16 input fed as float32 and cast in the model


class CannotCompareError(UsageError, RuntimeError):
    """The two models cannot be compared: inputs that do not fit them, or ONNX Runtime refusing or not finishing
    a run (exit 2)."""


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point type: `bits` fraction bits, the smallest normal exponent, the largest finite value."""

    name: str
    bits: int
    min_exponent: int
    max_finite: float

    @property
    def smallest_normal(self) -> float:
        return 2.0**self.min_exponent

    def spacing(self, magnitude: float) -> float:
        """The gap between neighbouring values of this type at `magnitude` (its ulp there; for a magnitude beyond its
        range, the gap its exponent would have; below its normals and at 0, the subnormal gap)."""
        exponent = self.min_exponent
        if math.isfinite(magnitude) and magnitude > 0:
            exponent = max(math.frexp(magnitude)[1] - 1, self.min_exponent)
        return 2.0 ** (exponent - self.bits)


FORMATS: dict[str, FloatFormat] = {
    "float16": FloatFormat("float16", 10, -14, 65504.0),
    "bfloat16": FloatFormat("bfloat16", 7, -126, 3.3895313892515355e38),
    "float": FloatFormat("float", 23, -126, float(np.finfo(np.float32).max)),
    "double": FloatFormat("double", 52, -1022, float(np.finfo(np.float64).max)),
}
REDUCED = ("float16", "bfloat16")


# --- inputs ---------------------------------------------------------------------------------------------------


@dataclass
class Feeds:
    """The inputs both models run on, and where they came from (recorded with every report)."""

    arrays: dict[str, np.ndarray]
    source: str  # the .npz path, or "generated"
    seed: int | None = None
    dims: dict[str, int] = field(default_factory=dict)  # dynamic dimension -> the size used (generated only)
    defaulted: list[str] = field(default_factory=list)  # the dynamic dimensions no --dim stated

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"source": self.source,
                                  "shapes": {name: list(a.shape) for name, a in self.arrays.items()},
                                  "dtypes": {name: str(a.dtype) for name, a in self.arrays.items()}}
        if self.source == "generated":
            record.update(seed=self.seed, dims=dict(self.dims), defaulted=list(self.defaulted),
                          generator="standard normal floats (numpy default_rng(seed)), ones for integers, True "
                                    "for booleans")  # fmt: skip
        return record

    def describe(self) -> str:
        if self.source != "generated":
            return f"inputs: {printable(self.source)}"
        dims = ", ".join(f"{printable(name)}={size}" + (" (default)" if name in self.defaulted else "")
                         for name, size in self.dims.items())  # fmt: skip
        return (f"inputs: generated (seed {self.seed}; standard normal floats, ones for integers, True for booleans"
                + (f"; dynamic dimensions {dims}" if dims else "") + ")")


def _model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds (an input that is also an initializer has a default and is left out)."""
    initializers = {t.name for t in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def _numpy_type(elem_type: int) -> np.dtype | None:
    """The numpy dtype a caller feeds for an element type (bfloat16 as float32: see EXPOSED_SUFFIX); None for
    strings and types numpy has no match for."""
    if elem_type == onnx.TensorProto.BFLOAT16:
        return np.dtype(np.float32)
    if elem_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def _input_type(value: onnx.ValueInfoProto) -> int:
    if value.type.WhichOneof("value") != "tensor_type":
        raise CannotCompareError(f"input '{printable(value.name)}' is not a tensor: give no such model")
    return value.type.tensor_type.elem_type


def read_feeds(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, read as untrusted input: at most FEEDS_MEMBERS arrays and FEEDS_LIMIT bytes
    uncompressed (as the archive declares them; reading stops there), no pickled objects. UsageError (one line)
    for anything else."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > FEEDS_MEMBERS:
                raise UsageError(f"{path}: {len(members)} arrays, more than {FEEDS_MEMBERS}")
            declared = sum(member.file_size for member in members)
            if declared > FEEDS_LIMIT:
                raise UsageError(f"{path}: {declared} bytes uncompressed, more than {FEEDS_LIMIT}")
        with np.load(path, allow_pickle=False) as loaded:
            return {name: np.asarray(loaded[name]) for name in loaded.files}
    except UsageError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as error:
        raise UsageError(f"{path}: not an .npz of plain arrays ({type(error).__name__}: "
                         f"{printable(str(error), 200)})") from None


def check_feeds(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """The arrays for the reference's inputs, checked: one per input, of its numpy type (float32 for a bfloat16
    input) and of a shape that fits its static dimensions; UsageError naming what does not fit."""
    inputs = _model_inputs(model)
    names = [value.name for value in inputs]
    extra = [name for name in arrays if name not in names]
    if extra:
        raise CannotCompareError(f"{source}: the model has no input named {', '.join(map(repr, map(printable, extra)))}"
                                 f" (its inputs: {', '.join(map(printable, names))})")
    checked = {}
    for value in inputs:
        name = printable(value.name)
        if value.name not in arrays:
            raise CannotCompareError(f"{source}: no array for input '{name}'")
        array, wanted = arrays[value.name], _numpy_type(_input_type(value))
        if wanted is None:
            raise CannotCompareError(f"input '{name}' is of a type diff cannot feed "
                                     f"({elem_type_name(_input_type(value))})")
        if array.dtype != wanted:
            raise CannotCompareError(f"{source}: input '{name}' is {array.dtype}, the model takes {wanted}")
        dims = value.type.tensor_type.shape.dim if value.type.tensor_type.HasField("shape") else None
        if dims is not None:
            fits = len(dims) == array.ndim and all(  # a dim_value of 0 or less is dynamic, as generate_feeds reads it
                not d.HasField("dim_value") or d.dim_value <= 0 or d.dim_value == size
                for d, size in zip(dims, array.shape, strict=False))  # fmt: skip
            if not fits:
                shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
                raise CannotCompareError(f"{source}: input '{name}' has shape {list(array.shape)}, the model takes "
                                         f"{shape}")
        checked[value.name] = array
    return checked


def generate_feeds(model: onnx.ModelProto, seed: int = DEFAULT_SEED, dims: Mapping[str, int] | None = None) -> Feeds:
    """Inputs for the reference's input types: standard normal floats from numpy's default_rng(seed), ones for
    integers, True for booleans. A dynamic dimension takes its size from `dims` (by its name, or as `INPUT:AXIS` for
    a nameless one), else DEFAULT_DIM; a stated name the model does not have is refused."""
    stated, used, defaulted = dict(dims or {}), {}, []
    rng = np.random.default_rng(seed)
    arrays, total = {}, 0
    for value in _model_inputs(model):
        elem = _input_type(value)
        wanted = _numpy_type(elem)
        name = printable(value.name)
        if wanted is None:
            raise CannotCompareError(f"input '{name}' is {elem_type_name(elem)}: no inputs are generated for it "
                                     "(give --feeds)")
        if not value.type.tensor_type.HasField("shape"):
            raise CannotCompareError(f"input '{name}' has no declared shape: give --feeds")
        shape = []
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(dim.dim_value)
                continue
            key = dim.dim_param or f"{value.name}:{axis}"
            size = stated.get(key, DEFAULT_DIM)
            if key not in stated and key not in defaulted:
                defaulted.append(key)
            used[key] = size
            shape.append(size)
        count = math.prod(shape)
        total += count
        if total > GENERATED_LIMIT:
            raise CannotCompareError(f"the generated inputs would hold more than {GENERATED_LIMIT} elements: state "
                                     "smaller dynamic dimensions (--dim) or give --feeds")
        if wanted.kind == "f":
            arrays[value.name] = rng.standard_normal(shape).astype(wanted)
        elif wanted.kind == "b":
            arrays[value.name] = np.ones(shape, dtype=wanted)
        else:
            arrays[value.name] = np.ones(shape, dtype=wanted)
    unknown = [key for key in stated if key not in used]
    if unknown:
        raise CannotCompareError(f"--dim names no dynamic dimension of the model's inputs: {', '.join(unknown)} "
                                 f"(its dynamic dimensions: {', '.join(used) or 'none'})")
    return Feeds(arrays, "generated", seed, used, defaulted)


# --- runs -----------------------------------------------------------------------------------------------------


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """The element type of each tensor value of the main graph, as lint types it (`where223.graph.types`, without
    shapes: the weights are not copied into onnx's inference)."""
    scope = model_types(model, shapes=False).scopes[""]
    names = [v.name for v in (*model.graph.input, *model.graph.output)] + [t.name for t in model.graph.initializer]
    names += [out for node in model.graph.node for out in node.output if out]
    found = {}
    for name in names:
        value_type = scope.type_of(name)
        if value_type and value_type.startswith("tensor("):
            found[name] = elem_type_of(value_type)
    return found


def runnable(model: onnx.ModelProto, exposed: Sequence[str] = (),
             types: Mapping[str, int] | None = None) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of `model` that ONNX Runtime's Python API can run and show: the values `exposed` added as outputs
    (after the model's own), bfloat16 inputs fed as float32 and cast inside, bfloat16 outputs cast to float32 (exact)
    under a new name. Returns it and {output name in the copy: value name}. `types`: `tensor_types(model)`, when
    known."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    types = tensor_types(model) if types is None else types
    declared = {value.name for value in graph.output}
    for name in exposed:
        if name and name not in declared:
            graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            declared.add(name)
    fed: list[onnx.NodeProto] = []
    for value in graph.input:
        tensor = value.type.WhichOneof("value") == "tensor_type"
        if tensor and value.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
            outer = value.name + EXPOSED_SUFFIX
            fed.append(onnx.helper.make_node("Cast", [outer], [value.name], to=onnx.TensorProto.BFLOAT16,
                                             name=outer + "/Cast"))  # fmt: skip
            value.name = outer
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    shown: dict[str, str] = {}
    outputs = list(graph.output)
    del graph.output[:]
    for value in outputs:
        if types.get(value.name) == onnx.TensorProto.BFLOAT16:
            outer = value.name + EXPOSED_SUFFIX
            graph.node.append(onnx.helper.make_node("Cast", [value.name], [outer], to=onnx.TensorProto.FLOAT,
                                                    name=outer + "/Cast"))  # fmt: skip
            graph.output.append(onnx.helper.make_empty_tensor_value_info(outer))
            shown[outer] = value.name
        else:
            graph.output.append(value)
            shown[value.name] = value.name
    if fed:
        nodes = list(graph.node)
        del graph.node[:]
        graph.node.extend([*fed, *nodes])
    return copy, shown


def _runnable_feeds(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds for the model's inputs, each rounded to the model's own input type (float32 for bfloat16, which
    `runnable` casts inside the model)."""
    ready = {}
    for value in _model_inputs(model):
        array = feeds[value.name]
        elem = value.type.tensor_type.elem_type
        name = value.name + EXPOSED_SUFFIX if elem == onnx.TensorProto.BFLOAT16 else value.name
        wanted = _numpy_type(elem)
        with np.errstate(over="ignore"):  # a value beyond the input type's range rounds to infinity, as it would there
            ready[name] = array if wanted is None or array.dtype == wanted else array.astype(wanted)
    return ready


def run_model(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    provider: str = "CPUExecutionProvider",
    timeout_s: float | None = ORT_TIMEOUT_S,
    optimize: bool = True,
    exposed: Sequence[str] = (),
    types: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Run `model` (its weights in memory) on ONNX Runtime with `feeds` (rounded to its input types): its outputs,
    then the values `exposed`, by value name (tensors only; bfloat16 as float32). `optimize=False` turns graph
    optimisations off. With `timeout_s`, the run is a child process killed after that many seconds; without, it
    runs here. CannotCompareError (one line) when ONNX Runtime refuses the model or the inputs, or does not finish.
    """
    prepared, shown = runnable(model, exposed, types)
    ready = _runnable_feeds(model, feeds)
    if timeout_s is None:
        named = _run_here(prepared, ready, provider, optimize)
    else:
        named = _run_in_child(prepared, ready, provider, optimize, timeout_s)
    return {shown.get(name, name): array for name, array in named.items()}


def _run_here(model: onnx.ModelProto | str, feeds: Mapping[str, np.ndarray], provider: str,
              optimize: bool) -> dict[str, np.ndarray]:  # fmt: skip
    from where223.graph.ort import load_session

    try:
        session = load_session(model, (provider,), probe=not optimize)
        names = [output.name for output in session.get_outputs()]
        values = session.run(names, dict(feeds))
    except (ImportError, UsageError):
        raise
    except Exception as error:  # ONNX Runtime's exception classes share no base but Exception
        raise CannotCompareError(f"ONNX Runtime cannot run the model: {first_message_line(str(error))}") from None
    found = {}
    for name, value in zip(names, values, strict=True):
        if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
            found[name] = value
    return found


def _run_in_child(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], provider: str, optimize: bool,
                  timeout_s: float) -> dict[str, np.ndarray]:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="where223-diff-") as scratch:
        folder = Path(scratch)
        model_path = folder / "model.onnx"
        external = model.ByteSize() > 2**31 - 2**20
        onnx.save_model(model, str(model_path), save_as_external_data=external, location="model.onnx.data")
        names = list(feeds)
        np.savez(folder / "feeds.npz", *[feeds[name] for name in names])
        (folder / "feeds.json").write_text(json.dumps(names))
        search = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, search))}
        command = [sys.executable, "-m", "where223.graph.ort_child", "--run", str(model_path), scratch, provider]
        command += [] if optimize else ["--no-optimize"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=environment,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise CannotCompareError(f"ONNX Runtime did not finish running the model within {timeout_s:g} s: "
                                     "stopped (--ort-timeout to wait longer)") from None
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            last = (done.stderr.strip().splitlines() or [""])[-1]
            how = f"died with signal {-done.returncode}" if done.returncode < 0 else f"exited with {done.returncode}"
            raise CannotCompareError(f"ONNX Runtime's run {how} {printable(last, 300)}".strip())
        answer = json.loads(lines[-1])
        if answer["error"] is not None:  # the child's CannotCompareError, worded as here
            raise CannotCompareError(answer["error"].replace(str(model_path), "<model>"))
        with np.load(folder / "outputs.npz", allow_pickle=False) as loaded:
            return {name: loaded[f"arr_{k}"] for k, name in enumerate(answer["outputs"])}


def child_run(argv: list[str]) -> dict[str, Any]:
    """The child's side of a run (`python -m where223.graph.ort_child --run MODEL FOLDER PROVIDER [--no-optimize]`):
    the model run on FOLDER's feeds, FOLDER/outputs.npz written; {"error": None, "outputs": [names]} or
    {"error": message}."""
    model_path, folder, provider = argv[0], Path(argv[1]), argv[2]
    names = json.loads((folder / "feeds.json").read_text())
    with np.load(folder / "feeds.npz", allow_pickle=False) as loaded:
        feeds = {name: loaded[f"arr_{k}"] for k, name in enumerate(names)}
    try:
        found = _run_here(model_path, feeds, provider, optimize="--no-optimize" not in argv[3:])
    except CannotCompareError as error:
        return {"error": str(error)}
    np.savez(folder / "outputs.npz", *found.values())
    return {"error": None, "outputs": list(found)}


# --- the comparison -------------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """One value of the reference against its candidate counterpart (see the module's docstring)."""

    elements: int
    max_abs: float
    max_rel: float | None  # over the reference's nonzero finite elements; None when it has none
    magnitude: float  # the reference's largest finite magnitude
    spacings: float | None  # max_abs in spacings of `reduced` at `magnitude`; None for non-float values
    tolerance: float  # the largest absolute difference allowed
    within: bool
    reduced: str | None  # the type whose spacings count
    overflow: int = 0  # infinite where the reference is finite
    nan: int = 0  # NaN where the reference is not
    saturated: int = 0  # held at the candidate's ceiling, below the reference by more than the tolerance
    ceiling: float | None = None
    underflow: int = 0  # zero where the reference is nonzero and below the type's smallest normal
    beyond_range: int = 0  # reference elements beyond the reduced type's largest finite value
    differing: int = 0  # elements beyond the tolerance (non-float values: elements not equal)
    shape_mismatch: str | None = None

    @property
    def how(self) -> list[str]:
        """What happened in the reduced type: overflows, NaN, saturates, underflows (empty: precision alone)."""
        found = []
        if self.overflow:
            found.append("overflows")
        if self.nan:
            found.append("NaN")
        if self.saturated:
            found.append("saturates")
        if self.underflow:
            found.append("underflows")
        return found

    def describe(self) -> str:
        if self.shape_mismatch:
            return self.shape_mismatch
        if self.spacings is None:
            return (f"{self.differing} of {self.elements} element(s) differ" if self.differing
                    else f"all {self.elements} element(s) equal")
        rel = f", max relative {self.max_rel:.3g}" if self.max_rel is not None else ""
        text = (f"max |diff| {self.max_abs:.3g} = {self.spacings:.3g} spacings of {self.reduced} at "
                f"{self.magnitude:.3g} (tolerance {self.tolerance:.3g}){rel}")
        return text + (f"; {self.explain()}" if self.how or self.beyond_range else "")

    def explain(self) -> str:
        fmt = FORMATS.get(self.reduced or "")
        parts = []
        if self.overflow:
            parts.append(f"overflows {self.reduced}: {self.overflow} of {self.elements} element(s) infinite where the "
                         "reference is finite")
        if self.nan:
            parts.append(f"{self.nan} element(s) NaN where the reference is not")
        if self.saturated:
            parts.append(f"saturates: {self.saturated} element(s) held at {self.ceiling:.6g} where the reference is "
                         "larger")
        if self.underflow:
            parts.append(f"underflows {self.reduced}: {self.underflow} element(s) zero where the reference is nonzero "
                         f"below {fmt.smallest_normal if fmt else 0:.3g}")
        if self.beyond_range and fmt:
            parts.append(f"the reference reaches {self.magnitude:.6g}, beyond {self.reduced}'s largest finite value "
                         f"{fmt.max_finite:.6g} ({self.beyond_range} element(s))")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        record = {key: _jsonable(value) for key, value in asdict(self).items()}
        record["how"] = self.how
        return record


def _jsonable(value: Any) -> Any:
    """A float JSON can hold: infinities and NaN as the strings "inf", "-inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def compare(reference: np.ndarray, candidate: np.ndarray, reduced: str | None,
            spacings: int = TOLERANCE_SPACINGS) -> Comparison:  # fmt: skip
    """Compare one value (see the module's docstring): float values against `spacings` spacings of `reduced` at the
    reference's largest finite magnitude, other values for equality."""
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    if reference.shape != candidate.shape:
        return Comparison(reference.size, math.inf, None, 0.0, None, 0.0, False, reduced,
                          shape_mismatch=f"shape {list(candidate.shape)}, the reference's {list(reference.shape)}")
    if reference.dtype.kind not in "fc" and candidate.dtype.kind not in "fc":
        differing = int(np.count_nonzero(reference != candidate))
        return Comparison(reference.size, float(differing > 0), None, 0.0, None, 0.0, differing == 0, None,
                          differing=differing)
    fmt = FORMATS[reduced or "float"]
    r, c = reference.astype(np.float64), candidate.astype(np.float64)
    finite_r = np.isfinite(r)
    magnitude = float(np.max(np.abs(r[finite_r]))) if finite_r.any() else 0.0
    spacing = fmt.spacing(magnitude)
    tolerance = spacings * spacing
    same = (np.isnan(r) & np.isnan(c)) | (np.isinf(r) & (r == c))
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.where(same, 0.0, np.abs(c - r))
    gap = np.where(np.isnan(gap), math.inf, gap)
    max_abs = float(gap.max()) if gap.size else 0.0
    nonzero = finite_r & (r != 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        max_rel = float(np.max(gap[nonzero] / np.abs(r[nonzero]))) if nonzero.any() else None
    beyond = gap > tolerance
    finite_c = np.isfinite(c)
    ceiling = float(np.max(np.abs(c[finite_c]))) if finite_c.any() else None
    saturated = 0
    if ceiling is not None:
        held = finite_c & (np.abs(c) == ceiling) & finite_r & (np.abs(r) - np.abs(c) > tolerance)
        saturated = int(np.count_nonzero(held & (np.sign(r) == np.sign(c))))
    return Comparison(
        elements=int(r.size), max_abs=max_abs, max_rel=max_rel, magnitude=magnitude,
        spacings=max_abs / spacing, tolerance=tolerance, within=not beyond.any(), reduced=fmt.name,
        overflow=int(np.count_nonzero(np.isinf(c) & finite_r)),
        nan=int(np.count_nonzero(np.isnan(c) & ~np.isnan(r))),
        saturated=saturated, ceiling=ceiling if saturated else None,
        underflow=int(np.count_nonzero(finite_r & (r != 0) & (np.abs(r) < fmt.smallest_normal) & (c == 0))),
        beyond_range=int(np.count_nonzero(finite_r & (np.abs(r) > fmt.max_finite))),
        differing=int(np.count_nonzero(beyond)),
    )  # fmt: skip


@dataclass
class OutputDiff:
    """One output of the reference against the candidate's output of the same name."""

    name: str
    reference_type: str
    candidate_type: str
    comparison: Comparison

    @property
    def within(self) -> bool:
        return self.comparison.within

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "reference_type": self.reference_type, "candidate_type": self.candidate_type,
                **self.comparison.to_dict()}  # fmt: skip


@dataclass
class Departure:
    """The first value, in the reference's topological order, where the candidate departs beyond the tolerance."""

    value: str  # its name in the reference
    candidate_value: str  # the candidate value it was compared with (its own name, or a Cast of it)
    candidate_type: str
    node: str | None  # the reference node that computes it (None for an input or an initializer)
    op_type: str | None
    kind: str  # "input", "initializer" or "node output"
    comparison: Comparison
    departing_values: int  # how many values depart in all

    def describe(self) -> str:
        made = f" (output of {printable(self.node)}, {self.op_type})" if self.node else f" ({self.kind})"
        shown = (f"'{printable(self.value)}'" if self.candidate_value == self.value
                 else f"'{printable(self.value)}' as '{printable(self.candidate_value)}'")
        how = (f"its shape differs ({self.comparison.shape_mismatch})" if self.comparison.shape_mismatch
               else self.comparison.explain() or "precision: its rounding errors grew beyond the tolerance")
        return (f"first departure at {shown}{made}, {self.candidate_type} in the candidate: {how} "
                f"[{self.comparison.describe().split('; ')[0]}]; {self.departing_values} value(s) depart in all")

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "candidate_value": self.candidate_value, "candidate_type": self.candidate_type,
                "node": self.node, "op_type": self.op_type, "kind": self.kind,
                "departing_values": self.departing_values, **self.comparison.to_dict()}  # fmt: skip


@dataclass
class DiffReport:
    """`diff`'s answer: every output compared, and beyond the tolerance the first departure."""

    reference: str
    candidate: str
    provider: str
    reduced: str | None  # the candidate's reduced type (None when it has none: spacings of float)
    feeds: Feeds
    outputs: list[OutputDiff]
    departure: Departure | None = None
    unmatched: list[str] = field(default_factory=list)  # reference values the candidate has no counterpart of
    notes: list[str] = field(default_factory=list)
    spacings: int = TOLERANCE_SPACINGS
    # every departing value as (reference name, candidate value, candidate type), in topological order: for
    # `convert`'s search (not in `to_dict`: `departure.departing_values` counts them)
    departures: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def within(self) -> bool:
        return all(output.within for output in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "candidate": self.candidate, "provider": self.provider,
            "reduced_type": self.reduced,
            "tolerance": {"spacings": self.spacings, "rule": "max |candidate - reference| <= spacings x the spacing "
                          "of the reduced type at the reference output's largest finite magnitude"},
            "feeds": self.feeds.to_dict(), "within": self.within,
            "outputs": [output.to_dict() for output in self.outputs],
            "departure": self.departure.to_dict() if self.departure else None,
            "unmatched": list(self.unmatched), "notes": list(self.notes),
        }  # fmt: skip

    def format(self) -> str:
        lines = [f"{printable(self.reference)} (reference) vs {printable(self.candidate)} (candidate, "
                 f"{self.reduced or 'no reduced type'}) on {self.provider}",
                 self.feeds.describe(),
                 f"tolerance: {self.spacings} spacings of the reduced type at each reference output's largest "
                 "magnitude"]  # fmt: skip
        for output in self.outputs:
            verdict = "within" if output.within else "BEYOND"
            lines.append(f"  {printable(output.name)} ({output.candidate_type}): {output.comparison.describe()}: "
                         f"{verdict}")
        lines += [f"  note: {note}" for note in self.notes]
        if self.within:
            lines.append("within tolerance")
        else:
            lines.append("beyond tolerance" + (f": {self.departure.describe()}" if self.departure else ""))
        return "\n".join(lines)


def _short(elem_type: int | None) -> str:
    return elem_type_name(elem_type) if elem_type else "unknown"


def reduced_type(model: onnx.ModelProto, types: Mapping[str, int] | None = None) -> str | None:
    """The candidate's reduced float type: float16 or bfloat16, whichever its main graph's values and initializers
    carry (the coarser, bfloat16, when it carries both); None when it carries neither."""
    types = tensor_types(model) if types is None else types
    found = {elem_type_name(t) for t in types.values() if t} & set(REDUCED)
    for node in model.graph.node:
        if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
            for attribute in node.attribute:
                if attribute.name == "to" and attribute.type == onnx.AttributeProto.INT:
                    try:
                        found |= {elem_type_name(attribute.i)} & set(REDUCED)
                    except UsageError:
                        continue
    if not found:
        return None
    return "bfloat16" if "bfloat16" in found else "float16"


def _counted_type(value_type: int | None, reduced: str | None) -> str | None:
    """The type whose spacings count for a value: its own when it is reduced, else the model's reduced type, else
    its own float type (float, double)."""
    name = elem_type_name(value_type) if value_type else None
    if name in REDUCED:
        return name
    if reduced is not None:
        return reduced
    return name if name in FORMATS else "float"


_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def cast_classes(candidate: onnx.ModelProto, reference_names: set[str],
                 types: Mapping[str, int] | None = None) -> dict[str, list[str]]:
    """For each reference value name the candidate has, the candidate values to compare with it: itself first, then
    the values joined to it by float-to-float Casts in the candidate (whose names the reference does not have)."""
    types = tensor_types(candidate) if types is None else types
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.get(name, name) != name:
            parent[name] = parent.get(parent[name], parent[name])
            name = parent[name]
        return name

    for node in candidate.graph.node:
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        source, target = node.input[0], node.output[0]
        if types.get(source) in _FLOAT_TYPES and types.get(target) in _FLOAT_TYPES:
            a, b = root(source), root(target)
            if a != b:
                parent[b] = a
    members: dict[str, list[str]] = {}
    names = {v.name for v in (*candidate.graph.input, *candidate.graph.output)} | set(types)
    names |= {out for node in candidate.graph.node for out in node.output if out}
    for name in names:
        members.setdefault(root(name), []).append(name)
    found = {}
    for name in reference_names & names:
        others = sorted(m for m in members.get(root(name), []) if m != name and m not in reference_names)
        found[name] = [name, *others]
    return found


class Comparator:
    """The reference and the inputs, run once; `compare(candidate)` runs a candidate against them (what `diff`
    does once and `convert`'s search once per round)."""

    def __init__(self, reference: ModelLike, feeds: Feeds | str | os.PathLike[str] | None = None,
                 seed: int = DEFAULT_SEED, dims: Mapping[str, int] | None = None,
                 provider: str = "CPUExecutionProvider", timeout_s: float | None = ORT_TIMEOUT_S,
                 label: str | None = None) -> None:  # fmt: skip
        self.reference, path = load_model(reference, load_weights=True)
        self.label = str(path) if path else (label or "<reference>")
        self.provider, self.timeout_s = provider, timeout_s
        available = import_onnxruntime().get_available_providers()
        if provider not in available:  # ONNX Runtime would run on the CPU provider instead, with a warning
            raise UsageError(f"execution provider {provider!r} is not in this onnxruntime ({', '.join(available)})")
        if feeds is None:
            self.feeds = generate_feeds(self.reference, seed, dims)
        elif isinstance(feeds, Feeds):
            self.feeds = Feeds(check_feeds(self.reference, feeds.arrays, feeds.source), feeds.source, feeds.seed,
                               feeds.dims, feeds.defaulted)  # fmt: skip
        else:
            self.feeds = Feeds(check_feeds(self.reference, read_feeds(feeds), str(feeds)), str(feeds))
        self.types = tensor_types(self.reference)
        self.outputs = self._run(self.reference, "the reference", optimize=True, types=self.types)
        self._everything: dict[str, np.ndarray] | None = None

    def _run(self, model: onnx.ModelProto, which: str, optimize: bool, exposed: Sequence[str] = (),
             types: Mapping[str, int] | None = None) -> dict[str, Any]:  # fmt: skip
        try:
            return run_model(model, self.feeds.arrays, self.provider, self.timeout_s, optimize, exposed, types)
        except CannotCompareError as error:
            raise CannotCompareError(f"{which}: {error}") from None

    def everything(self) -> dict[str, np.ndarray]:
        """Every main-graph value of the reference: inputs, initializers, node outputs (run once, optimisations off)."""
        if self._everything is None:
            exposed = [out for node in self.reference.graph.node for out in node.output if out]
            values = self._run(self.reference, "the reference", optimize=False, exposed=exposed, types=self.types)
            values.update({t.name: numpy_helper.to_array(t) for t in self.reference.graph.initializer})
            values.update(self.feeds.arrays)
            self._everything = values
        return self._everything

    def compare(self, candidate: ModelLike, localize: bool = True, label: str | None = None) -> DiffReport:
        """Run `candidate` on the inputs and compare it (see the module's docstring); `label` names an in-memory
        candidate in the report."""
        model, path = load_model(candidate, load_weights=True)
        label = str(path) if path else (label or "<candidate>")
        ref_inputs = [v.name for v in _model_inputs(self.reference)]
        cand_inputs = [v.name for v in _model_inputs(model)]
        if sorted(ref_inputs) != sorted(cand_inputs):
            raise CannotCompareError(f"the candidate's inputs ({', '.join(map(printable, cand_inputs))}) are not the "
                                     f"reference's ({', '.join(map(printable, ref_inputs))})")
        ref_types, cand_types = self.types, tensor_types(model)
        reduced = reduced_type(model, cand_types)
        produced = self._run(model, "the candidate", optimize=True, types=cand_types)
        report = DiffReport(self.label, label, self.provider, reduced, self.feeds, [])
        for value in self.reference.graph.output:
            name = value.name
            if name not in self.outputs:
                report.notes.append(f"output '{printable(name)}' is not a tensor: not compared")
                continue
            if name not in produced:
                raise CannotCompareError(f"the candidate has no output '{printable(name)}'")
            comparison = compare(self.outputs[name], produced[name], _counted_type(cand_types.get(name), reduced))
            report.outputs.append(OutputDiff(name, _short(ref_types.get(name)), _short(cand_types.get(name)),
                                             comparison))  # fmt: skip
        if not report.within and localize:
            self._localize(model, report, cand_types, reduced)
        return report

    def _order(self) -> list[tuple[str, str, str | None, str | None]]:
        """(value, kind, node, op type) of every reference value in topological order."""
        order = [(v.name, "input", None, None) for v in _model_inputs(self.reference)]
        order += [(t.name, "initializer", None, None) for t in self.reference.graph.initializer]
        for index, node in enumerate(self.reference.graph.node):
            label = node.name or f"<{node.op_type} #{index}>"
            order += [(out, "node output", label, node.op_type) for out in node.output if out]
        return order

    def _localize(self, model: onnx.ModelProto, report: DiffReport, cand_types: dict[str, int],
                  reduced: str | None) -> None:  # fmt: skip
        """Name the first value where the candidate departs (see the module's docstring)."""
        reference = self.everything()
        order = self._order()
        classes = cast_classes(model, {name for name, *_ in order}, cand_types)
        given = {t.name for t in model.graph.initializer} | {v.name for v in model.graph.input}
        exposed = sorted({m for members in classes.values() for m in members} - given)
        produced = self._run(model, "the candidate", optimize=False, exposed=exposed, types=cand_types)
        produced.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
        produced.update(_runnable_feeds_as_seen(model, self.feeds.arrays))
        first, departing, seen = None, 0, set()
        for name, kind, node, op_type in order:
            if name in seen or name not in reference:
                continue
            seen.add(name)
            members = [m for m in classes.get(name, []) if m in produced]
            if not members:
                report.unmatched.append(name)
                continue
            worst = None
            for member in members:
                comparison = compare(reference[name], produced[member], _counted_type(cand_types.get(member), reduced))
                if not comparison.within and worst is None:
                    worst = (member, comparison)
            if worst is None:
                continue
            departing += 1
            report.departures.append((name, worst[0], _short(cand_types.get(worst[0]))))
            if first is None:
                member, comparison = worst
                first = Departure(name, member, _short(cand_types.get(member)), node, op_type, kind, comparison, 0)
        if first is not None:
            first.departing_values = departing
            report.departure = first
        else:
            report.notes.append("no value departs with graph optimisations off: the departure arises in ONNX Runtime's "
                                "optimised graph (a fusion, or a float16 node it computes in float)")
        if report.unmatched:
            shown = ", ".join(map(printable, report.unmatched[:5])) + (", ..." if len(report.unmatched) > 5 else "")
            report.notes.append(f"{len(report.unmatched)} reference value(s) have no counterpart in the candidate "
                                f"(not compared): {shown}")


def _runnable_feeds_as_seen(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs as the candidate sees them: rounded to its input types (bfloat16 rounded to nearest even)."""
    seen = {}
    for value in _model_inputs(model):
        array = feeds[value.name]
        elem = value.type.tensor_type.elem_type
        if elem == onnx.TensorProto.BFLOAT16:
            seen[value.name] = _round_bfloat16(array.astype(np.float32))
        else:
            wanted = _numpy_type(elem)
            with np.errstate(over="ignore"):
                seen[value.name] = array if wanted is None else array.astype(wanted)
    return seen


def _round_bfloat16(array: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even; NaN kept), as float32."""
    bits = array.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(array), array, rounded)


def diff(
    reference: ModelLike,
    candidate: ModelLike,
    feeds: Feeds | str | os.PathLike[str] | None = None,
    seed: int = DEFAULT_SEED,
    dims: Mapping[str, int] | None = None,
    provider: str = "CPUExecutionProvider",
    timeout_s: float | None = ORT_TIMEOUT_S,
) -> DiffReport:
    """`where223 diff`: run both models on the same inputs and compare every output against the tolerance
    (TOLERANCE_SPACINGS spacings of the candidate's reduced type); beyond it, name the first departing value.
    `feeds`: an .npz path or Feeds, else inputs generated with `seed` and `dims`. `timeout_s` bounds each ONNX
    Runtime run (a child process; None runs here). UsageError (one line) for what cannot be compared."""
    model, path = load_model(candidate, load_weights=True)  # an unreadable candidate: refused before any run
    comparator = Comparator(reference, feeds, seed, dims, provider, timeout_s)
    return comparator.compare(model, label=str(path or "<candidate>"))


def parse_dims(texts: Iterable[str]) -> dict[str, int]:
    """`--dim NAME=N` values as {NAME: N}; UsageError for one that is not NAME=N with N a positive integer."""
    found = {}
    for text in texts:
        name, sep, size = text.rpartition("=")
        if not sep or not name or not size.isdigit() or int(size) < 1:
            raise UsageError(f"--dim {printable(text)}: expected NAME=N with N a positive integer")
        found[name] = int(size)
    return found

