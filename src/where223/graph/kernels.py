"""Which operators an execution provider of the installed ONNX Runtime has kernels for, at which input types: a table
ONNX Runtime fills itself, one one-node model per entry, so that lint can say "no kernel" without loading a model.

An entry is keyed by an ai.onnx operator with its schema's `since_version`, the model's ai.onnx opset and the
*binding*: the type of each type parameter the operator's required inputs bind, e.g.
`MatMul(13) opset 17 T=tensor(bfloat16)`. The opset is part of the key although ONNX Runtime registers kernels per
schema version: what it does around the lookup depends on the model's opset (the float Casts it inserts around a
float16 node without a float16 kernel are invalid at opset 1, where Cast's `to` was a string; function bodies are
expanded at the model's opset). Its value is what ONNX Runtime made of the one-node model built from onnx's schema
with those types at that opset (graph optimisations off, the provider alone), classified by `where223.graph.ort`'s
one parser of its messages:

- `available`: a session was created;
- `missing`: types accepted, no kernel (`OrtVerdict.MISSING_KERNEL`): what lint reports;
- `type_refused`: ONNX Runtime's type check refused the binding: one the schema does not allow (lint's type check
  reports those), or one it allows that ONNX Runtime's expansion of the op refuses (lint counts those apart);
- `unknown`: no one-node model could be built from the schema alone (a required graph or string attribute, an
  output type no input decides, a non-tensor or heterogeneous parameter), or ONNX Runtime refused it for
  another reason. Never guessed either way.

Required numeric attributes get placeholder values (1, [1], 1.0): the kernel lookup that decides `missing` happens
before any attribute is read, and a placeholder ONNX Runtime rejects makes the entry `unknown`, not `missing`.

The table is cached per (onnxruntime version, provider) as JSON in `cache_folder()/kernels/`, filled lazily (the
entries a linted model needs, or `KernelTable.build` for every operator at an opset), merged with what other
processes wrote, and written atomically. The cache is read as untrusted input: only a regular file is read (a FIFO,
a device or a symlink at its path is never opened for reading), at most CACHE_LIMIT bytes of it, and a file that
is not a table of this format (not JSON, nested too deep, entries of the wrong types or shapes) is corrupt: it is
discarded with one warning (`CorruptCacheWarning`), its entries probed again and the file rewritten. A table for
another onnxruntime, provider or format (an older where223's) is ignored without a word and replaced.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnx.defs

from where223.enums import TextEnum
from where223.errors import UsageError
from where223.files import write_atomic
from where223.graph.dtypes import elem_type_of
from where223.graph.ort import OrtVerdict, first_message_line, import_onnxruntime, judge

CACHE_ENV = "WHERE223_CACHE"  # a folder that replaces the default cache folder
DEFAULT_PROVIDER = "CPUExecutionProvider"
FLOAT_TYPES = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")
TABLE_FORMAT = 1  # bumped when the meaning of an entry changes: older files are then ignored
MESSAGE_LIMIT = 300  # characters of ONNX Runtime's message kept with an entry
CACHE_LIMIT = 64 * 2**20  # bytes of a cache file read; a longer one is corrupt (every entry of an opset: ~1 MB)
# the type a parameter that is not being varied takes, the first of these it allows
_DEFAULT_TYPES = ("tensor(int64)", "tensor(bool)", "tensor(int32)", "tensor(float)", "tensor(uint8)", "tensor(string)")
_PLACEHOLDERS = {
    onnx.AttributeProto.INT: 1,
    onnx.AttributeProto.INTS: [1],
    onnx.AttributeProto.FLOAT: 1.0,
    onnx.AttributeProto.FLOATS: [1.0],
}


class CorruptCacheWarning(UserWarning):
    """A kernel cache file that cannot be a table: discarded, its entries probed again (the command line shows it
    as one line)."""


class KernelStatus(TextEnum):
    """What ONNX Runtime made of one entry's one-node model (see the module's docstring)."""

    AVAILABLE = "available"
    MISSING = "missing"
    TYPE_REFUSED = "type_refused"
    UNKNOWN = "unknown"


_STATUS_OF = {
    OrtVerdict.ACCEPTED: KernelStatus.AVAILABLE,
    OrtVerdict.MISSING_KERNEL: KernelStatus.MISSING,
    OrtVerdict.TYPE_ERROR: KernelStatus.TYPE_REFUSED,
    OrtVerdict.WHERE_TYPE_ERROR: KernelStatus.TYPE_REFUSED,
}


@dataclass(frozen=True)
class KernelEntry:
    """One entry: the status, and ONNX Runtime's message or the reason no model was built (None when available)."""

    status: KernelStatus
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {"status": str(self.status), "message": self.message}


