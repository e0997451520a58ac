"""Section 8 of the write-up: does every refusal class have a repair and an export-time fix, from
`remedies/summary.json` and the ORTModule route's record (records only)."""

from __future__ import annotations

from typing import Any

from where223 import markdown
from where223.study._glance import Glance
from where223.study._page import Report
from where223.study.classes.figure import RECIPE_SHORT, class_name
from where223.study.remedies import baseline
from where223.study.remedies.figure import COLUMNS
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


def within(entry: dict[str, Any], prefix: str) -> str:
    """A count of comparisons within tolerance of eager with where they ran: `58 (4 ORT, 54 em.)` (ORT: on ONNX
    Runtime's own kernels; em.: a `missing_kernel` graph, its numerics emulated); the bare count from a summary made
    before the split was recorded."""
    count = entry[f"{prefix}_within_tolerance"]
    if f"{prefix}_within_on_ort_kernels" not in entry or not count:
        return str(count)
    return f"{count} ({entry[f'{prefix}_within_on_ort_kernels']} ORT, {entry[f'{prefix}_within_emulated']} em.)"


def _cell(entry: dict[str, Any], key: str) -> Any:
    """One count of a class's row: the `≈ eager` ones with where they ran (`within`)."""
    return within(entry, key.removesuffix("_within_tolerance")) if key in ("repair_within_tolerance",
                                                                            "fix_within_tolerance") else entry[key]


PART = {"plain": "plain export", "repair": "repair", "fixed": "fix", "pair": "repair against fix"}


def headline(data: dict[str, Any]) -> str:
    """The classes' totals: accepted and within tolerance after each remedy, where those ran, and how many
    comparisons are not judged (excluded from every count of *≈ eager*)."""
    total: dict[str, int] = {}
    for entry in data["classes"]:
        for key, value in entry.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    said = []
    for prefix, name in (("repair", "after `where223 repair`"), ("fix", "with the fixes")):
        said.append(f"{name}, {total.get(prefix + '_accepted', 0)} accepted and {within(total, prefix)} within "
                    f"tolerance of eager")
    judged = f"{total.get('repair_not_judged', 0)} repairs', {total.get('fix_not_judged', 0)} fixes' and " \
             f"{total.get('pair_not_judged', 0)} repaired-against-fixed comparisons"
    return (f"Over the {total.get('rerun', 0)} members rerun: {said[0]}; {said[1]} (ORT: the graph ran on ONNX "
            "Runtime's own CPU kernels; em.: ONNX Runtime accepted its types but has no kernel here "
            "(`missing_kernel`), so its numerics were emulated: float32 compute, outputs rounded). Not judged, and "
            f"counted in no *≈ eager*: {judged}, whose comparison could not have failed (below).")


