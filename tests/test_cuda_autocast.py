"""CUDA's fp16 autocast policy emulated on CPU (where223.cuda_autocast): the committed lists against the binary
that installs them (this stack's torch 2.1.2 in-process, today's torch 2.14.1 in its interpreter), each policy's
effect on CPU tensors beside CPU autocast's, the trace's casts and float16 ops, and the region leaving no trace."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
import torch

from tests.stacks import today_python
from where223 import cuda_autocast
from where223.cuda_autocast import (
    BinaryPolicies,
    CudaAutocastLists,
    drift,
    emulate_cuda_autocast,
    lists_for,
    policies_from_binary,
    policy_drift,
    registered_cuda_autocast_ops,
    releases,
)
from where223.pipeline.paths import ROOT


def test_the_installed_release_s_lists_are_what_its_binary_registers_for_cuda_autocast():
    lists = lists_for()
    assert lists.torch == torch.__version__.split("+")[0]
    assert drift(lists) == []
    assert len(lists.ops) == len(registered_cuda_autocast_ops()) == 112
    # the two policies the issue is about: CUDA runs layer_norm in float32 and softmax with dtype=float32
    assert lists.policy("layer_norm") == "fp32" and lists.policy("softmax.int") == "fp32_set_opt_dtype"
    assert lists.ops["layer_norm"][1] == "aten/src/ATen/autocast_mode.cpp:309"


def test_control_a_copy_that_drifted_from_the_binary_is_caught():
    lists = lists_for()
    ops = dict(lists.ops)
    dropped = ops.pop("layer_norm")
    ops["where.self"] = dropped  # listed, never registered
    problems = drift(dataclasses.replace(lists, ops=ops))
    assert "layer_norm: registered for AutocastCUDA, not listed" in problems
    assert "where.self: listed, not registered for AutocastCUDA" in problems
    moved = dataclasses.replace(lists, registered_at={"aten/src/ATen/autocast_mode.cpp": 254})
    assert any("registered at aten/src/ATen/autocast_mode.cpp:253" in problem for problem in drift(moved))


def test_today_s_lists_are_what_torch_2_14_registers_and_what_its_header_lists(tmp_path):
    python = today_python()
    script = (
        "import json, sys\n"
        "from where223.cuda_autocast import drift, lists_for, lists_from_binary, policies_from_binary, policy_drift\n"
        "committed = lists_for('2.14.1')\n"
        "binary = policies_from_binary()\n"
        "print(json.dumps({'drift': drift(committed), 'header_equal': lists_from_binary().ops == committed.ops,\n"
        "                  'count': len(committed.ops), 'policy_drift': policy_drift(committed, binary),\n"
        "                  'wrappers': binary.instantiations}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # each op's policy from 2.14.1's own wrappers too: 119 of them, and the two ops registered without one
    assert found == {"drift": [], "header_equal": True, "count": 121, "policy_drift": [], "wrappers": 119}


# --- Each op's policy against the binary's own wrappers (issue 38): `drift` compares which ops are registered and
# at which block line, so a policy moved between lists passed it.


@pytest.fixture(scope="module")
def binary() -> BinaryPolicies:
    return policies_from_binary()  # one pass over libtorch_cpu.so's string tables, once for this module


@pytest.fixture(scope="module")
def registered() -> dict[str, tuple[str, int]]:
    return registered_cuda_autocast_ops()


def _moved(op: str, to: str, release: str = "2.1.2") -> CudaAutocastLists:
    """A copy of the committed lists with `op`'s entry moved to the list of policy `to`, as an edit of the file."""
    document = json.loads((ROOT / "src/where223/autocast_lists" / f"{release}.json").read_text())
    entry = next(entry for entries in document["policies"].values() for entry in entries if entry["op"] == op)
    for entries in document["policies"].values():
        if entry in entries:
            entries.remove(entry)
    document["policies"].setdefault(to, []).append(entry)
    return CudaAutocastLists.from_dict(document)


