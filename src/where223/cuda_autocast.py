"""CUDA's fp16 autocast policy, emulated on CPU tensors, so that a trace carries the types a CUDA export would.

The seed's failure is CUDA fp16; this machine has no GPU, and CPU autocast casts other ops than CUDA's (torch 2.1.2
runs `layer_norm` and `softmax` in float32 under CUDA autocast and leaves them alone on CPU). `emulate_cuda_autocast`
applies one torch release's CUDA lists to CPU tensors, at the dispatcher level where CUDA autocast acts:

- above the tracer: a kernel for the AutocastCPU dispatch key of every listed op casts its inputs as that release's
  `autocast_mode.cpp` does for CUDA (`lower_precision_fp` to float16, `fp32` to float32, `fp32_set_opt_dtype` adds
  `dtype=float32`, `fp32_append_dtype` calls the overload with a dtype, `promote` to the widest input type, `banned`
  raises); every other op CPU autocast registers passes through, so CPU's own lists do not apply. The casts are
  dispatched like CUDA autocast's (`Tensor.to`), so a TorchScript trace records them; fp32 leaf weights' float16
  casts are cached for the region, as CUDA autocast caches them.
- below the tracer: a dispatch mode runs an op that has no float16 CPU kernel in float32 and rounds its floating
  results to the dtypes the op gives for float16 inputs (from its meta kernel), so the trace records the float16 op
  a CUDA run would have run, for every op the model reaches, listed or not.

The lists are data, one file per release in `autocast_lists/` with each op's policy and its source file and line
(`lists_for`); `lists_from_binary` reads the running release's own header and dispatcher (torch 2.4 and later ship
the lists in `ATen/autocast_mode.h`), which is what the GPU comparison script uses on a CUDA machine. Two checks hold
a committed copy to the binary it names, without a GPU: `drift`, which ops the dispatcher registers for AutocastCUDA
and at which block line, and `policy_drift`, each op's policy, from the binary's own wrappers
(`policies_from_binary`: the `CastPolicy` of every CUDA `WrapFunction_` instantiation named in libtorch_cpu.so's
symbol strings; the two ops registered without one are checked otherwise, `binary_cross_entropy` by running its
AutocastCUDA kernel, which must refuse as banned, and `_cudnn_rnn` by the file the dispatcher names for its kernel).
Imports only torch and the standard library: `benchmarks/bench_variants_gpu.py` copies this file into its bundle.

Inside a region where model code turns CUDA autocast off (`torch.cuda.amp.autocast(enabled=False)`, as GPT-2's
upcast attention does) the emulated kernels cast nothing, as CUDA's do there.

What it does not emulate: CUDA kernels' own numerics (cuBLAS accumulation, fused attention), ops that exist only
on CUDA (`_cudnn_rnn`, cudnn convolutions: CPU reaches other ops), autocast's effect on backward passes, and, on a
torch whose CPU lacks a float16 kernel for an op the TorchScript tracer records inside another call (2.1.2's
convolutions), the float16 node: the trace records that op in float32 between Casts (`Emulation.traced_in_float`
names it).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

__all__ = [
    "POLICIES", "BinaryPolicies", "CudaAutocastLists", "drift", "emulate_cuda_autocast", "lists_for",
    "lists_from_binary", "policies_from_binary", "policy_drift", "registered_cuda_autocast_ops", "releases",
]  # fmt: skip

LISTS_DIR = Path(__file__).with_name("autocast_lists")
POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")
_MACROS = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp",
    "AT_FORALL_FP32": "fp32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
    "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": "fp32_append_dtype",
    "AT_FORALL_PROMOTE": "promote",
}
# Registered for CUDA by name in autocast_mode.cpp (or another file), outside the header's macros.
_OUTSIDE_MACROS = {
    "cudnn_convolution": "lower_precision_fp",
    "cudnn_convolution_transpose": "lower_precision_fp",
    "binary_cross_entropy": "banned",
    "_cudnn_rnn": "lower_precision_fp",
    # torch 2.14.1 registers it by name in the CUDA block; its policy as seen under CPU autocast, which registers it
    # too (bfloat16 in, float32 out): fp32
    "linalg_matrix_sqrth": "fp32",
}
_HEADER = "aten/src/ATen/autocast_mode.h"
# fp32_append_dtype: the overload each listed one is redispatched to, with dtype appended.
_APPEND_DTYPE = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}


@dataclass(frozen=True)
class CudaAutocastLists:
    """One torch release's CUDA autocast lists: op name (`name.overload`) -> (policy, `file:line`)."""

    torch: str
    ops: Mapping[str, tuple[str, str]]
    registered_at: Mapping[str, int] = field(default_factory=dict)
    provenance: str = ""

    def policy(self, op: str) -> str | None:
        entry = self.ops.get(op)
        return None if entry is None else entry[0]

    def by_policy(self) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {policy: [] for policy in POLICIES}
        for op, (policy, _) in self.ops.items():
            grouped[policy].append(op)
        return grouped

    def to_json(self) -> str:
        """The lists as their committed file holds them: one op per line."""
        document = self.to_dict()
        lines = ["{"] + [f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in document.items()
                         if key != "policies"]  # fmt: skip
        policies = list(document["policies"].items())
        lines.append('  "policies": {')
        for number, (policy, entries) in enumerate(policies, start=1):
            lines.append(f"    {json.dumps(policy)}: [")
            lines += [f"      {json.dumps(entry)}" + ("," if index < len(entries) else "")
                      for index, entry in enumerate(entries, start=1)]  # fmt: skip
            lines.append("    ]" + ("," if number < len(policies) else ""))
        return "\n".join([*lines, "  }", "}", ""])

    def to_dict(self) -> dict[str, Any]:
        policies: dict[str, list[dict[str, str]]] = {}
        for op, (policy, at) in self.ops.items():
            policies.setdefault(policy, []).append({"op": op, "at": at})
        return {"torch": self.torch, "lower_precision": "float16", "registered_at": dict(self.registered_at),
                "provenance": self.provenance, "policies": policies}  # fmt: skip

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> CudaAutocastLists:
        ops: dict[str, tuple[str, str]] = {}
        for policy, entries in document["policies"].items():
            if policy not in POLICIES:
                raise ValueError(f"unknown CUDA autocast policy {policy!r}; known: {', '.join(POLICIES)}")
            for entry in entries:
                if entry["op"] in ops:
                    raise ValueError(f"{entry['op']} is listed twice")
                ops[entry["op"]] = (policy, entry["at"])
        return cls(str(document["torch"]), ops, dict(document.get("registered_at", {})),
                   str(document.get("provenance", "")))  # fmt: skip


