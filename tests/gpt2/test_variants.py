"""The attention patch: it restores transformers' code, and each variant's numbers and export are measured."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import GPT2ForSequenceClassification
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

from where223.eager.precision import autocast
from where223.gpt2 import models, variants
from where223.gpt2.export import export_onnx
from where223.graph.lint import FindingKind
from where223.graph.ort import OrtVerdict
from where223.study.variants.run import ort_record

ORIGINALS = (GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn)
# Scales that divide by a tensor of the scores' dtype, as 4.25.1 does; the others divide by a Python float.
DTYPE_DIVISORS = {"tensor", "full", "full_cast", "full_const"}


def _batch(vocab: int) -> dict[str, torch.Tensor]:
    data = models.example_batch(models.load_dataset("synthetic", 2, 8, vocab, 0), 2)
    return {key: data[key] for key in ("input_ids", "attention_mask")}


def _logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad(), autocast("cpu", "bf16"):
        return model(**batch).logits


def _attentions(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad(), autocast("cpu", "bf16"):
        out = model(**batch, output_attentions=True)
    return (out.logits, *out.attentions)


def test_patch_swaps_both_methods_and_restores_them_on_exit():
    with variants.patched_attention("4.26") as variant:
        assert variant.name == "4.26"
        assert GPT2Attention._attn is not ORIGINALS[0]
        assert GPT2Attention._upcast_and_reordered_attn is not ORIGINALS[1]
    assert (GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn) == ORIGINALS


def test_patch_restores_both_methods_after_an_exception():
    with pytest.raises(RuntimeError, match="inside"), variants.patched_attention("4.24"):
        raise RuntimeError("inside the patched block")
    assert (GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn) == ORIGINALS


def test_apply_patch_returns_the_restorer():
    restore = variants.apply_patch("float_cast+masked_fill")
    try:
        assert GPT2Attention._attn is not ORIGINALS[0]
    finally:
        restore()
    assert (GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn) == ORIGINALS


def test_unknown_names_fail_with_the_registered_ones():
    with pytest.raises(ValueError, match="registered: .*4.24"):
        variants.get_variant("4.27")
    with pytest.raises(ValueError, match="scale must be in"):
        variants.register(variants.Variant("bad", "decimal", "full_to", "unknown scale"))
    assert (GPT2Attention._attn, GPT2Attention._upcast_and_reordered_attn) == ORIGINALS


def test_the_wrong_scale_controls_divide_by_the_head_size_and_multiply_by_its_root():
    """The weak control (as first built) and the strong one, both negative controls only, never offered as fixes."""
    weights = torch.linspace(-2, 2, 8).reshape(2, 4)
    assert torch.equal(variants.SCALES["head_size"](weights, 4.0), weights / 16)
    assert torch.equal(variants.SCALES["product"](weights, 4.0), weights * 4)
    assert variants.get_variant("control-head-size-scale").scale == "head_size"
    assert {"control-wrong-scale", "control-head-size-scale"} <= set(variants.CONTROLS)
    assert not set(variants.CONTROLS) & set(variants.VARIANTS)


@pytest.fixture(scope="module")
def tiny_reference():
    model = models.build_model("tiny", 0, dropout=False).eval()
    batch = _batch(model.config.vocab_size)
    return model, batch, _logits(model, batch)


@pytest.mark.parametrize("name", sorted(variants.VARIANTS))
def test_eager_logits_against_unpatched_4_25_1(name, tiny_reference):
    """Measured on the tiny preset (head size 16, whose square root bf16 holds exactly): every variant agrees."""
    model, batch, reference = tiny_reference
    with variants.patched_attention(name):
        patched = _logits(model, batch)
    assert torch.equal(patched, reference), f"{name}: max |diff| {(patched - reference).abs().max()}"


def test_a_python_float_divisor_changes_the_numbers_when_bf16_cannot_hold_the_root():
    """Head size 20: dividing by float(sqrt(20)) is not dividing by bf16(sqrt(20)), as 4.25.1 does."""
    config = models.make_config("tiny", dropout=False)
    config.update({"n_layer": 1, "n_embd": 40, "initializer_range": 0.5})
    torch.manual_seed(0)
    model = GPT2ForSequenceClassification(config).eval()
    batch = _batch(config.vocab_size)
    reference = _attentions(model, batch)
    verdicts = {}
    for name in variants.VARIANTS:
        with variants.patched_attention(name):
            verdicts[name] = all(map(torch.equal, _attentions(model, batch), reference))
    assert verdicts == {name: v.scale in DTYPE_DIVISORS for name, v in variants.VARIANTS.items()}


class CallNames(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["4.24", "4.25", "4.26", "float_cast+masked_fill"])
def test_reorder_and_upcast_attn_path_is_patched_and_unchanged(name):
    config = models.make_config("tiny", dropout=False)
    config.reorder_and_upcast_attn = True
    torch.manual_seed(0)
    model = GPT2ForSequenceClassification(config).eval()
    batch = _batch(config.vocab_size)
    reference = _logits(model, batch)
    calls = CallNames()
    with variants.patched_attention(name), calls:
        patched = _logits(model, batch)
    assert "baddbmm" in calls.names  # the upcast path ran
    assert torch.equal(patched, reference)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("variant-exports")
    paths = {}
    for name in ("4.25", "4.26", "full_const+masked_fill"):
        model = models.build_model("tiny", 0, dropout=False).train()
        with variants.patched_attention(name):
            paths[name] = export_onnx(model, _batch(model.config.vocab_size), out / f"{name}.onnx", 17, "cpu", "bf16")
    return paths


def test_4_26_export_has_no_where_conflict_and_passes_the_type_check(exports):
    from where223.graph.lint import lint_model

    report = lint_model(exports["4.26"])
    assert not [v for v in report.violations if v.op_type == "Where"]
    # what is left: torch.full of a traced size exports as ConstantOfShape(bfloat16), which ONNX allows
    # only from opset 20 and ONNX Runtime accepts
    assert {(v.op_type, v.kind) for v in report.violations} <= {("ConstantOfShape", FindingKind.NOT_ALLOWED)}
    verdict = ort_record(exports["4.26"])
    assert verdict["status"] == OrtVerdict.MISSING_KERNEL, verdict["message"]
    assert verdict["type_binding"] is None


def test_4_25_export_is_refused_for_the_where_types(exports):
    verdict = ort_record(exports["4.25"])
    assert verdict["status"] == OrtVerdict.WHERE_TYPE_ERROR
    assert verdict["type_binding"]["op_type"] == "Where"
    assert verdict["type_binding"]["bound_types"] == ["tensor(float)", "tensor(bfloat16)"]


def test_a_constant_head_size_keeps_the_division_in_bf16_and_the_graph_clean(exports):
    from where223.gpt2.releases import attention_block_signature
    from where223.graph.lint import lint_model

    assert lint_model(exports["full_const+masked_fill"]).clean
    signature = dict(attention_block_signature(exports["full_const+masked_fill"]))
    assert "ConstantOfShape" not in signature
    assert signature["Div"] == signature["Where"] == ("tensor(bfloat16)",)
    assert ort_record(exports["full_const+masked_fill"])["status"] == OrtVerdict.MISSING_KERNEL