def test_each_listed_op_s_cuda_policy_is_the_one_its_binary_s_wrapper_gives(binary, registered):
    """The control: the committed 2.1.2 lists pass; 110 CUDA wrapper instantiations, each named to one listed op
    (`at::norm`'s three by their signatures), and the two ops registered without one checked otherwise."""
    lists = lists_for()
    assert policy_drift(lists, binary, registered) == []
    assert binary.instantiations == len(binary.policies) == 110 and binary.undecoded == ()
    assert set(lists.ops) - set(binary.policies) == {"_cudnn_rnn", "binary_cross_entropy"}
    assert binary.policies["native_layer_norm"] == "fp32" and binary.policies["bmm"] == "lower_precision_fp"
    assert binary.policies["softmax.int"] == "fp32_set_opt_dtype" and binary.policies["addcmul"] == "promote"
    assert {op: binary.policies[op] for op in binary.policies if op.startswith("norm.")} == dict.fromkeys(
        ["norm.Scalar", "norm.ScalarOpt_dim", "norm.names_ScalarOpt_dim"], "fp32_append_dtype"
    )


@pytest.mark.parametrize(("op", "to"), [
    ("bmm", "fp32"), ("baddbmm", "fp32"), ("addbmm", "fp32"), ("prelu", "fp32"),
    ("exp", "lower_precision_fp"), ("log", "lower_precision_fp"), ("rsqrt", "lower_precision_fp"),
])  # fmt: skip
def test_a_policy_moved_between_float16_and_float32_is_reported(binary, registered, op, to):
    mutant = _moved(op, to)
    assert drift(mutant, registered) == []  # what the registration check sees: the same ops at the same block line
    was = lists_for().policy(op)
    assert policy_drift(mutant, binary, registered) == [f"{op}: listed {to}, the binary's CUDA wrapper is {was}"]


def test_an_unlisted_wrapper_and_a_listed_op_nothing_checks_are_reported(binary, registered):
    lists = lists_for()
    ops = dict(lists.ops)
    ops.pop("mm")
    ops["where.self"] = ("fp32", "aten/src/ATen/autocast_mode.cpp:300")
    assert policy_drift(dataclasses.replace(lists, ops=ops), binary, registered) == [
        "where.self: listed fp32, the binary has no CUDA autocast wrapper for it and nothing else here checks its "
        "policy",
        "mm: the binary's CUDA wrapper is lower_precision_fp, not listed",
    ]


def test_the_banned_op_is_checked_by_running_its_cuda_autocast_kernel(binary, registered):
    """binary_cross_entropy has no wrapper template: its AutocastCUDA kernel, run on CPU tensors, must refuse. Moved
    out of the banned list it is reported; so is binary_cross_entropy_with_logits moved into it (its wrapper is
    fp32); and a binary whose kernel for it runs (a pass-through registered over it here) fails the committed lists,
    which pass again once it is gone."""
    assert policy_drift(_moved("binary_cross_entropy", "fp32"), binary, registered) == [
        "binary_cross_entropy: listed fp32; its AutocastCUDA kernel, run on CPU tensors, refuses it as unsafe to "
        "autocast (banned)"
    ]
    assert policy_drift(_moved("binary_cross_entropy_with_logits", "banned"), binary, registered) == [
        "binary_cross_entropy_with_logits: listed banned, the binary's CUDA wrapper is fp32"
    ]
    import warnings

    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            library.impl("binary_cross_entropy", torch.library.fallthrough_kernel, "AutocastCUDA")
        assert policy_drift(lists_for(), binary, registered) == [
            "binary_cross_entropy: listed banned; its AutocastCUDA kernel, run on CPU tensors, runs"
        ]
    finally:
        cuda_autocast._destroy(library)
    assert policy_drift(lists_for(), binary, registered) == []
    assert not torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.AutocastCUDA)
    assert torch.nn.functional.binary_cross_entropy(torch.rand(2), torch.rand(2)).dtype == torch.float32