def release_of(version: str) -> str:
    """`2.1.2+cu121` -> `2.1.2`."""
    return version.split("+", 1)[0]


def releases() -> list[str]:
    """The torch releases whose lists are committed."""
    return sorted(path.stem for path in LISTS_DIR.glob("*.json"))


def lists_for(release: str | None = None) -> CudaAutocastLists:
    """The committed lists of `release` (default: the installed torch's); an unknown release is a ValueError."""
    release = release_of(torch.__version__) if release is None else release
    path = LISTS_DIR / f"{release}.json"
    if not path.is_file():
        raise ValueError(f"no CUDA autocast lists for torch {release}; committed: {', '.join(releases())} "
                         "(scripts/cuda_autocast_lists.py writes them for a release that ships its header)")
    return CudaAutocastLists.from_dict(json.loads(path.read_text()))


def registered_cuda_autocast_ops() -> dict[str, tuple[str, int]]:
    """Every op the installed binary registers a CUDA autocast kernel for -> (source file, block line)."""
    found = {}
    for name in torch._C._dispatch_get_all_op_names():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA"):
            continue
        match = re.search(r"^AutocastCUDA: registered at (\S+):(\d+)", torch._C._dispatch_dump(name), re.M)
        file = "?" if match is None else re.sub(r"^.*?(aten/src/)", r"\1", match.group(1))
        found[_short(name)] = (file, 0 if match is None else int(match.group(2)))
    return found


def _short(name: str) -> str:
    return name.removeprefix("aten::")


def drift(lists: CudaAutocastLists, registered: Mapping[str, tuple[str, int]] | None = None) -> list[str]:
    """How `lists` differ from what a binary registers for CUDA autocast (default: the installed one): ops listed but
    not registered, registered but not listed, and ops whose registering file or block line is not the one cited.
    Empty when the copy matches the binary."""
    registered = registered_cuda_autocast_ops() if registered is None else registered
    problems = [f"{op}: listed, not registered for AutocastCUDA" for op in sorted(set(lists.ops) - set(registered))]
    problems += [f"{op}: registered for AutocastCUDA, not listed" for op in sorted(set(registered) - set(lists.ops))]
    for op in sorted(set(lists.ops) & set(registered)):
        file, line = registered[op]
        if lists.registered_at.get(file) != line:
            problems.append(f"{op}: registered at {file}:{line}, the lists cite {lists.registered_at}")
    return problems


# ---------------------------------------------------------------------------------------------------------------------
# Each op's policy as the binary's own wrappers give it, independently of where it is registered.