def not_judged_lines(data: dict[str, Any]) -> str:
    """The comparisons that could not have failed, cell by cell, with why and the seeds the cell tried; from a
    summary made before the rule, its controls that did not fail."""
    if "not_judged" not in data:
        quiet = sorted({c["cell"] for c in data.get("controls_not_failing", [])})
        return (f"Controls that did not fail, so their checks are shown nothing: {', '.join(quiet)}." if quiet else
                "Every control failed as built.")  # fmt: skip
    found: dict[str, dict[str, list[str]]] = {}
    seeds: dict[str, str] = {}
    for entry in data["not_judged"]:
        found.setdefault(entry["cell"], {}).setdefault(entry["reason"], []).append(PART.get(entry["part"],
                                                                                          entry["part"]))
        seeds[entry["cell"]] = ", ".join(str(seed) for seed in entry.get("seeds") or [0])
    if not found:
        return "Every comparison could have failed: each control failed as built, and no eager output was constant."
    cells = "; ".join(
        f"`{cell}`: " + ", ".join(f"{' and '.join(parts)} ({reason})" for reason, parts in reasons.items())
        + f", seed{'s' if ',' in seeds[cell] else ''} {seeds[cell]}" for cell, reasons in sorted(found.items()))
    return (f"**Not judged** (`where223.study.judging`): a comparison whose eager outputs are all zero or constant, "
            "or whose control did not fail, could not have failed, so it is not counted within tolerance: "
            f"{cells}. Where eager's outputs were all zero or constant, the cell built the model again with other "
            "random weights and inputs (the seeds listed, each tried recorded in the cell's `seeds`).")


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
             f"{EXPORTER_SHORT.get(e['exporter'], e['exporter'])})", e["members"],
             *(_cell(e, key) for key, _ in COLUMNS), f"{e['controls_failed_as_built']}/{e['controls_run']}"]
            for e in data["classes"]]  # fmt: skip
    rerun = sum(e["rerun"] for e in data["classes"])
    members = sum(e["members"] for e in data["classes"])
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
        "one position, which must fail it; a check whose control did not fail, or whose eager outputs are all zero "
        "or constant, could not have failed, and is *not judged*, never counted within tolerance.",
        "",
        headline(data),
        "",
        f"Members rerun so far: {rerun} of {members}; a class's counts are over its members rerun (*of*: its "
        "members; *refused*: refused again as in the class sweep; *ok*: ONNX Runtime accepts the types; *≈ eager*: "
        "within tolerance of eager, after the repair and after the fix, not judged ones excluded, with how many ran "
        "on ONNX Runtime's kernels (ORT) and how many were emulated (em.); *controls failed*: of the numeric "
        "checks run, how many failed on their control; TS: the TorchScript exporter). " + not_judged_lines(data),
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
            [[column, ", ".join(s["models"]), s["fix_accepted"], within(s, "fix"),
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
        "are not measured; *ok* on this CPU is mostly ONNX Runtime accepting the types and finding no bf16 kernel "
        "(`missing_kernel`), so those graphs' numbers are emulated, not run by ONNX Runtime (*em.* in the counts). "
        "Data: "
        "[`remedies/summary.json`](remedies/summary.json), one JSON per model type under `remedies/<release>/`; "
        "`where223 sweep --space spaces/remedies-today.yaml` (and `remedies-2022.yaml`) reruns them.",
        "",
    ]
    report.add(*lines)
    report.figure("remedies/remedies", "Refused model types repaired and fixed at export", "08_remedies")


def glance(report: Report) -> Glance:
    """Section 8's line for "At a glance": over the refusal classes' members rerun, how many ONNX Runtime accepts
    and how many compute within tolerance of eager after each remedy, how many comparisons are not judged, and the
    seed's own route on ELECTRA."""
    path = "remedies/summary.json"
    data = report.json(path)
    glance = Glance(8, "The remedies")

    def total(key: str) -> str:
        return glance.quote(sum(entry[key] for entry in data["classes"]), path, f"classes.*.{key}", reduce="sum")

    said = [f"of the {total('rerun')} members of the refusal classes rerun"]
    for prefix, name in (("repair", "`where223 repair` gets"), ("fix", "the export-time fixes get")):
        not_judged = (f" ({total(f'{prefix}_not_judged')} comparisons not judged)"
                      if all(f"{prefix}_not_judged" in entry for entry in data["classes"]) else "")
        said.append(f"{name} {total(f'{prefix}_accepted')} accepted by ONNX Runtime and "
                    f"{total(f'{prefix}_within_tolerance')} within tolerance of eager{not_judged}")
    text = said[0] + ", " + "; ".join(said[1:])
    if (report.outputs / ORTMODULE_RECORD).is_file():
        route = report.json(ORTMODULE_RECORD)
        verdicts = ", ".join(f"{'with the fixes' if run['fix'] else 'as exported'} `{run['ort_verdict']}`"
                             for run in route["runs"])
        text += f"; the seed's own route (ORTModule) on ELECTRA: {verdicts}"
    return glance.says(text + ".")