def test_cudnn_rnn_is_checked_by_the_file_that_registers_its_kernel(binary, registered):
    """_cudnn_rnn's kernel is a plain function of cudnn/AutocastRNN.cpp, which casts to float16: moved to fp32 it is
    reported, and so is a dispatcher that names another file for it."""
    assert policy_drift(_moved("_cudnn_rnn", "fp32"), binary, registered) == [
        "_cudnn_rnn: listed fp32; its AutocastCUDA kernel is aten/src/ATen/cudnn/AutocastRNN.cpp's, which casts to "
        "float16 (lower_precision_fp)"
    ]
    elsewhere = {**registered, "_cudnn_rnn": ("aten/src/ATen/autocast_mode.cpp", 253)}
    assert policy_drift(lists_for(), binary, elsewhere) == [
        "_cudnn_rnn: listed lower_precision_fp; its AutocastCUDA kernel is registered by "
        "aten/src/ATen/autocast_mode.cpp, not by aten/src/ATen/cudnn/AutocastRNN.cpp, whose float16 casts are all "
        "this check knows of it"
    ]


# torch 2.1.2's names of two wrappers: bmm's (CastPolicy 0, DeviceType 1) and norm.ScalarOpt_dim's (fp32_append_dtype:
# it points at at::norm and the signature it redispatches to, with a dtype)
_BMM = (
    b"_ZN2at8autocast13WrapFunction_ILNS0_10CastPolicyE0ELN3c1010DeviceTypeE1EFNS_6TensorERKS5_S7_EXadL_ZNS_4_ops3"
    b"bmm4callES7_S7_EES5_NS3_4guts8typelist8typelistIJS7_S7_EEEE4callES7_S7_"
)
_NORM = (
    b"_ZN2at8autocast13WrapFunction_ILNS0_10CastPolicyE3ELN3c1010DeviceTypeE1EFNS_6TensorERKS5_RKNS3_8optionalINS3"
    b"_6ScalarEEENS3_8ArrayRefIlEEbNS3_10ScalarTypeEEXadL_ZNS_4normES7_SC_SE_bSF_EES5_NS3_4guts8typelist8typelist"
    b"IJS7_SC_SE_bEEEE4callES7_SC_SE_b"
)


def _library(tmp_path, *names: bytes):
    path = tmp_path / "libtorch_cpu.so"
    path.write_bytes(b"\0".join([b"", *names, b""]))  # not ELF: the whole file is read
    return path


def test_a_binary_s_wrappers_are_read_by_policy_device_and_op(tmp_path, monkeypatch, registered):
    """A stand-in library: bmm's wrapper as fp32 and exp's as float16 are read so and fail the committed lists; a
    CPU instantiation (DeviceType 0) is not CUDA's; a wrapper of no op of this binary, or an at::norm whose
    redispatch overload `_APPEND_DTYPE` does not name, or whose signature this module cannot read, is reported as
    not named rather than skipped; a library without any is refused."""
    mutant = _library(tmp_path, _BMM.replace(b"CastPolicyE0", b"CastPolicyE1"), _BMM.replace(b"3bmm", b"3exp"),
                      _BMM.replace(b"3bmm", b"2mm").replace(b"DeviceTypeE1", b"DeviceTypeE0"), _NORM)  # fmt: skip
    found = policies_from_binary(mutant)
    assert found.instantiations == 3 and found.undecoded == ()
    assert found.policies == {"bmm": "fp32", "exp": "lower_precision_fp", "norm.ScalarOpt_dim": "fp32_append_dtype"}
    problems = policy_drift(lists_for(), found, registered)
    assert "bmm: listed lower_precision_fp, the binary's CUDA wrapper is fp32" in problems
    assert "exp: listed fp32, the binary's CUDA wrapper is lower_precision_fp" in problems
    assert not any(problem.startswith("norm.ScalarOpt_dim:") for problem in problems)
    unnamed = _library(tmp_path, _BMM.replace(b"3bmm", b"9not_an_op"), _NORM.replace(b"ArrayRefIlE", b"ArrayRefIdE"))
    assert [problem.split("...: ")[1] for problem in policies_from_binary(unnamed).undecoded] == [
        "at::_ops::not_an_op names 0 ops of this binary: []",
        "at::norm's signature has a type this module does not read at NS3_8ArrayRefIdEEbNS3_10ScalarTypeE",
    ]
    monkeypatch.delitem(cuda_autocast._APPEND_DTYPE, "norm.ScalarOpt_dim")
    assert (
        policies_from_binary(_library(tmp_path, _NORM))
        .undecoded[0]
        .endswith(
            "redispatches to norm.ScalarOpt_dim_dtype, which no fp32_append_dtype overload of this module appends to"
        )
    )
    with pytest.raises(ValueError, match="holds no CUDA autocast wrapper's name"):
        policies_from_binary(_library(tmp_path, b"_ZN2at6native3bmmERKNS_6TensorES3_"))