# One instantiation of autocast_mode.h's `WrapFunction_<CastPolicy, DeviceType, Redispatch, F, Ret, Args>` per wrapped
# op and device, kept by name in the library's symbol strings: the policy and device as integers, then the rest.
_WRAPPER = re.compile(rb"_ZN2at8autocast13WrapFunction_ILNS0_10CastPolicyE(\d+)ELN3c1010DeviceTypeE(\d+)E([\w$.]+)")
_LENGTH = re.compile(rb"\d+")
# The argument types of an `at::` function's signature as mangled right after that fixed prefix (S3_ is c10, S5_
# at::Tensor once the signature's return type has named it) -> the type as the op's schema prints it. Only the
# fp32_append_dtype wrappers point at an `at::` function (`at::norm`) rather than at an `at::_ops::<op>::call`.
_MANGLED_TYPES = {
    b"RKS5_": "Tensor",
    b"RKNS3_6ScalarE": "Scalar",
    b"RKNS3_8optionalINS3_6ScalarEEE": "Scalar?",  # c10::optional (torch 2.1)
    b"RKSt8optionalINS3_6ScalarEE": "Scalar?",  # std::optional (torch 2.14)
    b"NS3_8ArrayRefIlEE": "int[]",
    b"NS3_8ArrayRefINS_7DimnameEEE": "str[]",  # Dimname[]: the schema's text prints it str[]
    b"b": "bool",
    b"NS3_10ScalarTypeE": "ScalarType",
}
_CUDNN_RNN_FILE = "aten/src/ATen/cudnn/AutocastRNN.cpp"
_UNSAFE = "unsafe to autocast"


@dataclass(frozen=True)
class BinaryPolicies:
    """Each op's CUDA autocast policy as a binary's wrapper instantiations give it (`policies_from_binary`)."""

    library: str
    instantiations: int  # distinct CUDA WrapFunction_ instantiations in its symbol strings
    policies: Mapping[str, str]  # op (`name.overload`) -> policy
    undecoded: tuple[str, ...] = ()  # instantiations whose op could not be named (or named twice), and why


def policies_from_binary(library: Path | None = None) -> BinaryPolicies:
    """Each op's CUDA autocast policy read from the installed torch's `libtorch_cpu.so` (or `library`), where every
    wrapper `autocast_mode.cpp` registers keeps its template instantiation's mangled name: the `CastPolicy` and
    `DeviceType` as integers (named from the release's `autocast_mode.h` enum and the binary's `c10::DeviceType`
    binding), and the function it wraps, `at::_ops::<op>::call` (`<op>` is `name_overload`, named back to the
    dispatcher's one op of that spelling) or, for fp32_append_dtype, the `at::` function it redispatches to with a
    dtype: that overload is found by its signature's argument types among the function's schemas and named back to
    the overload registered (`_APPEND_DTYPE`). One pass of a regular expression over the mapped file's string
    tables (its symbol names: about a sixth of the file).

    Ops registered without such a wrapper are not here; `policy_drift` says how each is checked. ValueError where
    the file is missing or holds no CUDA wrapper (a stripped library)."""
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so" if library is None else Path(library)
    if not library.is_file():
        raise ValueError(f"no {library}")
    with library.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
        found = {match.group(0) for start, end in _string_tables(view) for match in _WRAPPER.finditer(view, start, end)}
    policy_names = _cast_policies()
    cuda = int(torch._C._autograd.DeviceType.CUDA)  # c10::DeviceType, as the binary binds it
    structs: dict[str, list[str]] = {}
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::"):
            structs.setdefault(_short(name).replace(".", "_"), []).append(_short(name))
    policies: dict[str, str] = {}
    undecoded: list[str] = []
    count = 0
    for mangled in sorted(found):
        match = _WRAPPER.match(mangled)
        if int(match.group(2)) != cuda:
            continue
        count += 1
        policy = policy_names.get(int(match.group(1)), f"CastPolicy {match.group(1).decode()}")
        try:
            op = _wrapped_op(match.group(3), structs)
        except ValueError as error:
            undecoded.append(f"{mangled[:160].decode()}...: {error}")
            continue
        if policies.setdefault(op, policy) != policy:
            undecoded.append(f"{op}: two CUDA wrappers, {policies[op]} and {policy}")
    if not count:
        raise ValueError(f"{library} holds no CUDA autocast wrapper's name (a stripped library?)")
    return BinaryPolicies(str(library), count, policies, tuple(undecoded))


def _string_tables(view: Any) -> list[tuple[int, int]]:
    """Where an ELF64 little-endian file keeps its string tables (SHT_STRTAB sections: the symbol names, about a sixth
    of libtorch_cpu.so), as (start, end); the whole file where it is no such file or lists none."""
    if view[:6] != b"\x7fELF\x02\x01":
        return [(0, len(view))]
    (table,) = struct.unpack_from("<Q", view, 0x28)
    size, count = struct.unpack_from("<HH", view, 0x3A)
    ranges = []
    for index in range(count):
        kind, _, _, offset, length = struct.unpack_from("<IQQQQ", view, table + index * size + 4)
        if kind == 3:  # SHT_STRTAB
            ranges.append((offset, offset + length))
    return ranges or [(0, len(view))]


