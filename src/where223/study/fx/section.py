"""Section 9 of the write-up: the seed's reviewer's torch.fx question, answered from `fx/fx.json` (records only)."""

from __future__ import annotations

from where223.study._glance import Glance
from where223.study._page import Report
from where223.study.fx import analysis
from where223.study.fx.record import FX_RECORD

NOTEBOOK = "09_fx"


def section(report: Report) -> None:
    """Section 9: does GPT-2's modeling code have an issue in mixed-precision training when traced with torch.fx?"""
    record = report.json(FX_RECORD)
    settings = record["settings"]
    training = settings.get("training", {})
    tolerance = record["tolerance"].get("training", {})
    control = settings.get("control", {})
    policies = " and under ".join(analysis.POLICY_NAMES[policy] for policy in settings["policies"])
    lines = analysis.control_lines(record)
    report.add(
        "## 9. The torch.fx question",
        "",
        "In the original thread a reviewer asked whether the modeling code would also have an issue in "
        "mixed-precision *training* traced with torch.fx; nobody answered. Measured here: transformers' own fx "
        "tracer (`transformers.utils.fx.symbolic_trace`) on GPT-2 (tiny preset, random weights) with each real "
        f"release folder ({', '.join(settings['releases'])}), the traced module trained, and run forward, beside "
        f"eager under {policies}.",
        "",
        f"**Training, the question as asked.** GPT-2 traced in training mode and eager GPT-2 from the same seed, "
        f"each trained {training.get('steps')} {training.get('optimizer')} steps (lr {training.get('lr')}, batches "
        f"of {training.get('batch_size')} x {training.get('seq_len')} synthetic tokens) by the project's one "
        "training recipe (`where223.gpt2.training.train`: autocast around each forward, backward and optimiser "
        "outside it), dropout off and the generator seeded alike. Compared, with a tolerance fixed before the runs "
        f"({tolerance.get('kind')}): {tolerance.get('compared')}. What each policy's run compares:",
        "",
        *[f"- {analysis.POLICY_NAMES[policy]}: {text}." for policy, text in analysis.compares(record).items()],
        "",
        f"Every comparison has a control: the same comparison on a traced module with {control.get('change')} "
        f"(the changed line: {'; '.join(f'{release} `{line}`' for release, line in lines.items()) or 'none'}). A "
        "comparison whose control was not told apart from eager, or whose eager reference could not tell modules "
        "apart (constant or all-zero losses, gradients or logits), is *not judged*, never a pass; every count "
        "leaves those out and says how many.",
        "",
        *[f"- {sentence}" for sentence in analysis.training_answer(record)],
        "",
        "**Forward, eval mode.** The traced module agrees when its logits are bitwise eager's (same ops, same CPU "
        "kernels, same order: no tolerance, fixed before the runs), with the same control.",
        "",
        *[f"- {sentence}" for sentence in analysis.answer(record)],
        "",
        "Values the tracer fixed when it traced (it reads dtypes from float32 meta tensors, outside any autocast "
        "region), GPT-2 as configured:",
        "",
    )
    for release, fixed in analysis.fixed_sources(record).items():
        report.add(f"- transformers {release}: " + ("; ".join(f"`{line}`" for line in fixed) or "none"))
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
        "Not measured: a training step whose backward runs under CUDA's fp16 policy (the emulation covers forward "
        "passes only, and the CPU backward stops where its row says), a real GPU (CUDA's policy is emulated on CPU "
        "tensors, section 1), loss scaling, dropout's random masks (dropout is off), ONNX export of the traced "
        "module, and transformers releases after 4.26.",
        "",
        f"Data: [`{FX_RECORD}`]({FX_RECORD}).",
        "",
    )
    report.figure("fx/outcomes", "The traced module against eager, per release, configuration, comparison and policy",
                  NOTEBOOK)  # fmt: skip


def glance(report: Report) -> Glance:
    """Section 9's line for "At a glance": the question as asked (GPT-2 as configured, traced and trained beside
    eager): per autocast policy, in how many of the judged releases training was bitwise eager's, or why it was not
    answered."""
    record = report.json(FX_RECORD)
    settings = record["settings"]
    glance = Glance(9, "torch.fx")
    model = "as configured"
    said = []
    for policy in settings["policies"]:
        rows = [row for row in analysis.training_cells(record) if row["model"] == model and row["policy"] == policy]
        judged = [row for row in rows if row["verdict"] in (analysis.PASS, analysis.FAIL)]
        name = analysis.POLICY_NAMES.get(policy, policy)
        if not judged:
            why = dict.fromkeys(f"{row['outcome']}: {row['reason'].split(':', 1)[0]}" if row["reason"] else
                                row["outcome"] for row in rows)
            said.append(f"under {name} not answered ({'; '.join(why) or 'no run'})")
            continue
        field = f"traces[model={model}].training[policy={policy}][control.failed=true].compared.equal"
        agree = sum(row["verdict"] == analysis.PASS for row in judged)
        said.append(f"under {name} bitwise eager's in {glance.quote(agree, FX_RECORD, field, equal=True)} of "
                    f"{glance.quote(len(judged), FX_RECORD, field, reduce='len')} releases judged")
    steps = settings.get("training", {}).get("steps")
    trained = (f"trained {glance.quote(steps, FX_RECORD, 'settings.training.steps')} steps beside eager"
               if steps else "trained beside eager")
    return glance.says(
        f"GPT-2 traced by transformers' fx tracer "
        f"({glance.quote(len(settings['releases']), FX_RECORD, 'settings.releases', reduce='len')} releases) and "
        f"{trained}, every loss, gradient and parameter compared: " + "; ".join(said) + ".")
