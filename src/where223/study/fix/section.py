"""Section 3 of the write-up: the fix and its verification, from `verification.json` (records only)."""

from __future__ import annotations

from where223 import markdown
from where223.gpt2 import runs
from where223.study._glance import Glance
from where223.study._page import Report, find_run
from where223.study.fix.analysis import controls_section, judged_checks, overall_verdict, verdict_cell


def section(report: Report) -> None:
    """Section 3: the fix and its verification."""
    planned = report.fix_run()
    source = find_run(report.outputs, planned.parameters)
    fixed = f"{source}/{runs.fix_name(str(planned.parameters['variant']))}"
    verification = report.json(f"{fixed}/verification.json")
    notebook = planned.name
    pinned = verification["environment"]["packages"]["transformers"]
    report.add(
        "## 3. The fix and its verification",
        "",
        f"`where223.gpt2.variants.patched_attention(\"{verification['variant']}\")` swaps our implementation of "
        f"the fixed attention into transformers {pinned} and restores the original on exit. "
        f"{overall_verdict(verification)}",
        "",
        *markdown.table(["check", "question", "measured", "tolerance", "verdict"],
                        [[f"`{c['name']}`", c["question"], c["value"], c["tolerance"], verdict_cell(c)]
                         for c in judged_checks(verification)]),
        "",
        *[f"- `{c['name']}`: {c['detail']}" for c in verification["checks"] if c["detail"]],
        "",
        *controls_section(verification),
        f"Record: [`verification.json`]({fixed}/verification.json).",
        "",
    )
    emulated_verification(report)
    report.figure(f"{fixed}/before_after", "The Where before and after the source-level fix", notebook)
    report.figure(f"{fixed}/repaired_vs_patched", "Graph repair (a Cast inserted into the exported model) beside "
                  "the source-level fix", notebook)
    report.figure(f"{fixed}/losses", "fp32 training losses, ORTModule with the fix against PyTorch eager", notebook)


def emulated_verification(report: Report) -> None:
    """The same verification under CUDA's fp16 policy emulated on CPU, where the plan runs it (`amp_dtype:
    fp16_cuda_emulated`), in one compact table, labelled emulated."""
    from where223.pipeline.params import EMULATED_CUDA_FP16
    from where223.study._page import FIX

    planned = [run for run in report.plan
               if run.notebook == FIX and run.parameters.get("amp_dtype") == EMULATED_CUDA_FP16]
    if not planned:
        return
    source = find_run(report.outputs, planned[0].parameters)
    fixed = f"{source}/{runs.fix_name(str(planned[0].parameters['variant']))}"
    verification = report.json(f"{fixed}/verification.json")
    report.add(
        f"**Under CUDA's fp16 policy, emulated on CPU** (section 1; not run on a GPU): the same checks on the run "
        f"`{source}`. {overall_verdict(verification)}",
        "",
        *markdown.table(["check", "measured", "tolerance", "verdict"],
                        [[f"`{c['name']}`", c["value"], c["tolerance"], verdict_cell(c)]
                         for c in judged_checks(verification)]),
        "",
        f"Record: [`verification.json`]({fixed}/verification.json).",
        "",
    )



def glance(report: Report) -> Glance:
    """Section 3's line for "At a glance": the fix's verdict with how many checks pass and fail, and the same under
    CUDA's fp16 policy emulated, where the plan runs it."""
    from where223.pipeline.params import EMULATED_CUDA_FP16
    from where223.study._page import FIX

    glance = Glance(3, "The fix")
    emulated = [(run, " under CUDA's fp16 policy emulated") for run in report.plan
                if run.notebook == FIX and run.parameters.get("amp_dtype") == EMULATED_CUDA_FP16]
    said, verifications = [], []
    for planned, where in [(report.fix_run(), ""), *emulated[:1]]:
        path = (f"{find_run(report.outputs, planned.parameters)}/"
                f"{runs.fix_name(str(planned.parameters['variant']))}/verification.json")
        verifications.append(report.json(path))
        verdicts = [check["verdict"] for check in verifications[-1]["checks"]]
        said.append(f"**{verifications[-1]['verdict']}**{where}, "
                    f"{glance.quote(verdicts.count('pass'), path, 'checks.*.verdict', equal='pass')} checks passing "
                    f"and {glance.quote(verdicts.count('fail'), path, 'checks.*.verdict', equal='fail')} failing")
    first = verifications[0]
    return glance.says(f"the `{first['variant']}` attention swapped into transformers "
                       f"{first['environment']['packages']['transformers']}: " + "; ".join(said) + ".")