def _cast_policies() -> dict[int, str]:
    """`at::autocast::CastPolicy`'s values -> names, from the installed release's `autocast_mode.h`."""
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    body = re.search(r"enum class CastPolicy\b[^{]*\{(.*?)\};", header.read_text() if header.is_file() else "", re.S)
    if body is None:
        raise ValueError(f"torch {torch.__version__} ships no {header.name} declaring CastPolicy")
    names: dict[int, str] = {}
    value = -1
    for item in re.sub(r"//[^\n]*", "", body.group(1)).split(","):
        enumerator = re.fullmatch(r"\s*(\w+)\s*(?:=\s*(\d+))?\s*", item)
        if enumerator is None:
            continue
        value = int(enumerator.group(2)) if enumerator.group(2) else value + 1
        names[value] = enumerator.group(1)
    return names


def _wrapped_op(tail: bytes, structs: Mapping[str, list[str]]) -> str:
    """The op a wrapper's template arguments (after the policy and device) wrap; ValueError saying why not."""
    start = tail.find(b"XadL_ZNS_")  # the function pointer: &at::...
    if start < 0:
        raise ValueError("no at:: function pointer among its template arguments")
    parts, position = [], start + len(b"XadL_ZNS_")
    while (length := _LENGTH.match(tail, position)) is not None:
        position = length.end() + int(length.group(0))
        parts.append(tail[length.end():position].decode())
    if len(parts) == 3 and parts[0] == "_ops" and parts[2] == "call":
        named = structs.get(parts[1], [])
        if len(named) != 1:
            raise ValueError(f"at::_ops::{parts[1]} names {len(named)} ops of this binary: {named}")
        return named[0]
    if len(parts) != 1:
        raise ValueError(f"points at at::{'::'.join(parts)}, neither at::_ops::<op>::call nor an at:: function")
    target = _overload_by_signature(parts[0], tail[:start])
    registered = [op for op, redispatched in _APPEND_DTYPE.items() if redispatched == target]
    if len(registered) != 1:
        raise ValueError(f"redispatches to {target}, which no fp32_append_dtype overload of this module appends to")
    return registered[0]


def _overload_by_signature(function: str, signature: bytes) -> str:
    """The one overload of `aten::<function>` whose schema's argument types the mangled `signature` spells."""
    body = re.fullmatch(rb"FNS_6TensorE(\w+)E", signature)
    types, position = [], 0
    while body is not None and position < len(body.group(1)):
        token = next((token for token in _MANGLED_TYPES if body.group(1).startswith(token, position)), None)
        if token is None:
            raise ValueError(f"at::{function}'s signature has a type this module does not read at "
                             f"{body.group(1)[position:position + 40].decode()}")
        types.append(_MANGLED_TYPES[token])
        position += len(token)
    if body is None:
        raise ValueError(f"at::{function}'s signature {signature[:80].decode()} does not return one Tensor")
    try:
        packet = getattr(torch.ops.aten, function)
    except (AttributeError, RuntimeError):
        raise ValueError(f"this binary has no op aten::{function}") from None
    matching = [f"{function}.{overload}" for overload in packet.overloads()
                if _schema_types(getattr(packet, overload)._schema) == types]  # fmt: skip
    if len(matching) != 1:
        raise ValueError(f"at::{function}({', '.join(types)}) matches {len(matching)} overloads: {matching}")
    return matching[0].removesuffix(".default")


def _schema_types(schema: Any) -> list[str]:
    """An op's argument types as its schema's text prints them, list sizes dropped (`int[1]` -> `int[]`)."""
    text = str(schema).partition("(")[2]  # after the op's name
    types = []
    for argument in schema.arguments:
        match = re.search(rf"(\S+) {re.escape(argument.name)}(?=[=,)])", text)
        types.append(re.sub(r"\[\d+\]", "[]", match.group(1)) if match else "?")
    return types


