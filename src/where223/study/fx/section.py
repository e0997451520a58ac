"""Section 9 of the write-up: the seed's reviewer's torch.fx question, answered from `fx/fx.json` (records only)."""

from __future__ import annotations

from where223.study.fx import analysis
from where223.study.fx.record import FX_RECORD
from where223.study.report import Report

NOTEBOOK = "09_fx"


def section(report: Report) -> None:
    """Section 9: does GPT-2's modeling code have an issue under mixed precision when traced with torch.fx?"""
    record = report.json(FX_RECORD)
    settings = record["settings"]
    report.add(
        "## 9. The torch.fx question",
        "",
        "In the original thread a reviewer asked whether the modeling code also breaks mixed-precision training "
        "traced with torch.fx; nobody answered. Measured here: transformers' own fx tracer "
        "(`transformers.utils.fx.symbolic_trace`) on GPT-2 (tiny preset, random weights) with each real release "
        f"folder ({', '.join(settings['releases'])}), the traced module run beside eager under "
        + " and under ".join(analysis.POLICY_NAMES[policy] for policy in settings["policies"])
        + ". The traced module agrees when its logits are bitwise eager's (same ops, same CPU kernels, same order: "
        "no tolerance, fixed before the runs).",
        "",
        *[f"- {sentence}" for sentence in analysis.answer(record)],
        "",
        "Values the tracer fixed when it traced (it reads dtypes from float32 meta tensors, outside any autocast "
        "region), GPT-2 as configured:",
        "",
    )
    for release, lines in analysis.fixed_sources(record).items():
        report.add(f"- transformers {release}: " + ("; ".join(f"`{line}`" for line in lines) or "none"))
    lost = analysis.lost_regions(record)
    report.add(
        "",
        "What the tracer could not follow: fx records calls, not context managers, so an autocast region of the "
        "source is in no traced graph"
        + (" (" + "; ".join(f"`{line}`" for line in lost) + ")" if lost else "")
        + ". In GPT-2 that region is `_upcast_and_reordered_attn`, taken with `reorder_and_upcast_attn=True`, which "
        "transformers' tracer does not trace at all (its rows above say why); the probe, that region in little "
        "traced by torch.fx (whose tracer transformers' extends), shows what a traced graph makes of it: its row "
        "above.",
        "",
        f"**Answer.** {analysis.verdict(record)}",
        "",
        "Not measured: training steps (backward and optimiser: forward passes in eval mode with dropout off), a real "
        "GPU (CUDA's policy is emulated on CPU tensors, section 1), ONNX export of the traced module, and "
        "transformers releases after 4.26.",
        "",
        f"Data: [`{FX_RECORD}`]({FX_RECORD}).",
        "",
    )
    report.figure("fx/outcomes", "The traced module against eager, per release, configuration and policy", NOTEBOOK)