def test_every_committed_file_reads_and_names_only_known_policies():
    assert {"2.1.2", "2.14.1"} <= set(releases())
    for release in releases():
        lists = lists_for(release)
        assert lists.torch == release and lists.provenance
        assert all(at.split(":")[0] in lists.registered_at or at.startswith("aten/src/ATen/autocast_mode.h:")
                   for _, at in lists.ops.values())  # fmt: skip
    with pytest.raises(ValueError, match="no CUDA autocast lists for torch 1.0.0"):
        lists_for("1.0.0")
    with pytest.raises(ValueError, match="unknown CUDA autocast policy"):
        CudaAutocastLists.from_dict({"torch": "x", "policies": {"fp64": [{"op": "mm", "at": "f:1"}]}})


def _cited_lines(lists: CudaAutocastLists) -> dict[str, dict[str, list[int]]]:
    """file -> policy -> the lines its ops are cited at, in the lists' order (ops cited by their block left out)."""
    cited: dict[str, dict[str, list[int]]] = {}
    for policy, at in lists.ops.values():
        file, _, line = at.partition(":")
        if not line.endswith("(block)"):
            cited.setdefault(file, {}).setdefault(policy, []).append(int(line))
    return cited


def _check_cited_lines(lists: CudaAutocastLists) -> None:
    for file, policies in _cited_lines(lists).items():
        lines = [line for own in policies.values() for line in own]
        assert len(lines) == len(set(lines)), (lists.torch, file)
        for own in policies.values():
            steps = [b - a for a, b in zip(own, own[1:], strict=False)]
            assert all(step == 1 or step > 2 for step in steps), (lists.torch, file, own)
        if len(lines) == 1 and file in lists.registered_at:
            assert lines == [lists.registered_at[file]], (lists.torch, file)


def test_each_cited_line_is_its_op_s_own_line_in_the_source_s_block():
    """The source lists one op per line, a policy's ops line after line (where it breaks, a comment and a blank
    line at least): no two ops share a line, each policy's lines rise in the lists' order without a one-line hole,
    and an op alone in its file is cited at the line the dispatcher records for that file's block. (torch 2.1's
    source is in no wheel: these are what can be checked of its lines here; 2.14.1's header lines are checked
    against the header itself, above.)"""
    for release in releases():
        _check_cited_lines(lists_for(release))


def _shifted(release: str, op: str) -> CudaAutocastLists:
    document = json.loads((ROOT / "src/where223/autocast_lists" / f"{release}.json").read_text())
    for entries in document["policies"].values():
        for entry in entries:
            if entry["op"] == op:
                file, _, line = entry["at"].partition(":")
                entry["at"] = f"{file}:{int(line) + 1}"
    return CudaAutocastLists.from_dict(document)


@pytest.mark.parametrize("op", ["conv1d", "scaled_dot_product_attention", "logsumexp", "_cudnn_rnn"])
def test_control_an_op_shifted_a_line_is_caught(op):
    # the first op of a run (onto its neighbour's line), the last of two policies' runs (a one-line hole), and the
    # op alone in its file (off its block's line)
    with pytest.raises(AssertionError):
        _check_cited_lines(_shifted("2.1.2", op))


def _dtypes_under(context, x, w, half):
    with context:
        return {
            "mm": torch.mm(x, w).dtype,
            "layer_norm": torch.nn.functional.layer_norm(half, (4,)).dtype,
            "softmax": torch.softmax(half, -1).dtype,
            "addcmul": torch.addcmul(x, half, half).dtype,  # promote: the widest input type
            "avg_pool3d": torch.nn.functional.avg_pool3d(half.reshape(1, 1, 1, 4, 4), 1).dtype,  # CPU's fp32 list
        }