def policy_drift(lists: CudaAutocastLists, binary: BinaryPolicies | None = None,
                 registered: Mapping[str, tuple[str, int]] | None = None) -> list[str]:  # fmt: skip
    """How each op's policy in `lists` differs from the one the binary gives it (default: the installed binary):

    - an op with a CUDA `WrapFunction_` instantiation: its policy must be the instantiation's `CastPolicy`; a
      wrapper whose op is not listed, or that could not be named, is reported too;
    - `binary_cross_entropy` (banned; its kernel is a plain function, no template): its AutocastCUDA kernel is run
      on CPU tensors, the AutocastCUDA key forced into this thread's dispatch, and must refuse as unsafe to autocast;
    - `_cudnn_rnn` (its kernel, `_cudnn_rnn_cast_reflatten`, is a plain function in libtorch_cuda.so): the
      dispatcher (`registered`, default the installed binary's) must name cudnn/AutocastRNN.cpp as its registering
      file, whose one kernel casts input, weights and states to float16 (torch's source): lower_precision_fp;
    - any other op without a wrapper is reported: nothing here could check its policy.

    Empty when every listed op's policy is the binary's."""
    binary = policies_from_binary() if binary is None else binary
    problems = [f"CUDA autocast wrapper not named: {text}" for text in binary.undecoded]
    for op, (policy, _) in sorted(lists.ops.items()):
        found = binary.policies.get(op)
        if found is not None:
            if found != policy:
                problems.append(f"{op}: listed {policy}, the binary's CUDA wrapper is {found}")
        elif op == "binary_cross_entropy":
            problems += _banned_problems(op, policy)
        elif op == "_cudnn_rnn":
            registered = registered_cuda_autocast_ops() if registered is None else registered
            file = registered.get(op, ("not registered", 0))[0]
            if file != _CUDNN_RNN_FILE:
                problems.append(f"{op}: listed {policy}; its AutocastCUDA kernel is registered by {file}, not by "
                                f"{_CUDNN_RNN_FILE}, whose float16 casts are all this check knows of it")
            elif policy != "lower_precision_fp":
                problems.append(f"{op}: listed {policy}; its AutocastCUDA kernel is {file}'s, which casts to float16 "
                                "(lower_precision_fp)")
        else:
            problems.append(f"{op}: listed {policy}, the binary has no CUDA autocast wrapper for it and nothing "
                            "else here checks its policy")
    problems += [f"{op}: the binary's CUDA wrapper is {policy}, not listed"
                 for op, policy in sorted(binary.policies.items()) if op not in lists.ops]  # fmt: skip
    return problems


def _banned_problems(op: str, policy: str) -> list[str]:
    """binary_cross_entropy's AutocastCUDA kernel, run on CPU tensors: listed banned, it must refuse them as unsafe
    to autocast; listed anything else, nothing here reads its policy."""
    refusal = _refusal_under_cuda_autocast(lambda: torch.ops.aten.binary_cross_entropy(torch.rand(2), torch.rand(2)))
    if refusal is None:
        found = "runs"
    elif _UNSAFE in refusal:
        found = "refuses it as unsafe to autocast (banned)"
        if policy == "banned":
            return []
    else:
        found = f"fails otherwise ({refusal.splitlines()[0][:120]})"
    return [f"{op}: listed {policy}; its AutocastCUDA kernel, run on CPU tensors, {found}"]


def _refusal_under_cuda_autocast(call) -> str | None:
    """Run `call` with the AutocastCUDA key forced into this thread's dispatch (CPU tensors never carry it, and CUDA
    autocast's kernels leave CPU tensors uncast): the error it raised, or None when it ran."""
    key = torch._C.DispatchKey.AutocastCUDA
    included = torch._C._dispatch_tls_is_dispatch_key_included(key)
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded(key)
    torch._C._dispatch_tls_set_dispatch_key_included(key, True)
    torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        with _below_autocast():  # CPU autocast's kernels (or the emulation's) stay out of it
            call()
    except RuntimeError as error:
        return str(error)
    finally:
        torch._C._dispatch_tls_set_dispatch_key_included(key, included)
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)
    return None


def lists_from_binary() -> CudaAutocastLists:
    """The installed release's lists read from its own wheel: the header's AT_FORALL_* macros (torch >= 2.4), the
    registrations outside them and every block's line from the dispatcher. ValueError where the header has none."""
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.is_file():
        raise ValueError(f"torch {torch.__version__} ships no {header.name}")
    ops: dict[str, tuple[str, str]] = {}
    policy = None
    for number, line in enumerate(header.read_text().splitlines(), start=1):
        define = re.match(r"#define (AT_FORALL_\w+)\(_\)", line)
        if define:
            policy = _MACROS.get(define.group(1))
            continue
        if policy is None:
            continue
        entry = re.match(r"\s*_\((\w+)(?:,\s*(\w+))?\)", line)
        redispatch = re.match(r'\s*"(\w+(?:\.\w+)?)",', line)
        if entry and entry.group(1) != "ADD_NS":
            ops[entry.group(1) + (f".{entry.group(2)}" if entry.group(2) else "")] = (policy, f"{_HEADER}:{number}")
        elif redispatch:
            ops[redispatch.group(1)] = (policy, f"{_HEADER}:{number}")
        if not line.rstrip().endswith("\\"):
            policy = None
    if not ops:
        raise ValueError(f"torch {torch.__version__}'s {header.name} has no AT_FORALL_* lists")
    binary = registered_cuda_autocast_ops()
    for op, (file, line) in sorted(binary.items()):
        if op not in ops and op in _OUTSIDE_MACROS:
            ops[op] = (_OUTSIDE_MACROS[op], f"{file}:{line} (block)")
    release = release_of(torch.__version__)
    provenance = (
        f"torch {release}'s wheel: each op's policy and line from the AT_FORALL_* macros of {_HEADER}, which the block"
        " TORCH_LIBRARY_IMPL(aten, Autocast, m) of aten/src/ATen/autocast_mode.cpp expands for CUDA; that block's"
        " line, and the registrations made outside the macros, from the binary's dispatcher (torch._C._dispatch_dump)."
    )
    return CudaAutocastLists(release, ops, dict(sorted(set(binary.values()))), provenance)


