"""benchmarks/bench_variants_gpu.py's comparison of real CUDA fp16 autocast with its CPU emulation, on this machine
without a GPU: the node-by-node comparison on two small graphs that differ in one Cast (and its control, two equal
graphs), and the bundled script run from its bundle alone, which writes its record although parts fail here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import torch

from where223.pipeline.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_variants_gpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_variants_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Plain(torch.nn.Module):
    def forward(self, x):
        return (x @ x).relu()


class _OneCast(torch.nn.Module):
    def forward(self, x):
        return (x @ x).to(torch.float32).relu()  # the same types, one Cast more


def _signature(bench, module):
    return bench.graph_signature(torch.jit.trace(module, (torch.randn(3, 3),)).inlined_graph)


def test_two_graphs_that_differ_in_one_cast_differ_in_exactly_that_node():
    bench = _bench()
    found = bench.compare_signatures(_signature(bench, _Plain()), _signature(bench, _OneCast()))
    assert not found["equal"]
    assert found["casts"] == {"real": 0, "emulated": 1}
    assert found["differences"] == [{"change": "insert", "real": [],
                                     "emulated": [{"kind": "aten::to", "inputs": ["Float", "int", "bool", "bool",
                                                                                 "NoneType"],
                                                   "outputs": ["Float"]}]}]  # fmt: skip


def test_control_the_same_graph_twice_is_equal():
    bench = _bench()
    found = bench.compare_signatures(_signature(bench, _Plain()), _signature(bench, _Plain()))
    assert found == {"equal": True, "nodes": {"real": 2, "emulated": 2}, "casts": {"real": 0, "emulated": 0},
                     "differences": []}  # fmt: skip


def test_the_bundle_runs_alone_and_records_every_part_even_without_a_gpu(tmp_path):
    bundle = tmp_path / "bundle"
    done = subprocess.run([sys.executable, str(SCRIPT), "--bundle", str(bundle)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = sorted(path.relative_to(bundle).as_posix() for path in bundle.rglob("*") if path.is_file())
    assert files == ["autocast_lists/2.1.2.json", "autocast_lists/2.14.1.json", "bench_variants_gpu.py",
                     "cuda_autocast.py"]  # fmt: skip
    assert sum(path.stat().st_size for path in bundle.rglob("*") if path.is_file()) < 60 * 2**20
    out = tmp_path / "out"
    # from the bundle alone (this checkout's src/ is not on the path), on CPU: "real" autocast on a CPU tensor is no
    # autocast at all, so the comparison must find the emulated casts missing from the "real" side
    done = subprocess.run([sys.executable, str(bundle / "bench_variants_gpu.py"), "--compare-emulation", "--device",
                           "cpu", "--models", "gpt2_attention", "--out", str(out)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "variants" / "cuda-emulation.json").read_text())
    assert record["environment"]["gpu"] is None and record["lists"]["torch"] == "2.1.2"
    assert record["lists"]["drift"] == []
    assert "lists from the binary" in record["errors"]  # torch 2.1.2's header has no lists: the bundled file served
    assert set(record["models"]) == {"gpt2_attention"}  # --models: one of the five (make test's time)
    attention = record["models"]["gpt2_attention"]["torchscript"]
    assert not attention["equal"] and attention["casts"]["emulated"] > attention["casts"]["real"]
