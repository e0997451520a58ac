"""The kernel table: one-node models ONNX Runtime judged, cached per version and provider, and lint's missing-kernel
prediction checked against ONNX Runtime's verdict on whole models (with a poisoned table as the control)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import stat
import time
import warnings

import onnx
import pytest
from onnx import TensorProto, helper

from where223.cli import main
from where223.graph import kernels
from where223.graph.kernels import KernelEntry, KernelStatus, entry_key, kernel_table, probe, table_path
from where223.graph.lint import FindingKind, LintOutcome, lint_model
from where223.graph.ort import OrtVerdict, judge, refused_node

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
CPU = "CPUExecutionProvider"
# the ops the restricted build probes (the whole opset is NOTES's measurement, not a test's)
BUILT_OPS = ("MatMul", "Gemm", "Add", "Relu", "Softmax", "Where", "Cast", "If", "Concat")


def _model(nodes, inputs, outputs, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _value(name, elem, shape=(2, 2)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _mlp(elem: int) -> onnx.ModelProto:
    """MatMul, Add, Relu, Softmax: an MLP block in one element type."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="MatMul_1"),
        helper.make_node("Add", ["h", "b"], ["a"], name="Add_1"),
        helper.make_node("Relu", ["a"], ["r"], name="Relu_1"),
        helper.make_node("Softmax", ["r"], ["y"], name="Softmax_1", axis=-1),
    ]
    return _model(nodes, [_value("x", elem), _value("w", elem), _value("b", elem)], [_value("y", elem)])


def _bf16_island() -> onnx.ModelProto:
    """A float model that computes one Relu in bfloat16 between two Casts: only that Relu lacks a CPU kernel."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="MatMul_f32"),
        helper.make_node("Cast", ["h"], ["h16"], name="Cast_to_bf16", to=BF16),
        helper.make_node("Relu", ["h16"], ["r16"], name="Relu_bf16"),
        helper.make_node("Cast", ["r16"], ["y"], name="Cast_back", to=F32),
    ]
    return _model(nodes, [_value("x", F32), _value("w", F32)], [_value("y", F32)])


def _where_bf16() -> onnx.ModelProto:
    """Where with a bool condition and bfloat16 branches, then a float Gemm: Where lacks the kernel."""
    nodes = [
        helper.make_node("Where", ["c", "p", "q"], ["w16"], name="Where_bf16"),
        helper.make_node("Cast", ["w16"], ["w32"], name="Cast_f32", to=F32),
        helper.make_node("Gemm", ["w32", "x"], ["y"], name="Gemm_f32"),
    ]
    inputs = [_value("c", TensorProto.BOOL), _value("p", BF16), _value("q", BF16), _value("x", F32)]
    return _model(nodes, inputs, [_value("y", F32)])


def _loss_bf16() -> onnx.ModelProto:
    """SoftmaxCrossEntropyLoss in bfloat16: its schema allows it; ONNX Runtime's expansion of it (a Log feeding a
    NegativeLogLikelihoodLoss) refuses it in its type check, before any kernel is looked up. lint reads the body's
    types (`graph.schema.FUNCTION_BODY_OPS`) and the kernel table's probe of the op finds the refusal too."""
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l"], ["loss"], name="Loss_bf16")]
    return _model(nodes, [_value("s", BF16, (2, 3)), _value("l", TensorProto.INT64, (2,))], [_value("loss", BF16, ())])


REAL_MODELS = {
    "float MLP": _mlp(F32),
    "float16 MLP": _mlp(F16),
    "bfloat16 MLP": _mlp(BF16),
    "bfloat16 island in a float model": _bf16_island(),
    "bfloat16 Where before a float Gemm": _where_bf16(),
    "bfloat16 loss": _loss_bf16(),
}