# ---------------------------------------------------------------------------------------------------------------------
# The emulation.

_LOW = torch.float16


def _eligible(value: Any) -> bool:
    """CUDA autocast's `is_eligible`, for the CPU tensors the emulation stands them in for."""
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64


class _Casts:
    """Casts as CUDA autocast's `cached_cast` makes them: fp32 leaf weights' float16 casts cached for the region
    while autocast's cache is on (torch.onnx.export turns it off while it traces, as a trace needs)."""

    def __init__(self) -> None:
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def cast(self, dtype: torch.dtype, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(self.cast(dtype, item) for item in value)
        if not _eligible(value) or value.dtype == dtype:
            return value
        cacheable = (torch.is_autocast_cache_enabled() and dtype == _LOW and value.dtype == torch.float32
                     and value.requires_grad and value.is_leaf and not value._is_view())  # fmt: skip
        if not cacheable:
            return value.to(dtype)
        hit = self.cache.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        casted = value.to(dtype)
        self.cache[id(value)] = (value, casted)
        return casted


def _first_tensor(args: tuple, kwargs: dict) -> Any:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    return item
    return None


def _overload(name: str) -> Any:
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _below_autocast():
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU))


def _cuda_autocast_on() -> bool:
    """CUDA autocast's flag as model code sets it (`torch.autocast("cuda", enabled=False)` regions turn it off)."""
    return _autocast_enabled("cuda")


def _kernel(name: str, policy: str, casts: _Casts):
    """The AutocastCPU kernel that applies CUDA's `policy` to op `name` and redispatches below autocast; inside a
    region where model code turned CUDA autocast off (GPT-2's `autocast(enabled=False)`), it casts nothing, as
    CUDA's kernels do there."""
    op = _overload(name)
    applies = _policy_kernel(name, policy, casts)

    def kernel(*args, **kwargs):
        if _cuda_autocast_on():
            return applies(*args, **kwargs)
        with _below_autocast():
            return op(*args, **kwargs)

    return kernel