def entry_key(op_type: str, since_version: int, opset: int, binding: Mapping[str, str]) -> str:
    """An entry's key: `MatMul(13) opset 17 T=tensor(bfloat16)`, the parameters in name order."""
    bound = ",".join(f"{param}={binding[param]}" for param in sorted(binding))
    return f"{op_type}({since_version}) opset {opset} {bound}"


def cache_folder() -> Path:
    """Where where223 keeps what it can rebuild: $WHERE223_CACHE, else the checkout's `.cache/` (the folder
    `where223.pipeline.paths.CACHE` names), else the user's cache folder ($XDG_CACHE_HOME or ~/.cache)/where223
    when the package is installed without a checkout."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / "pyproject.toml").is_file() and (checkout / "src" / "where223").is_dir():
        return checkout / ".cache"
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(user) / "where223"


# --- the one-node models --------------------------------------------------------------------------------------


def _schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    from where223.graph.schema import op_schema

    return op_schema(op_type, "", opset)


def probe_parameters(schema: onnx.defs.OpSchema) -> tuple[dict[str, tuple[str, ...]], str | None]:
    """The type parameters a one-node model's inputs bind (those of the required and variadic inputs) with the
    tensor types each allows, and the reason no model can be built from the schema alone (None when one can)."""
    constraints = {c.type_param_str: tuple(c.allowed_type_strs) for c in schema.type_constraints}
    Option = onnx.defs.OpSchema.FormalParameterOption
    params: dict[str, tuple[str, ...]] = {}
    for formal in schema.inputs:
        if formal.option == Option.Optional or formal.type_str not in constraints:
            continue
        if formal.option == Option.Variadic and not formal.is_homogeneous:
            return params, f"heterogeneous variadic input {formal.name}"
        params[formal.type_str] = tuple(t for t in constraints[formal.type_str] if t.startswith("tensor("))
    for formal in schema.inputs:
        if formal.option != Option.Optional and formal.type_str not in constraints:
            if not formal.type_str.startswith("tensor("):
                return params, f"input {formal.name} is {formal.type_str}"
    for formal in schema.outputs:
        param = formal.type_str
        if formal.option != Option.Optional and param in constraints and param not in params:
            if len(constraints[param]) > 1:
                return params, f"the type of output {formal.name} ({param}) is decided by no input"
    for attribute in schema.attributes.values():
        if attribute.required and attribute.type not in _PLACEHOLDERS:
            return params, f"required attribute {attribute.name} ({attribute.type.name}) has no generic value"
    if not all(params.values()):
        return params, "an input allows no tensor type"
    return params, None


def probe_model(schema: onnx.defs.OpSchema, opset: int, binding: Mapping[str, str]) -> onnx.ModelProto:
    """The one-node model of `schema` at `opset` with its inputs typed by `binding` (shapes unknown, outputs
    untyped: ONNX Runtime infers them); `probe_parameters` must have found no reason against it."""
    Option = onnx.defs.OpSchema.FormalParameterOption
    inputs, input_names = [], []
    for k, formal in enumerate(schema.inputs):
        if formal.option == Option.Optional:
            break  # inputs are positional: nothing after the first omitted optional one
        type_str = binding.get(formal.type_str, formal.type_str)
        for j in range(max(1, formal.min_arity) if formal.option == Option.Variadic else 1):
            name = f"in{k}_{j}"
            input_names.append(name)
            inputs.append(onnx.helper.make_tensor_value_info(name, elem_type_of(type_str), None))
    outputs = [f"out{k}" for k, formal in enumerate(schema.outputs) if formal.option != Option.Optional]
    attributes = {a.name: _PLACEHOLDERS[a.type] for a in schema.attributes.values() if a.required}
    node = onnx.helper.make_node(schema.name, input_names, outputs, name="probe", **attributes)
    graph = onnx.helper.make_graph(
        [node], "kernel_probe", inputs, [onnx.helper.make_empty_tensor_value_info(name) for name in outputs]
    )
    opsets = [onnx.helper.make_opsetid("", opset)]
    return onnx.helper.make_model(graph, opset_imports=opsets, ir_version=_ir_version(opset))


def _ir_version(opset: int) -> int:
    """The oldest IR version that carries an ai.onnx opset (onnx's table skips a few early opsets, such as 2 to 4:
    the next one listed answers for them)."""
    for version in range(opset, onnx.defs.onnx_opset_version() + 1):
        try:
            return onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", version)])
        except ValueError:
            continue
    return onnx.IR_VERSION


def probe(op_type: str, opset: int, binding: Mapping[str, str], provider: str = DEFAULT_PROVIDER) -> KernelEntry:
    """ONNX Runtime's answer for one entry: the one-node model loaded with graph optimisations off."""
    schema = _schema(op_type, opset)
    if schema is None:
        return KernelEntry(KernelStatus.UNKNOWN, f"onnx has no schema for {op_type} at opset {opset}")
    params, reason = probe_parameters(schema)
    if reason is None and set(binding) != set(params):
        reason = f"binds {', '.join(sorted(binding))}, the schema's inputs {', '.join(sorted(params))}"
    if reason is not None:
        return KernelEntry(KernelStatus.UNKNOWN, reason)
    judgement = judge(probe_model(schema, opset, binding), (provider,), probe=True)
    status = _STATUS_OF.get(judgement.verdict, KernelStatus.UNKNOWN)
    message = first_message_line(judgement.message)[:MESSAGE_LIMIT] if judgement.message else None
    return KernelEntry(status, message)


