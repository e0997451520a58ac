"""Section 8 of the write-up: does every refusal class have a repair and an export-time fix, from
`remedies/summary.json` and the ORTModule route's record (records only)."""

from __future__ import annotations

from typing import Any

from where223 import markdown
from where223.study.classes.figure import RECIPE_SHORT, class_name
from where223.study.remedies import baseline
from where223.study.remedies.figure import COLUMNS
from where223.study.report import Report
from where223.verdicts import NOT_MEASURED

ORTMODULE_RECORD = "remedies/ortmodule_electra.json"
# the table's short headers (the text above the table says what each means)
SHORT = {"rerun": "rerun", "refused_before": "refused", "repair_accepted": "repair ok",
         "repair_within_tolerance": "≈ eager", "fix_accepted": "fix ok", "fix_within_tolerance": "≈ eager",
         "pair_within_tolerance": "repair ≈ fix"}  # fmt: skip
EXPORTER_SHORT = {"torchscript": "TS", "dynamo": "dynamo"}
BERT_RECORD = "remedies/5.24.0/fp16_model-torchscript/bert.json"


def _relative(numerics: dict[str, Any] | None) -> str:
    """`7.4e-04 (tolerance 7.8e-03)`, or why it was not measured."""
    if not numerics or numerics.get("status") != "measured":
        return f"{NOT_MEASURED} ({(numerics or {}).get('reason', 'not run')})"
    return f"{numerics['relative']:.1e} against eager ({numerics['execution']}; tolerance {numerics['tolerance']:.1e})"


def _tolerances(data: dict[str, Any]) -> str:
    eager = data["tolerances"]["against_eager"]
    pair = data["tolerances"]["repaired_against_fixed"]
    said = ", ".join(f"{k} {'/'.join(f'{v:.2e}' for v in vs)}" for k, vs in eager.items()) or NOT_MEASURED
    paired = ", ".join(f"{k} {'/'.join(f'{v:.2e}' for v in vs)}" for k, vs in pair.items()) or NOT_MEASURED
    return f"against eager {said}; repaired against fixed {paired}"


def ortmodule_lines(record: dict[str, Any] | None) -> list[str]:
    """The seed's route on ELECTRA, plain and fixed, in one paragraph each."""
    if not record:
        return [f"The seed's route (ORTModule on ELECTRA): {NOT_MEASURED} (no record)."]
    lines = []
    for run in record["runs"]:
        error = run.get("error") or {}
        binding = error.get("type_binding") or {}
        said = f"`{run['ort_verdict']}`"
        if binding:
            said += f" at `{binding['node']}` ({binding['op_type']} bound to {' and '.join(binding['bound_types'])})"
        elif error.get("ort_message"):
            said += f": {markdown.code(error['ort_message'][:160])}"
        lines.append(f"- {'with the fixes' if run['fix'] else 'as exported'}: {said}")
    return lines


def not_remedied_lines(data: dict[str, Any]) -> list[str]:
    """Every member rerun that a remedy left refused: the repair's and the fix's outcome, the refusal left (the
    fix's, else the repair's) and whether the model's float32 export is refused alike (then it is not the
    precision's)."""
    rows = [[f"`{entry['model_type']}`", f"{e['operator']} ({e['stack']}, {RECIPE_SHORT.get(e['recipe'], e['recipe'])}"
             f", {EXPORTER_SHORT.get(e['exporter'], e['exporter'])})", entry["repair"], entry["fix"],
             entry.get("refusal_left") or "—", baseline.SHORT.get(entry.get("float32"), entry.get("float32")),
             str(entry.get("eager", "—")).split(":", 1)[0]]
            for e in data["classes"] for entry in e.get("not_remedied", [])]  # fmt: skip
    if not rows:
        return ["Every member rerun is accepted after both remedies.", ""]
    alike = sum(entry.get("float32") == baseline.ALIKE_IN_FLOAT32
                for e in data["classes"] for entry in e.get("not_remedied", []))  # fmt: skip
    eager_refused = [(entry["model_type"], entry["eager"].split(": ", 1)[-1]) for e in data["classes"]
                     for entry in e.get("not_remedied", []) if str(entry.get("eager", "")).startswith("refused")]
    eager_said = "".join(
        f" Eager PyTorch itself refuses `{model}` under its recipe ({markdown.code(error[:120])}): the mismatch is "
        "the model's own code's, before any exporter, and there is no eager result for a remedy to match."
        for model, error in eager_refused
    )
    return [
        f"**Left refused.** {len(rows)} members rerun are still refused after a remedy (repair or fix; ONNX Runtime "
        "names a model's first refusal only, so fixing one can show the next). Each was exported once more by the "
        "same exporter with the model left in float32 (`classes/baseline/`, `spaces/classes-baseline-*.yaml`): "
        f"{alike} of them are refused alike there (*refused alike*: the same verdict at the same operator), so what "
        "is left is the exporter's, not the reduced precision's, and no precision remedy is asked to fix it. "
        "*Refusal left*: the operator ONNX Runtime refused in the fixed export, else in the repaired one; *not run*: "
        "the plain export failed on the rerun, so neither remedy ran; ONNX Runtime's words are in "
        "[`remedies/summary.json`](remedies/summary.json) (`not_remedied`); *eager*: whether eager PyTorch ran the "
        f"model under the recipe.{eager_said}",
        "",
        *markdown.table(["model", "class", "repair", "fix", "refusal left", "float32 export", "eager"], rows),
        "",
    ]