def _policy_kernel(name: str, policy: str, casts: _Casts):
    """CUDA's `policy` for op `name`: cast its arguments, then redispatch below autocast."""
    op = _overload(name)
    schema_names = [argument.name for argument in op._schema.arguments]

    def redispatch(target, args, kwargs):
        with _below_autocast():
            return target(*args, **kwargs)

    if policy == "banned":
        def banned(*args, **kwargs):
            raise RuntimeError(f"aten::{name} is banned under CUDA autocast (emulated): it is unsafe in float16; "
                               "CUDA autocast asks for binary_cross_entropy_with_logits instead")
        return banned
    if policy in ("lower_precision_fp", "fp32"):
        dtype = _LOW if policy == "lower_precision_fp" else torch.float32

        def cast_all(*args, **kwargs):
            return redispatch(op, casts.cast(dtype, args), {key: casts.cast(dtype, v) for key, v in kwargs.items()})
        return cast_all
    if policy == "promote":
        def promote(*args, **kwargs):
            widest = _LOW
            for value in _tensors(args, kwargs):
                if _eligible(value):
                    widest = torch.promote_types(widest, value.dtype)
            return redispatch(op, casts.cast(widest, args), {key: casts.cast(widest, v) for key, v in kwargs.items()})
        return promote
    if policy == "fp32_set_opt_dtype":
        position = schema_names.index("dtype")

        def set_opt_dtype(*args, **kwargs):
            if not _eligible(_first_tensor(args, kwargs)):
                return redispatch(op, args, kwargs)
            args = list(args)
            if position < len(args):
                args[position] = torch.float32 if args[position] is None else args[position]
            elif kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": torch.float32}
            return redispatch(op, tuple(args), kwargs)
        return set_opt_dtype
    if policy == "fp32_append_dtype":
        target = _overload(_APPEND_DTYPE[name])

        def append_dtype(*args, **kwargs):
            if not _eligible(_first_tensor(args, kwargs)):
                return redispatch(op, args, kwargs)
            return redispatch(target, args, {**kwargs, "dtype": torch.float32})
        return append_dtype
    raise ValueError(f"unknown CUDA autocast policy {policy!r}")


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []

    def visit(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            found.append(value)
        return value

    tree_map(visit, (args, kwargs))
    return found


class _HalfBelowTracer(TorchDispatchMode):
    """Below the tracer: an op without a float16 CPU kernel runs in float32, its results rounded to the dtypes the op
    gives float16 inputs (its meta kernel says which). `fallbacks` counts the ops it ran so, by name.

    The TorchScript tracer records most ops at their own level and none of what they call; a few (the convolutions)
    it records in a call they make (`_convolution`), and a dispatch mode, which runs with the tracer's key excluded,
    would hide that call from it. For those (a trace is under way while the op reaches the mode) the tracer's key is
    included again around the op, as it is without the mode; if such an op also lacks a float16 CPU kernel, its
    float32 computation is what the trace records (`traced_in_float` names them: none on torch 2.14's CPU for the
    convolutions, whose float16 kernels exist there)."""

    def __init__(self) -> None:
        super().__init__()
        self.fallbacks: dict[str, int] = {}
        self.traced_in_float: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch._C._get_tracing_state() is not None:
            return self._recorded_inside(func, args, kwargs)
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as error:
            if "Expected a value of type 'Tensor'" in str(error):
                # graph passes (torch.onnx's CSE) call ops on wrapped numbers, which reach Python as numbers
                return func(*_wrapped_numbers_as_tensors(func, args), **kwargs)
            if not _half_missing(error, args, kwargs):
                raise
        _count(self.fallbacks, func)
        return _in_float(func, args, kwargs)

    def _recorded_inside(self, func, args: tuple, kwargs: dict) -> Any:
        """An op the tracer records in a call it makes: tried untraced first (a kernel that fails while the tracer
        records leaves a broken node), then run again with the tracer's key included, in float32 if it must."""
        pure = not any(argument.alias_info is not None and argument.alias_info.is_write
                       for argument in func._schema.arguments)  # fmt: skip
        in_float = False
        if pure:
            try:
                func(*args, **kwargs)
            except (RuntimeError, NotImplementedError) as error:
                if not _half_missing(error, args, kwargs):
                    raise
                in_float = True
        with _tracer_included():
            if not in_float:
                return func(*args, **kwargs)
            _count(self.traced_in_float, func)
            return _in_float(func, args, kwargs)


def _half_missing(error: BaseException, args: tuple, kwargs: dict) -> bool:
    """Whether `error` is a missing float16 kernel for these arguments."""
    return "Half" in str(error) and any(t.dtype == _LOW for t in _tensors(args, kwargs))


def _count(counts: dict[str, int], func: Any) -> None:
    name = str(func.name()) if hasattr(func, "name") else str(func)
    counts[name] = counts.get(name, 0) + 1


def _tracer_included():
    """The TorchScript tracer's dispatch key included again for a while (a dispatch mode runs with it excluded)."""
    key = torch._C._dispatch_key_parse("Tracer")

    @contextlib.contextmanager
    def included() -> Iterator[None]:
        excluded = torch._C._dispatch_tls_is_dispatch_key_excluded(key)
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
        try:
            yield
        finally:
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)

    return included()


def _in_float(func, args: tuple, kwargs: dict) -> Any:
    """`func` computed in float32 on its float16 inputs, its results rounded as a float16 kernel would give them."""
    wanted = _meta_dtypes(func, args, kwargs)
    up = tree_map(lambda v: v.float() if isinstance(v, torch.Tensor) and v.dtype == _LOW else v, (args, kwargs))
    result = func(*up[0], **up[1])
    mutated = [index for index, argument in enumerate(func._schema.arguments)
               if argument.alias_info is not None and argument.alias_info.is_write]  # fmt: skip
    for index in mutated:  # an in-place or out= op wrote its float32 copy: write the rounded result back
        if index < len(args) and isinstance(args[index], torch.Tensor) and args[index].dtype == _LOW:
            args[index].copy_(up[0][index])
            return args[index] if func._schema.returns and len(func._schema.returns) == 1 else result
    return _round_like(result, wanted)


def _wrapped_numbers_as_tensors(func, args: tuple) -> tuple:
    """`args` with the Python numbers given for Tensor parameters made 0-dim tensors again (a wrapped number is a
    double, long or bool tensor), so an internal call the mode intercepts gets what its caller passed."""
    fixed = list(args)
    for index, argument in enumerate(func._schema.arguments[: len(fixed)]):
        if str(argument.type) == "Tensor" and isinstance(fixed[index], (bool, int, float)):
            fixed[index] = torch.tensor(fixed[index])
    return tuple(fixed)


