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
from where223.cuda_autocast import (
    CudaAutocastLists,
    drift,
    emulate_cuda_autocast,
    lists_for,
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
        "from where223.cuda_autocast import drift, lists_for, lists_from_binary\n"
        "committed = lists_for('2.14.1')\n"
        "print(json.dumps({'drift': drift(committed), 'header_equal': lists_from_binary().ops == committed.ops,\n"
        "                  'count': len(committed.ops)}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"drift": [], "header_equal": True, "count": 121}


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