def test_each_policy_casts_as_cuda_autocast_does_and_cpu_autocast_does_not():
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with emulate_cuda_autocast():
        half = torch.randn(4, 4).half()
    emulated = _dtypes_under(emulate_cuda_autocast(), x, w, half)
    assert emulated == {"mm": torch.float16, "layer_norm": torch.float32, "softmax": torch.float32,
                        "addcmul": torch.float32, "avg_pool3d": torch.float16}  # fmt: skip
    # the control: CPU autocast (bfloat16 inputs) leaves layer_norm and softmax in the input's type, and casts
    # avg_pool3d to float32 - a class found under CPU bf16 need not be CUDA's
    bf16 = half.bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.nn.functional.layer_norm(bf16, (4,)).dtype == torch.bfloat16
        assert torch.softmax(bf16, -1).dtype == torch.bfloat16
        assert torch.nn.functional.avg_pool3d(bf16.reshape(1, 1, 1, 4, 4), 1).dtype == torch.float32
    with emulate_cuda_autocast(), pytest.raises(RuntimeError, match="banned under CUDA autocast"):
        torch.nn.functional.binary_cross_entropy(torch.rand(3), torch.rand(3))


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        hidden = self.linear(x)
        return torch.where(self.norm(hidden) > 0, hidden, torch.tensor(-1.0))


def _trace(block, x, **options):
    with emulate_cuda_autocast(**options) as emulation:
        previous = torch.is_autocast_cache_enabled()
        torch.set_autocast_cache_enabled(False)  # as torch.onnx.export traces
        try:
            graph = torch.jit.trace(block, (x,), check_trace=False).inlined_graph
        finally:
            torch.set_autocast_cache_enabled(previous)
    return graph, emulation


def test_a_trace_records_the_casts_and_float16_ops_a_cuda_trace_would():
    graph, emulation = _trace(_Block(), torch.randn(2, 4))
    nodes = {node.kind(): node for node in graph.nodes()}
    casts = [node for node in graph.nodes() if node.kind() == "aten::to"]
    assert len(casts) >= 3  # input and weights to float16 for linear, float16 back to float32 for layer_norm
    assert nodes["aten::linear"].output().type().scalarType() == "Half"
    assert nodes["aten::layer_norm"].output().type().scalarType() == "Float"
    assert nodes["aten::where"].output().type().scalarType() == "Half"
    # torch 2.1.2's CPU has no float16 addmm: it ran in float32 below the tracer, rounded to float16
    assert emulation.fallbacks and all("addmm" in name for name in emulation.fallbacks)


def test_control_without_the_mode_below_the_tracer_cpu_refuses_the_float16_op():
    with pytest.raises(RuntimeError, match="Half"):
        _trace(_Block(), torch.randn(2, 4), below_tracer=False)


def test_the_region_leaves_autocast_and_the_kernels_as_they_were():
    x = torch.randn(2, 2)
    with emulate_cuda_autocast():
        assert torch.mm(x, x).dtype == torch.float16
        assert torch.is_autocast_enabled()  # what model code asks sees CUDA autocast on
    assert not torch.is_autocast_enabled() and not torch.is_autocast_cpu_enabled()
    assert torch.mm(x, x).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(x, x).dtype == torch.bfloat16  # CPU autocast's own kernel is back
    with emulate_cuda_autocast():  # a second region registers again
        assert torch.mm(x, x).dtype == torch.float16


@pytest.mark.slow
@pytest.mark.parametrize("amp_dtype", ["fp16_cuda_emulated", "fp32"])
def test_the_seed_s_message_under_the_emulated_cuda_policy(tmp_path, amp_dtype):
    """Notebook 01's bare-exporter path: under the emulated policy, the seed's own types (float and float16); the
    control, fp32, exports a graph ONNX Runtime accepts."""
    from where223.gpt2.reproduce import REPRODUCED, ReproduceSettings, reproduce

    settings = ReproduceSettings.resolve(path="onnx_export", preset="tiny", device="cpu", amp_dtype=amp_dtype,
                                         batch_size=1, seq_len=8, opset=17, seed=0)  # fmt: skip
    record = reproduce(settings, tmp_path)
    if amp_dtype == "fp32":
        assert record["status"] == "not reproduced"
        return
    assert record["status"] == REPRODUCED
    binding = record["error"]["type_binding"]
    assert binding["op_type"] == "Where" and binding["bound_types"] == ["tensor(float)", "tensor(float16)"]