def _mismatches(cache) -> list[str]:
    """Each real model whose lint prediction (a type refusal, which ONNX Runtime's check meets first, a missing
    kernel, or accepted; and the node) differs from what ONNX Runtime says when it loads the whole model (graph
    optimisations on, as a user loads it)."""
    found = []
    for name, model in REAL_MODELS.items():
        report = lint_model(model, provider=CPU, kernel_cache=cache)
        # every model is type-clean by its operators' schemas but the loss, whose function body is not
        assert (report.outcome == LintOutcome.CLEAN) == (name != "bfloat16 loss"), name
        predicted = (OrtVerdict.TYPE_ERROR if report.violations or report.kernels.type_refused else
                     OrtVerdict.MISSING_KERNEL if report.kernels.missing else OrtVerdict.ACCEPTED)
        real = judge(model)
        if predicted != real.verdict:
            found.append(f"{name}: lint predicts {predicted}, ONNX Runtime says {real.verdict}")
        elif real.verdict == OrtVerdict.MISSING_KERNEL and refused_node(real.message) not in {
                m.node for m in report.kernels.missing}:  # fmt: skip
            found.append(f"{name}: ONNX Runtime names {refused_node(real.message)}, lint does not")
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A CPU table built for BUILT_OPS at opset 17, cached in a folder of its own, with its build time."""
    cache = tmp_path_factory.mktemp("kernel-cache")
    table = kernel_table(CPU, cache)
    started = time.perf_counter()
    probed = table.build(17, ops=BUILT_OPS)
    seconds = time.perf_counter() - started
    table.save()
    return cache, table, probed, seconds


def test_restricted_build_records_what_onnx_runtime_said(built):
    cache, table, probed, seconds = built
    assert probed == len(table.entries) and seconds < 30
    status = {key: entry.status for key, entry in table.entries.items()}
    assert status["MatMul(13) opset 17 T=tensor(float)"] == KernelStatus.AVAILABLE
    assert status["MatMul(13) opset 17 T=tensor(bfloat16)"] == KernelStatus.MISSING  # the sweep's missing_kernel
    assert status["Gemm(13) opset 17 T=tensor(bfloat16)"] == KernelStatus.MISSING
    assert status["Where(16) opset 17 B=tensor(bool),T=tensor(bfloat16)"] == KernelStatus.MISSING
    assert status["Concat(13) opset 17 T=tensor(bfloat16)"] == KernelStatus.AVAILABLE  # a placeholder axis will do
    # no one-node model from the schema alone: recorded unknown, with the reason, never guessed
    assert status["Cast(13) opset 17 T1=tensor(float)"] == KernelStatus.UNKNOWN
    assert "decided by no input" in table.entries["Cast(13) opset 17 T1=tensor(float)"].message
    assert [k for k in status if k.startswith("If(")] and all(
        status[k] == KernelStatus.UNKNOWN for k in status if k.startswith("If("))
    # ONNX Runtime's type check refuses a float condition: not a missing kernel
    assert probe("Where", 17, {"B": "tensor(float)", "T": "tensor(float)"}).status == KernelStatus.TYPE_REFUSED
    on_disk = json.loads(table_path(CPU, table.onnxruntime_version, cache).read_text())
    assert on_disk["provider"] == CPU
    assert on_disk["entries"]["MatMul(13) opset 17 T=tensor(bfloat16)"]["status"] == "missing"


def test_lint_predicts_what_onnx_runtime_says_on_real_models(built):
    cache, *_ = built
    assert _mismatches(cache) == []


def test_control_a_poisoned_table_is_caught(built, tmp_path):
    """The same comparison against a table whose bfloat16 MatMul, Relu and Where entries are made up."""
    cache, table, *_ = built
    path = table_path(CPU, table.onnxruntime_version, tmp_path)
    record = json.loads(table_path(CPU, table.onnxruntime_version, cache).read_text())
    for key in ("MatMul(13) opset 17 T=tensor(bfloat16)", "Relu(14) opset 17 T=tensor(bfloat16)",
                "Where(16) opset 17 B=tensor(bool),T=tensor(bfloat16)"):
        record["entries"][key] = {"status": "available", "message": None}
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    found = _mismatches(tmp_path)
    assert [line.split(":")[0] for line in found] == [
        "bfloat16 MLP", "bfloat16 island in a float model", "bfloat16 Where before a float Gemm"]
    # the bfloat16 MLP still predicts a missing kernel (Add and Softmax), but not the node ONNX Runtime names
    report = lint_model(REAL_MODELS["bfloat16 MLP"], provider=CPU, kernel_cache=tmp_path)
    assert [m.node for m in report.kernels.missing] == ["Add_1", "Softmax_1"]


def test_the_cache_answers_without_probing(tmp_path):
    first = kernel_table(CPU, tmp_path)
    first.status("MatMul", 17, {"T": "tensor(bfloat16)"})
    assert first.probes == 1 and first.save() == table_path(CPU, first.onnxruntime_version, tmp_path)
    again = kernel_table(CPU, tmp_path)
    since, entry = again.status("MatMul", 17, {"T": "tensor(bfloat16)"})
    assert (since, entry.status, again.probes) == (13, KernelStatus.MISSING, 0)
    again.status("MatMul", 18, {"T": "tensor(bfloat16)"})  # the same schema version, another opset: its own entry
    assert again.probes == 1
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [table_path(CPU, again.onnxruntime_version).name]


def test_saves_merge_what_other_processes_wrote(tmp_path):
    one, two = kernel_table(CPU, tmp_path), kernel_table(CPU, tmp_path)
    one.status("Relu", 17, {"T": "tensor(float)"})
    two.status("Relu", 17, {"T": "tensor(bfloat16)"})
    one.save()
    two.save()
    assert set(kernel_table(CPU, tmp_path).entries) == {
        "Relu(14) opset 17 T=tensor(float)", "Relu(14) opset 17 T=tensor(bfloat16)"}


@pytest.mark.parametrize("spoil", ["another version", "another provider", "garbage", "old format"])
def test_control_a_foreign_or_broken_cache_file_is_ignored(tmp_path, spoil):
    table = kernel_table(CPU, tmp_path)
    path = table_path(CPU, table.onnxruntime_version, tmp_path)
    path.parent.mkdir(parents=True)
    record = {"format": kernels.TABLE_FORMAT, "onnxruntime": table.onnxruntime_version, "provider": CPU,
              "entries": {"MatMul(13) opset 17 T=tensor(bfloat16)": {"status": "available", "message": None}}}
    path.write_text(json.dumps(record))
    assert kernel_table(CPU, tmp_path).entries == {
        "MatMul(13) opset 17 T=tensor(bfloat16)": KernelEntry(KernelStatus.AVAILABLE)}  # control: a good file is read
    spoilt = {"another version": {**record, "onnxruntime": "0.0.1"}, "another provider": {**record, "provider": "X"},
              "old format": {**record, "format": 0}}
    path.write_text("{not json" if spoil == "garbage" else json.dumps(spoilt[spoil]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kernel_table(CPU, tmp_path).entries == {}
    # another version's, provider's or format's table is ignored without a word; garbage is corrupt, and said so
    assert [type(w.message).__name__ for w in caught] == (["CorruptCacheWarning"] if spoil == "garbage" else [])


def test_cache_folder(monkeypatch, tmp_path):
    from where223.pipeline.paths import CACHE

    monkeypatch.delenv(kernels.CACHE_ENV, raising=False)
    assert kernels.cache_folder() == CACHE  # in a checkout: the project's .cache/
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    assert kernels.cache_folder() == tmp_path and table_path(CPU, "1.2.3").parent == tmp_path / "kernels"


def test_an_unwritable_cache_does_not_fail_lint(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    report = lint_model(REAL_MODELS["bfloat16 MLP"], provider=CPU, kernel_cache=blocked)
    assert len(report.kernels.missing) == 4 and report.kernels.table is None


def test_nodes_with_violations_or_of_other_domains_are_not_looked_up(violations_model, tmp_path):
    report = lint_model(violations_model, provider=CPU, kernel_cache=tmp_path)
    kinds = {v.kind for v in report.violations}
    assert FindingKind.MISSING_KERNEL not in kinds  # missing kernels never join the type violations
    checked = report.kernels
    # If has no one-node model (its branches are graphs): unknown, never guessed
    assert checked.missing == [] and checked.unknown == {"If(16)": 1}
    assert checked.not_checked == 6  # five violating nodes (then_add inside If_3 too) and Fused_1 (com.example)
    assert checked.nodes_checked == 2  # If_3 and else_identity


def test_lint_without_a_provider_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    report = lint_model(REAL_MODELS["bfloat16 MLP"])
    assert report.kernels is None and "kernels" not in report.to_dict() and "\nkernels (" not in report.format()
    assert not (tmp_path / "kernels").exists()


def test_cli_exit_codes(save, violations_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path / "cache"))
    bf16, f32 = save(REAL_MODELS["bfloat16 MLP"], "bf16.onnx"), save(REAL_MODELS["float MLP"], "f32.onnx")
    assert main(["lint", str(bf16)]) == 0  # without --kernels: the type check alone, as before
    assert main(["lint", str(bf16), "--kernels"]) == 4
    out = capsys.readouterr().out
    assert "No CPUExecutionProvider kernel for MatMul(13) at T=tensor(bfloat16) in onnxruntime" in out
    assert "node (MatMul_1)" in out and "4 missing" in out
    assert main(["lint", str(f32), "--provider", CPU]) == 0
    assert main(["lint", str(save(violations_model, "v.onnx")), "--kernels"]) == 1  # violations still say 1
    record = capsys.readouterr()
    assert main(["lint", str(bf16), "--kernels", "--json"]) == 4
    record = json.loads(capsys.readouterr().out)
    assert [m["node"] for m in record["kernels"]["missing"]] == ["MatMul_1", "Add_1", "Relu_1", "Softmax_1"]
    assert record["kernels"]["missing"][0]["kind"] == "missing_kernel" and record["outcome"] == "clean"


def test_cli_unknown_provider_is_one_line(save, capsys):
    assert main(["lint", str(save(REAL_MODELS["float MLP"])), "--provider", "NoSuchExecutionProvider"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "NoSuchExecutionProvider" in captured.err


def test_entry_key_is_order_free():
    assert entry_key("Where", 16, 17, {"T": "tensor(float)", "B": "tensor(bool)"}) == (
        "Where(16) opset 17 B=tensor(bool),T=tensor(float)")


def test_float16_probes_at_the_models_opset():
    """ONNX Runtime computes a float16 GlobalAveragePool in float through Casts it inserts; at opset 1 (the op's
    schema version) those Casts are invalid. Probed at the model's opset, as keyed, the entry says available."""
    assert probe("GlobalAveragePool", 17, {"T": "tensor(float16)"}).status == KernelStatus.AVAILABLE
    at_one = probe("GlobalAveragePool", 1, {"T": "tensor(float16)"})  # the control: why the opset is in the key
    assert at_one.status == KernelStatus.UNKNOWN and "InsertedPrecisionFreeCast" in at_one.message


