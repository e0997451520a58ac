"""Small modules, one per refusal class the export-time fixes are for, each exported plain and with the fixes and
judged by ONNX Runtime's CPU provider; run as a script in any stack's interpreter (`python fix_cases.py OUT.json`),
it writes {case: {"plain": verdict, "fixed": verdict, ...}}. Verdicts are `where223.graph.ort`'s."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch


class Attention(torch.nn.Module):
    """SDPA with a boolean mask and a Python-float scale (transformers' sdpa_attention passes both)."""

    def forward(self, q, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask, scale=0.125)


class NormConv(torch.nn.Module):
    """A LayerNorm handed bf16 activations and float weights under CPU autocast, then a Conv1d."""

    def __init__(self):
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x):
        h = self.linear(x)
        return self.conv(self.norm(h + h).transpose(1, 2))


class EinsumScale(torch.nn.Module):
    """An einsum, and a Python scalar from a size dividing a bf16 tensor (the exporter's Cast(to=15))."""

    def forward(self, x, y):
        return torch.einsum("bij,bjk->bik", x, y) / (x.size(-1) ** 0.5)


class MaskedScores(torch.nn.Module):
    """GPT-2's mask in transformers 4.25.1 under autocast: `where` of bf16 scores and a float mask value; then an
    adaptive average pool (AveragePool/GlobalAveragePool, refused in bf16 before opset 22)."""

    def forward(self, x, mask):
        scores = torch.matmul(x, x.transpose(-1, -2))
        masked = torch.where(mask, scores, torch.tensor(-1e4, dtype=torch.float32))
        return torch.nn.functional.adaptive_avg_pool1d(masked.to(scores.dtype), 1)


class NegativePermute(torch.nn.Module):
    """A permutation written with negative axes, as bamba's mamba layer writes it (not a type: its second refusal)."""

    def forward(self, x):
        return (x + 1).permute(0, -2, -1, 1)


class GroupNormTopK(torch.nn.Module):
    """A group norm (the dynamo exporter's InstanceNormalization), a topk and a round, refused in bf16 by their
    schemas at today's default opset (bit's, deepseek_v32's and fastspeech2_conformer's second refusals)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x):
        values, indices = torch.topk(self.norm(x).flatten(1), 3)
        return torch.round(values * 2), indices  # Round: refused in bf16 too (fastspeech2_conformer's)


class CrossEntropy(torch.nn.Module):
    """A bf16 loss (retribert's): SoftmaxCrossEntropyLoss, whose function body does not take bf16 before opset 22."""

    def forward(self, logits, labels):
        return torch.nn.functional.cross_entropy(logits, labels)


def cases():
    torch.manual_seed(0)
    q, mask = torch.randn(1, 2, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    x, y = torch.randn(2, 5, 8), torch.randn(2, 8, 3)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    return {
        "sdpa_bf16": (Attention(), (q.bfloat16(), mask), contextlib.nullcontext),
        "sdpa_fp16": (Attention(), (q.half(), mask), contextlib.nullcontext),
        "layer_norm_conv_autocast": (NormConv().eval(), (x,), autocast),
        "conv_bf16": (NormConv().eval().bfloat16(), (x.bfloat16(),), contextlib.nullcontext),
        "einsum_scale_bf16": (EinsumScale(), (x[:, :4].bfloat16(), y.bfloat16()), contextlib.nullcontext),
        "where_pool_autocast": (MaskedScores(), (x, torch.ones(5, 5, dtype=torch.bool).tril()), autocast),
        "permute_negative": (NegativePermute(), (torch.randn(2, 3, 4, 5),), contextlib.nullcontext),
        "cross_entropy_bf16": (CrossEntropy(), (torch.randn(4, 5).bfloat16(), torch.tensor([0, 1, 2, 3])),
                               contextlib.nullcontext),
        "group_norm_topk_bf16": (GroupNormTopK().bfloat16(), (torch.randn(2, 4, 3, 3).bfloat16(),),
                                 contextlib.nullcontext),
    }


# the dynamo exporter's cases: the four it refuses plainly, and one it accepts (which must stay accepted); its
# exports take seconds each, so the others run with the TorchScript exporter only
DYNAMO_CASES = ("layer_norm_conv_autocast", "conv_bf16", "einsum_scale_bf16", "sdpa_fp16", "group_norm_topk_bf16")


def judge(path: Path) -> str:
    from where223.graph.ort import judge as ort_judge

    return str(ort_judge(path).verdict)


def cast_targets(path: Path) -> list[int]:
    """The `to` of every Cast in the file, each once, sorted."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return sorted({a.i for n in model.graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"})


def main(out: str, exporters: list[str]) -> None:
    from where223.fixes import export_dynamo_fixed, fixed

    warnings.filterwarnings("ignore")
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for exporter in exporters:
            for name, (module, args, context) in cases().items():
                if exporter == "dynamo" and name not in DYNAMO_CASES:
                    continue
                found = {}
                for fix in (False, True):
                    path = Path(scratch) / f"{exporter}-{name}-{fix}.onnx"
                    try:
                        with context():
                            if exporter == "dynamo" and fix:
                                export_dynamo_fixed(torch, module, args, path, opset="auto", input_names=[])
                            elif exporter == "dynamo":
                                torch.onnx.export(module, args, str(path), dynamo=True)
                            else:
                                kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
                                with fixed("torchscript", 17) if fix else contextlib.nullcontext():
                                    torch.onnx.export(module, args, str(path), opset_version=17,
                                                      do_constant_folding=False, **kwargs)
                        found["fixed" if fix else "plain"] = judge(path)
                        found[("fixed" if fix else "plain") + "_casts"] = cast_targets(path)
                    except Exception as error:  # noqa: BLE001 - an export that fails is a result
                        found["fixed" if fix else "plain"] = f"not_exported: {type(error).__name__}"
                results[f"{exporter}/{name}"] = found
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["torchscript"])