def planned_bindings(schema: onnx.defs.OpSchema, types: Iterable[str] = FLOAT_TYPES) -> list[dict[str, str]]:
    """The bindings `KernelTable.build` asks about for an operator: for each of `types`, every parameter that
    allows it takes it, the others their first allowed type among int64, bool, int32, float, uint8, string."""
    params, _ = probe_parameters(schema)
    found = []
    for wanted in types:
        if not any(wanted in allowed for allowed in params.values()):
            continue
        binding = {}
        for param, allowed in params.items():
            fallback = next((t for t in _DEFAULT_TYPES if t in allowed), allowed[0] if allowed else wanted)
            binding[param] = wanted if wanted in allowed else fallback
        found.append(binding)
    return found


def node_binding(node: onnx.NodeProto, opset: int, type_of: Callable[[str], str | None]) -> dict[str, str] | None:
    """The binding a node's inputs give its op's probe parameters (`probe_parameters`) at the model's opset, from
    the types `type_of` gives its values; None when onnx has no schema for it, or a parameter is left unbound,
    untyped, bound to a non-tensor type or to two types (lint's type check speaks for those)."""
    from where223.graph.schema import formal_pairs, signature

    schema, sig = _schema(node.op_type, opset), signature(node.op_type, "", opset)
    if schema is None or sig is None:
        return None
    params, _ = probe_parameters(schema)
    binding: dict[str, str] = {}
    for _, name, formal in formal_pairs(node.input, sig.inputs):
        if formal.type_str not in params:
            continue
        value_type = type_of(name)
        if value_type is None or not value_type.startswith("tensor("):
            return None
        if binding.setdefault(formal.type_str, value_type) != value_type:
            return None
    return binding if set(binding) == set(params) else None


# --- the table --------------------------------------------------------------------------------------------------


class KernelTable:
    """The cached table of one provider in the installed onnxruntime; entries are probed when first asked for."""

    def __init__(self, provider: str, onnxruntime_version: str, path: Path | None,
                 entries: dict[str, KernelEntry] | None = None) -> None:
        self.provider = provider
        self.onnxruntime_version = onnxruntime_version
        self.path = path  # None: kept in memory only
        self.entries: dict[str, KernelEntry] = dict(entries or {})
        self._new: dict[str, KernelEntry] = {}  # probed here since the last save
        self.probes = 0
        self.probe_seconds = 0.0

    def status(self, op_type: str, opset: int, binding: Mapping[str, str]) -> tuple[int, KernelEntry]:
        """The schema version and entry of an ai.onnx operator at a model's opset with a binding, probed if not yet
        known."""
        schema = _schema(op_type, opset)
        since = schema.since_version if schema is not None else opset
        key = entry_key(op_type, since, opset, binding)
        entry = self.entries.get(key)
        if entry is None:
            started = time.perf_counter()
            entry = probe(op_type, opset, binding, self.provider)
            self.probe_seconds += time.perf_counter() - started
            self.probes += 1
            self.entries[key] = self._new[key] = entry
        return since, entry

    def build(self, opset: int, types: Iterable[str] = FLOAT_TYPES, ops: Iterable[str] | None = None) -> int:
        """Probe every ai.onnx operator (or `ops`) at `opset` for each of `types` its schema allows
        (`planned_bindings`); an operator no model can be built for gets one `unknown` entry. Returns how many
        entries were probed (those already known are kept)."""
        before = self.probes
        wanted = tuple(types)
        names = sorted(ops) if ops is not None else sorted(
            {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""})
        for op_type in names:
            schema = _schema(op_type, opset)
            if schema is None or schema.deprecated:
                continue
            params, reason = probe_parameters(schema)
            bindings = planned_bindings(schema, wanted) if reason is None else [
                {param: wanted[0] for param in params}]
            for binding in bindings:
                self.status(op_type, opset, binding)
        return self.probes - before

    def path_text(self) -> str | None:
        """The cache file, as text (None when the table is kept in memory)."""
        return None if self.path is None else str(self.path)

    def save(self) -> Path | None:
        """Write the entries probed here into the cache file, merged with what it holds now (another process
        may have written since), atomically; returns the file (None when in memory only or nothing new)."""
        if self.path is None or not self._new:
            return None
        on_disk, _ = _read_entries(self.path, self.provider, self.onnxruntime_version)  # corrupt: replaced
        merged = {**on_disk, **self._new}
        record = {
            "format": TABLE_FORMAT,
            "onnxruntime": self.onnxruntime_version,
            "provider": self.provider,
            "onnx": onnx.__version__,
            "entries": {key: merged[key].to_dict() for key in sorted(merged)},
        }
        write_atomic(self.path, json.dumps(record, indent=1) + "\n")
        self.entries = {**merged, **self.entries}
        self._new = {}
        return self.path

    def counts(self) -> dict[str, int]:
        """How many entries have each status."""
        found = dict.fromkeys((str(s) for s in KernelStatus), 0)
        for entry in self.entries.values():
            found[str(entry.status)] += 1
        return found