# --- the cache is untrusted input (issue 37) ---------------------------------------------------------------------

_GOOD_ENTRY = {"MatMul(13) opset 17 T=tensor(bfloat16)": {"status": "missing", "message": None}}


def _cache_file(tmp_path):
    """The cache file's path for this onnxruntime, its folder made, and the header a good file has."""
    version = kernel_table(CPU, False).onnxruntime_version
    path = table_path(CPU, version, tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path, {"format": kernels.TABLE_FORMAT, "onnxruntime": version, "provider": CPU}


class Hung(RuntimeError):
    """Still at it when the guard's time ran out (not an OSError: a reader's `except OSError` would swallow it)."""


@contextlib.contextmanager
def _bounded(seconds: float = 5.0, memory: int = 2**30):
    """A guard for code that may hang or read without end (the cache reader before the fix): Hung after `seconds`,
    a MemoryError past `memory` more bytes of address space, instead of a stuck or swapping test."""
    def expire(signum, frame):
        raise Hung(f"still reading after {seconds} s")

    limits = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * resource.getpagesize()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    resource.setrlimit(resource.RLIMIT_AS, (used + memory, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


MALFORMED = {
    "deep JSON": lambda header: "[" * 100_000 + "]" * 100_000,
    "not an object": lambda header: "[1, 2]",
    "entries a list": lambda header: json.dumps({**header, "entries": [["MatMul", "missing"]]}),
    "an entry a string": lambda header: json.dumps({**header, "entries": {"MatMul(13) opset 17 T=x": "missing"}}),
    "an unknown status": lambda header: json.dumps(
        {**header, "entries": {"MatMul(13) opset 17 T=x": {"status": "maybe", "message": None}}}),
    "a message of numbers": lambda header: json.dumps(
        {**header, "entries": {"MatMul(13) opset 17 T=x": {"status": "missing", "message": [1, 2]}}}),
    "not UTF-8": lambda header: b"\xff\xfe\x00{",
}


@pytest.mark.parametrize("spoil", list(MALFORMED))
def test_a_malformed_cache_is_discarded_with_one_warning(tmp_path, spoil):
    path, header = _cache_file(tmp_path)
    path.write_text(json.dumps({**header, "entries": _GOOD_ENTRY}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # control: a good file is read, without a word
        assert set(kernel_table(CPU, tmp_path).entries) == set(_GOOD_ENTRY)
    content = MALFORMED[spoil](header)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.warns(UserWarning, match=r"kernel cache .* is corrupt \(.*\): discarded") as caught:
        table = kernel_table(CPU, tmp_path)
    assert table.entries == {} and [type(w.message).__name__ for w in caught] == ["CorruptCacheWarning"]


def _fifo(path):
    os.mkfifo(path)


def _device(path):
    if os.geteuid() != 0:
        pytest.skip("making a device node takes root (the symlink case stands for it)")
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is: zeros without end


SPECIAL = {
    "a FIFO": _fifo,
    "a symlink to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "a zero device": _device,
}


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_a_cache_path_that_is_not_a_regular_file_is_never_read(tmp_path, kind):
    """Before: open() of a FIFO waits for a writer; /dev/zero is read until memory runs out. Now: refused at once
    (opened non-blocking, without following a link, and checked), with one warning, and replaced on save."""
    path, _ = _cache_file(tmp_path)
    SPECIAL[kind](path)
    started = time.perf_counter()
    with _bounded(), pytest.warns(UserWarning, match="corrupt") as caught:
        table = kernel_table(CPU, tmp_path)
    assert table.entries == {} and [type(w.message).__name__ for w in caught] == ["CorruptCacheWarning"]
    assert time.perf_counter() - started < 1
    table.status("Relu", 17, {"T": "tensor(float)"})
    assert table.save() == path and path.is_file() and not path.is_symlink()  # replaced by a good file
    assert set(kernel_table(CPU, tmp_path).entries) == {"Relu(14) opset 17 T=tensor(float)"}


def test_cli_lint_rebuilds_a_corrupt_cache_with_one_warning_line(save, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv(kernels.CACHE_ENV, str(cache))
    path, _ = _cache_file(cache)
    path.write_text("[" * 100_000 + "]" * 100_000)  # before: a RecursionError traceback
    relu = _model([helper.make_node("Relu", ["x"], ["y"], name="Relu_1")], [_value("x", F32)], [_value("y", F32)])
    model = save(relu, "relu.onnx")
    assert main(["lint", str(model), "--kernels"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"where223 lint: warning: kernel cache {path} is corrupt"), err
    again = kernel_table(CPU, cache)  # control: the rebuilt cache is read, and answers without probing
    again.status("Relu", 17, {"T": "tensor(float)"})
    assert again.probes == 0
    assert main(["lint", str(model), "--kernels"]) == 0 and capsys.readouterr().err == ""