def test_a_region_that_turns_cuda_autocast_off_casts_nothing_as_on_a_gpu():
    """GPT-2's `_upcast_and_reordered_attn` runs inside `torch.cuda.amp.autocast(enabled=False)`: CUDA's kernels cast
    nothing there, and neither do the emulated ones; the control is the same op outside the region."""
    import warnings

    x = torch.randn(2, 2)
    with emulate_cuda_autocast():
        assert torch.mm(x, x).dtype == torch.float16
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "CUDA is not available": the flag is turned off all the same
            with torch.cuda.amp.autocast(enabled=False):
                assert torch.mm(x, x).dtype == torch.float32


class _Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x).relu()


def test_a_convolution_the_tracer_records_inside_another_call_is_traced_and_counted():
    """torch 2.1.2's tracer records a convolution as the `_convolution` its op calls; the mode below the tracer
    includes the tracer's key again for it, so the trace keeps the node (without that, a pass-through mode left
    the convolution out of the graph altogether); 2.1.2's CPU has no float16 convolution, so it is traced in float32
    and named in `traced_in_float`. The control: a Linear model has nothing traced in float."""
    graph, emulation = _trace(_Conv(), torch.randn(2, 4, 8))
    assert "aten::_convolution" in [node.kind() for node in graph.nodes()]
    assert emulation.traced_in_float == {"aten::convolution": 1}
    _, linear = _trace(_Block(), torch.randn(2, 4))
    assert linear.traced_in_float == {}