class _Corrupt(ValueError):
    """Why a cache file cannot be a table."""


def _read_cache(path: Path) -> bytes | None:
    """The bytes of the cache file at `path`, None when there is none; _Corrupt for anything but a regular file
    (never opened blocking, never followed) or one longer than CACHE_LIMIT."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _Corrupt("a symlink, not a file") from None
        raise
    with os.fdopen(fd, "rb") as file:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise _Corrupt("a FIFO, not a file" if stat.S_ISFIFO(kind) else "not a regular file")
        data = file.read(CACHE_LIMIT + 1)
    if len(data) > CACHE_LIMIT:
        raise _Corrupt(f"longer than {CACHE_LIMIT} bytes")
    return data


def _entries_of(record: object, provider: str, version: str) -> dict[str, KernelEntry] | None:
    """The entries of a parsed cache file, None when it is another version's, provider's or format's table;
    _Corrupt when it is no table at all."""
    if not isinstance(record, dict):
        raise _Corrupt(f"a JSON {type(record).__name__}, not an object")
    if (record.get("format"), record.get("onnxruntime"), record.get("provider")) != (TABLE_FORMAT, version, provider):
        return None
    entries = record.get("entries")
    if not isinstance(entries, dict):
        raise _Corrupt("'entries' is not an object")
    statuses = {str(status) for status in KernelStatus}
    found = {}
    for key, value in entries.items():
        if not (isinstance(value, dict) and isinstance(value.get("status"), str) and value["status"] in statuses
                and isinstance(value.get("message"), (str, type(None)))):
            raise _Corrupt("an entry is not {status, message}")
        found[key] = KernelEntry(KernelStatus(value["status"]), value.get("message"))
    return found


def _read_entries(path: Path, provider: str, version: str) -> tuple[dict[str, KernelEntry], str | None]:
    """The entries of a cache file, and why it is corrupt (None when it is not). Empty when it is missing,
    unreadable, corrupt, or for another version, provider or format."""
    try:
        data = _read_cache(path)
        if data is None:
            return {}, None
        return _entries_of(json.loads(data), provider, version) or {}, None
    except _Corrupt as error:
        return {}, str(error)
    except RecursionError:
        return {}, "JSON nested too deep"
    except ValueError as error:  # not JSON, not UTF-8
        return {}, f"not JSON ({type(error).__name__})"
    except OSError:  # unreadable: nothing to discard; a save then says whether it can be written
        return {}, None


def table_path(provider: str, onnxruntime_version: str, cache: Path | None = None) -> Path:
    """The cache file of a provider's table: `<cache>/kernels/onnxruntime-<version>-<provider>.json`."""
    return (cache or cache_folder()) / "kernels" / f"onnxruntime-{onnxruntime_version}-{provider}.json"


def kernel_table(provider: str = DEFAULT_PROVIDER, cache: Path | None | bool = None) -> KernelTable:
    """The installed onnxruntime's table for `provider`, read from the cache (`cache`: a folder, None for
    `cache_folder()`, False to keep it in memory only). A UsageError for a provider this onnxruntime lacks:
    ONNX Runtime would quietly fall back to the CPU provider and the table would describe that one."""
    onnxruntime = import_onnxruntime()
    available = onnxruntime.get_available_providers()
    if provider not in available:
        raise UsageError(f"execution provider {provider!r} is not in this onnxruntime ({', '.join(available)})")
    version = onnxruntime.__version__
    if cache is False:
        return KernelTable(provider, version, None)
    path = table_path(provider, version, None if cache in (None, True) else Path(cache))
    entries, corrupt = _read_entries(path, provider, version)
    if corrupt:
        warnings.warn(CorruptCacheWarning(f"kernel cache {path} is corrupt ({corrupt}): discarded, its entries are "
                                          "probed again and the file rewritten"), stacklevel=2)
    return KernelTable(provider, version, path, entries)