def section(report: Report) -> None:
    """Section 8: the refusal classes repaired and fixed at export, verified against ONNX Runtime and eager."""
    data = report.json("remedies/summary.json")
    headers = ["class (stack, recipe, exporter)", "of", *(SHORT[key] for key, _ in COLUMNS), "controls failed"]
    rows = [[f"{class_name(e)} ({e['stack']}, {RECIPE_SHORT.get(e['recipe'], e['recipe'])}, "
             f"{EXPORTER_SHORT.get(e['exporter'], e['exporter'])})", e["members"], *(e[key] for key, _ in COLUMNS),
             f"{e['controls_failed_as_built']}/{e['controls_run']}"] for e in data["classes"]]  # fmt: skip
    rerun = sum(e["rerun"] for e in data["classes"])
    members = sum(e["members"] for e in data["classes"])
    quiet = sorted({c["cell"] for c in data.get("controls_not_failing", [])})
    lines = [
        "## 8. Fixing the class: a repair and an export-time fix for each refusal",
        "",
        "Each model type of a refusal class was exported again as its class cell was (the *plain* export), then "
        "remedied two ways: `where223 repair` of the plain export, following the eager kernels its record holds for "
        "each blamed node; and the export run again with the export-time fixes of `where223.fixes` (for the "
        "TorchScript exporter, symbolics overridden for the export: `scaled_dot_product_attention` with its mask "
        "constants in the query's type and its scale cast by ONNX's type number, every `Cast` given torch's number "
        "for bfloat16 retargeted after the exporter's scalar-type analysis, `layer_norm` and `where` handed mixed "
        "dtypes computed in the widest, the ops whose schema does not allow the reduced type at the opset "
        "computed in float, and `permute`'s negative axes counted from the end; for the dynamo exporter, the "
        "binding and in-float rules as a pass over the exported program before it is translated). ONNX Runtime's "
        "CPU provider judges each; each one it accepts (or accepts the types of, "
        "lacking a kernel on this CPU: then emulated) runs against eager PyTorch under the same recipe, and the "
        "repaired graph runs against the fixed one. Tolerances, set before the runs: "
        f"{_tolerances(data)}. Every numeric check runs again on its control, the same graph fed inputs rolled by "
        "one position, which must fail it.",
        "",
        f"Members rerun so far: {rerun} of {members}; a class's counts are over its members rerun (*of*: its "
        "members; *refused*: refused again as in the class sweep; *ok*: ONNX Runtime accepts the types; *≈ eager*: "
        "within tolerance of eager, after the repair and after the fix; *controls failed*: of the numeric checks "
        "run, how many failed on their control; TS: the TorchScript exporter). "
        + (f"Controls that did not fail, so their checks are shown nothing: {', '.join(quiet)} (outputs that do "
           "not move when the inputs are rolled)." if quiet else "Every control failed as built."),
        "",
        *markdown.table(headers, rows),
        "",
    ]
    lines += not_remedied_lines(data)
    samples = data.get("samples") or {}
    if samples:
        lines += ["Accepted models rerun as controls that the fixes must not regress (three per recipe and exporter, "
                  "chosen by a hash of their names):", ""]  # fmt: skip
        lines += markdown.table(
            ["stack/recipe/exporter", "models", "fix accepted", "fix ≈ eager", "repair had nothing to do",
             "regressed"],
            [[column, ", ".join(s["models"]), s["fix_accepted"], s["fix_within_tolerance"],
              s["repair_nothing_to_do"], ", ".join(s["regressed"]) or "none"] for column, s in samples.items()])
        lines.append("")
    route = report.json(ORTMODULE_RECORD) if (report.outputs / ORTMODULE_RECORD).is_file() else None
    lines += ["**The seed's own route, on ELECTRA.** ORTModule (onnxruntime-training 1.19.2, torch 2.1.2) training "
              "ElectraForSequenceClassification one step under CPU bf16 autocast:", "", *ortmodule_lines(route), ""]
    if (report.outputs / BERT_RECORD).is_file():
        bert = report.json(BERT_RECORD)
        repaired, fixed = bert.get("repair") or {}, bert.get("fixed") or {}
        lines += [f"**BERT in fp16, TorchScript exporter, today's stack.** Plain: `{bert.get('outcome')}`; after "
                  f"`where223 repair` (`{repaired.get('outcome') or repaired.get('status')}`): "
                  f"{_relative(repaired.get('numerics'))}; with the fixes (`{fixed.get('outcome')}`): "
                  f"{_relative(fixed.get('numerics'))}.", ""]  # fmt: skip
    lines += [
        "What a class's row does not say: members not yet rerun (the difference between *members* and *rerun*) "
        "are not measured; `accepted` on this CPU is mostly ONNX Runtime accepting the types and finding no "
        "bf16 kernel, so those graphs' numbers are emulated, not run by ONNX Runtime. Data: "
        "[`remedies/summary.json`](remedies/summary.json), one JSON per model type under `remedies/<release>/`; "
        "`where223 sweep --space spaces/remedies-today.yaml` (and `remedies-2022.yaml`) reruns them.",
        "",
    ]
    report.add(*lines)
    report.figure("remedies/remedies", "Refused model types repaired and fixed at export", "08_remedies")