def _meta_dtypes(func, args, kwargs) -> Any:
    """The result dtypes `func` gives these (float16) inputs, from its meta kernel; None where it has none."""
    try:
        meta = tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, (args, kwargs))
        result = func(*meta[0], **meta[1])
    except Exception:  # no meta kernel (or one that refuses float16 too): round floating results to float16
        return None
    return tree_map(lambda v: v.dtype if isinstance(v, torch.Tensor) else None, result)


def _round_like(result: Any, wanted: Any) -> Any:
    if wanted is None:
        return tree_map(lambda v: v.to(_LOW) if isinstance(v, torch.Tensor) and v.dtype == torch.float32 else v,
                        result)
    flat_results = result if isinstance(result, (list, tuple)) else (result,)
    flat_wanted = wanted if isinstance(wanted, (list, tuple)) else (wanted,)
    rounded = [v.to(dtype) if isinstance(v, torch.Tensor) and isinstance(dtype, torch.dtype) and v.dtype != dtype
               else v for v, dtype in zip(flat_results, flat_wanted, strict=True)]  # fmt: skip
    if isinstance(result, (list, tuple)):
        return type(result)(rounded)
    return rounded[0]


def _autocast_enabled(device: str) -> bool:
    """`device`'s autocast flag: torch 2.4 and later take the device type; torch 2.1 has a function per device."""
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()


def _autocast_flag(device: str, enabled: bool) -> bool:
    """Turn `device`'s autocast flag on or off; its previous value (`_autocast_enabled` on the two APIs). For CUDA
    only code that asks is affected (what `torch.is_autocast_enabled()` answers model code): CPU tensors never
    reach the AutocastCUDA kernels."""
    previous = _autocast_enabled(device)
    try:
        torch.set_autocast_enabled(device, enabled)
    except TypeError:  # torch < 2.4
        (torch.set_autocast_cpu_enabled if device == "cpu" else torch.set_autocast_enabled)(enabled)
    return previous


@dataclass
class Emulation:
    """What one emulated region did: the lists it applied and the ops it ran in float32 below the tracer."""

    lists: CudaAutocastLists
    fallbacks: dict[str, int] = field(default_factory=dict)
    traced_in_float: dict[str, int] = field(default_factory=dict)
    label: str = "emulated CUDA fp16 autocast on CPU"


@contextlib.contextmanager
def emulate_cuda_autocast(lists: CudaAutocastLists | None = None, below_tracer: bool = True) -> Iterator[Emulation]:
    """CUDA fp16 autocast's policy of `lists` (default: the installed release's committed lists) on CPU tensors.

    `below_tracer=False` leaves out the dispatch mode (ops without float16 CPU kernels then fail as they would on CPU).
    Yields an `Emulation` whose `fallbacks` fill as the region runs. Nested use is an error.
    """
    lists = lists_for() if lists is None else lists
    missing = [name for name in lists.ops if not _exists(name)]
    if missing:
        raise ValueError(f"torch {torch.__version__} has no op {missing[0]} of torch {lists.torch}'s CUDA autocast "
                         f"lists ({len(missing)} missing): use the lists of the installed release")
    casts = _Casts()
    library = torch.library.Library("aten", "IMPL")
    emulation = Emulation(lists)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for name, (policy, _) in lists.ops.items():
            library.impl(name, _kernel(name, policy, casts), "AutocastCPU")
        for name in _cpu_autocast_ops():
            if name not in lists.ops:  # CPU's own lists must not apply: straight through to the op below
                library.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")
    cuda_before = _autocast_flag("cuda", True)
    cpu_before = _autocast_flag("cpu", True)
    mode = _HalfBelowTracer() if below_tracer else contextlib.nullcontext()
    try:
        with mode:
            yield emulation
    finally:
        _autocast_flag("cpu", cpu_before)
        _autocast_flag("cuda", cuda_before)
        if below_tracer:
            emulation.fallbacks.update(mode.fallbacks)
            emulation.traced_in_float.update(mode.traced_in_float)
        casts.cache.clear()
        _destroy(library)


def _exists(name: str) -> bool:
    try:
        _overload(name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _cpu_autocast_ops() -> list[str]:
    names = []
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU"):
            names.append(_short(name))
    return names


def _destroy(library: Any) -> None:
    """Deregister the library's kernels (torch 2.1's Library frees them when collected; newer ones have _destroy)."""
    destroy = getattr(library, "_destroy", None)
    if destroy is not None:
        destroy()
        return
    library.m = None  # the C++ library object's destructor deregisters what it registered
    import torch.library as module

    getattr(module, "_impls", set()).difference_update(getattr(library, "_op_impls", ()))