def _elf(sections: list[tuple[int, int, int]], size: int = 512) -> bytes:
    """A little-endian ELF64 file of `size` bytes whose section table (at 256) lists (type, offset, length)."""
    import struct

    data = bytearray(size)
    data[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", data, 0x28, 256)
    struct.pack_into("<HH", data, 0x3A, 64, len(sections))
    for index, (kind, offset, length) in enumerate(sections):
        struct.pack_into("<IIQQQQ", data, 256 + 64 * index, 0, kind, 0, 0, offset, length)
    return bytes(data)


def test_the_binary_is_searched_in_its_string_tables_and_whole_when_it_has_none():
    """Only the SHT_STRTAB sections (type 3) of an ELF64 file; the whole file where it is no ELF64 file or lists no
    string table."""
    assert cuda_autocast._string_tables(_elf([(0, 0, 0), (3, 100, 20), (1, 200, 10), (3, 300, 5)])) == [
        (100, 120), (300, 305)]
    assert cuda_autocast._string_tables(_elf([(1, 200, 10)])) == [(0, 512)]
    assert cuda_autocast._string_tables(b"\x7fELF\x01\x01" + bytes(58)) == [(0, 64)]  # a 32-bit ELF: whole


# --- the binary reader and the checks at their edges (the mutation run's survivors) --------------------------------
def test_the_policy_enum_is_read_in_order_with_its_explicit_values_and_an_item_it_cannot_read_skipped(
        tmp_path, monkeypatch):
    header = tmp_path / "torch" / "include" / "ATen" / "autocast_mode.h"
    header.parent.mkdir(parents=True)
    header.write_text("namespace at::autocast {\nenum class CastPolicy : uint8_t {\n  lower_precision_fp, // 0, then\n"
                      "  fp32 = 3, // explicit\n  odd = SOME_MACRO,\n  fp32_set_opt_dtype,\n};\n}\n")
    monkeypatch.setattr(torch, "__file__", str(tmp_path / "torch" / "__init__.py"))
    assert cuda_autocast._cast_policies() == {0: "lower_precision_fp", 3: "fp32", 4: "fp32_set_opt_dtype"}
    header.unlink()
    with pytest.raises(ValueError, match="ships no autocast_mode.h declaring CastPolicy"):
        cuda_autocast._cast_policies()


@pytest.mark.parametrize(("tail", "said"), [
    (b"XadL_ZNS_4_ops10add_Tensor4callEE", "add.Tensor"),  # the pointer at the very start
    (b"FNS_6TensorEXadL_ZNS_4_ops10add_Tensor4callEE", "add.Tensor"),
    (b"FNS_6TensorEES5_", "no at:: function pointer among its template arguments"),
    (b"XadL_ZNS_4_ops10add_Tensor10redispatchE", "points at at::_ops::add_Tensor::redispatch, neither"),
    (b"XadL_ZNS_5other10add_Tensor4callE", "points at at::other::add_Tensor::call, neither"),
    (b"XadL_ZNS_4_ops10add_Tensor4call5extraE", "points at at::_ops::add_Tensor::call::extra, neither"),
    (b"XadL_ZNS_4_ops3two4callE", "at::_ops::two names 2 ops of this binary: ['two.a', 'two.b']"),
])
def test_a_wrapper_s_op_is_named_from_its_function_pointer_or_refused_with_why(tail, said):
    structs = {"add_Tensor": ["add.Tensor"], "two": ["two.a", "two.b"]}
    if "." in said and " " not in said:
        assert cuda_autocast._wrapped_op(tail, structs) == said
    else:
        with pytest.raises(ValueError) as caught:
            cuda_autocast._wrapped_op(tail, structs)
        assert said in str(caught.value)


def test_a_signature_this_module_cannot_read_is_refused_showing_its_first_bytes():
    with pytest.raises(ValueError) as caught:
        cuda_autocast._overload_by_signature("norm", b"FNS_6TensorE" + b"Q" * 60 + b"E")
    assert str(caught.value).endswith(f"does not read at {'Q' * 40}")
    with pytest.raises(ValueError) as caught:
        cuda_autocast._overload_by_signature("norm", b"Z" * 100)
    assert str(caught.value) == f"at::norm's signature {'Z' * 80} does not return one Tensor"
    with pytest.raises(ValueError, match="this binary has no op aten::no_such_op_xyz"):
        cuda_autocast._overload_by_signature("no_such_op_xyz", b"FNS_6TensorERKS5_E")
    assert cuda_autocast._overload_by_signature("norm", b"FNS_6TensorERKS5_RKNS3_8optionalINS3_6ScalarEEENS3_8ArrayRef"
                                                        b"IlEEbNS3_10ScalarTypeEE") == "norm.ScalarOpt_dim_dtype"


def test_an_unknown_policy_is_named_by_its_number_and_an_unnamed_wrapper_shown_to_160_characters(tmp_path):
    long = _BMM.replace(b"3bmm", b"60" + b"n" * 60)
    found = policies_from_binary(_library(tmp_path, _BMM.replace(b"CastPolicyE0", b"CastPolicyE9"), long))
    assert found.policies == {"bmm": "CastPolicy 9"}
    (unnamed,) = found.undecoded
    assert unnamed == f"{long[:160].decode()}...: at::_ops::{'n' * 60} names 0 ops of this binary: []"


def test_cudnn_rnn_unregistered_and_the_banned_op_failing_otherwise_are_reported(binary, monkeypatch):
    assert policy_drift(lists_for(), binary, {}) == [
        "_cudnn_rnn: listed lower_precision_fp; its AutocastCUDA kernel is registered by not registered, not by "
        "aten/src/ATen/cudnn/AutocastRNN.cpp, whose float16 casts are all this check knows of it"]
    monkeypatch.setattr(cuda_autocast, "_refusal_under_cuda_autocast", lambda call: "E" * 200 + "\nsecond line")
    assert cuda_autocast._banned_problems("binary_cross_entropy", "banned") == [
        "binary_cross_entropy: listed banned; its AutocastCUDA kernel, run on CPU tensors, fails otherwise "
        f"({'E' * 120})"]
    monkeypatch.setattr(cuda_autocast, "_refusal_under_cuda_autocast", lambda call: None)
    assert cuda_autocast._banned_problems("binary_cross_entropy", "banned") == [
        "binary_cross_entropy: listed banned; its AutocastCUDA kernel, run on CPU tensors, runs"]


def test_the_lists_group_every_op_by_its_policy():
    lists = CudaAutocastLists("x", {"a": ("fp32", "1"), "b": ("lower_precision_fp", "2"), "c": ("fp32", "3")})
    grouped = lists.by_policy()
    assert grouped["fp32"] == ["a", "c"] and grouped["lower_precision_fp"] == ["b"]
    assert set(grouped) == set(cuda_autocast.POLICIES) and lists.policy("b") == "lower_precision_fp"
    assert lists.policy("d") is None
